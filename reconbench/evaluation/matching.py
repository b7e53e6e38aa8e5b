"""Matching candidates to training images: best-buddy assignment and the per-image vote.

Method: docs/method/evaluation-protocol.md#best-buddy-matching and #b-vote.

With ``best_buddy`` every candidate belongs only to its nearest training image, so a candidate is never counted for
two training images; a training image that no candidate chose is *unmatched* (the reference silently paired it with
an arbitrary candidate). Without it, every training image takes its nearest candidates among all (the notebooks'
variant, which counts a repeated candidate several times).

The vote ``mean`` averages, per training image, the candidates whose distance is below B times the best distance
(the best always included; the reference's "keep adding while d_j / d_best < B" on sorted distances is the same
set); ``min`` keeps the best only. Averages are taken in the centred space, as in the reference.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from reconbench.evaluation import decisions
from reconbench.evaluation.distances import paired, pairwise


@dataclass
class Matching:
    """The outcome of matching M candidates (ids are positions in the pooled candidate tensor) to n images."""

    nearest: np.ndarray       # (M,) nearest training image of each candidate, -1 for invalid candidates
    nearest_dist: np.ndarray  # (M,) its exact distance (nan for invalid candidates)
    best: np.ndarray          # (n,) best candidate id per training image, -1 when unmatched
    best_dist: np.ndarray     # (n,) its exact distance (nan when unmatched)
    members: list[np.ndarray]  # per training image: candidate ids averaged (best first; empty when unmatched)
    best_buddy: bool
    vote: str
    avg_threshold: float
    dist: torch.Tensor | None = None  # (n, valid candidates) ranking distances, reusable by other metrics

    @property
    def matched(self) -> np.ndarray:
        return self.best >= 0

    @property
    def n(self) -> int:
        return len(self.best)

    def average(self, candidates: torch.Tensor) -> torch.Tensor:
        """Per training image the mean of its member candidates (centred space); zeros where unmatched."""
        out = torch.zeros((self.n, *candidates.shape[1:]), dtype=torch.float64)
        single = [i for i, ids in enumerate(self.members) if len(ids) == 1]
        if single:
            # the mean of one row is 0.0 + row (a sum starts at +0.0, so -0.0 turns +0.0), divided by 1: taken for
            # all such images at once
            rows = torch.as_tensor(np.asarray([self.members[i][0] for i in single], dtype=np.int64))
            out[torch.as_tensor(single)] = candidates[rows].to(torch.float64) + 0.0
        for i, ids in enumerate(self.members):
            if len(ids) > 1:
                out[i] = candidates[torch.as_tensor(ids)].to(torch.float64).mean(0)
        return out


def match(train_feat: torch.Tensor, cand_feat: torch.Tensor, cand_ids: np.ndarray, n_total: int, *,
          best_buddy: bool, vote: str, avg_threshold: float, per_dimension: bool,
          dist: torch.Tensor | None = None) -> Matching:
    """Match valid candidates (feature rows ``cand_feat``, pooled ids ``cand_ids``) to the training features.

    ``n_total`` is the number of pooled candidates, valid or not (for the per-candidate arrays); ``dist`` is the
    (n, valid candidates) matrix of :func:`pairwise` when already computed.
    """
    n = train_feat.shape[0]
    nearest = np.full(n_total, -1, dtype=np.int64)
    nearest_dist = np.full(n_total, np.nan)
    best = np.full(n, -1, dtype=np.int64)
    best_dist = np.full(n, np.nan)
    members: list[np.ndarray] = [np.zeros(0, dtype=np.int64) for _ in range(n)]
    if cand_feat.shape[0] == 0:
        return Matching(nearest, nearest_dist, best, best_dist, members, best_buddy, vote, avg_threshold)

    if dist is None:
        dist = pairwise(train_feat, cand_feat, per_dimension)       # (n, Mv), for ranking

    def scale() -> torch.Tensor:  # |a|^2 + |b|^2 per entry: what a distance's rounding error is relative to
        size = (train_feat * train_feat).sum(1)[:, None] + (cand_feat * cand_feat).sum(1)[None, :]
        return size / train_feat.shape[1] if per_dimension else size

    near = decisions.argmin(dist, 0, "nearest training image of candidate", scale)  # (Mv,)
    exact = paired(cand_feat, train_feat[near], per_dimension)       # (Mv,)
    nearest[cand_ids] = near.numpy()
    nearest_dist[cand_ids] = exact.numpy()

    if best_buddy:
        a, d = near.numpy(), exact.numpy()
        order = np.lexsort((np.arange(len(a)), d, a))                # by image, then distance, then id
        a_sorted = a[order]
        starts = np.searchsorted(a_sorted, np.arange(n), side="left")
        ends = np.searchsorted(a_sorted, np.arange(n), side="right")
        # every image's group at once (its local rows order[start:end], best first): the best of each group, and
        # the rows kept by the vote (the best, and with "mean" every other row below avg_threshold times the best)
        chosen = np.flatnonzero(starts < ends)
        first = order[starts[chosen]]
        d_best = d[first]
        best[chosen], best_dist[chosen] = cand_ids[first], d_best
        if vote == "min":
            kept = first
            counts = np.ones(len(chosen), dtype=np.int64)
        else:
            group_best = np.repeat(d_best, ends[chosen] - starts[chosen])     # per sorted row, its group's best
            lead = np.zeros(len(order), dtype=bool)
            lead[starts[chosen]] = True
            keep = lead | (d[order] < avg_threshold * group_best)
            kept = order[keep]
            counts = (np.add.reduceat(keep.astype(np.int64), starts[chosen]) if len(chosen)
                      else np.zeros(0, dtype=np.int64))
        for image, ids in zip(chosen.tolist(), np.split(cand_ids[kept], np.cumsum(counts)[:-1]), strict=True):
            members[image] = ids
    else:
        col = decisions.argmin(dist, 1, "nearest candidate of image", scale)  # (n,) nearest candidate of each image
        d_best_exact = paired(train_feat, cand_feat[col], per_dimension).numpy()
        d_np = dist.numpy()
        for i in range(n):
            j = int(col[i])
            best[i], best_dist[i] = cand_ids[j], d_best_exact[i]
            if vote == "min":
                members[i] = cand_ids[[j]]
            else:
                row = d_np[i]
                others = np.flatnonzero(row < avg_threshold * row[j])
                others = others[others != j]
                others = others[np.argsort(row[others], kind="stable")]
                members[i] = cand_ids[np.concatenate([[j], others]).astype(np.int64)]
    return Matching(nearest, nearest_dist, best, best_dist, members, best_buddy, vote, avg_threshold, dist)
