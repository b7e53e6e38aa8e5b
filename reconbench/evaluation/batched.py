"""Many candidate sets scored in one pass: the calibrated score's column of every null draw.

The calibration scores K held-out draws (and J data-prior draws, and the null runs behind a selected run's bar)
against the same training images under the same protocol, and reads one per-image column of each: the calibrated
score (``null.calibrated_column``). Scored one draw at a time, almost all of the time goes to per-call overhead on
small images. Here the draws are stacked: validity, matching features, display scaling and the column's metric run
once over the stack; the per-draw work (matching) stays per draw. Every step treats each image (or each row) on its
own, so a draw's column equals the one :func:`reconbench.evaluation.evaluate.score` gives it alone, bit for bit
(tests/unit/evaluation/test_batched_scores.py).

A metric takes part when it offers ``column_scores_many(evaluations, config)`` (the built-in ``ssim`` and ``corr``
do); for any other calibrated column, and under a decision guide (re-scoring that notes or flips borderline
decisions draw by draw), :func:`column_scorer` returns None and the caller scores draw by draw as before.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from reconbench import plugins
from reconbench.data import Problem
from reconbench.evaluation import decisions
from reconbench.evaluation.context import (
    CandidateError,
    Evaluation,
    as_images,
    as_vector,
    card_margins,
    train_features,
    validity,
)
from reconbench.evaluation.distances import features
from reconbench.evaluation.matching import match
from reconbench.evaluation.protocol import ResolvedProtocol
from reconbench.evaluation.ssim import display

#: candidate values stacked in one pass at most (float64: 32 MiB; the features and reconstructions add a few times
#: that): bounds the memory of a batch whatever the candidate count, at no cost on small images
BATCH_VALUES = 2 ** 22

ColumnScorer = Callable[[Sequence[torch.Tensor]], list[np.ndarray]]


@dataclass(frozen=True)
class Shared:
    """What every candidate set of one problem and protocol is scored against (computed once per batch)."""

    mean: torch.Tensor            # (C, H, W) the training mean, float64
    train_features: torch.Tensor  # (n, D') matching features of the training images
    originals: torch.Tensor       # (n, C, H, W) training images in [0, 1]

    @staticmethod
    def of(problem: Problem, protocol: ResolvedProtocol) -> Shared:
        p = protocol.base
        return Shared(mean=problem.mean_tensor(torch.float64),
                      train_features=train_features(problem, p.distance, p.ncc_eps),
                      originals=torch.as_tensor(problem.train_images, dtype=torch.float64))


def contexts(problem: Problem, sets: Sequence[torch.Tensor], protocol: ResolvedProtocol,
             labels: object = None, shared: Shared | None = None, card: object = None,
             per_set: Sequence[dict[str, object]] | None = None) -> list[Evaluation]:
    """The evaluation context of each candidate set, as ``build_context`` builds it, with validity, features and
    display scaling computed over the stacked sets. ``labels``: the candidate labels of every set; ``per_set``: for
    each set its own ``labels``, ``run_ids`` and ``x0`` (starting candidates) instead, checked as ``build_context``
    checks them."""
    p = protocol.base
    shared = shared or Shared.of(problem, protocol)
    cands, labs, runs, starts = [], [], [], []
    for k, c in enumerate(sets):   # each set checked in build_context's order
        cand = as_images(c, problem)
        count = cand.shape[0]
        extra = per_set[k] if per_set is not None else {"labels": labels}
        cands.append(cand)
        labs.append(as_vector(extra.get("labels"), count, "labels"))
        runs.append(as_vector(extra.get("run_ids"), count, "run_ids"))
        x0 = extra.get("x0")
        start = as_images(x0, problem, "x0 (starting candidates)") if x0 is not None else None
        if start is not None and start.shape[0] != count:
            raise CandidateError(f"x0 has {start.shape[0]} starting candidates for {count} candidates; give one "
                                 "per candidate")
        starts.append(start)
    sizes = [c.shape[0] for c in cands]
    stack = torch.cat(cands)
    valid, invalid = validity(stack, shared.mean, p.constant_tol)
    bad = {reason: np.asarray(ids, dtype=np.int64) for reason, ids in invalid.items()}
    valid_rows = np.flatnonzero(valid)
    feat = torch.cat([features(stack[torch.as_tensor(valid_rows[s:s + 2048])], p.distance, p.ncc_eps)
                      for s in range(0, len(valid_rows), 2048)]) if len(valid_rows) else \
        features(stack[:0], p.distance, p.ncc_eps)
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    feat_offsets = np.searchsorted(valid_rows, offsets)
    matchings, recons = [], []
    for k, c in enumerate(cands):
        ids = valid_rows[feat_offsets[k]:feat_offsets[k + 1]] - offsets[k]
        m = match(shared.train_features, feat[feat_offsets[k]:feat_offsets[k + 1]], ids, sizes[k],
                  best_buddy=p.best_buddy, vote=p.vote, avg_threshold=protocol.avg_threshold,
                  per_dimension=p.per_dimension)
        matchings.append(m)
        recons.append(m.average(c))
    recon = torch.cat(recons)
    shown = display(recon, shared.mean, p.constant_tol)
    n = problem.n
    margins = card_margins(card, problem)
    out = []
    for k, c in enumerate(cands):
        v = valid[offsets[k]:offsets[k + 1]]
        out.append(Evaluation(
            problem=problem, protocol=protocol, candidates=c, valid=v,
            invalid={reason: [int(i) - int(offsets[k]) for i in ids[(ids >= offsets[k]) & (ids < offsets[k + 1])]]
                     for reason, ids in bad.items()}, labels=labs[k], run_ids=runs[k], x0=starts[k], card=card,
            margins=margins,
            train_features=shared.train_features, valid_ids=np.flatnonzero(v),
            candidate_features=feat[feat_offsets[k]:feat_offsets[k + 1]], matching=matchings[k],
            recon_centred=recons[k], recon_display=shown[k * n:(k + 1) * n], originals=shared.originals))
    return out


def column_scorer(problem: Problem, protocol: ResolvedProtocol, labels: np.ndarray | None,
                  column: str) -> ColumnScorer | None:
    """A function from candidate sets to their per-image ``column`` ((n,) arrays, NaN where unmatched or not
    finite, as ``null.scores_of`` reads it from a scored set), or None where only draw-by-draw scoring applies:
    under a decision guide, or when ``column`` is not the column of a metric that scores many contexts at once."""
    if decisions.current() is not None or column not in protocol.metric_names:
        return None
    metric = plugins.metric(column)
    many = getattr(metric, "column_scores_many", None)
    if many is None:
        return None
    cfg = protocol.metric_configs[column]

    def score(sets: Sequence[torch.Tensor]) -> list[np.ndarray]:
        if decisions.current() is not None:
            raise RuntimeError("a batched column scorer was called under a decision guide; score draw by draw")
        shared = Shared.of(problem, protocol)
        out: list[np.ndarray] = []
        start = 0
        while start < len(sets):   # batches of at most BATCH_VALUES candidate values (at least one set)
            stop, size = start + 1, sets[start].numel()
            while stop < len(sets) and size + sets[stop].numel() <= BATCH_VALUES:
                size += sets[stop].numel()
                stop += 1
            evs = contexts(problem, sets[start:stop], protocol, labels, shared)
            for values in many(evs, cfg):
                col = np.asarray(values, dtype=np.float64)
                out.append(np.where(np.isfinite(col), col, np.nan))
            start = stop
        return out

    return score


__all__ = ["BATCH_VALUES", "ColumnScorer", "Shared", "column_scorer", "contexts"]
