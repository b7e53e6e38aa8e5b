"""The re-score of a cell's figure pairs (reconbench/leaderboard/figure_pairs.py) against independent
implementations: the papers' SSIM built from scikit-image's Gaussian filter, scikit-image's own SSIM, the
correlation from numpy; the float16 tolerance against the rounding it bounds; and the file read strictly."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from skimage.filters import gaussian
from skimage.metrics import structural_similarity

from reconbench.evaluation.protocol import resolve_protocol
from reconbench.leaderboard import figure_pairs
from reconbench.leaderboard.figure_pairs import FigurePairs, PairsError, pair_tolerances, rescore

SHAPE = (3, 16, 16)


@pytest.fixture
def problem():
    """Six colour training images in [0, 1] and their mean: what a re-score reads of a training problem."""
    rng = np.random.default_rng(0)
    images = rng.random((6, *SHAPE))
    mean = images.mean(0)
    return SimpleNamespace(train_images=images, mean=mean, n=6, image_shape=SHAPE,
                           mean_tensor=lambda dtype=torch.float64: torch.as_tensor(mean, dtype=dtype),
                           x_train=lambda dtype=torch.float64: torch.as_tensor(images - mean, dtype=dtype))


@pytest.fixture(autouse=True)
def default_protocol(monkeypatch):
    """The cells here were scored under the default protocol of an MLP target."""
    monkeypatch.setattr(figure_pairs, "cell_protocol", lambda rec: resolve_protocol({}, "mlp"))


def _pairs(problem, dtype: torch.dtype) -> FigurePairs:
    """Three shown images: two matched to one noisy copy of themselves, one averaging two (centred space)."""
    gen = torch.Generator().manual_seed(1)
    x = problem.x_train()
    noisy = x + 0.3 * torch.randn(x.shape, generator=gen, dtype=torch.float64)
    best = torch.stack([noisy[4], noisy[1], noisy[2]])
    averaged = ((noisy[2] + x[2] + 0.1) / 2)[None]
    return FigurePairs("cell", [4, 1, 2], [40, 10, 20], [1, 1, 2], best.to(dtype), averaged.to(dtype))


def _papers_ssim(a: np.ndarray, b: np.ndarray) -> float:
    """The papers' SSIM (kornia's: a 3x3 Gaussian window of sigma 1.5, reflect borders, data range 1, channels apart,
    the map averaged), its local moments by scikit-image's Gaussian filter: truncate 1 / 1.5 keeps a radius of one
    pixel, mode 'mirror' reflects without repeating the edge as torch's 'reflect' padding does."""
    def blur(x: np.ndarray) -> np.ndarray:
        return gaussian(x, sigma=1.5, truncate=1 / 1.5, mode="mirror", preserve_range=True)

    c1, c2 = 0.01 ** 2, 0.03 ** 2
    maps = []
    for x, y in zip(a, b, strict=True):
        mx, my = blur(x), blur(y)
        vx, vy, cxy = blur(x * x) - mx ** 2, blur(y * y) - my ** 2, blur(x * y) - mx * my
        maps.append((2 * mx * my + c1) * (2 * cxy + c2) / ((mx ** 2 + my ** 2 + c1) * (vx + vy + c2) + 1e-12))
    return float(np.mean(maps))


def _display(recon: np.ndarray, mean: np.ndarray) -> np.ndarray:
    x = recon + mean
    return (x - x.min()) / (x.max() - x.min())


def test_the_rescore_equals_independent_ssims_and_correlation(problem):
    pairs = _pairs(problem, torch.float64)   # unrounded: the formulas alone are compared
    scores = rescore(problem, pairs, rec=None)
    assert sorted(scores) == [1, 2, 4]
    x = problem.train_images - problem.mean
    for j, i in enumerate(pairs.shown):
        recon = pairs.reconstruction(j)
        assert recon is not None
        shown = _display(recon.numpy(), problem.mean)
        orig = problem.train_images[i]
        assert scores[i]["ssim"] == pytest.approx(_papers_ssim(shown, orig), rel=1e-10, abs=1e-12)
        assert scores[i]["ssim_standard"] == pytest.approx(
            structural_similarity(shown, orig, data_range=1.0, channel_axis=0), rel=1e-10, abs=1e-12)
        corr = np.mean([np.corrcoef(recon.numpy()[c].ravel(), x[i][c].ravel())[0, 1] for c in range(SHAPE[0])])
        assert scores[i]["corr"] == pytest.approx(corr, rel=1e-10, abs=1e-12)
        want = float(np.mean((_ncc2(pairs.best[j].numpy()) - _ncc2(x[i])) ** 2))   # per dimension
        assert scores[i]["best_distance"] == pytest.approx(want, rel=1e-10, abs=1e-12)


def _halve(x: np.ndarray, axis: int) -> np.ndarray:
    """Bicubic down-sampling by 2 along ``axis`` (half-pixel centres, borders replicated): each output sits halfway
    between source pixels 2i and 2i + 1, so the cubic kernel (a = -0.75) weighs pixels 2i - 1 .. 2i + 2 at distances
    1.5, 0.5, 0.5, 1.5: -3/32, 19/32, 19/32, -3/32."""
    n = x.shape[axis]
    idx = np.arange(0, n, 2)
    take = [np.take(x, np.clip(idx + d, 0, n - 1), axis=axis) for d in (-1, 0, 1, 2)]
    return (-3 * take[0] + 19 * take[1] + 19 * take[2] - 3 * take[3]) / 32


def _ncc2(img: np.ndarray) -> np.ndarray:
    """The ncc2 matching features: halved by bicubic along height and width, each channel standardised (unbiased std + 1e-10)."""
    small = _halve(_halve(img, 1), 2)
    flat = small.reshape(small.shape[0], -1)
    return ((flat - flat.mean(1, keepdims=True)) / (flat.std(1, ddof=1, keepdims=True) + 1e-10)).ravel()


def test_float16_rounding_moves_the_scores_within_the_stated_tolerance_and_visibly(problem):
    exact = rescore(problem, _pairs(problem, torch.float64), rec=None)
    stored = _pairs(problem, torch.float16)
    rounded = rescore(problem, stored, rec=None)
    tols = pair_tolerances(problem, stored, None, rounded)
    assert all(0 < (tols[i][k] or 0) < 8e-3 for i in exact for k in exact[i])
    moved = [abs(exact[i][k] - rounded[i][k]) for i in exact for k in exact[i]]
    assert all(abs(exact[i][k] - rounded[i][k]) <= (tols[i][k] or 0) for i in exact for k in exact[i])
    assert max(moved) > 1e-6   # float16 is visible: a float64 rounding tolerance alone would refuse honest pairs


def test_the_file_round_trips_and_a_wrong_one_is_refused_in_one_line(problem, tmp_path):
    pairs = _pairs(problem, torch.float16)
    back = FigurePairs.from_bytes(pairs.to_bytes(), "p")
    assert (back.cell_id, back.shown, back.best_ids, back.members) == ("cell", [4, 1, 2], [40, 10, 20], [1, 1, 2])
    assert torch.equal(back.best, pairs.best) and torch.equal(back.averaged, pairs.averaged)
    assert back.reconstruction(2) is not None and torch.equal(back.reconstruction(2), pairs.averaged[0].double())
    broken = FigurePairs("cell", [4, 1, 2], [40, 10, 20], [1, 2, 2], pairs.best, pairs.averaged)   # an average short
    with pytest.raises(PairsError, match="do not fit one another") as err:
        FigurePairs.from_bytes(broken.to_bytes(), tmp_path / "x.safetensors")
    assert "\n" not in str(err.value)
    with pytest.raises(PairsError, match="not a readable figure-pairs file"):
        FigurePairs.from_bytes(b"not safetensors", "x")


def test_a_failed_write_of_figure_pairs_leaves_no_file_behind(problem, tmp_path, monkeypatch):
    """The rename that publishes a written file fails (a full or read-only folder): the folder is as it was, no
    temporary file in it, for the results folder's file and for the board's."""
    import os
    from pathlib import Path

    from reconbench.leaderboard.figures import keep_pairs

    def refused(*args: object) -> None:
        raise OSError("rename refused")

    monkeypatch.setattr(os, "replace", refused)
    monkeypatch.setattr(Path, "replace", refused)
    pairs = _pairs(problem, torch.float16)
    with pytest.raises(OSError, match="rename refused"):
        figure_pairs.write_pairs(tmp_path / "work" / figure_pairs.PAIRS_FILE, pairs)
    with pytest.raises(OSError, match="rename refused"):
        keep_pairs(tmp_path / "board", "cell", pairs.to_bytes())
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == []


def test_the_rescores_correlation_is_the_corr_plugins():
    """The re-score's copy of the ``corr`` metric's formula is the plugin's, constant channels included."""
    from reconbench_plugins.metrics import pearson

    gen = torch.Generator().manual_seed(2)
    a, b = torch.randn((5, *SHAPE), generator=gen, dtype=torch.float64), torch.randn((5, *SHAPE), generator=gen,
                                                                                      dtype=torch.float64)
    a[0, 1] = 0.25   # a constant channel: correlation 0 there
    assert torch.equal(figure_pairs._pearson(a, b), pearson(a, b))
