"""Is a reconstruction really a training image? Membership against decoys, init copies and collapse.

None of the papers measures these; they follow Runkel et al. (docs/method/bilevel.md#membership-and-collapse): natural-looking
outputs can be images the model never saw (the attack stayed near a partition initialisation), and many candidates
can converge to one image (collapse). All distances are the protocol's matching distance.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from reconbench.evaluation.distances import paired, pairwise
from reconbench.evaluation.matching import Matching


@dataclass
class Membership:
    nearest_is_train: np.ndarray   # (k,) whether the nearest of train ∪ decoys is a training image
    train_dist: np.ndarray         # (k,) distance to the nearest training image
    decoy_dist: np.ndarray         # (k,) distance to the nearest decoy
    nearest_decoy: np.ndarray      # (k,) index of that decoy in the problem's decoy pool


def nearest_member(query: torch.Tensor, train: torch.Tensor, decoys: torch.Tensor, per_dimension: bool) -> Membership:
    """For each query row: is its nearest neighbour among training images and decoys a training image?

    Ties go to the decoy (a claim of membership needs the training image to be strictly closer).
    """
    k = query.shape[0]
    if k == 0:
        z = np.zeros(0)
        return Membership(z.astype(bool), z, z, z.astype(np.int64))
    dt_rank = pairwise(query, train, per_dimension)
    dd_rank = pairwise(query, decoys, per_dimension)
    it, idd = dt_rank.argmin(1), dd_rank.argmin(1)
    dt = paired(query, train[it], per_dimension).numpy()
    dd = paired(query, decoys[idd], per_dimension).numpy()
    return Membership(dt < dd, dt, dd, idd.numpy())


def nearest_distance(query: torch.Tensor, pool: torch.Tensor, per_dimension: bool) -> np.ndarray:
    """Exact distance of each query row to its nearest pool row."""
    if query.shape[0] == 0:
        return np.zeros(0)
    near = pairwise(query, pool, per_dimension).argmin(1)
    return paired(query, pool[near], per_dimension).numpy()


def init_copy(cand: torch.Tensor, start: torch.Tensor, nearest_train: np.ndarray, per_dimension: bool) -> np.ndarray:
    """Per candidate: is it closer to its own starting image than to every training image?

    ``cand`` and ``start`` are matching features row by row; ``nearest_train`` the distance of each candidate to its
    nearest training image (from the matching).
    """
    if cand.shape[0] == 0:
        return np.zeros(0, dtype=bool)
    return paired(cand, start, per_dimension).numpy() < nearest_train


def collapse(matching: Matching, n_valid: int) -> dict[str, float | int | None]:
    """Distinct training images chosen as nearest by at least one candidate, against the number of candidates."""
    chosen = matching.nearest[matching.nearest >= 0]
    counts = np.bincount(chosen, minlength=matching.n) if len(chosen) else np.zeros(matching.n, dtype=np.int64)
    distinct = int((counts > 0).sum())
    ceiling = min(n_valid, matching.n)
    return {
        "distinct_matched": distinct,
        "candidates_valid": int(n_valid),
        "distinct_share": distinct / ceiling if ceiling else None,
        "candidates_per_matched_image": n_valid / distinct if distinct else None,
        "max_candidates_per_image": int(counts.max()) if len(counts) else 0,
    }


# -- the membership test: members against a pool of non-members, as membership-inference papers report -----------
def pearson_matrix(a: torch.Tensor, b: torch.Tensor, chunk: int = 1024,
                   remove: torch.Tensor | None = None) -> torch.Tensor:
    """(len(a), len(b)) Pearson correlation of every pair of images (N, C, H, W): per channel over pixels, averaged
    over channels (the ``corr`` metric's score, for all pairs at once; a constant image correlates 0).

    ``remove`` (C, H, W): before the correlation, every image's component along this direction is taken out, per
    channel (both the images and the direction with their per-channel mean subtracted first; :func:`without`).
    """
    return correlations(unit_rows(a, remove), unit_rows(b, remove), chunk)


def unit_rows(x: torch.Tensor, remove: torch.Tensor | None = None) -> torch.Tensor:
    """(N, C, H*W) the images' per-channel mean-free pixels (``remove``'s direction taken out), scaled to unit norm
    per channel (a constant channel stays zero): one side of :func:`pearson_matrix`."""
    f = x.flatten(2).to(torch.float64)
    f = f - f.mean(-1, keepdim=True)
    if remove is not None:
        f = without(f, remove)
    norm = f.norm(dim=-1, keepdim=True)
    return f / torch.where(norm > 0, norm, torch.ones_like(norm))


def correlations(ua: torch.Tensor, ub: torch.Tensor, chunk: int = 1024) -> torch.Tensor:
    """(len(ua), len(ub)) correlations of :func:`unit_rows` outputs, averaged over channels."""
    channels = ua.shape[1]
    out = torch.empty(ua.shape[0], ub.shape[0], dtype=torch.float64)
    for s in range(0, ua.shape[0], chunk):
        out[s:s + chunk] = torch.einsum("icd,jcd->ij", ua[s:s + chunk], ub) / channels
    return out


def without(f: torch.Tensor, direction: torch.Tensor) -> torch.Tensor:
    """Rows ``f`` (N, C, D), each channel's mean already subtracted, with their component along ``direction``
    (C, H, W) removed per channel: the orthogonal projection onto the complement of the direction's mean-free part
    (a channel where the direction is constant is left as it is)."""
    u = direction.reshape(1, f.shape[1], -1).to(torch.float64)
    u = u - u.mean(-1, keepdim=True)
    norm = u.norm(dim=-1, keepdim=True)
    u = torch.where(norm > 0, u / torch.where(norm > 0, norm, torch.ones_like(norm)), torch.zeros_like(u))
    return f - (f * u).sum(-1, keepdim=True) * u


def population_mean(class_means: np.ndarray, class_counts: list[int]) -> np.ndarray:
    """The mean image of a population whose classes have the members' proportions: class means (K, C, H, W)
    weighted by the members' class counts."""
    w = np.asarray(class_counts, dtype=np.float64)
    return np.tensordot(w / w.sum(), class_means, axes=1)


def auc(pos: np.ndarray, neg: np.ndarray) -> float:
    """Area under the ROC curve: P(a member scores above a non-member), ties counting one half (Mann-Whitney)."""
    greater = (pos[:, None] > neg[None, :]).sum()
    ties = (pos[:, None] == neg[None, :]).sum()
    return float((greater + 0.5 * ties) / (len(pos) * len(neg)))


def tpr_at_fpr(pos: np.ndarray, neg: np.ndarray, fpr: float) -> tuple[float, float]:
    """(TPR, threshold) of the rule "member iff score > threshold" with the smallest threshold among the non-member
    scores (or +inf) that lets at most ``floor(fpr * len(neg))`` non-members pass."""
    allowed = int(np.floor(fpr * len(neg)))
    ranked = np.sort(neg)[::-1]
    threshold = float(ranked[allowed]) if allowed < len(ranked) else -np.inf
    return float((pos > threshold).mean()), threshold
