"""The closed-form float16 bounds of reconbench/evaluation/float16_bounds.py against measured moves: the min-max
stretch on adversarial vectors (values near the minimum and maximum rounded in opposite directions), the rounding
bound on subnormals, the correlation and ncc distance bounds on rounding pushed along the features."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from reconbench.evaluation import float16_bounds as bounds
from reconbench.evaluation.ssim import minmax

U = 2.0 ** -11


def _rounded_to(x16: np.ndarray, direction: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Unrounded values that round to ``x16``: each moved by up to (just under) half a float16 spacing in
    ``direction`` (+1 up, -1 down), so that rounding moves it back by nearly the most it can."""
    up = np.nextafter(x16.astype(np.float16), np.float16(np.inf)).astype(np.float64) - x16
    down = x16 - np.nextafter(x16.astype(np.float16), np.float16(-np.inf)).astype(np.float64)
    frac = 0.5 * (1 - 2.0 ** -8) * rng.uniform(0.9, 1.0, size=x16.shape)
    return x16 + np.where(direction > 0, frac * up, -frac * down)


def _adversarial(rng: np.random.Generator, n: int, level: float, rel_range: float) -> tuple[np.ndarray, np.ndarray]:
    """A vector around ``level`` of relative range ``rel_range``, in float64 and as float16: its lowest tenth lies
    above its float16 values and its highest tenth below them (rounding widens the range by nearly 2 u max|x|), its
    middle values either way."""
    x16 = (level + level * rel_range * rng.uniform(-0.5, 0.5, size=n)).astype(np.float16).astype(np.float64)
    order = np.argsort(x16)
    direction = rng.choice([-1.0, 1.0], size=n)
    direction[order[: max(1, n // 10)]] = -1.0    # rounding moved these down
    direction[order[-max(1, n // 10):]] = 1.0     # and these up
    x = _rounded_to(x16, -direction, rng)
    assert np.array_equal(x.astype(np.float16).astype(np.float64), x16)
    return x, x16


@pytest.mark.parametrize("level", [0.03, 0.5, -0.7, 3.0])
@pytest.mark.parametrize("rel_range", [1.0, 0.1, 1e-2, 2e-3])
def test_the_minmax_stretch_bounds_the_measured_move_of_every_scaled_value(level, rel_range):
    rng = np.random.default_rng(int(1000 * abs(level)) + int(1 / rel_range))
    worst = 0.0
    for _ in range(20):
        x, x16 = _adversarial(rng, 400, level, rel_range)
        mean = torch.zeros(1)
        shift = bounds.minmax_shift(torch.as_tensor(x16), mean)
        assert shift is not None
        exact = minmax(torch.as_tensor(x)[None])[0]
        rounded = minmax(torch.as_tensor(x16)[None])[0]
        moved = float((exact - rounded).abs().max())
        assert moved <= shift
        worst = max(worst, moved / shift)
    # the bound is the stretch, not a loose multiple of it: adversarial rounding reaches a good part of it
    assert worst > 0.3


def test_the_stretch_is_about_twice_the_ratio_of_size_to_range():
    x16 = torch.tensor([0.5, 0.505, 0.51], dtype=torch.float16)
    shift = bounds.minmax_shift(x16, torch.zeros(1))
    assert shift is not None
    rng = float(x16.double().max() - x16.double().min())
    assert shift == pytest.approx(2 * U * float(x16.double().abs().max()) / rng / (1 - U), rel=1e-3)


def test_a_range_within_rounding_of_zero_cannot_be_scaled():
    flat = torch.full((3, 4, 4), 0.5, dtype=torch.float16)
    assert bounds.minmax_shift(flat, torch.zeros(1)) is None
    almost = flat.clone()
    almost[0, 0, 0] = torch.nextafter(torch.tensor(0.5, dtype=torch.float16), torch.tensor(1.0, dtype=torch.float16))
    assert bounds.minmax_shift(almost, torch.zeros(1)) is None   # a range of one float16 step: within 2 delta
    with_inf = flat.clone()
    with_inf[0, 0, 0] = float("inf")
    assert bounds.minmax_shift(with_inf, torch.zeros(1)) is None


def test_the_rounding_bound_covers_normal_and_subnormal_values():
    rng = np.random.default_rng(3)
    x = np.concatenate([rng.uniform(-2, 2, 5000), rng.uniform(-2.0 ** -14, 2.0 ** -14, 5000),
                        rng.uniform(-1e-7, 1e-7, 100)])
    x16 = torch.as_tensor(x).half()
    moved = (torch.as_tensor(x) - x16.double()).abs()
    assert bool((moved <= bounds.rounding_bounds(x16)).all())


@pytest.mark.parametrize("factor", [2, 4])
def test_the_distance_bound_covers_the_worst_rounding_of_the_features(factor):
    """Rounding pushed along the sign of each down-sampled feature's largest weights, for a flat and a textured
    image: the ncc distance to an exact image moves within its bound (and the bound is attained in part)."""
    from reconbench.evaluation.distances import features, paired

    rng = np.random.default_rng(factor)
    target = torch.as_tensor(rng.normal(size=(1, 2, 16, 16)))
    for rel in (1.0, 0.1, 1e-2):
        x16 = (0.3 + 0.3 * rel * rng.normal(size=(2, 16, 16))).astype(np.float16).astype(np.float64)
        feat16 = features(torch.as_tensor(x16)[None], f"ncc{factor}", 1e-10)
        for direction in (np.sign(rng.normal(size=x16.shape)), np.sign(x16 - x16.mean())):
            x = _rounded_to(x16, direction, rng)
            d16 = float(paired(feat16, features(target, f"ncc{factor}", 1e-10), True)[0])
            d = float(paired(features(torch.as_tensor(x)[None], f"ncc{factor}", 1e-10),
                             features(target, f"ncc{factor}", 1e-10), True)[0])
            tol = bounds.distance_shift(torch.as_tensor(x16), d16, factor=factor, standardised=True, eps=1e-10,
                                        per_dimension=True, n_terms=512)
            assert tol is not None and abs(d - d16) <= tol


def test_the_correlation_bound_covers_an_adversarial_rounding():
    """Pearson correlation of a flat channel with a signal: rounding pushed along the signal moves it most."""
    rng = np.random.default_rng(5)
    y = rng.normal(size=(1, 8, 8))
    for rel in (1e-1, 1e-2, 3e-3):
        x16 = (0.4 + 0.4 * rel * rng.normal(size=(1, 8, 8))).astype(np.float16).astype(np.float64)
        x = _rounded_to(x16, np.sign(y - y.mean()), rng)
        tol = bounds.correlation_shift(torch.as_tensor(x16), 64)

        def corr(a: np.ndarray) -> float:
            return float(np.corrcoef(a.ravel(), y.ravel())[0, 1])

        if tol is not None:
            assert abs(corr(x) - corr(x16)) <= tol


def test_a_whole_cells_bound_is_its_worst_candidates_and_a_near_flat_one_cannot_widen_it_past_the_ceiling():
    """candidates_tolerance (all candidates at once) against the per-image functions one candidate at a time; a
    low-contrast honest candidate's papers' SSIM moves past the uniform float16 tolerance and within its own bound,
    which passes the ceiling: it is counted as too flat, and the cell's tolerance stays its other candidates'."""
    from reconbench.evaluation import decisions
    from reconbench.evaluation.ssim import display, ssim_paper

    rng = np.random.default_rng(9)
    images = rng.random((4, 3, 12, 12))
    mean = torch.as_tensor(images.mean(0))
    grey = torch.full((3, 12, 12), 0.7, dtype=torch.float64) * (1 + 2.5e-3 * torch.as_tensor(images[0] - 0.5))
    cands = torch.stack([torch.as_tensor(images[1]) - mean, torch.as_tensor(images[2] * 0.3) - mean, grey - mean,
                         torch.full((3, 12, 12), 0.25, dtype=torch.float64)])     # the last: flat
    stored = cands.half().double()
    n = 3 * 12 * 12
    got = bounds.candidates_tolerance(stored, mean, 1e-10, n)
    singles = []
    for c in stored[:3]:
        shift = bounds.minmax_shift(c, mean, 1e-10)
        ssim_tol = None if shift is None else bounds.ssim_shift_tolerance(shift, n)
        corr_tol = bounds.correlation_shift(c, n)
        assert ssim_tol is not None and corr_tol is not None
        singles.append(max(ssim_tol, corr_tol))
    assert singles[2] > bounds.CELL_TOLERANCE_CEILING > max(singles[:2])   # the grey one passes the ceiling
    assert got.flat == 2   # the grey one and the flat one
    assert got.tolerance == pytest.approx(max(singles[:2]) + decisions.score_tolerance(n), rel=1e-9)
    assert got.tolerance <= bounds.CELL_TOLERANCE_CEILING + decisions.score_tolerance(n)
    orig = torch.as_tensor(images[0])[None]
    exact = float(ssim_paper(display(cands[2][None], mean), orig)[0])
    rounded = float(ssim_paper(display(stored[2][None], mean), orig)[0])
    assert decisions.float16_tolerance(n) < abs(exact - rounded) <= singles[2]
