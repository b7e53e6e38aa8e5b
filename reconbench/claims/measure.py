"""Reading a claim's cells: per point of the claim (an axis value, an init or an attack of its comparison block), the
value of its measure at every seed, with the held-out null the evaluation recorded beside it in the same cell.

A cell counts only when it finished (status ok), matches the suite as it is now (edited cells are stale) and its
attack did its work (:mod:`reconbench.attack.outcome`); the rest are listed as missing or failed, never as values.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from reconbench import plugins
from reconbench.attack.outcome import cell_outcome
from reconbench.bench.cells import Cell, cell_id, expand
from reconbench.bench.runner import STATUS_OK, load_cell_records
from reconbench.bench.suite import Comparison, Suite
from reconbench.claims.records import Claim
from reconbench.config import build_config
from reconbench.evaluation.protocol import Protocol
from reconbench.evaluation.reported import CALIBRATED_HEADLINE
from reconbench.records import CellRecord, Selection, Spread
from reconbench.targets.regime import RegimeTest, regime_test_of, residual_for

#: the selection every claim reads: all search runs of a cell pooled, as the papers evaluated
SELECTION = "pool"


def protocol_options(overrides: Mapping[str, Any] | None) -> Protocol:
    """The evaluation protocol's own options as a suite (or a cell of it) sets them, the others at their defaults
    (metric options, ``METRIC.OPTION``, are not among them)."""
    return build_config(Protocol, {k: v for k, v in (overrides or {}).items() if "." not in k}, "protocol")


def _number(v: object) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(float(v)):
        return None
    return float(v)


def _selection(rec: CellRecord) -> Selection:
    return rec.selection(SELECTION)


def _theta_gap(rec: CellRecord) -> float | None:
    return _number(_selection(rec).attack_loss)


def _theta_gap_reduction(rec: CellRecord) -> float | None:
    """Final over initial attack loss of the cell's runs (their mean): for the bilevel attack,
    ||theta* - theta(x)||^2 at the end over the same at the start."""
    ratios = []
    for run in rec.search_runs:
        first, last = _number(run.initial_loss), _number(run.final_loss)
        if first is None or last is None or first <= 0:
            return None
        ratios.append(last / first)
    return sum(ratios) / len(ratios) if ratios else None


def _theta_gap_relative(rec: CellRecord) -> float | None:
    gap = _theta_gap(rec)
    norm = _number(rec.target.metrics.param_norm_sq)
    return gap / norm if gap is not None and norm else None


def _calibrated_share(rec: CellRecord) -> float | None:
    """The calibrated headline over n: the share of the training set reconstructed beyond the calibrated bar."""
    count = _selection(rec).value(CALIBRATED_HEADLINE)
    n = _number(rec.target.n_train)
    return count / n if count is not None and n else None


@dataclass(frozen=True)
class MeasureSpec:
    """How a claim's measure is read from a cell, and how one seed is judged against its null.

    ``null``: "calibrated" (the calibrated headline: a seed is beyond its null when it counts at least one image; a
    held-out draw does so with probability at most 1 / (K + 1), K calibration draws), "draws" (above every one
    of the cell's D reported null draws: probability at most 1 / (D + 1) for an exchangeable draw; boards keep
    the largest draw, not the smallest, so such tests are always "above"), or "none" (no null: the measure is
    compared with a threshold or between points)."""

    key: str
    label: str
    fmt: str
    null: Literal["calibrated", "draws", "none"]
    read: Callable[[CellRecord], float | None] | None = None

    def value(self, rec: CellRecord) -> float | None:
        return self.read(rec) if self.read is not None else _selection(rec).value(self.key)

    def show(self, x: float | None) -> str:
        return "n/a" if x is None else format(x, self.fmt)


MEASURES: dict[str, MeasureSpec] = {m.key: m for m in (
    MeasureSpec(CALIBRATED_HEADLINE, "training images reconstructed beyond the calibrated null bar", ".1f",
                "calibrated"),
    MeasureSpec("reconstructed_calibrated_share", "share of the training set reconstructed beyond the calibrated "
                "null bar", ".2f", "none", _calibrated_share),
    MeasureSpec("top_k_mean_ssim", "mean SSIM of the 10 best-reconstructed training images", ".3f", "draws"),
    MeasureSpec("top_k_mean_corr", "mean correlation of the 10 best-reconstructed training images with their "
                "reconstructions", ".3f", "draws"),
    MeasureSpec("membership_auc", "membership AUC (training images against held-out non-members)", ".2f", "draws"),
    MeasureSpec("distinct_share", "distinct training images matched / candidates (1: no collapse)", ".2f", "none"),
    MeasureSpec("max_candidates_per_image", "most candidates matched to one training image", ".1f", "draws"),
    MeasureSpec("init_copy_share", "share of candidates nearer their own start than any training image", ".2f",
                "none"),
    MeasureSpec("candidates_nearer_decoy_share", "share of candidates nearer a held-out partition image than any "
                "training image", ".2f", "none"),
    MeasureSpec("margin_score_spearman", "rank correlation of per-image margin with per-image SSIM", ".2f", "none"),
    MeasureSpec("margin_near_min_share", "share of training images within 10% of the smallest margin", ".2f", "none"),
    MeasureSpec("theta_gap", "||theta* - theta(x)||^2 after the attack (its final upper loss)", ".3g", "none",
                _theta_gap),
    MeasureSpec("theta_gap_reduction", "||theta* - theta(x)||^2 after the attack over the same at its start", ".3g",
                "none", _theta_gap_reduction),
    MeasureSpec("theta_gap_relative", "||theta* - theta(x)||^2 / ||theta*||^2 after the attack", ".3g", "none",
                _theta_gap_relative),
)}


@dataclass
class SeedValue:
    seed: int
    cell: str
    value: float
    #: the cell's held-out null: its mean, its most extreme draw in the claim's direction, how many draws
    null_mean: float | None = None
    null_extreme: float | None = None
    null_draws: int = 0
    #: per-seed test against the null (None: the measure has no null); p0 its false-positive bound
    beyond: bool | None = None
    p0: float | None = None
    #: the target's residual for the attack's threat model (docs/regime.md), where it comes from; None: not gated
    regime_residual: float | None = None
    regime_how: str = ""
    #: the cell's start is an oracle (the training images themselves)
    oracle: bool = False
    #: the target's training error from its card (None: not recorded)
    train_error: float | None = None


@dataclass
class Point:
    label: str
    target: str
    attack: str
    init: str
    seeds: list[SeedValue] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)  # (cell id, the outcome's reason)
    #: the attack's threat model (None: an attack without a stationarity premise, not gated)
    threat: str | None = None
    #: the same point with the start left unchanged (0 attack steps, an ``init_only`` entry, same protocol);
    #: None: no suite read ran such cells
    unchanged: Point | None = None
    #: the suite whose cells this point was read from
    suite: str = ""

    def value_of(self, seed: int) -> float | None:
        return next((s.value for s in self.seeds if s.seed == seed), None)


def comparison(suite: Suite, name: str) -> Comparison:
    for comp in suite.comparisons:
        if comp.name == name:
            return comp
    raise KeyError(f"suite {suite.name} has no comparison {name!r}")


def show_value(v: object) -> str:
    if isinstance(v, dict):
        return ", ".join(f"{k} = {show_value(x)}" for k, x in v.items())
    if isinstance(v, list):
        return "-".join(show_value(x) for x in v)
    return f"{v:g}" if isinstance(v, float) else str(v)


def point_specs(claim: Claim, comp: Comparison) -> list[tuple[str, str, str, str]]:
    """(label, target, attack, init) of each point of a claim, in the order of the comparison block (restricted
    to the claim's ``points`` when it names them)."""
    attack = claim.attack or comp.attacks[0]
    init = claim.init or comp.inits[0]
    if claim.axis == "variants":
        specs = [(show_value(v.value) if isinstance(v.value, dict) else f"{comp.axis} = {show_value(v.value)}",
                  v.target, attack, init) for v in comp.variants]
    elif claim.axis == "inits":
        specs = [(i, comp.variants[0].target, attack, i) for i in comp.inits]
    else:
        specs = [(a, comp.variants[0].target, a, init) for a in comp.attacks]
    if claim.points:
        by_label = {s[0]: s for s in specs}
        unknown = [p for p in claim.points if p not in by_label]
        if unknown:
            raise KeyError(f"claim {claim.id}: no point {unknown[0]!r} in {comp.name} (points: {', '.join(by_label)})")
        specs = [by_label[p] for p in claim.points]
    return specs


def _null(rec: CellRecord, spec: MeasureSpec, above: bool) -> tuple[float | None, float | None, int, float | None]:
    """(null mean, most extreme null draw in the claim's direction, draws, per-seed false-positive bound)."""
    spread = _selection(rec).null_spread(spec.key) or Spread()
    mean = _number(spread.mean)
    if spec.null == "calibrated":
        k = protocol_options(rec.protocol).calibration_draws
        return mean, 0.0, k, 1.0 / (k + 1)
    if spec.null == "draws":
        draws = int(spread.draws or 0)
        extreme = _number(spread.max if above else spread.min)
        return mean, extreme, draws, (1.0 / (draws + 1) if draws else None)
    return None, None, 0, None


#: measures that are properties of the trained target, not of the attack's output: no unchanged-start comparison
TARGET_MEASURES = frozenset({"margin_near_min_share"})
#: the attack plugin that returns its starting candidates unchanged (0 attack steps)
UNCHANGED_ATTACK = "init_only"
#: measures whose value for an unchanged start is known without running it: the attack loss's final over initial
#: value is 1 after 0 steps, and every unchanged candidate is at distance 0 from its own start (a start that is a
#: training image itself is an oracle start, refused anyway)
UNCHANGED_BY_CONSTRUCTION = {"theta_gap_reduction": 1.0, "init_copy_share": 1.0}


def _regime(rec: CellRecord, threat: RegimeTest | None) -> tuple[float | None, str]:
    if threat is None:
        return None, ""
    return residual_for(rec.target.metrics.certificate_dict, threat)


def unchanged_attack(suite: Suite) -> str | None:
    """The suite's attack entry that leaves the start unchanged, if it has one."""
    return next((name for name, a in suite.attacks.items() if a.attack == UNCHANGED_ATTACK), None)


@dataclass(frozen=True)
class Companion:
    """Another claims suite read beside a claim's own, whose ``init_only`` cells may hold the claim's unchanged
    start: its suite, its cell records and its planned cells."""

    suite: Suite
    found: Mapping[str, CellRecord]
    plan: dict[str, Cell]


def same_start(a: Cell, suite_a: Suite, b: Cell, suite_b: Suite) -> bool:
    """Whether two planned cells attack the same trained target from the same start, scored by the same protocol:
    the same recipe (the same target, trained once for both), init regime and options, candidate count and seed."""
    return (a.recipe.to_dict() == b.recipe.to_dict() and a.init.regime == b.init.regime
            and dict(a.init.config) == dict(b.init.config) and a.attack.candidates == b.attack.candidates
            and a.seed == b.seed and a.protocol(suite_a) == b.protocol(suite_b))


def companion_unchanged(companions: Sequence[Companion], suite: Suite, plan: dict[str, Cell], seeds: Sequence[int],
                        target: str, attack: str, init: str) -> tuple[Companion, str] | None:
    """The first companion suite whose ``init_only`` entry left the same start unchanged at every seed (a target of
    the same name and recipe, the same init, candidates and protocol): (companion, its entry's name)."""
    for other in companions:
        still = unchanged_attack(other.suite)
        if still is None:
            continue
        pairs = [(plan.get(cell_id(target, attack, init, s)), other.plan.get(cell_id(target, still, init, s)))
                 for s in seeds]
        if pairs and all(a is not None and b is not None and same_start(a, suite, b, other.suite) for a, b in pairs):
            return other, still
    return None


def measure_point(claim: Claim, suite: Suite, comp: Comparison, found: Mapping[str, CellRecord],
                  plan: dict[str, Cell], label: str, target: str, attack: str, init: str,
                  with_unchanged: bool = True, companions: Sequence[Companion] = ()) -> Point:
    """One point of a claim at every seed of its block, with its unchanged start: from the suite's own
    ``init_only`` entry, else from the first of ``companions`` that left the same start unchanged."""
    spec = MEASURES[claim.measure]
    above = True  # a null is passed upwards: boards keep the largest null draw, not the smallest
    point = Point(label, target, attack, init, suite=suite.name)
    entry = suite.attacks.get(attack)
    point.threat = regime_test_of(entry.attack if entry is not None else attack)
    wanted = with_unchanged and claim.measure not in TARGET_MEASURES and claim.measure not in UNCHANGED_BY_CONSTRUCTION
    still = unchanged_attack(suite) if wanted else None  # by construction: filled in below from the seeds found
    if still is not None and still != attack:
        point.unchanged = measure_point(claim, suite, comp, found, plan, label, target, still, init,
                                        with_unchanged=False)
    elif still is None and wanted:
        other = companion_unchanged(companions, suite, plan, comp.seeds, target, attack, init)
        if other is not None:
            point.unchanged = measure_point(claim, other[0].suite, comp, other[0].found, other[0].plan, label,
                                            target, other[1], init, with_unchanged=False)
    for seed in comp.seeds:
        cid = cell_id(target, attack, init, seed)
        rec = found.get(cid)
        if (rec is None or rec.status != STATUS_OK or cid not in plan
                or rec.cell_key != plan[cid].key(suite, rec.dtype)):
            point.missing.append(cid)
            continue
        outcome = cell_outcome(rec)
        if outcome is not None and not outcome.ok:
            point.failed.append((cid, outcome.reason))
            continue
        value = spec.value(rec)
        if value is None:
            point.missing.append(cid)
            continue
        mean, extreme, draws, p0 = _null(rec, spec, above)
        beyond = None
        if spec.null == "calibrated":
            beyond = value >= 1.0
        elif spec.null == "draws" and extreme is not None:
            beyond = value > extreme if above else value < extreme
        residual, how = _regime(rec, point.threat)
        oracle = bool(rec.init.is_oracle)
        train_error = _number(rec.target.metrics.train_error)
        point.seeds.append(SeedValue(seed, cid, value, mean, extreme, draws, beyond, p0, residual, how, oracle,
                                     train_error))
    if with_unchanged and claim.measure in UNCHANGED_BY_CONSTRUCTION:
        known = UNCHANGED_BY_CONSTRUCTION[claim.measure]
        point.unchanged = Point(label, target, UNCHANGED_ATTACK, init,
                                [SeedValue(s.seed, f"{s.cell} left unchanged (known: {known:g})", known)
                                 for s in point.seeds])
    return point


def load_all(results: dict[str, Path]) -> dict[str, dict[str, CellRecord]]:
    """The cell records of each suite's folder (suite name -> cell id -> record)."""
    return {name: load_cell_records(folder) if folder.is_dir() else {} for name, folder in results.items()}


def records_of(cells: Mapping[str, Mapping[str, Any]]) -> dict[str, CellRecord]:
    """Cell records read from their JSON (strictly: a cell a claim cannot read is a one-line error naming it)."""
    return {cid: CellRecord.from_dict(rec, f"cell {cid}") for cid, rec in cells.items()}


def plans(suites: dict[str, Suite]) -> dict[str, dict[str, Cell]]:
    return {name: {c.cell_id: c for c in expand(s)} for name, s in suites.items()}


def default_m_text(attack: str) -> str:
    """The candidate count an attack runs with when neither its entry nor the suite sets one, in words: the attack's
    own factor times n (m = 2n for the papers' attacks, m = n for projection_law; reconbench/attack/candidates.py)."""
    factor = plugins.attack(attack).candidate_factor
    return "n" if factor == 1 else f"{factor}n"


def setup_text(claim: Claim, suite: Suite, comp: Comparison, specs: list[tuple[str, str, str, str]]) -> str:
    """The set-up of a claim's first point, in words, with what varies and the seeds."""
    recipe = suite.targets[specs[0][1]].recipe
    prob, train = recipe.problem, recipe.train
    k = (prob.num_classes or 2) if prob.task == "multiclass" else 2
    model = dict(recipe.model)
    widths = model.pop("widths", None)
    arch = recipe.family + (" " + "-".join(str(w) for w in widths) if widths else "")
    if model:
        arch += " (" + ", ".join(f"{a} {show_value(b)}" for a, b in sorted(model.items())) + ")"
    data = prob.dataset.removeprefix("npz:").split("/")[0]
    attack = suite.attacks[specs[0][2]]
    steps = attack.config.get("steps", attack.config.get("outer_steps"))
    parts = [
        f"{data} {prob.task}, K = {k}, n = {k * prob.n_per_class} ({prob.n_per_class} per class)",
        f"{arch}, {train.loss or 'default loss'}, wd {train.weight_decay:g}, "
        + (f"trained until the learned-part ratio is at most {train.stop_at_gate:g} (at most {train.steps:,} steps)"
           if train.stop_at_gate > 0 else f"{train.steps:,} training steps"),
        f"{attack.attack}, {steps} steps x {attack.search_runs} run{'s' if attack.search_runs != 1 else ''} pooled, "
        f"m = {attack.candidates or suite.candidates or default_m_text(attack.attack)}, {suite.dtype}",
        "start" + ("s" if len({s[3] for s in specs}) > 1 else "") + ": " + ", ".join(dict.fromkeys(s[3] for s in specs)),
        f"{len(comp.seeds)} seeds" + (" (each retrains the target)" if suite.seed_targets else " (same target)"),
    ]
    if claim.axis == "variants" and len(specs) > 1:
        parts.insert(0, f"points: {'; '.join(s[0] for s in specs)} (set-up shown for the first)")
    elif claim.axis == "attacks" and len(specs) > 1:
        parts.insert(0, f"attacks: {', '.join(s[2] for s in specs)}")
    return f"`{suite.name}` / `{comp.name}`: " + "; ".join(parts)
