"""The claims data file (``benchmarks/claims.toml``): one record per claim of the papers, read with tomllib.

Each ``[[claims]]`` record names the paper and the section or figure it rests on, a short verbatim fragment of the
paper's text (``quote``, checked against the papers' text by the tests) or an empty one when the statement is not in
the available text (``in_text = false``), our paraphrase, the kind of test, the measure, and the comparison block of
a claims suite whose cells it reads. A record that is not measured here says why (``reason``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, get_args

import tomllib

from reconbench.errors import ReconbenchError
from reconbench.records.claims_data import ClaimsData, SuiteCostNote

Kind = Literal["above_null", "at_null", "trend", "comparison", "some_above", "no_change", "threshold",
               "not_run"]
Axis = Literal["variants", "inits", "attacks"]
Direction = Literal["up", "down"]
#: a condition the claim puts on its targets, checked on every cell's model card before the claim is judged:
#: ``nonzero_train_error``: the target does not fit every training image (its card's training error is above 0)
Premise = Literal["", "nonzero_train_error"]

#: kinds whose decision needs a direction (which way the claim says the measure moves)
DIRECTED = ("trend", "comparison", "some_above", "threshold")
#: kinds that read cells
MEASURED = tuple(k for k in get_args(Kind) if k != "not_run")

DEFAULT_FILE = Path("benchmarks") / "claims.toml"


@dataclass(frozen=True)
class Paper:
    key: str
    title: str
    short: str
    text: str  # the file of the papers' folder holding its text


@dataclass(frozen=True)
class Claim:
    """One statement of a paper and how the claims suites test it (fields as in the data file)."""

    id: str
    paper: Paper
    where: str
    statement: str
    kind: Kind
    source: str = ""
    quote: str = ""
    in_text: bool = True
    measure: str = ""
    suite: str = ""
    comparison: str = ""
    axis: Axis = "variants"
    attack: str | None = None
    init: str | None = None
    points: tuple[str, ...] = ()
    direction: Direction | None = None
    threshold: float | None = None
    judge: bool = True
    oracle: bool = False
    reason: str = ""
    note: str = ""
    premise: Premise = ""
    #: the paper's setting and adversary for this statement, in words (shown on the page)
    setting: str = ""
    #: why the cells do not reproduce that setting or adversary (non-empty: the claim is not judged, whatever its
    #: test gives; the test's outcome is kept in the reason)
    outside_setting: str = ""
    #: what the paper reports for this statement, in our words, with where it says so; settings the paper leaves
    #: implicit are named as such
    paper_number: str = ""

    @property
    def measured(self) -> bool:
        return self.kind != "not_run"


@dataclass(frozen=True)
class ClaimsFile:
    path: Path
    papers: dict[str, Paper]
    claims: tuple[Claim, ...]
    suites: Mapping[str, SuiteCostNote] = field(default_factory=dict)


_FIELDS: dict[str, type | tuple[type, ...]] = {
    "id": str, "paper": str, "where": str, "statement": str, "kind": str, "source": str, "quote": str,
    "in_text": bool, "measure": str, "suite": str, "comparison": str, "axis": str, "attack": str, "init": str,
    "points": list, "direction": str, "threshold": (int, float), "judge": bool, "oracle": bool, "reason": str,
    "note": str, "premise": str, "setting": str, "outside_setting": str, "paper_number": str,
}
_REQUIRED = ("id", "paper", "where", "statement", "kind")


def _fail(path: Path, where: str, problem: str, fix: str) -> ReconbenchError:
    return ReconbenchError(f"{path}: {where}: {problem}; {fix}")


def load(path: Path = DEFAULT_FILE) -> ClaimsFile:
    """Read and check the claims data file; a bad record raises one line naming it and the fix."""
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ReconbenchError(f"{path}: no claims data file here; run from the repository root or pass --claims FILE") \
            from None
    except tomllib.TOMLDecodeError as exc:
        raise ReconbenchError(f"{path}: not valid TOML ({exc}); fix the syntax at the place named") from exc
    tables = ClaimsData.from_dict(data, path)
    papers = {}
    for key, p in tables.papers.items():
        missing = [k for k, v in (("title", p.title), ("short", p.short), ("text", p.text)) if not v]
        if missing:
            raise _fail(path, f"[papers.{key}]", f"missing {', '.join(missing)}", "give each as a string")
        papers[key] = Paper(key, p.title, p.short, p.text)
    claims, seen = [], set()
    for i, raw in enumerate(tables.claims):
        # a claim's table is checked here field by field (its messages name the claim); until then it is free-form
        where = f"claim {i + 1} ({raw.get('id', '?')})"
        for k, v in raw.items():
            if k not in _FIELDS:
                raise _fail(path, where, f"unknown field {k!r}", f"use one of {', '.join(_FIELDS)}")
            if not isinstance(v, _FIELDS[k]) or (isinstance(v, bool) and _FIELDS[k] is not bool):
                raise _fail(path, where, f"field {k!r} has the wrong type ({type(v).__name__})",
                            f"write it as {getattr(_FIELDS[k], '__name__', 'a number')}")
        for k in _REQUIRED:
            if not raw.get(k):
                raise _fail(path, where, f"missing {k!r}", "every claim needs id, paper, where, statement and kind")
        if raw["id"] in seen:
            raise _fail(path, where, "duplicate id", "give every claim its own id")
        seen.add(raw["id"])
        if raw["paper"] not in papers:
            raise _fail(path, where, f"unknown paper {raw['paper']!r}", f"use one of {', '.join(papers)}")
        # every field has its type: the claim as a record, each field it leaves out at its default
        claim = Claim(paper=papers[raw["paper"]], **{k: v for k, v in raw.items() if k != "paper"})
        if claim.kind not in get_args(Kind):
            raise _fail(path, where, f"unknown kind {claim.kind!r}", f"use one of {', '.join(get_args(Kind))}")
        if claim.axis not in get_args(Axis):
            raise _fail(path, where, f"unknown axis {claim.axis!r}", f"use one of {', '.join(get_args(Axis))}")
        if claim.premise not in get_args(Premise):
            raise _fail(path, where, f"unknown premise {claim.premise!r}",
                        f"use one of {', '.join(repr(p) for p in get_args(Premise))}")
        kind = claim.kind
        if kind in MEASURED:
            for k, v in (("measure", claim.measure), ("suite", claim.suite), ("comparison", claim.comparison)):
                if not v:
                    raise _fail(path, where, f"a {kind} claim needs {k!r}", "name the measure and the suite block")
        elif not claim.reason:
            raise _fail(path, where, "a not_run claim needs a 'reason'", "say why it is not measured here")
        if kind in DIRECTED and claim.direction not in get_args(Direction):
            raise _fail(path, where, f"a {kind} claim needs direction = 'up' or 'down'", "say which way it goes")
        if kind == "threshold" and claim.threshold is None:
            raise _fail(path, where, "a threshold claim needs 'threshold'", "give the value the measure is compared to")
        if not claim.judge and not claim.reason:
            raise _fail(path, where, "judge = false needs a 'reason'", "say why the claim is shown but not judged")
        if claim.in_text and not claim.quote:
            raise _fail(path, where, "in_text claims need a 'quote'", "give a short verbatim fragment of the text")
        claims.append(dataclasses.replace(
            claim, points=tuple(str(p) for p in claim.points), source=claim.source or claim.paper.text,
            threshold=None if claim.threshold is None else float(claim.threshold)))
    if not claims:
        raise _fail(path, "[[claims]]", "no claims", "add [[claims]] records")
    return ClaimsFile(path, papers, tuple(claims), tables.suites)
