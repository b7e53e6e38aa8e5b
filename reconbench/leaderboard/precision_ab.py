"""The float64 A/B check of a GPU board: cells that differ only in their attack's precision, side by side.

A GPU board's attacks run in float32 with TF32 products (reconbench/precision.py); its suite carries an A/B subset
(``paper.toml``: the ``*-ab-*`` attacks) that runs the same target, init, seed, attack options and search runs in
float64 too. Two such cells are paired here, and for the pooled selection's count (``reconstructed``) and its
calibrated headline (``reconstructed_calibrated``) the board says whether they agree within the held-out null's
spread: the difference is at most the larger of the two cells' null widths for that number (largest minus least over
the null draws; a board's slim entry keeps only the mean and the largest, so there it is the largest minus the mean).
A precision that moved a number by more than chance moves it is then visible on the board.
Boards without such pairs (every CPU board) show nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from reconbench.leaderboard.cost import cell_precision
from reconbench.records import CellRecord
from reconbench.records.record import mapping, number

#: the numbers compared (summary key, as the tables name it)
AB_METRICS: tuple[tuple[str, str], ...] = (("reconstructed", "reconstructed"),
                                           ("reconstructed_calibrated", "reconstructed (calibrated)"))
SELECTION = "pool"


@dataclass(frozen=True)
class ABValue:
    reference: float | None   # the float64 cell's
    other: float | None
    tolerance: float | None   # the larger null width of the two cells (None: no null recorded)

    @property
    def agree(self) -> bool | None:
        if self.reference is None or self.other is None or self.tolerance is None:
            return None
        return abs(self.reference - self.other) <= self.tolerance


@dataclass(frozen=True)
class ABPair:
    """A float64 cell and a cell of another precision with everything else equal."""

    reference: str            # the float64 cell's id
    other: str
    other_precision: str
    values: dict[str, ABValue]

    @property
    def agree(self) -> bool | None:
        flags = [v.agree for v in self.values.values()]
        return None if any(f is None for f in flags) else all(flags)


def _identity(rec: CellRecord) -> tuple[Any, ...]:
    """What must be equal for two cells to differ by precision alone (the attack's ``tf32`` option aside)."""
    config = {k: v for k, v in sorted(mapping(rec.attack.config).items()) if k != "tf32"}
    return (rec.target.name, rec.target.recipe_key, rec.init.regime, repr(sorted(mapping(rec.init.config).items())),
            rec.seed, rec.attack.name, rec.attack.search_runs, rec.attack.candidates, repr(config))


def _null_range(rec: CellRecord, key: str) -> float | None:
    """The width of the selection's held-out null draws: largest minus least, or largest minus mean where only those
    two are stored (None: not recorded)."""
    null = rec.selection(SELECTION).null
    raw = (null.spread or {}).get(key) if null is not None else None
    if isinstance(raw, list):   # a slim entry's [mean, largest] (bench/entries.SPREAD_FIELDS): no least is kept
        return None if len(raw) != 2 or None in raw else float(raw[1]) - float(raw[0])   # type: ignore[arg-type]
    spread = null.spread_of(key) if null is not None else None
    if spread is None or spread.max is None or spread.min is None:
        return None
    return float(spread.max) - float(spread.min)


def _value(rec: CellRecord, key: str) -> float | None:
    return number(rec.selection(SELECTION).raw(key))


def ab_pairs(records: Mapping[str, CellRecord]) -> list[ABPair]:
    """Every float64 cell paired with each ok cell of another precision and the same identity, in id order."""
    ok = [records[c] for c in sorted(records) if records[c].status == "ok"]
    by_identity: dict[tuple[Any, ...], list[CellRecord]] = {}
    for rec in ok:
        by_identity.setdefault(_identity(rec), []).append(rec)
    pairs = []
    for group in by_identity.values():
        references = [r for r in group if cell_precision(r).split(",")[0] == "float64"]
        others = [r for r in group if cell_precision(r).split(",")[0] != "float64"]
        for ref in references:
            for other in others:
                values = {}
                for key, _ in AB_METRICS:
                    ranges = [x for x in (_null_range(ref, key), _null_range(other, key)) if x is not None]
                    values[key] = ABValue(_value(ref, key), _value(other, key), max(ranges) if ranges else None)
                pairs.append(ABPair(ref.cell_id, other.cell_id, cell_precision(other).split(",")[0], values))
    return pairs


def _number(v: float | None) -> str:
    return "n/a" if v is None else f"{v:g}"


def ab_lines(records: Mapping[str, CellRecord]) -> list[str]:
    """The board's A/B section (markdown), or nothing when the board has no pair."""
    pairs = ab_pairs(records)
    if not pairs:
        return []
    lines = ["## Precision A/B (float64 against the board's precision)", "",
             "The same target, init, seed, attack options and search runs in float64 and in the board's precision "
             "(reconbench/leaderboard/precision_ab.py). A number agrees when the two cells differ by at most the "
             "larger of their held-out nulls' ranges for it (largest minus least over the null draws).", "",
             "| float64 cell | other cell | precision | " + " | ".join(f"{label} (float64 / other, null range)"
                                                                  for _, label in AB_METRICS) + " | agree |",
             "|---|---|---|" + "---|" * len(AB_METRICS) + "---|"]
    for p in pairs:
        cols = [f"{_number(v.reference)} / {_number(v.other)}, {_number(v.tolerance)}"
                for v in (p.values[k] for k, _ in AB_METRICS)]
        verdict = "n/a (no null recorded)" if p.agree is None else "yes" if p.agree else "**no**"
        lines.append(f"| `{p.reference}` | `{p.other}` | {p.other_precision} | " + " | ".join(cols)
                     + f" | {verdict} |")
    disagree = sum(1 for p in pairs if p.agree is False)
    lines += ["", f"{len(pairs) - disagree} of {len(pairs)} pair(s) agree within the null's spread.", ""]
    return lines
