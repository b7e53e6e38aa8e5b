"""The claims page's data: every claim measured from the published claims boards, as ``docs/claims.md`` shows it.

The measurement and the verdicts are :mod:`reconbench.claims`' own (``measure_claims``); this module only arranges
them for the template, with each point's cells linked to their pages on the boards.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from reconbench import plugins
from reconbench.claims import records
from reconbench.claims.measure import MEASURES, load_all
from reconbench.claims.page import DEFAULT_RESULTS, KIND_NAMES, ClaimResult, measure_claims
from reconbench.claims.verdicts import RULES, fmt_p

#: the claims boards the site needs before it shows the claims page
REQUIRED_BOARDS = ("claims-a", "claims-b")


@dataclass(frozen=True)
class PointView:
    label: str
    number: str
    null: str
    suite: str
    cells: list[str]
    contrast: bool = False

    @property
    def links(self) -> list[tuple[str, str]]:
        """(cell id, label) of each cell: the seed part of the id (``s0``), else the id."""
        return [(c, c.rsplit("--", 1)[-1] if "--" in c else c) for c in self.cells]


@dataclass(frozen=True)
class ClaimView:
    id: str
    paper: str
    statement: str
    evidence: str
    setup: str
    unit: str
    points: list[PointView]
    verdict: str
    reason: str

    @property
    def verdict_class(self) -> str:
        return self.verdict.split(" ")[0].replace("'", "")


@dataclass(frozen=True)
class PaperView:
    """One paper and the registered attacks that implement it, with its BibTeX."""

    attacks: list[str]
    bibtex: str


@dataclass(frozen=True)
class ClaimsView:
    rules: str
    sources: dict[str, str]
    claims: list[ClaimView]
    papers: list[PaperView] = field(default_factory=list)

    @property
    def rule_items(self) -> list[str]:
        """The verdict rules' bullets as plain text (Markdown emphasis and code marks dropped)."""
        items: list[str] = []
        for line in self.rules.splitlines():
            if line.startswith("- "):
                items.append(line[2:])
            elif items:
                items[-1] += " " + line.strip()
        return [re.sub(r"[*`]", "", item) for item in items]

    def count(self, verdict: str) -> int:
        return sum(1 for c in self.claims if c.verdict == verdict)

    @property
    def verdicts(self) -> list[tuple[str, int]]:
        seen: list[str] = []
        for c in self.claims:
            if c.verdict not in seen:
                seen.append(c.verdict)
        return [(v, self.count(v)) for v in seen]


def _view(res: ClaimResult) -> ClaimView:
    c = res.claim
    points = []
    spec = MEASURES[c.measure] if c.measure else None
    for p in res.points:
        assert spec is not None
        number = "; ".join(f"s{s.seed}: {spec.show(s.value)}" for s in p.seeds) or "not run"
        nulls = [s.null_mean for s in p.seeds if s.null_mean is not None]
        null = spec.show(sum(nulls) / len(nulls)) if nulls else "-"
        points.append(PointView(p.label, number, null, c.suite, [s.cell for s in p.seeds]))
    test = res.decision.test + ("" if res.decision.p is None else f" (p = {fmt_p(res.decision.p)})")
    reason = res.reason + (f"; {test}" if res.decision.test else "")
    unit = spec.label if spec is not None else ""
    return ClaimView(c.id, c.paper.short, c.statement, f"{KIND_NAMES[c.kind]}; {c.where}", res.setup.replace("`", ""),
                     unit, points, res.verdict, reason)


def attack_papers() -> list[PaperView]:
    """The papers the registered attacks implement (each once, in order of first attack), for citing them."""
    by_paper: dict[str, list[str]] = {}
    for entry in plugins.host().entries("attacks"):
        if paper := plugins.attack(entry.name).paper:
            by_paper.setdefault(paper, []).append(entry.name)
    return [PaperView(attacks, bibtex) for bibtex, attacks in by_paper.items()]


def claims_view(leaderboards: Path, rendered: set[str]) -> ClaimsView | None:
    """The claims measured from the claims boards under ``leaderboards``; None where claims-a or claims-b is absent
    or not among the ``rendered`` boards (the page links to their cells). A later claims board (claims-c) is read
    when it is published and rendered; until then its claims show as not run."""
    results = {name: leaderboards / name for name in DEFAULT_RESULTS}
    present = {name for name, p in results.items() if (p / "results.json").is_file() and name in rendered}
    if not set(REQUIRED_BOARDS) <= present:
        return None
    results = {name: p for name, p in results.items() if name in present}
    found = load_all(results)
    data = records.load(leaderboards.parent / records.DEFAULT_FILE)
    return ClaimsView(RULES, {k: str(Path(v.name)) for k, v in results.items()},
                      [_view(r) for r in measure_claims(data, results, None, found)], attack_papers())
