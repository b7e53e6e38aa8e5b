"""The standard SSIM's box filter against scipy.ndimage's, bit for bit: random stacks of many sizes and scales,
windows 3 to 11, constant and negative images, and the axis-by-axis order of the 2-d filter."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.ndimage import uniform_filter, uniform_filter1d

from reconbench.evaluation.ssim import uniform_filter_1d, uniform_filter_2d


@pytest.mark.parametrize("size", [3, 5, 7, 9, 11])
def test_two_d_filter_equals_scipy_bit_for_bit(size):
    rng = np.random.default_rng(size)
    for trial in range(40):
        shape = (int(rng.integers(1, 5)), int(rng.integers(size, 33)), int(rng.integers(size, 33)))
        scale = float(rng.choice([1e-6, 1.0, 1e6]))
        x = rng.standard_normal(shape) * scale if trial % 2 else rng.random(shape) * scale
        assert np.array_equal(uniform_filter_2d(x, size), uniform_filter(x, size=(1, size, size))), (trial, shape)


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_one_d_filter_equals_scipy_along_every_axis(axis):
    rng = np.random.default_rng(axis)
    x = rng.standard_normal((9, 12, 15))
    for size in (1, 2, 4, 7):
        assert np.array_equal(uniform_filter_1d(x, size, axis), uniform_filter1d(x, size, axis=axis))


def test_constant_and_short_lines():
    x = np.full((2, 8, 8), -0.25)
    assert np.array_equal(uniform_filter_2d(x, 7), uniform_filter(x, size=(1, 7, 7)))
    short = np.random.default_rng(1).standard_normal((3, 2))   # shorter than half the window: scipy's own path
    assert np.array_equal(uniform_filter_1d(short, 7, 1), uniform_filter1d(short, 7, axis=1))
