"""SSIM in two variants, both through maintained libraries (docs/method/evaluation-protocol.md#ssim-variants).

* ``ssim_paper``: the papers' variant, ``kornia.metrics.ssim`` with a 3x3 Gaussian window of sigma 1.5
  (kornia's fixed sigma), data range 1, reflect 'same' padding, channels independent, the map averaged over
  C x H x W. The reconstruction is un-centred and min-max scaled per image (:func:`display`); the original is not.
* ``ssim_standard``: ``skimage.metrics.structural_similarity`` with its defaults (7x7 uniform window, sample
  covariance, K1 0.01, K2 0.03, borders cropped), ``data_range=1`` and ``channel_axis=0``.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from reconbench.errors import IncompatibleError
from reconbench.evaluation.image_filters import uniform_filter_2d

#: kornia's Gaussian window has this sigma whatever its size
KORNIA_SIGMA = 1.5


def minmax(x: torch.Tensor, tol: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Per image, jointly over channels and pixels: (x - min) / (max - min). Returns (scaled, is_constant).

    A constant image (range <= tol) becomes all zeros instead of NaN and is flagged.
    """
    flat = x.flatten(1)
    lo = flat.min(1).values
    rng = flat.max(1).values - lo
    const = rng <= tol
    safe = torch.where(const, torch.ones_like(rng), rng)
    out = (flat - lo[:, None]) / safe[:, None]
    out[const] = 0.0
    return out.reshape(x.shape), const


def display(recon_centred: torch.Tensor, mean: torch.Tensor, tol: float = 0.0) -> torch.Tensor:
    """The reference's view of a reconstruction: add the mean image back, then min-max scale to [0, 1]."""
    return minmax(recon_centred + mean[None].to(recon_centred.dtype), tol)[0]


def ssim_paper(recon: torch.Tensor, orig: torch.Tensor, window_size: int = 3, data_range: float = 1.0,
               eps: float = 1e-12, batch: int = 1024) -> torch.Tensor:
    """Mean kornia SSIM per pair of images (N, C, H, W) -> (N,), in float64."""
    if recon.shape != orig.shape:
        raise IncompatibleError(f"SSIM needs images of the same shape, got {tuple(recon.shape)} and {tuple(orig.shape)}")
    h, w = recon.shape[-2:]
    if window_size % 2 == 0 or window_size < 1:
        raise IncompatibleError(f"SSIM window_size must be odd and positive, got {window_size}")
    if min(h, w) <= window_size // 2:
        raise IncompatibleError(f"SSIM window {window_size} does not fit {h}x{w} images; use a smaller window_size")
    out = []
    c = recon.shape[1]
    for s in range(0, recon.shape[0], batch):
        # channels are independent in kornia's SSIM: score them as separate 1-channel images (same numbers, a
        # plain instead of a grouped convolution, about twice as fast in float64)
        a = recon[s:s + batch].to(torch.float64).reshape(-1, 1, h, w)
        b = orig[s:s + batch].to(torch.float64).reshape(-1, 1, h, w)
        smap = kornia_ssim_map(a, b, window_size, float(data_range), eps)
        out.append(smap.reshape(-1, c, h, w).mean(dim=(1, 2, 3)))
    return torch.cat(out) if out else torch.zeros(0, dtype=torch.float64)


@functools.cache
def _gaussian_window(window_size: int, dtype: torch.dtype) -> torch.Tensor:
    """kornia's 1-d SSIM window (``kornia.filters.get_gaussian_kernel1d(window_size, 1.5)``, sigma 1.5), by kornia's
    operations, built once per size and dtype: kornia.metrics.ssim rebuilds it on every call, which on small images
    costs about as much as the filtering. A (1, window_size) tensor, never written."""
    sigma = torch.tensor([[KORNIA_SIGMA]], dtype=dtype)
    mean = torch.tensor([[float(window_size // 2)]], dtype=dtype)
    x = (torch.arange(window_size, dtype=dtype) - mean).expand(1, -1)
    if window_size % 2 == 0:
        x = x + 0.5
    dist = x.pow(2.0)
    dist = dist - dist.min(-1, keepdim=True)[0]
    gauss = torch.exp(-dist / (2 * sigma.pow(2.0)))
    return gauss / gauss.sum(-1, keepdim=True)


def _reflect_correlate(img: torch.Tensor, taps: torch.Tensor, axis: int) -> torch.Tensor:
    """``kornia.filters.filter2d`` of (B, 1, H, W) images with a 1-d kernel along W (axis -1) or H (axis -2), 'same'
    reflect padding: kornia's own two calls, ``F.pad`` then ``F.conv2d``."""
    k = taps.shape[-1]
    front = (k - 1) // 2
    pad = [front, k - 1 - front, 0, 0] if axis == -1 else [0, 0, front, k - 1 - front]
    kernel = taps.reshape(1, 1, 1, k) if axis == -1 else taps.reshape(1, 1, k, 1)
    return F.conv2d(F.pad(img, pad, mode="reflect"), kernel, groups=1, padding=0, stride=1)


def filter2d_separable(img: torch.Tensor, kernel: torch.Tensor) -> torch.Tensor:
    """``kornia.filters.filter2d_separable(img, kernel, kernel)`` (reflect borders, 'same' padding) for (B, C, H, W)
    images: along W, then along H, as kornia does, every channel on its own (as one-channel images: the same numbers
    as kornia's grouped convolution), equal to it bit for bit (tests/unit/evaluation/test_evaluation_ssim.py).
    Written with torch's own pad and convolution, which kornia calls, because importing kornia costs about 0.15 s of
    CPU, a tenth of a suite's evaluation."""
    b, c, h, w = img.shape
    flat = img.reshape(b * c, 1, h, w)
    return _reflect_correlate(_reflect_correlate(flat, kernel, -1), kernel, -2).reshape(b, c, h, w)


def kornia_ssim_map(img1: torch.Tensor, img2: torch.Tensor, window_size: int, max_val: float,
                    eps: float) -> torch.Tensor:
    """``kornia.metrics.ssim(img1, img2, window_size, max_val, eps, padding="same")`` for float64 images (B, C, H, W),
    equal to it bit for bit (tests/unit/evaluation/test_evaluation_ssim.py).

    kornia's float64 path filters five local moments, each by ``kornia.filters.filter2d_separable`` with a Gaussian
    window it builds afresh; here the window is built once (:func:`_gaussian_window`) and the five moments are
    filtered in one :func:`filter2d_separable` call on their stack: the filter treats every image of a batch on its
    own, so the stacked call gives each moment the values of its own call, with a fifth of the calls. The moments are
    then combined by kornia's formula, operation for operation."""
    kernel = _gaussian_window(window_size, torch.float64)
    n = img1.shape[0]
    moments = filter2d_separable(torch.cat([img1, img2, img1 ** 2, img2 ** 2, img1 * img2]), kernel)
    mu1, mu2, mu_img1_sq, mu_img2_sq, mu_img1_img2 = moments.split(n)
    c1 = (0.01 * max_val) ** 2
    c2 = (0.03 * max_val) ** 2
    mu1_sq = mu1 ** 2
    mu2_sq = mu2 ** 2
    mu1_mu2 = mu1 * mu2
    sigma1_sq = mu_img1_sq - mu1_sq
    sigma2_sq = mu_img2_sq - mu2_sq
    sigma12 = mu_img1_img2 - mu1_mu2
    num = (2.0 * mu1_mu2 + c1) * (2.0 * sigma12 + c2)
    den = (mu1_sq + mu2_sq + c1) * (sigma1_sq + sigma2_sq + c2)
    return num / (den + eps)


def skimage_defaults() -> dict[str, Any]:
    """The scikit-image defaults the standard variant relies on (recorded with every result)."""
    return {"win_size": 7, "gaussian_weights": False, "use_sample_covariance": True, "K1": 0.01, "K2": 0.03,
            "borders": "cropped by (win_size - 1) // 2", "channel_axis": 0}


def ssim_standard(recon: torch.Tensor | np.ndarray, orig: torch.Tensor | np.ndarray, data_range: float = 1.0,
                  win_size: int | None = None, gaussian_weights: bool = False) -> np.ndarray:
    """scikit-image SSIM per pair of images (N, C, H, W) -> (N,), channels as ``channel_axis=0``."""
    a = np.asarray(recon, dtype=np.float64)
    b = np.asarray(orig, dtype=np.float64)
    if a.shape != b.shape:
        raise IncompatibleError(f"SSIM needs images of the same shape, got {a.shape} and {b.shape}")
    h, w = a.shape[-2:]
    ws = 7 if win_size is None else win_size
    if min(h, w) < ws:
        raise IncompatibleError(f"scikit-image SSIM needs images of at least {ws}x{ws} pixels (win_size), got "
                                f"{h}x{w}; set ssim_standard.win_size to an odd value <= {min(h, w)}")
    if not gaussian_weights:
        return _uniform_ssim_stack(a, b, data_range, ws)
    from skimage.metrics import structural_similarity  # here: the uniform window above needs neither it nor scipy

    out = np.empty(len(a))
    for i in range(len(a)):
        out[i] = structural_similarity(a[i], b[i], data_range=data_range, channel_axis=0, win_size=win_size,
                                       gaussian_weights=gaussian_weights)
    return out


def _uniform_ssim_stack(a: np.ndarray, b: np.ndarray, data_range: float, win_size: int) -> np.ndarray:
    """``structural_similarity(a[i], b[i], data_range=..., channel_axis=0, win_size=...)`` (uniform window, sample
    covariance, K1 0.01, K2 0.03) for every i, equal to it bit for bit (tests/unit/evaluation/test_evaluation_ssim.py).

    Written out because scikit-image scores one 2-d channel per call, and on small images the calls cost far more
    than the arithmetic: here its five ``uniform_filter`` passes run once over all channels of all images (a window
    of 1 along the stacking axis, which scipy leaves unfiltered, so every channel gets its own call's values), then
    scikit-image's formula, operation for operation, and its per-channel cropped mean and mean over channels. The
    passes are :func:`~reconbench.evaluation.image_filters.uniform_filter_2d` (scipy's ``uniform_filter``, bit for bit,
    without importing scipy.ndimage)."""
    n, c, h, w = a.shape
    x = a.reshape(n * c, h, w)
    y = b.reshape(n * c, h, w)
    npix = win_size ** 2              # scikit-image's NP for a 2-d channel
    cov_norm = npix / (npix - 1)      # sample covariance
    ux = uniform_filter_2d(x, win_size)
    uy = uniform_filter_2d(y, win_size)
    uxx = uniform_filter_2d(x * x, win_size)
    uyy = uniform_filter_2d(y * y, win_size)
    uxy = uniform_filter_2d(x * y, win_size)
    vx = cov_norm * (uxx - ux * ux)
    vy = cov_norm * (uyy - uy * uy)
    vxy = cov_norm * (uxy - ux * uy)
    c1 = (0.01 * data_range) ** 2
    c2 = (0.03 * data_range) ** 2
    a1, a2, b1, b2 = (2 * ux * uy + c1, 2 * vxy + c2, ux ** 2 + uy ** 2 + c1, vx + vy + c2)
    smap = (a1 * a2) / (b1 * b2)
    pad = (win_size - 1) // 2
    per_channel = np.empty(n * c, dtype=np.float64)
    for i in range(n * c):   # each channel's cropped map averaged as scikit-image averages it
        per_channel[i] = smap[i, pad:h - pad, pad:w - pad].mean(dtype=np.float64)
    out = np.empty(n, dtype=np.float64)
    for i in range(n):
        out[i] = per_channel[i * c:(i + 1) * c].mean()
    return out

