"""Why a run's calibrated headline does not beat its held-out null: one line for ``reconbench run`` to print.

It reads only what the result record holds: the headline and its null, the target card's metrics (the regime
residuals of ``certificate.regime``, docs/regime.md; the training error) and each search run's first and last attack
loss. The causes it names are what those numbers can show; it never claims the weights do not leak.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from reconbench.records import RunResult, SearchRun, Spread, TrainMetrics
from reconbench.targets.regime import MAX_RESIDUAL, regime_test_of, residual_for

#: a run whose attack loss fell by less than this share of its starting value did not move
STILL_SHARE = 1e-3

#: a calibrated correlation bar at or above this leaves little room: random held-out images of the data set already
#: correlate that well with the training images (8 x 8 `digits`: 0.973; 28 x 28 MNIST: 0.81-0.85, measured in docs/usage.md)
HIGH_CORR_BAR = 0.95


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(value) else None


def loss_moved(runs: Sequence[SearchRun]) -> bool | None:
    """Whether any search run's attack loss fell by at least :data:`STILL_SHARE` of where it started; None when no
    run recorded both ends."""
    seen = False
    for run in runs:
        start, end = _number(run.initial_loss), _number(run.final_loss)
        if start is None or end is None:
            continue
        seen = True
        if start - end > STILL_SHARE * abs(start):
            return True
    return False if seen else None


def _loss_span(runs: Sequence[SearchRun]) -> str:
    pairs = [(_number(r.initial_loss), _number(r.final_loss), int(r.steps or 0)) for r in runs]
    pairs = [p for p in pairs if p[0] is not None and p[1] is not None]
    if not pairs:
        return ""
    start, end, steps = min(pairs, key=lambda p: p[1] if p[1] is not None else math.inf)
    return f"{start:.3g} -> {end:.3g} in {steps} step(s)"


def below_null_line(result: RunResult) -> str | None:
    """One line when the calibrated headline does not beat the maximum of its held-out null: that it does not, the
    likely causes, and what to change. None when it beats it, or when there is no calibrated headline."""
    evaluation = result.evaluation
    null = evaluation.held_out
    headline = evaluation.headline.reconstructed_calibrated
    top = _number((null.spread_of("reconstructed_calibrated") or Spread()).max)
    if not isinstance(headline, int) or top is None or headline > top:
        return None
    metrics = result.target.train_metrics or TrainMetrics()
    attack = str(result.attack or "")
    causes: list[str] = []
    fixes: dict[str, str] = {}   # what to change, one per part: the target, the attack, the search
    threat = regime_test_of(attack)
    inside = ""
    if threat is not None:
        residual, how = residual_for(metrics.certificate_dict, threat)
        if residual is not None and residual > MAX_RESIDUAL:
            causes.append(f"the target is outside the attack's regime (its {how} residual is {residual:.2g}, above "
                          f"{MAX_RESIDUAL:g}; docs/regime.md)")
            fixes["target"] = ("train the target to a stationary point of its regularised loss (more --steps N)"
                               if threat == "regularised" else
                               "train the target longer (--steps N) or with weight decay (docs/regime.md)")
        elif residual is not None:
            inside = f"the target is inside the attack's regime ({how} residual {residual:.2g} <= {MAX_RESIDUAL:g}) and "
    error = _number(metrics.train_error)
    if error is not None and error > 0:
        causes.append(f"the target misclassifies {error:.0%} of its training set")
        fixes.setdefault("target", "train the target longer (--steps N)")
    runs = [r for r in result.runs if r.stopped != "failed"]
    moved = loss_moved(runs)
    span = _loss_span(runs)
    if moved is False:
        causes.append(f"the attack did not move (its loss {span})" if span else "the attack did not move")
        fixes["attack"] = "more attack steps (--set steps=N) or another initialisation scale (--init-set scale=...)"
    elif moved and not causes:
        causes.append(f"{inside}the attack's loss fell ({span}), but its candidates are no closer to the training "
                      "images than to held-out ones")
    cal = evaluation.recorded_protocol.calibrated
    bar = _number(evaluation.headline.calibrated_threshold)
    if cal.score == "corr" and bar is not None and bar >= HIGH_CORR_BAR:
        causes.append(f"the null's bar is high (corr > {bar:.3f}: held-out images of this data set already correlate "
                      "that well), which leaves little room on small, alike images")
        fixes["data"] = "a data set of larger images (e.g. --dataset mnist_test)"
    if runs and all(r.steps == 0 for r in runs):   # a baseline reads its candidates off once: no steps to add
        causes.append("the attack takes no steps (a baseline: it reads its candidates off the weights or the start "
                      "once), so more steps or search runs change nothing")
        fixes["attack"] = "an attack that optimises its candidates (`reconbench list attacks`)"
    if not causes:
        causes.append("no recorded cause (no regime residual or loss trace to read)")
    if "an attack that optimises" not in fixes.get("attack", ""):
        fixes.setdefault("search", "more --search-runs")
        fixes.setdefault("attack", "more attack steps (--set steps=N)")
    fixes.setdefault("target", "a longer-trained target (--steps N)")
    return (f"note: the calibrated headline ({headline} of {evaluation.headline.n_train}) does not beat its held-out null "
            f"(max {top:.0f} over {null.draws or 0} draws), so this run shows no reconstruction; likely why: "
            f"{'; '.join(causes)}. Try: {', '.join(fixes.values())}.")
