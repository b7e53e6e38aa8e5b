"""The box and Gaussian filters against scipy.ndimage's, bit for bit: random stacks of many sizes and scales, box
windows 1 to 11, the data prior's blurs and others, constant and negative images, lines shorter than the filter, and
the axis-by-axis order of the 2-d filters."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.ndimage import gaussian_filter, gaussian_filter1d, uniform_filter, uniform_filter1d

from reconbench.evaluation.image_filters import (
    gaussian_filter_1d,
    gaussian_filter_2d,
    uniform_filter_1d,
    uniform_filter_2d,
)
from reconbench.evaluation.prior import BLUR_SIGMAS


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
    short = np.random.default_rng(1).standard_normal((3, 2))   # shorter than half the window: reflected again
    assert np.array_equal(uniform_filter_1d(short, 7, 1), uniform_filter1d(short, 7, axis=1))


@pytest.mark.parametrize("sigma", sorted({*BLUR_SIGMAS[1:], 0.3, 1.5, 3.0}))
def test_gaussian_filter_equals_scipy_bit_for_bit(sigma):
    rng = np.random.default_rng(int(sigma * 10))
    for trial in range(30):
        side = int(rng.choice([3, 5, 8, 16, 28, 32]))        # 8: the digits, shorter than the widest blur's reach
        shape = (int(rng.integers(1, 4)), int(rng.integers(1, 4)), side, int(rng.choice([side, side + 3])))
        x = rng.standard_normal(shape) * float(rng.choice([1e-6, 1.0, 1e6]))
        want = gaussian_filter(x, sigma=(0.0, 0.0, sigma, sigma), mode="reflect")
        assert np.array_equal(gaussian_filter_2d(x, sigma), want), (trial, shape)
    line = rng.standard_normal((4, 11))
    assert np.array_equal(gaussian_filter_1d(line, sigma, 1), gaussian_filter1d(line, sigma, axis=1))
