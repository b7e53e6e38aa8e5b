"""Each figure pair's float16 bound (figure_pairs.pair_tolerances, reconbench/evaluation/float16_bounds.py) against
the move float16 rounding actually makes: over honest pairs of real digits, CIFAR-like colour images and noise, down
to reconstructions of 1e-4 relative contrast, the score re-computed from float16 stays within its pair's bound of the
float64 one; at normal contrast the bound stays within the uniform float16 tolerance; a pair swapped for another
candidate of the same cell falls outside it."""

from __future__ import annotations

from types import SimpleNamespace
from typing import TYPE_CHECKING, cast

import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits

from reconbench.bench.entries import ROW_RTOL
from reconbench.evaluation import decisions
from reconbench.evaluation.protocol import resolve_protocol
from reconbench.leaderboard import figure_pairs
from reconbench.leaderboard.figure_pairs import FigurePairs, pair_tolerances, rescore

if TYPE_CHECKING:
    from reconbench.records import CellRecord
    from reconbench.targets.problems import Problem

#: the relative contrasts of the low-contrast reconstructions (their displayed range over their grey level)
CONTRASTS = (1e-1, 3e-2, 1e-2, 3e-3, 1e-3, 3e-4, 1e-4)


def _problem(images: np.ndarray) -> SimpleNamespace:
    mean = images.mean(0)
    return SimpleNamespace(train_images=images, mean=mean, n=len(images), image_shape=images.shape[1:],
                           mean_tensor=lambda dtype=torch.float64: torch.as_tensor(mean, dtype=dtype),
                           x_train=lambda dtype=torch.float64: torch.as_tensor(images - mean, dtype=dtype))


def _digits() -> SimpleNamespace:
    """Twenty of scikit-learn's 8 x 8 handwritten digits, in [0, 1]."""
    return _problem(load_digits().images[:20, None] / 16.0)


def _cifar_like() -> SimpleNamespace:
    """Twelve smooth colour images in [0, 1]: blurred colour noise over a colour gradient."""
    rng = np.random.default_rng(7)
    ramp = np.linspace(0, 1, 16)
    out = []
    for _ in range(12):
        noise = rng.random((3, 18, 18))
        blurred = sum(noise[:, a:a + 16, b:b + 16] for a in range(3) for b in range(3)) / 9
        gradient = rng.random((3, 1, 1)) * ramp[None, :, None] + rng.random((3, 1, 1)) * ramp[None, None, :]
        img = 0.6 * blurred + 0.4 * gradient / 2
        out.append((img - img.min()) / (img.max() - img.min()) * rng.uniform(0.5, 1.0) + rng.uniform(0, 0.2))
    return _problem(np.clip(np.stack(out), 0, 1))


PROBLEMS = {"digits": _digits, "cifar-like": _cifar_like}


@pytest.fixture(autouse=True)
def default_protocol(monkeypatch):
    """The cells here were scored under the default protocol of an MLP target (ncc2 distances, both SSIMs)."""
    monkeypatch.setattr(figure_pairs, "cell_protocol", lambda rec: resolve_protocol({}, "mlp"))


def _pair(i: int, recon: torch.Tensor, dtype: torch.dtype, averaged: torch.Tensor | None = None) -> FigurePairs:
    """One shown image ``i`` matched to ``recon`` (centred), or averaging two members whose mean is ``averaged``."""
    if averaged is None:
        return FigurePairs("cell", [i], [0], [1], recon[None].to(dtype), torch.zeros((0, *recon.shape), dtype=dtype))
    return FigurePairs("cell", [i], [0], [2], recon[None].to(dtype), averaged[None].to(dtype))


def _honest(problem: SimpleNamespace, rng: np.random.Generator) -> list[tuple[str, int, torch.Tensor, torch.Tensor | None]]:
    """Honest reconstructions (centred) of each training image: exact, noisy, averaged with a noisy copy, pure
    noise, and grey images of each low contrast carrying the training image."""
    x = problem.x_train()
    mean = problem.mean_tensor()
    out: list[tuple[str, int, torch.Tensor, torch.Tensor | None]] = []
    for i in range(problem.n):
        noise = torch.as_tensor(rng.normal(size=x[i].shape))
        image = torch.as_tensor(problem.train_images[i])
        out.append(("exact", i, x[i], None))
        out.append(("noisy", i, x[i] + 0.1 * noise, None))
        out.append(("averaged", i, x[i] + 0.2 * noise, x[i] + 0.1 * noise))
        out.append(("noise", i, 0.3 * noise, None))
        grey = float(rng.uniform(0.2, 0.8))
        for contrast in CONTRASTS:
            shown = grey * (1 + contrast * (image - 0.5) / max(float(image.max() - image.min()), 1e-9))
            out.append((f"contrast {contrast:g}", i, shown - mean, None))
    return out


def _moves(problem: SimpleNamespace, seed: int):
    """Per honest pair: its kind, and per score the float64 score, the float16 one and the pair's bound."""
    rng = np.random.default_rng(seed)
    for kind, i, recon, averaged in _honest(problem, rng):
        # stand-ins: the problem's mean and size, no record (the cell's protocol is patched in above)
        prob, rec = cast("Problem", problem), cast("CellRecord", None)
        exact = rescore(prob, _pair(i, recon, torch.float64, averaged), rec=rec)[i]
        stored = _pair(i, recon, torch.float16, averaged)
        rounded = rescore(prob, stored, rec=rec)
        tols = pair_tolerances(prob, stored, rec, rounded)[i]
        yield kind, {key: (exact[key], rounded[i][key], tols[key]) for key in tols}


@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_every_honest_pair_rescores_within_its_own_bound(name):
    problem = PROBLEMS[name]()
    uniform = decisions.float16_tolerance(int(np.prod(problem.image_shape))) + ROW_RTOL
    beyond_uniform, flat, compared = 0, set(), 0
    for seed in (0, 1):
        for kind, scores in _moves(problem, seed):
            for key, (exact, rounded, tol) in scores.items():
                if tol is None:
                    flat.add((kind, key))
                    continue
                compared += 1
                moved = abs(exact - rounded)
                assert moved <= tol, f"{kind} {key}: float16 moved it by {moved:.3g}, its bound is {tol:.3g}"
                beyond_uniform += moved > uniform * max(1.0, abs(exact))
    assert compared > 500
    # the uniform tolerance is no bound: honest low-contrast pairs move past it, and their own bounds hold them
    assert beyond_uniform > 0
    # at 1e-4 contrast float16 cannot re-score the SSIMs: they are said to be flat, never passed at any value
    assert ("contrast 0.0001", "ssim") in flat and ("contrast 0.0001", "ssim_standard") in flat
    assert not any(kind in ("exact", "noisy", "averaged", "noise") for kind, _ in flat)


@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_at_normal_contrast_the_bound_is_within_the_uniform_tolerance(name):
    problem = PROBLEMS[name]()
    uniform = decisions.float16_tolerance(int(np.prod(problem.image_shape))) + ROW_RTOL
    assert 7e-3 < uniform < 8e-3
    for kind, scores in _moves(problem, 2):
        if kind not in ("exact", "noisy", "averaged"):
            continue
        for key, (exact, _rounded, tol) in scores.items():
            assert tol is not None and tol <= uniform * max(1.0, abs(exact)), f"{kind} {key}: bound {tol}"


@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_a_pair_swapped_for_the_nearest_other_candidate_of_its_cell_falls_outside_its_bound(name):
    """Each training image's noisy reconstruction replaced by the nearest other one of the same cell (by L2 in the
    centred space): some score of the pair moves past the swapped pair's bound."""
    problem = PROBLEMS[name]()
    rng = np.random.default_rng(11)
    x = problem.x_train()
    candidates = x + 0.1 * torch.as_tensor(rng.normal(size=x.shape))
    for i in range(problem.n):
        own = rescore(problem, _pair(i, candidates[i], torch.float64), rec=None)[i]
        others = [c for c in range(problem.n) if c != i]
        nearest = min(others, key=lambda c: float((candidates[c] - candidates[i]).norm()))
        swapped = _pair(i, candidates[nearest], torch.float16)
        fresh = rescore(problem, swapped, rec=None)
        tols = pair_tolerances(problem, swapped, None, fresh)[i]
        beyond = [key for key, tol in tols.items()
                  if tol is not None and abs(fresh[i][key] - own[key]) > tol + ROW_RTOL * max(1.0, abs(own[key]))]
        assert beyond, f"image {i}: the pair swapped for candidate {nearest} re-scores within its bound"
