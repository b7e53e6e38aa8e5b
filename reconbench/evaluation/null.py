"""The ``held_out`` null and the calibrated headline (docs/calibration.md).

The null asks what an attack would score if it knew nothing about the training set: its candidates are random images
of the same distribution that the model never saw (the problem's held-out pool: neither training images nor
membership decoys), as many as the attack returned and with the attack's candidate labels (each candidate is
replaced by a random held-out image of its label). They are scored under the same protocol as the attack.

The headline threshold is calibrated on the null: ``calibration_draws`` = K draws are scored, and the threshold is
the highest per-image score any of them reached on any training image.
A training image counts as reconstructed only when its score is above it. A fresh null draw is exchangeable with
the K calibration draws, so the chance that it reaches the threshold on even one training image is at most
1 / (K + 1) (5% for K = 19), whatever the data set, the candidate count or the metric. ``null_draws`` further draws
(other seeds) are reported next to the attack's numbers: mean, spread and every draw.

The threshold depends on the problem, the protocol, the candidate count and the labels, not on the attack: it is
computed once per process for each of these and reused.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import torch

from reconbench.data import Problem
from reconbench.evaluation import decisions, problem_memo
from reconbench.evaluation.batched import BATCH_VALUES
from reconbench.evaluation.prior import AVERAGE_SIZES, prior_candidates
from reconbench.evaluation.protocol import ResolvedProtocol

#: the rng stream of each use of the held-out pool (calibration draws, reported draws and the membership test's
#: non-members never share a seed)
CALIBRATION_STREAM, REPORT_STREAM, MEMBERSHIP_STREAM = 0, 1, 2
#: the rng stream of the null runs behind a selected run's bar (calibrate_selected)
SELECTION_STREAM = 3
#: the rng stream of the data prior's calibration draws (protocol prior_draws)
PRIOR_STREAM = 4

_THRESHOLDS: dict[str, dict[str, Any]] = {}
_REPORTED: dict[str, list[dict[str, float]]] = {}
#: the borderline decisions of each cached entry of _REPORTED (None: computed without a decision guide)
_REPORTED_BORDERLINE: dict[str, list[decisions.Borderline] | None] = {}


def clear_caches() -> None:
    """Forget the thresholds, reported draws and per-problem values (``problem_memo``) kept for this process (each
    is computed again on its next use)."""
    _THRESHOLDS.clear()
    _REPORTED.clear()
    _REPORTED_BORDERLINE.clear()
    problem_memo.clear()


def pool_size(problem: Problem) -> int:
    """Held-out images usable as null candidates (their task label is one of the problem's classes)."""
    if problem.source_images is None:
        return 0
    return int((problem.held_out_labels < problem.num_classes).sum())


def unavailable_reason(problem: Problem, labels: np.ndarray | None) -> str | None:
    """Why the null cannot be drawn for these candidate labels, or None."""
    if pool_size(problem) == 0:
        return "the problem has no held-out pool (it was not built from a data set)"
    if labels is not None:
        missing = sorted({int(c) for c in np.unique(labels)} - {int(c) for c in np.unique(problem.held_out_labels)})
        if missing:
            return f"the held-out pool has no image of label(s) {missing}"
    return None


def draw(problem: Problem, labels: np.ndarray | None, m: int, seed: int, stream: int, k: int) -> torch.Tensor:
    """Null draw ``k`` of a stream: m held-out images (centred), candidate j of label c <- a random image of label c.

    Images are drawn without replacement within a label while the pool has enough (else with replacement).
    """
    rng = np.random.default_rng([seed, stream, k])
    positions = np.empty(m, dtype=np.int64)
    if labels is None:
        eligible = np.flatnonzero(problem.held_out_labels < problem.num_classes)
        positions[:] = rng.choice(eligible, m, replace=len(eligible) < m)
    else:
        for c in np.unique(labels):
            want = np.flatnonzero(labels == c)
            pool = np.flatnonzero(problem.held_out_labels == c)
            positions[want] = rng.choice(pool, len(want), replace=len(pool) < len(want))
    return problem.centred(problem.held_out_images(positions))


def prior_draw(problem: Problem, labels: np.ndarray | None, m: int, seed: int, k: int) -> torch.Tensor:
    """Prior draw ``k``: m candidates built from held-out images alone (reconbench/evaluation/prior.py), candidate j
    of label c from images of label c; only the images a draw can use are loaded."""
    rng = np.random.default_rng([seed, PRIOR_STREAM, k])
    if labels is None:
        labels = np.zeros(m, dtype=np.int64)
        pools = {0: np.flatnonzero(problem.held_out_labels < problem.num_classes)}
    else:
        pools = {int(c): np.flatnonzero(problem.held_out_labels == c) for c in np.unique(labels)}
    positions, pool_labels = [], []
    for c, pool in pools.items():
        want = int((np.asarray(labels) == c).sum()) * max(AVERAGE_SIZES)
        take = rng.choice(pool, min(len(pool), want), replace=False)
        positions.append(take)
        pool_labels.append(np.full(len(take), c))
    images = problem.centred(problem.held_out_images(np.concatenate(positions)))
    return prior_candidates(images, np.concatenate(pool_labels), np.asarray(labels), rng)


def scores_of(evaluation: dict[str, Any], column: str) -> np.ndarray:
    """(n,) per-image score column of an evaluation dict, NaN where unmatched."""
    return np.asarray([np.nan if row[column] is None else float(row[column]) for row in evaluation["per_image"]],
                      dtype=np.float64)


def cache_key(problem: Problem, resolved: ResolvedProtocol, labels: np.ndarray | None, m: int) -> str:
    counts = None if labels is None else np.unique(labels, return_counts=True)
    blob = {"spec": problem.spec.to_dict(), "train": problem.train_indices.tolist(),
            "held_out": [len(problem.held_out_indices), int(problem.held_out_indices.sum())],
            "protocol": resolved.overrides, "family": resolved.family, "m": m,
            "labels": None if counts is None else [c.tolist() for c in counts]}
    if labels is not None and resolved.base.prior_draws:
        # the held-out draws depend on the label counts only; a prior draw builds candidate j from images of label j
        # in candidate order, so it depends on the order too: two cells with equal counts must not share an entry
        blob["label_order"] = np.asarray(labels).tolist()
    return hashlib.sha256(json.dumps(blob, sort_keys=True, default=str).encode()).hexdigest()


def _maximum(s: np.ndarray) -> float:
    return float(np.nanmax(s)) if np.isfinite(s).any() else -math.inf


def in_batches(makers: Iterable[Callable[[], torch.Tensor]]) -> Iterator[list[torch.Tensor]]:
    """The made candidate sets in consecutive batches of about ``BATCH_VALUES`` candidate values (at least one set
    a batch); each set is made when its batch is, so memory stays bounded whatever the count and size of the sets."""
    batch: list[torch.Tensor] = []
    size = 0
    for make in makers:
        batch.append(make())
        size += batch[-1].numel()
        if size >= BATCH_VALUES:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def _maxima_in_batches(makers: Iterable[Callable[[], torch.Tensor]],
                       columns: Callable[[Sequence[torch.Tensor]], list[np.ndarray]]) -> list[float]:
    """The highest column score of each made candidate set, scored by ``columns`` batch by batch."""
    return [_maximum(s) for batch in in_batches(makers) for s in columns(batch)]


def calibrate(problem: Problem, resolved: ResolvedProtocol, labels: np.ndarray | None, m: int,
              score: Callable[[torch.Tensor], dict[str, Any]],
              columns: Callable[[Sequence[torch.Tensor]], list[np.ndarray]] | None = None) -> dict[str, Any]:
    """The calibrated threshold for m candidates with these labels; ``score`` evaluates null candidates, and
    ``columns`` (optional) gives the calibrated column of many draws at once, with the numbers ``score`` gives
    (``batched.column_scorer``): used outside a decision guide."""
    p = resolved.base
    key = cache_key(problem, resolved, labels, m)
    guide = decisions.current()  # re-scoring that notes or flips borderline decisions takes the draws' decisions too
    cached = _THRESHOLDS.get(key)
    if cached is not None and (guide is None or (cached["borderline"] is not None
                                                 and not guide.flips_in("calibration"))):
        if guide is not None:
            guide.replay(cached["borderline"])
        return cached
    before = set(guide.seen) if guide is not None else set()
    column = calibrated_column(resolved)
    n_prior = p.prior_draws if p.calibration_draws else 0
    if columns is not None and guide is None:
        makers = [functools.partial(draw, problem, labels, m, p.null_seed, CALIBRATION_STREAM, k)
                  for k in range(p.calibration_draws)]
        makers += [functools.partial(prior_draw, problem, labels, m, p.null_seed, k) for k in range(n_prior)]
        scored = _maxima_in_batches(makers, columns)
        maxima, prior_maxima = scored[:p.calibration_draws], scored[p.calibration_draws:]
    else:
        maxima = []
        for k in range(p.calibration_draws):
            cand = draw(problem, labels, m, p.null_seed, CALIBRATION_STREAM, k)
            with decisions.scope(f"calibration draw {k}"):
                maxima.append(_maximum(scores_of(score(cand), column)))
        prior_maxima = []
        for k in range(n_prior):
            cand = prior_draw(problem, labels, m, p.null_seed, k)
            with decisions.scope(f"calibration prior draw {k}"):
                prior_maxima.append(_maximum(scores_of(score(cand), column)))
    null_max = max(maxima + prior_maxima) if maxima else -math.inf
    finite = math.isfinite(null_max)
    out = {"threshold": null_max, "null_max": null_max if finite else None,
           "draw_maxima": [x if math.isfinite(x) else None for x in maxima], "pool_size": pool_size(problem),
           "candidates": m,
           **({"prior_draw_maxima": [x if math.isfinite(x) else None for x in prior_maxima]} if prior_maxima else {}),
           "borderline": None if guide is None else [b for k, b in guide.seen.items() if k not in before]}
    if guide is not None and guide.flips_in("calibration"):
        return out
    if len(_THRESHOLDS) > 64:
        _THRESHOLDS.clear()
    _THRESHOLDS[key] = out
    return out


def calibrate_selected(problem: Problem, resolved: ResolvedProtocol, labels: np.ndarray | None, m: int, runs: int,
                       score: Callable[[torch.Tensor], dict[str, Any]],
                       rank: Callable[[torch.Tensor], float], rule: str,
                       columns: Callable[[Sequence[torch.Tensor]], list[np.ndarray]] | None = None) -> dict[str, Any]:
    """The threshold for a run picked among ``runs`` runs of m candidates by ``rank`` (lowest wins), calibrated by
    applying the same pick to null runs: calibration draw k is ``runs`` null runs (stream
    :data:`SELECTION_STREAM`, draws k * runs .. k * runs + runs - 1); the run of lowest rank is scored, and the
    threshold is the highest score any picked run reached on any training image. A fresh set of null runs, picked
    the same way, passes it with probability at most 1 / (K + 1). ``rule`` names the ranking (it is part of the
    cache key and of the record); ``columns`` as for :func:`calibrate`."""
    p = resolved.base
    key = cache_key(problem, resolved, labels, m) + f"-selected-{runs}-{rule}"
    if key in _THRESHOLDS:
        return _THRESHOLDS[key]
    column = calibrated_column(resolved)
    picked: list[int] = []

    def pick(k: int) -> torch.Tensor:
        draws = [draw(problem, labels, m, p.null_seed, SELECTION_STREAM, k * runs + r) for r in range(runs)]
        ranks = [rank(cand) for cand in draws]
        picked.append(int(np.argmin(ranks)))
        return draws[picked[-1]]

    makers = [functools.partial(pick, k) for k in range(p.calibration_draws)]
    if columns is not None and decisions.current() is None:
        maxima = _maxima_in_batches(makers, columns)
    else:
        maxima = [_maximum(scores_of(score(make()), column)) for make in makers]
    null_max = max(maxima) if maxima else -math.inf
    out = {"threshold": null_max, "draw_maxima": [x if math.isfinite(x) else None for x in maxima],
           "picked": picked, "runs": runs, "rule": rule,
           "candidates": m}
    if len(_THRESHOLDS) > 64:
        _THRESHOLDS.clear()
    _THRESHOLDS[key] = out
    return out


def reported_draws(key: str, compute: Callable[[], list[dict[str, float]]]) -> list[dict[str, float]]:
    """The reported null draws' numbers for an evaluation key, computed once per process (copies returned).

    Under a decision guide (re-scoring) the draws' borderline decisions are cached with them and noted again on a
    hit; a guide that flips a draw's decision computes the draws afresh and does not cache them."""
    guide = decisions.current()
    if guide is not None and guide.flips_in("null draw"):
        return compute()
    cached = _REPORTED_BORDERLINE.get(key)
    if key not in _REPORTED or (guide is not None and cached is None):
        before = set(guide.seen) if guide is not None else set()
        draws = compute()
        if len(_REPORTED) > 64:
            _REPORTED.clear()
            _REPORTED_BORDERLINE.clear()
        _REPORTED[key] = draws
        cached = None if guide is None else [b for k, b in guide.seen.items() if k not in before]
        _REPORTED_BORDERLINE[key] = cached
    elif guide is not None and cached is not None:
        guide.replay(cached)
    return [dict(d) for d in _REPORTED[key]]


def calibrated_column(resolved: ResolvedProtocol) -> str:
    """The per-image score the headline threshold applies to (the primary metric's unless set)."""
    return resolved.base.calibrated_score


def calibrated_flags(scores: np.ndarray, threshold: float) -> np.ndarray:
    """(n,) training images whose score is strictly above the threshold (unmatched: never)."""
    return decisions.above(scores, threshold, "reconstructed_calibrated")


def numeric_summary(summary: dict[str, Any]) -> dict[str, float]:
    """The numbers of a summary (strings, lists and missing values dropped)."""
    return {k: float(v) for k, v in summary.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and v is not None and math.isfinite(float(v))}


def aggregate(draws: list[dict[str, float]]) -> dict[str, dict[str, float]]:
    """Per summary key over the draws: mean, sample std, min, max, and how many draws had it."""
    keys = sorted({k for d in draws for k in d})
    out: dict[str, dict[str, float]] = {}
    for key in keys:
        vals = np.asarray([d[key] for d in draws if key in d], dtype=np.float64)
        out[key] = {"mean": float(vals.mean()), "std": float(vals.std(ddof=1)) if len(vals) > 1 else 0.0,
                    "min": float(vals.min()), "max": float(vals.max()), "draws": len(vals)}
    return out
