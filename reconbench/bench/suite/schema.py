"""The schema of a suite file, declared once, and the one checker that holds a file to it.

Each kind of table (``[suite]``, ``[leaderboard]`` and its columns, ``[attacks.LABEL]``, ``[inits.LABEL]``,
``[[grid]]``, ``[comparisons.NAME]``, ``[defenses.LABEL]``, ``[privacy.NAME]``) is a :class:`Table`: its keys with
their types, the keys it needs. A target table is flat: :data:`TARGET_KEYS` maps each key to the recipe field it
sets. :meth:`Checker.section` checks a table against its declaration; unknown keys and wrong types are rejected with
the key's name and its line in the file.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from reconbench import plugins
from reconbench.attack.search import DEFAULT_SEARCH
from reconbench.bench.suite.files import SuiteError, display_path
from reconbench.bench.toml_lines import KeyLines
from reconbench.config import MAX_SEED, Limit, build_config, coerce
from reconbench.data import ProblemSpec
from reconbench.errors import ReconbenchError, UnknownNameError
from reconbench.targets.recipe import TrainSpec

NAME_RE = re.compile(r"^[A-Za-z0-9_.+-]+$")


@dataclass(frozen=True)
class Table:
    """One kind of table of a suite file: its keys with their types, the keys it needs, and what it is called."""

    keys: dict[str, Any]
    required: tuple[str, ...] = ()
    called: str = "this table"


#: the bounds of a table's keys, declared as an option's are (reconbench.config.Limit): a count of runs or candidates
#: (candidates left out: 2n), a positive gate
COUNT = Annotated[int, Limit(ge=1)]
POSITIVE = Annotated[float, Limit(gt=0)]

SUITE_TABLE = Table({
    "name": str,
    "description": str,
    "seeds": list[int],
    "device": str,
    "dtype": typing.Literal["float64", "float32"],
    "search_runs": COUNT,
    "search": str,
    "search_config": dict[str, Any],
    "candidates": COUNT | None,
    "seed_targets": bool,
    "seed_nulls": bool,
    "max_stationarity_ratio": POSITIVE | None,
    "max_learned_ratio": POSITIVE | None,
})
LEADERBOARD_TABLE = Table({
    "store_candidates": str | int,
    "sample_cells": list[str],
    "figures": bool,
    "sample_images": int,
    "figure_inits": list[str],
    "candidates_max_bytes": int,
    "figure_pairs": bool,
    "columns": list[dict[str, Any]],
    "target_columns": list[str],
})
COLUMN_TABLE = Table({
    "name": str,
    "keys": list[str],
    "key": str,
    "higher_is_better": bool,
    "format": str,
    "source": typing.Literal["summary", "attack_loss", "wall_seconds", "target"],
}, required=("higher_is_better",), called="a column")
ATTACK_TABLE = Table({
    "attack": str,
    "config": dict[str, Any],
    "search_runs": COUNT,
    "search": str,
    "search_config": dict[str, Any],
    "candidates": COUNT | None,
    "dtype": typing.Literal["float64", "float32"],
    "description": str,
})
INIT_TABLE = Table({"regime": str, "config": dict[str, Any], "description": str})


@dataclass(frozen=True)
class SuiteHead:
    """The ``[suite]`` table as :data:`SUITE_TABLE` typed it, each key it leaves out at its default."""

    name: str | None = None
    description: str = ""
    seeds: list[int] = field(default_factory=lambda: [0])
    device: str = "cpu"
    dtype: str = "float64"
    search_runs: int = 1
    search: str = DEFAULT_SEARCH
    search_config: dict[str, Any] = field(default_factory=dict)
    candidates: int | None = None
    seed_targets: bool = False
    seed_nulls: bool = False
    max_stationarity_ratio: float | None = None
    max_learned_ratio: float | None = None


@dataclass(frozen=True)
class SuiteTables:
    """The top-level tables of a suite file (:data:`TOP_KEYS`), each held to its schema where it is read; a table the
    file leaves out is empty (``inits``: the gaussian init alone)."""

    suite: object = field(default_factory=dict)
    protocol: object = field(default_factory=dict)
    leaderboard: object = field(default_factory=dict)
    targets: object = field(default_factory=dict)
    attacks: object = field(default_factory=dict)
    inits: object = field(default_factory=lambda: {"gaussian": {}})
    grid: object = field(default_factory=list)
    comparisons: object = field(default_factory=dict)
    defenses: object = field(default_factory=dict)
    privacy: object = field(default_factory=dict)

    @classmethod
    def read(cls, data: dict[str, Any], chk: Checker) -> SuiteTables:
        """The file's top-level tables (an unknown one is a one-line error naming it and the known ones)."""
        chk.known(data, TOP_KEYS, ())
        return cls(**data)


@dataclass(frozen=True)
class GridTable:
    """A ``[[grid]]`` block as :data:`GRID_TABLE` typed it (``inits``: every init; ``seeds`` None: the suite's)."""

    targets: object
    attacks: object
    inits: object = "*"
    seeds: list[int] | None = None


@dataclass(frozen=True)
class SuiteComparisonTable:
    """A ``[comparisons.NAME]`` table as :data:`COMPARISON_TABLE` typed it (``title`` None: named after its axis;
    exactly one of ``values`` and ``variants``)."""

    target: str
    axis: str
    attacks: object
    title: str | None = None
    values: list[Any] | None = None
    variants: list[dict[str, Any]] | None = None
    inits: object = "*"
    seeds: list[int] | None = None


@dataclass(frozen=True)
class SuitePrivacyTable:
    """A ``[privacy.NAME]`` table as :data:`PRIVACY_TABLE` typed it (``title`` None: named after the axis;
    ``defenses`` and ``inits``: every one)."""

    targets: object
    attacks: object
    title: str | None = None
    defenses: object = "*"
    inits: object = "*"
    seeds: list[int] | None = None
    null_attack: str | None = None
    null_init: str | None = None


@dataclass(frozen=True)
class DefenseTable:
    """A ``[defenses.LABEL]`` table as :data:`DEFENSE_TABLE` typed it (``defense`` None: the table's label;
    ``strength`` None: the one the defense declares)."""

    defense: str | None = None
    config: dict[str, Any] = field(default_factory=dict)
    strength: str | None = None
    values: list[Any] = field(default_factory=list)
    description: str = ""


@dataclass(frozen=True)
class LeaderboardTable:
    """The ``[leaderboard]`` table as :data:`LEADERBOARD_TABLE` typed it, each key it leaves out at its default
    (``columns`` None: the default columns)."""

    store_candidates: str | int = "all"
    sample_cells: list[str] = field(default_factory=list)
    figures: bool = True
    sample_images: int = 8
    figure_inits: list[str] | None = None
    candidates_max_bytes: int | None = None
    figure_pairs: bool = False
    columns: list[dict[str, Any]] | None = None
    target_columns: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ColumnTable:
    """One ``[[leaderboard.columns]]`` table as :data:`COLUMN_TABLE` typed it (``name`` None: the label its key
    declares; ``key`` is one more key after ``keys``)."""

    higher_is_better: bool
    name: str | None = None
    keys: list[str] = field(default_factory=list)
    key: str | None = None
    format: str = ".3g"
    source: str = "summary"


@dataclass(frozen=True)
class AttackTable:
    """An ``[attacks.NAME]`` table as :data:`ATTACK_TABLE` typed it; a key it leaves out is None (``attack``: the
    table's name; the search and the counts: the suite's)."""

    attack: str | None = None
    config: dict[str, Any] = field(default_factory=dict)
    search_runs: int | None = None
    search: str | None = None
    search_config: dict[str, Any] | None = None
    candidates: int | None = None
    dtype: str | None = None
    description: str = ""


@dataclass(frozen=True)
class InitTable:
    """An ``[inits.NAME]`` table as :data:`INIT_TABLE` typed it (``regime`` left out: the table's name)."""

    regime: str | None = None
    config: dict[str, Any] = field(default_factory=dict)
    description: str = ""
GRID_TABLE = Table({"targets": Any, "attacks": Any, "inits": Any, "seeds": list[int]},
                   required=("targets", "attacks"), called="a [[grid]] block")
COMPARISON_TABLE = Table({
    "title": str,
    "target": str,
    "axis": str,
    "values": list[Any],
    "variants": list[dict[str, Any]],
    "attacks": Any,
    "inits": Any,
    "seeds": list[int],
}, required=("target", "axis", "attacks"), called="a comparison")
DEFENSE_TABLE = Table({"defense": str, "config": dict[str, Any], "strength": str, "values": list[Any],
                       "description": str})
PRIVACY_TABLE = Table({"title": str, "targets": Any, "defenses": Any, "attacks": Any, "inits": Any,
                       "seeds": list[int], "null_attack": str, "null_init": str},
                      required=("targets", "attacks"), called="a privacy axis")


def _target_keys() -> dict[str, tuple[str, str, Any]]:
    """Flat target key -> (section, field, annotation). ``seed`` is the weight-init seed; ``problem_seed`` the
    multiclass permutation seed."""
    out: dict[str, tuple[str, str, Any]] = {}
    for f, ann in typing.get_type_hints(ProblemSpec).items():
        out["problem_seed" if f == "seed" else f] = ("problem", f, ann)
    for f, ann in typing.get_type_hints(TrainSpec).items():
        out[f] = ("train", f, ann)
    out["family"] = ("recipe", "family", str)
    out["widths"] = ("model", "widths", list[int])
    out["model"] = ("model", "*", dict[str, Any])
    out["description"] = ("meta", "description", str)
    out["defense"] = ("recipe", "defense", str)
    out["defense_config"] = ("recipe", "defense_config", dict[str, Any])
    return out

TARGET_KEYS = _target_keys()

TOP_KEYS = ("suite", "protocol", "leaderboard", "targets", "attacks", "inits", "grid", "comparisons", "defenses", "privacy")


class Checker:
    """Holds one suite file to the schema: every failure names the file, the line and the key."""

    def __init__(self, path: Path, text: str) -> None:
        self.path = path
        self.lines = KeyLines(text)

    def where(self, keys: tuple[Any, ...]) -> str:
        line = self.lines.line(keys)
        where = display_path(self.path)
        return f"{where}:{line}" if line else where

    @staticmethod
    def dotted(keys: tuple[Any, ...]) -> str:
        out = ""
        for k in keys:
            out += f"[{k}]" if isinstance(k, int) else (f".{k}" if out else str(k))
        return out

    def fail(self, keys: tuple[Any, ...], message: str) -> SuiteError:
        return SuiteError(f"{self.where(keys)}: {self.dotted(keys)}: {message}")

    def table(self, value: object, keys: tuple[Any, ...]) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(keys, f"expected a table, got {type(value).__name__} {value!r}")
        return value

    def known(self, table: dict[str, Any], allowed: typing.Iterable[str], keys: tuple[Any, ...]) -> None:
        allowed = list(allowed)
        for k in table:
            if k not in allowed:
                close = difflib.get_close_matches(k, allowed, n=3, cutoff=0.5)
                hint = f" Did you mean: {', '.join(close)}?" if close else ""
                raise self.fail((*keys, k), f"unknown key {k!r}.{hint} Known keys here: {', '.join(sorted(allowed))}")

    def section(self, value: object, table: Table, keys: tuple[Any, ...]) -> dict[str, Any]:
        """``value`` held to ``table``: a table of known keys, each of its declared type, with the keys it needs.
        Returns the typed values."""
        value = self.table(value, keys)
        self.known(value, table.keys, keys)
        typed = {k: self.typed(v, table.keys[k], (*keys, k)) for k, v in value.items()}
        for req in table.required:
            if req not in value:
                raise self.fail(keys, f"{table.called} needs `{req}`")
        return typed

    def typed(self, value: object, annotation: object, keys: tuple[Any, ...]) -> Any:
        try:
            return coerce(value, annotation, self.dotted(keys))
        except ReconbenchError as exc:
            msg, here = str(exc), self.dotted(keys)
            if msg.startswith(here):  # "a.b: expected ..." or "a.b[1]: expected ..."
                msg = msg[len(here) :].removeprefix(": ")
                msg = f"element {msg}" if msg.startswith("[") else msg
            raise self.fail(keys, msg) from None

    def seeds(self, value: object, keys: tuple[Any, ...]) -> tuple[int, ...]:
        """A list of seeds, each in the range the command line accepts for --seed."""
        items = self.typed(value, list[int], keys)
        for i, seed in enumerate(items):
            if not 0 <= seed <= MAX_SEED:
                raise self.fail((*keys, i), f"seed {seed} is out of range; seeds are whole numbers from 0 to {MAX_SEED:,}")
            if seed in items[:i]:
                raise self.fail((*keys, i), f"seed {seed} is listed twice (a cell runs once per seed); list each seed "
                                            "once")
        if not items:
            raise self.fail(keys, "is empty, so nothing would run; list at least one seed, e.g. [0]")
        return tuple(items)

    def name(self, value: str, keys: tuple[Any, ...]) -> str:
        if not NAME_RE.match(value) or set(value) == {"."}:  # "." and ".." would name a folder outside the results
            raise self.fail(keys, f"name {value!r} may use only letters, digits and _ . + - and not be . or .. "
                                  "(it names files)")
        return value

    def refs(self, value: object, known: dict[str, Any], what: str, keys: tuple[Any, ...]) -> tuple[str, ...]:
        """A list of names of ``what`` (or "*" for all of them), each checked against ``known``."""
        if value == "*":
            return tuple(known)
        items = self.typed(value, list[str], keys)
        if not items:
            raise self.fail(keys, f'lists no {what}s; name at least one (or "*" for all)')
        for i, item in enumerate(items):
            if item not in known:
                close = difflib.get_close_matches(item, list(known), n=3, cutoff=0.5)
                hint = f" Did you mean: {', '.join(close)}?" if close else ""
                raise self.fail(
                    (*keys, i),
                    f"no {what} {item!r} in this suite.{hint} Defined: {', '.join(known) or '(none)'}",
                )
        return tuple(items)


def check_plugin_config(
    kind: str,
    name: str,
    config: dict[str, Any],
    chk: Checker,
    keys: tuple[Any, ...],
    strict: bool,
    warnings: list[str],
) -> None:
    """Check a registered plugin's config keys and types; warn about an unregistered one (strict: fail)."""
    try:
        obj = plugins.get(kind, name)
    except UnknownNameError as exc:
        if strict:
            raise chk.fail(keys, str(exc)) from None
        warnings.append(f"{chk.where(keys)}: {exc} Its cells will be reported as failed.")
        return
    cls = obj.config_cls
    if not isinstance(cls, type) or not dataclasses.is_dataclass(cls):
        return
    for k, v in config.items():
        try:
            build_config(cls, {k: v}, f"{kind[:-1]} {name}")
        except ReconbenchError as exc:
            raise chk.fail((*keys, "config", k), str(exc)) from None
