"""scipy.ndimage's box (``uniform_filter``) and Gaussian (``gaussian_filter``) filters in numpy, equal to scipy's
bit for bit (tests/unit/evaluation/test_image_filters.py), for the standard SSIM and the data prior's blur.

Written out because importing scipy.ndimage costs about 0.35 s of CPU, more than a run's standard-SSIM scoring or a
suite's prior blurs. Each follows scipy's own arithmetic in scipy's order (its line filters, ni_filters.c): the same
sums in the same sequence, so the same rounding. Lines are extended by half-sample reflection, scipy's 'reflect'
mode (d c b a | a b c d | d c b a), repeated where the filter reaches further than the line is long.
"""

from __future__ import annotations

import functools

import numpy as np


@functools.cache
def _reflect_positions(n: int, left: int, right: int) -> np.ndarray:
    """Where each value of a line of ``n`` extended by ``left`` and ``right`` comes from ('reflect', period 2n); kept
    per shape (a suite filters thousands of lines of a few shapes), never written."""
    at = np.arange(-left, n + right) % (2 * n)
    at = np.where(at >= n, 2 * n - 1 - at, at)
    at.setflags(write=False)
    return at


def _reflect_extend(z: np.ndarray, left: int, right: int) -> np.ndarray:
    """The last axis of ``z`` extended by ``left`` and ``right`` values in scipy's 'reflect' mode (period 2n)."""
    return z[..., _reflect_positions(z.shape[-1], left, right)]


def uniform_filter_1d(x: np.ndarray, size: int, axis: int) -> np.ndarray:
    """``scipy.ndimage.uniform_filter1d(x, size, axis)`` (mode 'reflect', origin 0) in float64, equal to it bit for bit
    (tests/unit/evaluation/test_image_filters.py).

    scipy's recurrence: the window's sum added up from 0 in order, then kept undivided as it slides (plus the entering
    value minus the leaving one, that difference taken first), each output that running sum divided by ``size``;
    np.cumsum adds in the same order.
    """
    z = np.moveaxis(np.asarray(x, dtype=np.float64), axis, -1)
    n = z.shape[-1]
    left = size // 2
    right = size - left - 1
    ext = _reflect_extend(z, left, right)
    first = np.zeros(z.shape[:-1])
    for k in range(size):
        first = first + ext[..., k]
    steps = ext[..., size:size + n - 1] - ext[..., :n - 1]
    out = np.cumsum(np.concatenate([first[..., None], steps], axis=-1), axis=-1) / size
    return np.ascontiguousarray(np.moveaxis(out, -1, axis))


def uniform_filter_2d(x: np.ndarray, size: int) -> np.ndarray:
    """``scipy.ndimage.uniform_filter(x, size=(1, size, size))`` for a stack (N, H, W): the two image axes in scipy's
    order, each by :func:`uniform_filter_1d`."""
    return uniform_filter_1d(uniform_filter_1d(x, size, 1), size, 2)



@functools.cache
def gaussian_weights(sigma: float, truncate: float = 4.0) -> np.ndarray:
    """scipy's Gaussian taps for ``gaussian_filter1d(..., sigma, truncate=truncate)`` (order 0), by its formula:
    radius int(truncate sigma + 1/2), exp(-x^2 / (2 sigma^2)) over -radius..radius, divided by its numpy sum. Kept
    per sigma, never written."""
    radius = int(truncate * float(sigma) + 0.5)
    sigma2 = sigma * sigma
    x = np.arange(-radius, radius + 1)
    phi = np.exp(-0.5 / sigma2 * x ** 2)
    taps = np.asarray(phi / phi.sum())[::-1].copy()
    taps.setflags(write=False)
    return taps


def gaussian_filter_1d(x: np.ndarray, sigma: float, axis: int) -> np.ndarray:
    """``scipy.ndimage.gaussian_filter1d(x, sigma, axis)`` (order 0, mode 'reflect', truncate 4) in float64, bit for
    bit: scipy's correlation with a symmetric kernel, each output the centre tap times the centre value, then for
    offsets from the farthest in, the two values at +-offset added first and times their tap."""
    w = gaussian_weights(float(sigma))
    r = len(w) // 2
    z = np.moveaxis(np.asarray(x, dtype=np.float64), axis, -1)
    n = z.shape[-1]
    ext = _reflect_extend(z, r, r)
    out = ext[..., r:r + n] * w[r]
    for j in range(r, 0, -1):
        out += (ext[..., r - j:r - j + n] + ext[..., r + j:r + j + n]) * w[r - j]
    return np.ascontiguousarray(np.moveaxis(out, -1, axis))


def gaussian_filter_2d(x: np.ndarray, sigma: float) -> np.ndarray:
    """``scipy.ndimage.gaussian_filter(x, sigma=(0, 0, sigma, sigma), mode="reflect")`` for (N, C, H, W): the two
    image axes in scipy's order (axes of sigma 0 are left as they are)."""
    return gaussian_filter_1d(gaussian_filter_1d(x, sigma, 2), sigma, 3)
