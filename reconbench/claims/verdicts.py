"""The verdict rules: from a claim's points (per-seed values and nulls) to a verdict, the test that decided it and
its p-value. The rules are written out for the page in :data:`RULES`; the tests are in :mod:`reconbench.claims.stats`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from reconbench.claims.measure import TARGET_MEASURES, UNCHANGED_ATTACK, Point
from reconbench.claims.records import Claim
from reconbench.claims.stats import ALPHA, binomial_p, sign_p, trend_p
from reconbench.targets.regime import MAX_RESIDUAL

REPRODUCED = "reproduced"
NOT_REPRODUCED = "not reproduced at this scale"
CONTRADICTED = "contradicted"
NOT_CONTRADICTED = "not contradicted"
NOT_RUN = "not run"
#: not run because the board it reads is partial and has not run its cells yet (board_state.py); a complete board's
#: claim never reads so
NOT_RUN_YET = "not run yet (the board is partial)"
NOT_JUDGED = "not judged"
VERDICTS = (REPRODUCED, NOT_REPRODUCED, CONTRADICTED, NOT_CONTRADICTED, NOT_JUDGED, NOT_RUN, NOT_RUN_YET)

#: seeds a measured claim needs at every point before it is judged
MIN_SEEDS = 5


@dataclass(frozen=True)
class Decision:
    verdict: str
    reason: str
    test: str = ""          # the test and its statistic, in words
    p: float | None = None  # the p-value the verdict rests on (None: no test ran)


def fmt_p(p: float) -> str:
    return f"{p:.2g}" if p >= 1e-3 else f"{p:.1e}"


def _preconditions(claim: Claim, points: list[Point]) -> Decision | None:
    if not claim.measured:
        return Decision(NOT_RUN, claim.reason)
    failed = [f"{cid} ({why})" for p in points for cid, why in p.failed]
    if failed:
        return Decision(NOT_RUN, "the attack did not complete its steps in: " + "; ".join(failed))
    short = [p for p in points if len(p.seeds) < MIN_SEEDS]
    if not points or short:
        done = sum(len(p.seeds) for p in points)
        planned = sum(len(p.seeds) + len(p.missing) for p in points)
        return Decision(NOT_RUN, f"{done} of {planned} cells finished; every point needs {MIN_SEEDS} seeds"
                        if done else "no finished cells yet")
    if not claim.judge:
        return Decision(NOT_JUDGED, claim.reason)
    return None


def _binomial(point: Point) -> tuple[float, int, int, float] | None:
    """(p, passes, seeds, per-seed bound) of the binomial test of one point; None when a seed lacks its null."""
    if any(s.beyond is None or s.p0 is None for s in point.seeds):
        return None
    p0 = max(s.p0 for s in point.seeds if s.p0 is not None)
    passes = sum(1 for s in point.seeds if s.beyond)
    return binomial_p(passes, len(point.seeds), p0), passes, len(point.seeds), p0


def _null_claim(claim: Claim, points: list[Point]) -> Decision:
    side = "beyond"
    results = []
    for p in points:
        b = _binomial(p)
        if b is None:
            return Decision(NOT_RUN, f"the cells at {p.label} record no held-out null for {claim.measure}")
        results.append((p, *b))
    texts = [f"{p.label}: {passes} of {k} seeds {side} their null (per-seed bound {p0:.3g}), p = {fmt_p(pv)}"
             for p, pv, passes, k, p0 in results]
    test = "binomial test on the seeds that pass their null: " + "; ".join(texts)
    worst = max(r[1] for r in results)
    best = min(r[1] for r in results)
    if claim.kind == "at_null":
        level = ALPHA / len(results)
        above = [r[0].label for r in results if r[1] <= level]
        if above:
            return Decision(CONTRADICTED, f"beyond the null at {', '.join(above)} (p <= {level:.3g})", test, best)
        return Decision(NOT_CONTRADICTED, f"no point beyond its null at level {level:.3g}", test, best)
    if worst <= ALPHA:
        return Decision(REPRODUCED, f"every point {side} its null (each p <= {ALPHA})", test, worst)
    weak = [r[0].label for r in results if r[1] > ALPHA]
    return Decision(NOT_REPRODUCED, f"not {side} the null at: {', '.join(weak)}", test, worst)


def _matrix(points: list[Point]) -> tuple[np.ndarray, list[int]]:
    """Seeds x points, over the seeds present at every point."""
    seeds = sorted(set.intersection(*({s.seed for s in p.seeds} for p in points)))
    rows = [[p.value_of(s) for p in points] for s in seeds]
    return np.asarray(rows, dtype=np.float64).reshape(len(seeds), len(points)), seeds


def _paired(claim: Claim, points: list[Point]) -> Decision:
    v, seeds = _matrix(points)
    if len(seeds) < MIN_SEEDS:
        return Decision(NOT_RUN, f"only {len(seeds)} seeds have every point; {MIN_SEEDS} needed")
    up = claim.direction == "up"
    ends = f"{points[0].label} -> {points[-1].label}"
    if claim.kind == "some_above":
        tests = []
        for j in range(1, len(points)):
            pu, pd, t, how = trend_p(v[:, [0, j]])
            adj = min(1.0, (pu if up else pd) * (len(points) - 1))
            tests.append((adj, points[j].label, how))
        best = min(tests)
        test = (f"paired permutation test of each point against {points[0].label} "
                f"({'higher' if up else 'lower'}), Bonferroni over {len(tests)}: "
                + "; ".join(f"{lab}: p = {fmt_p(p)}" for p, lab, _ in tests) + f" ({best[2]})")
        if best[0] <= ALPHA:
            return Decision(REPRODUCED, f"{best[1]} {'above' if up else 'below'} {points[0].label}", test, best[0])
        return Decision(NOT_REPRODUCED, f"no point {'above' if up else 'below'} {points[0].label} at level {ALPHA}",
                        test, best[0])
    pu, pd, t, how = trend_p(v)
    name = "paired permutation (sign-flip) test" if len(points) == 2 else "within-seed permutation test of the " \
        "linear trend"
    if claim.kind == "no_change":
        p2 = min(1.0, 2 * min(pu, pd))
        test = f"{name}, two-sided, over {len(seeds)} seeds ({how}): p = {fmt_p(p2)}"
        if p2 <= ALPHA:
            return Decision(CONTRADICTED, f"the measure changes along {ends}", test, p2)
        return Decision(NOT_CONTRADICTED, f"no change along {ends} at level {ALPHA}", test, p2)
    claimed, opposite = (pu, pd) if up else (pd, pu)
    test = (f"{name}, one-sided ({'increasing' if up else 'decreasing'}), over {len(seeds)} seeds ({how}): "
            f"p = {fmt_p(claimed)}; the opposite direction p = {fmt_p(opposite)}")
    if claimed <= ALPHA:
        return Decision(REPRODUCED, f"{'increases' if up else 'decreases'} along {ends}", test, claimed)
    if opposite <= ALPHA:
        return Decision(CONTRADICTED, f"{'decreases' if up else 'increases'} along {ends}, against the claim", test,
                        opposite)
    return Decision(NOT_REPRODUCED, f"no trend along {ends} at level {ALPHA}", test, claimed)


def _threshold(claim: Claim, points: list[Point]) -> Decision:
    assert claim.threshold is not None
    above = claim.direction == "up"
    side = ">" if above else "<"
    results = []
    for p in points:
        values = [s.value for s in p.seeds]
        pc, wins, untied = sign_p(values, claim.threshold, above)
        po, _, _ = sign_p(values, claim.threshold, not above)
        results.append((p.label, pc, po, wins, untied))
    test = f"sign test of the seeds against {claim.threshold:g}: " + "; ".join(
        f"{lab}: {w} of {u} untied seeds {side} {claim.threshold:g}, p = {fmt_p(pc)}" for lab, pc, _, w, u in results)
    worst = max(r[1] for r in results)
    if worst <= ALPHA:
        return Decision(REPRODUCED, f"every point {side} {claim.threshold:g}", test, worst)
    level = ALPHA / len(results)
    against = [r for r in results if r[2] <= level]
    if against:
        return Decision(CONTRADICTED, f"on the other side of {claim.threshold:g} at "
                        f"{', '.join(r[0] for r in against)}", test, min(r[2] for r in against))
    return Decision(NOT_REPRODUCED, f"not every point {side} {claim.threshold:g} at level {ALPHA}", test, worst)


def _test(claim: Claim, points: list[Point]) -> Decision:
    if claim.kind in ("above_null", "at_null"):
        return _null_claim(claim, points)
    if claim.kind == "threshold":
        return _threshold(claim, points)
    return _paired(claim, points)


def _span(values: list[float]) -> str:
    lo, hi = min(values), max(values)
    return f"{lo:.3g}" if f"{lo:.3g}" == f"{hi:.3g}" else f"{lo:.3g}-{hi:.3g}"


def _oracle(claim: Claim, points: list[Point]) -> Decision | None:
    cells = [s.cell for p in points for s in p.seeds if s.oracle]
    if claim.oracle or cells:
        where = f" ({len(cells)} cells, e.g. {cells[0]})" if cells else ""
        return Decision(NOT_JUDGED, f"oracle start refused: the attack starts from the training images{where}, so "
                        "the outcome says nothing about privacy")
    return None


def _outside_regime(points: list[Point]) -> Decision | None:
    """Not judged when a cell's target is outside its attack's regime (residual above the bound)."""
    gated = [(p, s) for p in points if p.threat is not None for s in p.seeds]
    outside = [(p, s) for p, s in gated if s.regime_residual is not None and s.regime_residual > MAX_RESIDUAL]
    if not outside:
        return None
    shown = "; ".join(
        f"{p.label}: {_span([s.regime_residual for s in p.seeds if s.regime_residual is not None])}"
        f" ({sum(1 for q, s in outside if q is p)} of {len(p.seeds)} seeds outside)"
        for p in points if p.threat is not None and any(q is p for q, _ in outside))
    first = outside[0]
    return Decision(NOT_JUDGED, f"targets outside the regime: {first[0].threat} residual (||v - J^T lambda|| / "
                    f"||v||, {first[1].regime_how}) above {MAX_RESIDUAL:g} at {shown}")


def _premise(claim: Claim, points: list[Point]) -> Decision | None:
    """Not judged when some cell's target lacks the condition the claim puts on its targets."""
    if claim.premise != "nonzero_train_error":
        return None
    lacking = [s for p in points for s in p.seeds if s.train_error is None or s.train_error <= 0]
    if not lacking:
        return None
    errors = ", ".join("not recorded" if s.train_error is None else f"{s.train_error:g}" for s in lacking)
    return Decision(NOT_JUDGED, f"targets outside the claim's premise: it is about models with a non-zero training "
                    f"error, and {len(lacking)} of {sum(len(p.seeds) for p in points)} cells' targets have training "
                    f"error {errors} (e.g. {lacking[0].cell})")


def _unchanged(claim: Claim, points: list[Point], verdict: Decision) -> Decision:
    """A verdict that says something must not be met already by the same start left unchanged (0 attack steps)."""
    if verdict.verdict not in (REPRODUCED, CONTRADICTED) or claim.measure in TARGET_MEASURES:
        return verdict
    still = [p.unchanged for p in points]
    missing = [p.label for p, u in zip(points, still, strict=True) if u is None or len(u.seeds) < len(p.seeds)]
    cells_alone = f"the cells alone give {verdict.verdict} ({verdict.reason}; {verdict.test})"
    if missing:
        return Decision(NOT_JUDGED, "no unchanged-start comparison (the same start, 0 attack steps, the suite's "
                        f"{UNCHANGED_ATTACK} entry) at {', '.join(missing)}; {cells_alone}", verdict.test, verdict.p)
    base = _test(claim, [u for u in still if u is not None])
    if base.verdict == verdict.verdict:
        return Decision(NOT_JUDGED, f"the unchanged start already meets it ({base.reason}; {base.test}); "
                        f"{cells_alone}", verdict.test, verdict.p)
    return Decision(verdict.verdict, f"{verdict.reason}; the unchanged start does not ({base.verdict}: "
                    f"{base.reason})", verdict.test, verdict.p)


def _outside_setting(claim: Claim, verdict: Decision) -> Decision:
    """Not judged when the cells do not reproduce the paper's setting or adversary for this statement: a
    contradiction (or its absence) outside that setting says nothing about what the paper claims."""
    if not claim.outside_setting or verdict.verdict == NOT_RUN:
        return verdict
    return Decision(NOT_JUDGED, f"outside the paper's setting: {claim.outside_setting}; the cells alone give "
                    f"{verdict.verdict} ({verdict.reason})", verdict.test, verdict.p)


def decide(claim: Claim, points: list[Point]) -> Decision:
    """The verdict of one claim from its measured points (the rules in :data:`RULES`)."""
    pre = _preconditions(claim, points)
    if pre is not None:
        return pre
    refused = _oracle(claim, points) or _outside_regime(points) or _premise(claim, points)
    return _outside_setting(claim, refused or _unchanged(claim, points, _test(claim, points)))


RULES = f"""\
Every decision is taken at level {ALPHA} and shows its test and p-value. A measured claim is judged only when every
point has {MIN_SEEDS} finished seeds whose attacks did their work; in the claims suites each seed retrains the
target (`seed_targets`) and seeds the held-out null draws afresh (`seed_nulls`), so seeds are independent repetitions.

- **above the null** (the attack recovers training images; reconstructions collapse onto a few images): per seed, the
  calibrated headline counts at least one image (a held-out draw does so with probability at most 1/(K+1) = 5%
  for K = 19 calibration draws; docs/calibration.md), or the measure lies beyond every one of the cell's D held-out
  null draws (probability at most 1/(D+1)). The number of seeds that pass is compared with Binomial(seeds, bound):
  p = P(Binomial >= passes). *Reproduced* if p <= {ALPHA} at every point (an intersection-union test, valid without
  correction); otherwise *not reproduced at this scale* (a smaller set-up cannot contradict a success). With 5 seeds
  and the 5% bound, 2 passing seeds give p = 0.023, 1 gives p = 0.23, 5 give p = 3.1e-7.
- **at the null** (the attack recovers nothing): the same test; *contradicted* if some point has p <= {ALPHA}
  divided by the number of points (Bonferroni), else *not contradicted*. Absence of evidence is weak evidence: with
  5 seeds, an attack that passes its null at half the seeds is caught with probability 0.81.
- **trend** and **comparison** (the measure rises or falls along the axis; one point against another): the linear
  contrast of the points within each seed, against its distribution when each seed's values are permuted across the
  points (exact; with two points the paired sign-flip test, smallest p with 5 seeds 1/32 = 0.031, with 8 seeds
  1/256; seeds whose points tie add nothing, which is why the count comparisons run 8 seeds). *Reproduced* if
  the one-sided p in the claimed direction is <= {ALPHA}, *contradicted* if the opposite one is, else *not
  reproduced at this scale*.
- **some point above the first** ("certain values" of a setting): each point against the first by the paired test,
  Bonferroni over the points; *reproduced* if the smallest corrected p is <= {ALPHA} (with two points against the
  first that needs at least 6 seeds: smallest p 2/64).
- **no change** (a count stays about the same): the trend test two-sided; *contradicted* if p <= {ALPHA}, else *not
  contradicted* (with the power caveat above). Two-sided, the smallest p with 5 seeds is 2/32 > {ALPHA}, so these
  claims need at least 6 seeds (the suites run 8).
- **threshold** (a share is above one half; a correlation is below 0): per point a sign test of the seeds against the
  threshold, p = P(Binomial(untied seeds, 1/2) >= seeds on the claimed side); *reproduced* if p <= {ALPHA} at every
  point, *contradicted* if some point is on the other side at {ALPHA} / points, else *not reproduced at this scale*.
- *not run*: some cell is missing, stale (its suite entry changed) or its attack did not complete its steps
  (diverged, non-finite, stopped early: reconbench/attack/outcome.py); such a claim gets no verdict. *Not judged*:
  measured and shown, but the paper's outcome is not in the available text, so there is nothing to compare with;
  or one of the five rules below holds.
- *not judged: oracle start refused*: some cell starts from the training images themselves (the init records
  `is_oracle`), or the data file marks the claim as one; such a run tests the attack, not privacy.
- *not judged: targets outside the regime*: the attack assumes the released weights are a stationary point
  (docs/regime.md), and some cell's target is further from one than the bound: its residual
  ||v - J^T lambda|| / ||v|| for the attack's threat model (theta with the best lambda >= 0 for an attacker who
  sees theta only; the regularised loss's gradient under weight decay; theta - theta0 for one given theta0) is
  above {MAX_RESIDUAL:g}. Cards recorded before the regime test carry the same theta fit as a squared residual; for
  the weight-decay attack that fit is a lower bound, so a target it puts outside is outside. Attacks without a
  stationarity premise (the bilevel attack, the baselines) are not gated.
- *not judged: outside the paper's setting*: the data file names the paper's setting and adversary for the
  statement, and the cells do not reproduce them (an adversary given what the paper's has not, a set-up that
  cannot reach what the statement is about); whatever the test gives is kept in the reason, not as a verdict. A
  contradiction stands only where the paper's own setting and adversary are reproduced.
- *not judged: targets outside the claim's premise*: the claim is about targets of a kind (models that do not fit
  every training image) and some cell's target is not of that kind (its card's training error is 0).
- *not judged: the unchanged start already meets it*: every verdict that says something (reproduced,
  contradicted) is also computed, by the same rule, from the same starts left unchanged (0 attack steps: the
  suite's `{UNCHANGED_ATTACK}` entry, or another claims suite's where it ran the same target recipe from the same
  init with the same candidates, seeds and protocol, scored the same way); if those give the same verdict, the
  attack is not what produced it. Without such cells the verdict cannot be told apart from the start's and is not judged
  either; the reason keeps what the cells alone give. Measures of the target itself (margins) are exempt."""
