"""An independent implementation of the papers' evaluation protocol, written apart from reconbench/evaluation,
used only to cross-check it (tests/unit/evaluation/test_protocol_cross_check.py). The steps are those of
docs/method/evaluation-protocol.md: pooled candidates; bicubic down-sampling by 2 and per-pixel NCC distance;
best-buddy assignment; per training image the mean of its candidates within B times its best distance; the mean
image added back and min-max scaled; kornia's window-3 SSIM against the original; "reconstructed" iff SSIM > 0.4.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F


def standardise(x: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """Per image and channel: subtract the mean, divide by the unbiased std (+ eps); flattened."""
    flat = x.flatten(2)
    return ((flat - flat.mean(-1, keepdim=True)) / (flat.std(-1, keepdim=True) + eps)).flatten(1)


def ncc_distance(train: torch.Tensor, cands: torch.Tensor, downsample: int = 2) -> torch.Tensor:
    """(n, M) squared L2 between standardised images divided by the number of pixels (~ 2 (1 - corr))."""
    if downsample > 1:
        def down(t: torch.Tensor) -> torch.Tensor:
            return F.interpolate(t, scale_factor=1 / downsample, mode="bicubic", align_corners=False,
                                 antialias=False)
        train, cands = down(train), down(cands)
    a, b = standardise(train), standardise(cands)
    return torch.cdist(a, b) ** 2 / a.shape[1]


def correlation(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Mean over channels of the Pearson correlation of paired images (n, C, H, W)."""
    fa, fb = a.flatten(2), b.flatten(2)
    fa = fa - fa.mean(-1, keepdim=True)
    fb = fb - fb.mean(-1, keepdim=True)
    r = (fa * fb).sum(-1) / (fa.norm(dim=-1) * fb.norm(dim=-1) + 1e-12)
    return r.mean(-1)


def minmax(x: torch.Tensor) -> torch.Tensor:
    lo = x.flatten(1).min(1).values[:, None, None, None]
    hi = x.flatten(1).max(1).values[:, None, None, None]
    return (x - lo) / (hi - lo).clamp_min(1e-12)


def kornia_ssim(a: torch.Tensor, b: torch.Tensor, window: int = 3) -> torch.Tensor:
    import kornia

    return kornia.metrics.ssim(a.double(), b.double(), window_size=window, max_val=1.0).flatten(1).mean(1)


def skimage_ssim(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    from skimage.metrics import structural_similarity

    out = []
    for x, y in zip(a.numpy(), b.numpy(), strict=True):
        out.append(structural_similarity(x, y, data_range=1.0, channel_axis=0))
    return torch.tensor(out)


def match(train_c: torch.Tensor, cands_c: torch.Tensor, mean: torch.Tensor, *, threshold: float = 1.1,
          best_buddy: bool = True, downsample: int = 2) -> dict[str, Any]:
    """Protocol steps 2-6. Inputs in the centred space; returns per-training-image scores."""
    d = ncc_distance(train_c, cands_c, downsample)
    if best_buddy:
        owner = d.argmin(dim=0)  # the nearest training image of each candidate
        d = torch.where(torch.arange(len(train_c))[:, None] == owner[None, :], d, torch.inf)
    n = len(train_c)
    recon = torch.zeros_like(train_c)
    matched = torch.zeros(n, dtype=torch.bool)
    counts = torch.zeros(n, dtype=torch.long)
    for i in range(n):
        row = d[i]
        best = row.min()
        if not torch.isfinite(best):
            continue
        keep = row < threshold * best if best > 0 else row <= best
        recon[i] = cands_c[keep].mean(0)
        matched[i], counts[i] = True, int(keep.sum())
    original = train_c + mean
    scaled = minmax(recon + mean)
    ssim3 = kornia_ssim(scaled, original, 3)
    ssim_sk = skimage_ssim(scaled, original)
    corr = correlation(recon, train_c)                    # in the centred space, as the papers' NCC
    corr_mean = correlation(recon + mean, original)       # after adding the mean image back to both
    nan = torch.full((n,), float("nan"), dtype=torch.float64)
    ssim3, ssim_sk, corr, corr_mean = (torch.where(matched, v.double(), nan)
                                       for v in (ssim3, ssim_sk, corr, corr_mean))
    # without best-buddy and averaging: each training image's single nearest candidate (full resolution NCC)
    d_full = ncc_distance(train_c, cands_c, 1)
    nearest = d_full.argmin(dim=1)
    corr_nearest = correlation(cands_c[nearest], train_c)
    return {"ssim_w3": ssim3, "ssim_skimage": ssim_sk, "corr": corr, "corr_with_mean": corr_mean,
            "corr_nearest": corr_nearest.double(),
            "matched": matched, "n_averaged": counts, "recon_scaled": scaled}
