"""Distances between images in the centred space: squared L2 and NCC, optionally after bicubic down-sampling.

``ncc`` standardises every image per channel (subtract the channel mean, divide by the unbiased channel standard
deviation plus ``eps``) and then takes the squared L2 distance; for one pair and one channel this equals
2 (HW - 1)(1 - rho), rho the Pearson correlation. ``ncc2`` / ``ncc4`` first down-sample by 2 / 4 with torch's
bicubic interpolation (``align_corners=False``, no antialias), as the reference does. Distances are divided by the
dimension of the compared vectors when ``per_dimension`` is set. Method: docs/method/evaluation-protocol.md#ncc2-distances.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from reconbench.errors import IncompatibleError
from reconbench.evaluation.protocol import DISTANCES


def downsample(x: torch.Tensor, factor: int) -> torch.Tensor:
    """Bicubic down-sampling by ``factor`` (torch, ``align_corners=False``, no antialias); factor 1 is a no-op."""
    if factor == 1:
        return x
    h, w = x.shape[-2:]
    if h // factor < 2 or w // factor < 2:
        raise IncompatibleError(f"images of {h}x{w} pixels are too small to down-sample by {factor}; "
                                "use --protocol-set distance=ncc (or l2)")
    return F.interpolate(x, scale_factor=1.0 / factor, mode="bicubic", align_corners=False, antialias=False)


def standardise(x: torch.Tensor, eps: float) -> torch.Tensor:
    """Per image and per channel: (x - mean) / (unbiased std + eps)."""
    if x.shape[0] == 0:
        return x
    std, mean = torch.std_mean(x, dim=(-2, -1), keepdim=True, correction=1)
    return (x - mean).div_(std.add_(eps))


def features(x: torch.Tensor, distance: str, eps: float) -> torch.Tensor:
    """The flattened vectors whose squared L2 distance is ``distance`` (x: (N, C, H, W), centred space)."""
    if distance not in DISTANCES:
        raise IncompatibleError(f"unknown distance {distance!r}; choose one of {', '.join(DISTANCES)}")
    x = downsample(x.to(torch.float64), DISTANCES[distance])
    if distance.startswith("ncc"):
        x = standardise(x, eps)
    return x.flatten(1)


def pairwise(a: torch.Tensor, b: torch.Tensor, per_dimension: bool, chunk: int = 4096) -> torch.Tensor:
    """Squared L2 distances (Na, Nb) between rows, through one matrix product per chunk.

    ``|a|^2 + |b|^2 - 2 a.b`` loses absolute precision of about 1e-16 |a|^2 (cancellation), so it is used to rank
    candidates; reported distances are recomputed exactly with :func:`paired`.
    """
    na = (a * a).sum(1)
    nb = (b * b).sum(1)
    out = torch.empty(a.shape[0], b.shape[0], dtype=torch.float64)
    for s in range(0, b.shape[0], chunk):
        bb = b[s:s + chunk]
        block = torch.addmm(na[:, None] + nb[None, s:s + chunk], a, bb.T, alpha=-2.0)
        out[:, s:s + chunk] = block.clamp_min_(0.0)
    if per_dimension:
        out /= a.shape[1]
    return out


def paired(a: torch.Tensor, b: torch.Tensor, per_dimension: bool) -> torch.Tensor:
    """Exact squared L2 distance between corresponding rows of a and b."""
    d = ((a - b) ** 2).sum(1)
    return d / a.shape[1] if per_dimension else d
