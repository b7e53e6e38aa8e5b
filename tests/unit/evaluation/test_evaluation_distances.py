"""Distances against closed forms and independent re-implementations."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from reconbench.errors import IncompatibleError
from reconbench.evaluation.distances import downsample, features, paired, pairwise


def test_ncc_distance_is_twice_hw_minus_one_times_one_minus_correlation():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(2, 3, 8, 8))
    fa = features(torch.as_tensor(a[None]), "ncc", 1e-12)
    fb = features(torch.as_tensor(b[None]), "ncc", 1e-12)
    got = float(paired(fa, fb, per_dimension=False)[0])
    hw = 64
    rho = [np.corrcoef(a[c].ravel(), b[c].ravel())[0, 1] for c in range(3)]
    expected = sum(2 * (hw - 1) * (1 - r) for r in rho)
    assert got == pytest.approx(expected, rel=1e-6)
    per_dim = float(paired(fa, fb, per_dimension=True)[0])
    assert per_dim == pytest.approx(expected / (3 * hw), rel=1e-6)


def test_ncc_ignores_a_positive_affine_change_of_each_channel():
    rng = np.random.default_rng(1)
    a = rng.normal(size=(1, 3, 8, 8))
    b = a * np.array([2.0, 0.5, 7.0])[None, :, None, None] + np.array([1.0, -3.0, 0.2])[None, :, None, None]
    d = paired(features(torch.as_tensor(a), "ncc", 1e-12), features(torch.as_tensor(b), "ncc", 1e-12), True)
    # 1 - correlation of two standardised 192-vectors: float64 rounding of the sums, not zero
    assert float(d[0]) < 1e-12


def test_l2_is_the_mean_squared_difference():
    rng = np.random.default_rng(2)
    a, b = rng.normal(size=(2, 4, 1, 6, 6))
    d = pairwise(features(torch.as_tensor(a), "l2", 1e-10), features(torch.as_tensor(b), "l2", 1e-10), True)
    brute = ((a.reshape(4, 1, -1) - b.reshape(1, 4, -1)) ** 2).mean(-1)
    np.testing.assert_allclose(d.numpy(), brute, rtol=1e-10, atol=1e-14)


def _keys_bicubic_half(x: np.ndarray) -> np.ndarray:
    """Independent bicubic down-sampling by 2 (Keys a = -0.75, half-pixel centres, clamped borders, no antialias).

    Output pixel i samples source coordinate 2i + 0.5: taps at 2i-1 .. 2i+2 with weights
    w(1.5), w(0.5), w(0.5), w(1.5) = -0.09375, 0.59375, 0.59375, -0.09375.
    """
    w = np.array([-0.09375, 0.59375, 0.59375, -0.09375])

    def along(z: np.ndarray, axis: int) -> np.ndarray:
        n = z.shape[axis]
        out = []
        for i in range(n // 2):
            idx = np.clip(np.arange(2 * i - 1, 2 * i + 3), 0, n - 1)
            out.append(np.tensordot(np.take(z, idx, axis=axis), w, axes=([axis], [0])))
        return np.stack(out, axis=axis)

    return along(along(x, -1), -2)


def test_downsample_is_bicubic_without_antialias():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(2, 3, 8, 12))
    got = downsample(torch.as_tensor(x), 2).numpy()
    np.testing.assert_allclose(got, _keys_bicubic_half(x), rtol=1e-12, atol=1e-12)
    anti = F.interpolate(torch.as_tensor(x), scale_factor=0.5, mode="bicubic", align_corners=False, antialias=True)
    assert not np.allclose(got, anti.numpy(), atol=1e-3)  # the choice matters, and we made the reference's one


def test_ncc2_feature_dimension_and_mnist_size():
    x = torch.zeros(1, 1, 28, 28).normal_()
    assert features(x, "ncc2", 1e-10).shape == (1, 14 * 14)
    assert features(x, "ncc4", 1e-10).shape == (1, 7 * 7)


def test_constant_images_give_finite_distances():
    x = torch.ones(2, 3, 8, 8)
    y = torch.zeros(1, 3, 8, 8).normal_()
    d = pairwise(features(x, "ncc", 1e-10), features(y, "ncc", 1e-10), True)
    assert torch.isfinite(d).all()


def test_pairwise_agrees_with_exact_distances():
    rng = np.random.default_rng(4)
    a = torch.as_tensor(rng.normal(size=(7, 50)))
    b = torch.as_tensor(rng.normal(size=(9, 50)))
    exact = torch.stack([paired(a, b[j].expand_as(a), True) for j in range(9)], 1)
    torch.testing.assert_close(pairwise(a, b, True, chunk=4), exact, rtol=1e-10, atol=1e-12)


def test_too_small_for_downsampling_is_a_clear_error():
    with pytest.raises(IncompatibleError, match="too small"):
        downsample(torch.zeros(1, 1, 3, 3), 2)
