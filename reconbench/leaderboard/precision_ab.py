"""Precision A/B: cells that differ only in their attack's precision, side by side, on a GPU or a CPU board.

A GPU board's attacks run in float32 with TF32 products (reconbench/precision.py); its suite carries an A/B subset
(``paper.toml``: the ``*-ab-*`` attacks) that runs the same target, init, seed, attack options and search runs in
float64 too. A CPU board (``precision-cpu.toml``) runs each attack twice, once per attack entry ``dtype`` (float64 and
float32). Two such cells are paired here, and for the pooled selection's count (``reconstructed``) and its
calibrated headline (``reconstructed_calibrated``) the board says whether they agree within the held-out null's
spread: the difference is at most the larger of the two cells' null excursions for that number (the largest null draw
minus the draws' mean: how far chance alone lifts the number above its typical value). The excursion, not the range
(largest minus least), because a published board's slim entries keep only the mean and the largest draw: a rule that
read the least would give a draft board, the published one and ``--verify``'s re-rendering three different verdicts.
A precision that moved a number by more than chance moves it is then visible on the board.

The pairs of one target and attack (their seeds) are also summarised as one row per precision: the count and the
calibrated headline over seeds (mean and 95% interval, :class:`reconbench.records.board_results.Stat`, clipped to the
values the evaluation declares), their held-out null (mean of the cells' null means, largest draw), the CPU and wall
seconds the cells took, and the verdict (every seed's pair agrees, or how many do not). Boards without such pairs show
nothing.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from reconbench.leaderboard.cost import cell_precision
from reconbench.leaderboard.tables import value_range
from reconbench.records import CellRecord
from reconbench.records.board_results import Stat
from reconbench.records.record import mapping, number

#: the numbers compared (summary key, as the tables name it)
AB_METRICS: tuple[tuple[str, str], ...] = (("reconstructed", "reconstructed"),
                                           ("reconstructed_calibrated", "reconstructed (calibrated)"))
SELECTION = "pool"
AGREE = "agree within the null's spread"


@dataclass(frozen=True)
class ABValue:
    reference: float | None   # the float64 cell's
    other: float | None
    tolerance: float | None   # the larger null excursion of the two cells (None: no null recorded)

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


@dataclass(frozen=True)
class NullMeanMax:
    """The held-out null of one number over a side's cells: the mean of the cells' null means and the largest draw."""

    mean: float
    max: float


@dataclass(frozen=True)
class PrecisionSide:
    """One precision's cells of a target and attack (one per seed): their numbers over seeds and their cost."""

    precision: str
    cells: tuple[str, ...]
    stats: dict[str, Stat]                 # per AB_METRICS key: the values over seeds
    nulls: dict[str, NullMeanMax | None]   # per AB_METRICS key
    wall_seconds: float                    # the cells' recorded wall seconds, summed
    attack_seconds: float                  # the attacks' recorded seconds, summed
    cpu_seconds: float | None              # the cells' recorded CPU seconds, summed (None: a cell did not record it)


@dataclass(frozen=True)
class ABGroup:
    """The pairs of one target and attack (their seeds), with a side per precision."""

    target: str
    attack: str
    reference: PrecisionSide   # float64
    other: PrecisionSide
    pairs: tuple[ABPair, ...]

    @property
    def disagreeing(self) -> int:
        return sum(1 for p in self.pairs if p.agree is False)

    @property
    def agree(self) -> bool | None:
        """Every seed's pair agrees (None: some pair has no null to judge by and none disagrees)."""
        if self.disagreeing:
            return False
        return None if any(p.agree is None for p in self.pairs) else True

    @property
    def verdict(self) -> str:
        if self.agree is None:
            return "n/a (no null recorded)"
        if self.agree:
            return f"{AGREE} ({len(self.pairs)} of {len(self.pairs)} seeds)"
        return f"**differ beyond the null's spread** ({self.disagreeing} of {len(self.pairs)} seeds)"


def _identity(rec: CellRecord, *, seed: bool = True) -> tuple[Any, ...]:
    """What must be equal for two cells to differ by precision alone (the attack's ``tf32`` option aside); without
    ``seed``, what the cells of one target and attack share (not the recipe key: a suite that retrains its target
    per seed gives each seed its own)."""
    config = {k: v for k, v in sorted(mapping(rec.attack.config).items()) if k != "tf32"}
    return (rec.target.name, rec.target.recipe_key if seed else None, rec.init.regime,
            repr(sorted(mapping(rec.init.config).items())), rec.seed if seed else None, rec.attack.name,
            rec.attack.search_runs, rec.attack.candidates, repr(config))


def _precision(rec: CellRecord) -> str:
    return cell_precision(rec).split(",")[0]


def _null_mean_max(rec: CellRecord, key: str) -> tuple[float, float] | None:
    """The selection's held-out null of ``key``: the mean and the largest draw, from a full record or a slim entry's
    ``[mean, largest]`` (None: not recorded)."""
    null = rec.selection(SELECTION).null
    raw = (null.spread or {}).get(key) if null is not None else None
    if isinstance(raw, list):
        pair = [number(x) for x in raw]
        return None if len(pair) != 2 or pair[0] is None or pair[1] is None else (pair[0], pair[1])
    spread = null.spread_of(key) if null is not None else None
    mean, top = (None, None) if spread is None else (number(spread.mean), number(spread.max))
    return None if mean is None or top is None else (mean, top)


def _null_excursion(rec: CellRecord, key: str) -> float | None:
    """The selection's held-out null's largest draw minus its mean, the same from a full record, a slim entry and an
    expanded one (None: not recorded)."""
    stored = _null_mean_max(rec, key)
    return None if stored is None else stored[1] - stored[0]


def _value(rec: CellRecord, key: str) -> float | None:
    return number(rec.selection(SELECTION).raw(key))


def _pair(ref: CellRecord, other: CellRecord) -> ABPair:
    values = {}
    for key, _ in AB_METRICS:
        widths = [x for x in (_null_excursion(ref, key), _null_excursion(other, key)) if x is not None]
        values[key] = ABValue(_value(ref, key), _value(other, key), max(widths) if widths else None)
    return ABPair(ref.cell_id, other.cell_id, _precision(other), values)


def _paired_records(records: Mapping[str, CellRecord]) -> list[tuple[CellRecord, CellRecord]]:
    """Every float64 cell with each ok cell of another precision and the same identity, in id order."""
    ok = [records[c] for c in sorted(records) if records[c].status == "ok"]
    by_identity: dict[tuple[Any, ...], list[CellRecord]] = {}
    for rec in ok:
        by_identity.setdefault(_identity(rec), []).append(rec)
    out = []
    for group in by_identity.values():
        references = [r for r in group if _precision(r) == "float64"]
        others = [r for r in group if _precision(r) != "float64"]
        out += [(ref, other) for ref in references for other in others]
    return out


def ab_pairs(records: Mapping[str, CellRecord]) -> list[ABPair]:
    """Every float64 cell paired with each ok cell of another precision and the same identity, in id order."""
    return [_pair(ref, other) for ref, other in _paired_records(records)]


def _side(recs: Sequence[CellRecord]) -> PrecisionSide:
    stats, nulls = {}, {}
    for key, _ in AB_METRICS:
        stats[key] = Stat([v for r in recs if (v := _value(r, key)) is not None], value_range(key, recs))
        stored = [x for r in recs if (x := _null_mean_max(r, key)) is not None]
        nulls[key] = NullMeanMax(statistics.fmean(m for m, _ in stored), max(t for _, t in stored)) if stored else None
    cpu = [r.cpu_seconds for r in recs]
    return PrecisionSide(_precision(recs[0]), tuple(r.cell_id for r in recs), stats, nulls,
                         sum(float(r.wall_seconds or 0.0) for r in recs),
                         sum(float(r.attack_seconds or 0.0) for r in recs),
                         None if any(c is None for c in cpu) else sum(float(c or 0.0) for c in cpu))


def ab_groups(records: Mapping[str, CellRecord]) -> list[ABGroup]:
    """The pairs gathered by target, attack (with its options, init and search runs) and the other precision: one
    group per target and attack, its seeds' pairs in id order and each precision's cells summarised."""
    grouped: dict[tuple[Any, ...], list[tuple[CellRecord, CellRecord]]] = {}
    for ref, other in _paired_records(records):
        grouped.setdefault((*_identity(ref, seed=False), _precision(other)), []).append((ref, other))
    groups = []
    for members in grouped.values():
        refs = list({r.cell_id: r for r, _ in members}.values())
        others = list({o.cell_id: o for _, o in members}.values())
        groups.append(ABGroup(refs[0].target.name, refs[0].attack.name, _side(refs), _side(others),
                              tuple(_pair(r, o) for r, o in members)))
    return sorted(groups, key=lambda g: (g.target, g.attack, g.other.precision, g.reference.cells))


def _number(v: float | None) -> str:
    return "n/a" if v is None else f"{v:g}"


def _stat_text(s: Stat) -> str:
    """``mean [lo, hi]`` over seeds (the interval from two seeds up), as the main tables write it."""
    if s.mean is None:
        return "n/a"
    ci = s.ci95
    return f"{s.mean:.3g}" + ("" if ci is None else f" [{ci[0]:.3g}, {ci[1]:.3g}]")


def _null_text(n: NullMeanMax | None) -> str:
    return "n/a" if n is None else f"{n.mean:.3g}, {n.max:g}"


def _seconds(s: float | None) -> str:
    return "n/a" if s is None else f"{s:.1f}"


def _cpu_text(side: PrecisionSide, reference: PrecisionSide) -> str:
    """The side's CPU seconds, and on the other side their ratio to float64's."""
    if side is reference or side.cpu_seconds is None or not reference.cpu_seconds:
        return _seconds(side.cpu_seconds)
    return f"{_seconds(side.cpu_seconds)} ({side.cpu_seconds / reference.cpu_seconds:.2f}x)"


def _group_lines(groups: list[ABGroup]) -> list[str]:
    lines = ["| target | attack | precision | cells | " + " | ".join(f"{label} [95% CI] (null mean, largest)"
                                                                  for _, label in AB_METRICS)
             + " | CPU s (ratio to float64) | wall s: cells / attack | verdict |",
             "|---|---|---|---|" + "---|" * len(AB_METRICS) + "---|---|---|"]
    for g in groups:
        for side in (g.reference, g.other):
            cols = [f"{_stat_text(side.stats[k])} ({_null_text(side.nulls[k])})" for k, _ in AB_METRICS]
            verdict = "" if side is g.reference else g.verdict
            lines.append(f"| {g.target} | `{g.attack}` | {side.precision} | {len(side.cells)} | " + " | ".join(cols)
                         + f" | {_cpu_text(side, g.reference)} | {_seconds(side.wall_seconds)} / "
                         + f"{_seconds(side.attack_seconds)} | {verdict} |")
    return lines


def ab_lines(records: Mapping[str, CellRecord]) -> list[str]:
    """The board's A/B section (markdown), or nothing when the board has no pair."""
    pairs = ab_pairs(records)
    if not pairs:
        return []
    groups = ab_groups(records)
    lines = ["## Precision A/B (float64 against another precision)", "",
             "The same target, init, seed, attack options and search runs in float64 and in another precision "
             "(reconbench/leaderboard/precision_ab.py). A number agrees when the two cells differ by at most the "
             "larger of their held-out nulls' excursions for it (the largest null draw minus the draws' mean). "
             "Per target and attack, each precision's "
             "cells over seeds: the mean with its 95% interval, the held-out null (mean of the cells' null means, "
             "largest draw), the CPU seconds of the processes that ran the cells (all threads; a cell that trained "
             "its target counts the training too), and their wall seconds with the attack's part (which include "
             "the machine's other load). The verdict says whether every seed's pair agrees.", ""]
    lines += _group_lines(groups)
    agreeing = sum(1 for g in groups if g.agree)
    lines += ["", f"{agreeing} of {len(groups)} target and attack group(s) {AGREE} in every seed.", "",
              "Per seed:", "",
              "| float64 cell | other cell | precision | " + " | ".join(f"{label} (float64 / other, null excursion)"
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
