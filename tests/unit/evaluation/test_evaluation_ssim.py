"""Both SSIM variants against independent implementations and closed forms."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _helpers.evalkit import FAST, centred, make_problem, smooth_images
from scipy.ndimage import correlate, uniform_filter

from reconbench.errors import IncompatibleError
from reconbench.evaluation import evaluate
from reconbench.evaluation.ssim import display, kornia_ssim_map, minmax, ssim_paper, ssim_standard

C1, C2 = 0.01**2, 0.03**2


def ref_paper_ssim(a: np.ndarray, b: np.ndarray, win: int = 3, sigma: float = 1.5, eps: float = 1e-12) -> float:
    """The kornia formula written out with scipy: sampled Gaussian window, 'mirror' borders (torch's reflect)."""
    x = np.arange(win) - win // 2
    g = np.exp(-(x**2) / (2 * sigma**2))
    g /= g.sum()
    k = np.outer(g, g)
    maps = []
    for ca, cb in zip(a, b, strict=True):
        f = lambda z: correlate(z, k, mode="mirror")  # noqa: E731
        mu1, mu2 = f(ca), f(cb)
        s1, s2, s12 = f(ca * ca) - mu1**2, f(cb * cb) - mu2**2, f(ca * cb) - mu1 * mu2
        maps.append(((2 * mu1 * mu2 + C1) * (2 * s12 + C2)) / ((mu1**2 + mu2**2 + C1) * (s1 + s2 + C2) + eps))
    return float(np.mean(maps))


def ref_skimage_default(a: np.ndarray, b: np.ndarray, win: int = 7) -> float:
    """scikit-image's documented default algorithm: uniform 7x7 window, sample covariance, borders cropped."""
    npix = win * win
    cov = npix / (npix - 1)
    pad = (win - 1) // 2
    vals = []
    for ca, cb in zip(a, b, strict=True):
        f = lambda z: uniform_filter(z, size=win)  # noqa: E731
        ux, uy = f(ca), f(cb)
        vx, vy = cov * (f(ca * ca) - ux * ux), cov * (f(cb * cb) - uy * uy)
        vxy = cov * (f(ca * cb) - ux * uy)
        s = ((2 * ux * uy + C1) * (2 * vxy + C2)) / ((ux**2 + uy**2 + C1) * (vx + vy + C2))
        vals.append(s[pad:-pad, pad:-pad].mean())
    return float(np.mean(vals))


@pytest.mark.parametrize("shape,win", [((1, 16, 16), 3), ((3, 12, 10), 3), ((3, 16, 16), 5)])
def test_paper_variant_matches_an_independent_implementation(shape, win):
    a = smooth_images(3, shape, seed=1)
    b = smooth_images(3, shape, seed=2)
    got = ssim_paper(torch.as_tensor(a), torch.as_tensor(b), window_size=win).numpy()
    ref = [ref_paper_ssim(a[i], b[i], win) for i in range(3)]
    np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("shape", [(1, 16, 16), (3, 12, 10)])
def test_standard_variant_matches_an_independent_implementation(shape):
    a = smooth_images(3, shape, seed=3)
    b = smooth_images(3, shape, seed=4)
    got = ssim_standard(a, b)
    ref = [ref_skimage_default(a[i], b[i]) for i in range(3)]
    np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-12)
    assert not np.allclose(got, ssim_paper(torch.as_tensor(a), torch.as_tensor(b)).numpy(), atol=1e-3)


def test_identical_images_give_one():
    a = torch.as_tensor(smooth_images(2, (3, 8, 8), seed=5))
    np.testing.assert_allclose(ssim_paper(a, a).numpy(), 1.0, atol=1e-9)
    np.testing.assert_allclose(ssim_standard(a, a), 1.0, atol=1e-12)


def test_constant_images_closed_form():
    # constant images p and q: SSIM = (2pq + C1) / (p^2 + q^2 + C1) (the structure term is C2 / C2)
    for p, q in [(0.2, 0.7), (0.5, 0.5), (0.0, 1.0)]:
        a = torch.full((1, 1, 8, 8), p, dtype=torch.float64)
        b = torch.full((1, 1, 8, 8), q, dtype=torch.float64)
        expected = (2 * p * q + C1) / (p * p + q * q + C1)
        assert float(ssim_paper(a, b, eps=0.0)[0]) == pytest.approx(expected, rel=1e-12)
        assert float(ssim_standard(a, b)[0]) == pytest.approx(expected, rel=1e-12)


def test_a_constant_shift_only_changes_the_luminance_term():
    # b = a + c: local variances and covariance are equal, so the map is (2 mu (mu + c) + C1) / (mu^2 + (mu+c)^2 + C1)
    a = smooth_images(1, (1, 12, 12), seed=6)[0] * 0.5
    c = 0.3
    x = np.arange(3) - 1
    g = np.exp(-(x**2) / (2 * 1.5**2))
    g /= g.sum()
    mu = correlate(a[0], np.outer(g, g), mode="mirror")
    expected = np.mean((2 * mu * (mu + c) + C1) / (mu**2 + (mu + c) ** 2 + C1))
    got = float(ssim_paper(torch.as_tensor(a[None]), torch.as_tensor(a[None] + c), eps=0.0)[0])
    assert got == pytest.approx(expected, rel=1e-10)


def test_channels_are_independent_and_averaged():
    a = smooth_images(1, (3, 10, 10), seed=7)
    b = smooth_images(1, (3, 10, 10), seed=8)
    whole = float(ssim_paper(torch.as_tensor(a), torch.as_tensor(b))[0])
    per = [float(ssim_paper(torch.as_tensor(a[:, [c]]), torch.as_tensor(b[:, [c]]))[0]) for c in range(3)]
    assert whole == pytest.approx(np.mean(per), rel=1e-12)
    perm = [2, 0, 1]
    assert float(ssim_paper(torch.as_tensor(a[:, perm]), torch.as_tensor(b[:, perm]))[0]) == pytest.approx(whole)
    gray = np.repeat(a[:, :1], 3, axis=1), np.repeat(b[:, :1], 3, axis=1)
    assert float(ssim_paper(torch.as_tensor(gray[0]), torch.as_tensor(gray[1]))[0]) == pytest.approx(per[0])
    whole_std = float(ssim_standard(a, b)[0])
    per_std = [float(ssim_standard(a[:, [c]], b[:, [c]])[0]) for c in range(3)]
    assert whole_std == pytest.approx(np.mean(per_std), rel=1e-12)


def test_reconstruction_is_uncentred_and_min_max_scaled_but_the_original_is_not():
    imgs = smooth_images(4, (1, 12, 12), seed=9) * 0.4 + 0.3   # originals in [0.3, 0.7]
    problem = make_problem(imgs)
    out = evaluate(problem, centred(problem, imgs), family="mlp", protocol={**FAST, "metrics": ["ssim"]})
    # the exact training image, once scaled to [0, 1], is compared with the unscaled original
    scaled = (imgs - imgs.min(axis=(1, 2, 3), keepdims=True)) / np.ptp(imgs, axis=(1, 2, 3), keepdims=True)
    for i in range(4):
        assert out["per_image"][i]["ssim"] == pytest.approx(ref_paper_ssim(scaled[i], imgs[i]), rel=1e-9)
        assert out["per_image"][i]["ssim"] < 0.999
    shown = display(centred(problem, imgs), problem.mean_tensor())
    np.testing.assert_allclose(shown.numpy(), scaled, atol=1e-12)


def test_minmax_flags_constant_images_instead_of_nan():
    x = torch.stack([torch.ones(1, 4, 4), torch.arange(16.0).reshape(1, 4, 4)]).double()
    out, const = minmax(x, 1e-10)
    assert const.tolist() == [True, False] and torch.isfinite(out).all()
    assert float(out[1].min()) == 0.0 and float(out[1].max()) == 1.0


def test_bad_windows_are_clear_errors():
    a = torch.zeros(1, 1, 6, 6)
    with pytest.raises(IncompatibleError, match="odd"):
        ssim_paper(a, a, window_size=4)
    with pytest.raises(IncompatibleError, match="win_size"):
        ssim_standard(a.numpy(), a.numpy())


@pytest.mark.parametrize("shape,win", [((20, 1, 8, 8), 3), ((7, 1, 28, 28), 5), ((4, 3, 12, 10), 7), ((1, 1, 5, 9), 3)])
def test_paper_variant_map_equals_kornia_bit_for_bit(shape, win):
    """The moments filtered in one stacked call with a window built once: kornia.metrics.ssim's map, exactly."""
    from kornia.metrics import ssim

    gen = torch.Generator().manual_seed(win)
    a = torch.rand(shape, generator=gen, dtype=torch.float64)
    b = torch.rand(shape, generator=gen, dtype=torch.float64)
    b[0] = a[0]   # an identical pair
    for max_val, eps in ((1.0, 1e-12), (0.5, 0.0)):
        expected = ssim(a, b, win, max_val=max_val, eps=eps, padding="same")
        assert torch.equal(kornia_ssim_map(a, b, win, max_val, eps), expected)
    per_image = ssim(a.reshape(-1, 1, *shape[-2:]), b.reshape(-1, 1, *shape[-2:]), win, padding="same")
    assert torch.equal(ssim_paper(a, b, win), per_image.reshape(shape).mean(dim=(1, 2, 3)))


@pytest.mark.parametrize("shape,win", [((20, 1, 8, 8), None), ((5, 3, 12, 10), 5), ((7, 1, 28, 28), 3),
                                       ((3, 3, 9, 7), 7)])
def test_standard_variant_equals_scikit_image_bit_for_bit(shape, win):
    """The channels' filters run over the whole stack: scikit-image's value per image pair, exactly."""
    from skimage.metrics import structural_similarity

    rng = np.random.default_rng(len(shape) + (win or 0))
    a, b = rng.random(shape), rng.random(shape)
    b[0] = a[0]
    for data_range in (1.0, 0.5):
        expected = [structural_similarity(a[i], b[i], data_range=data_range, channel_axis=0, win_size=win)
                    for i in range(shape[0])]
        np.testing.assert_array_equal(ssim_standard(a, b, data_range, win), expected)
    weighted = [structural_similarity(a[i], b[i], data_range=1.0, channel_axis=0, gaussian_weights=True)
                for i in range(shape[0])] if min(shape[-2:]) >= 11 else None
    if weighted is not None:
        np.testing.assert_array_equal(ssim_standard(a, b, gaussian_weights=True), weighted)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_window_and_separable_filter_are_kornias_bit_for_bit(dtype):
    """The window built by kornia's operations and the filter by kornia's pad and convolution: kornia's numbers."""
    from kornia.filters import filter2d_separable as kornia_filter
    from kornia.filters import get_gaussian_kernel1d

    from reconbench.evaluation.ssim import KORNIA_SIGMA, _gaussian_window, filter2d_separable

    gen = torch.Generator().manual_seed(3)
    for size in (1, 3, 5, 7, 9, 11):
        window = _gaussian_window(size, dtype)
        assert torch.equal(window, get_gaussian_kernel1d(size, KORNIA_SIGMA, dtype=dtype))
        for shape in ((6, 1, 8, 8), (2, 3, 28, 17), (3, 2, size // 2 + 1, size // 2 + 2)):
            x = torch.randn(shape, generator=gen, dtype=dtype)
            assert torch.equal(filter2d_separable(x, window), kornia_filter(x, window, window)), (size, shape)


def test_paper_ssim_imports_no_kornia():
    import subprocess
    import sys

    probe = ("import sys, torch; from reconbench.evaluation.ssim import ssim_paper; "
             "a = torch.rand(4, 1, 8, 8, dtype=torch.float64); ssim_paper(a, a.flip(-1)); "
             "print('kornia' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
