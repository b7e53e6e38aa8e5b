"""The run's reconstructions figure shows the calibrated headline: ordered by its score, passing pairs framed green."""

from __future__ import annotations

import numpy as np
from matplotlib.image import imread

from reconbench.evaluation.figures import Headline, figure_order, reconstructions_figure


def _images(n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    orig = rng.uniform(size=(n, 1, 8, 8))
    return np.clip(orig + 0.05 * rng.normal(size=orig.shape), 0, 1), orig


def _green_pixels(path) -> int:
    rgb = imread(path)[..., :3]
    return int(((rgb[..., 1] > 0.4) & (rgb[..., 0] < 0.2) & (rgb[..., 2] < 0.2)).sum())


def test_order_follows_the_headline_not_the_papers_score():
    corr = np.array([0.2, 0.9, np.nan, 0.5])
    ssim = np.array([0.9, 0.1, 0.8, 0.3])
    matched = np.array([True, True, False, True])
    assert figure_order(Headline("corr", corr, 0.6, "the calibrated headline"), matched, 10).tolist() == [1, 3, 0]
    assert figure_order(Headline("SSIM", ssim, 0.4, "the papers' protocol"), matched, 2).tolist() == [0, 3]


def test_pairs_passing_the_headline_are_framed_green(tmp_path):
    recon, orig = _images(4)
    matched = np.ones(4, dtype=bool)
    papers = Headline("SSIM", np.full(4, 0.9), 0.4, "the papers' protocol")  # every pair passes the papers' count
    none_pass = Headline("corr", np.array([0.1, 0.2, 0.3, 0.4]), 0.95, "the calibrated headline")
    two_pass = Headline("corr", np.array([0.99, 0.2, 0.97, 0.4]), 0.95, "the calibrated headline")
    a = reconstructions_figure(tmp_path / "a.png", recon, orig, matched, 10, none_pass, papers)
    b = reconstructions_figure(tmp_path / "b.png", recon, orig, matched, 10, two_pass, papers)
    assert a is not None and b is not None
    assert _green_pixels(a) == 0 < _green_pixels(b)


def test_nothing_matched_draws_nothing(tmp_path):
    recon, orig = _images(3)
    h = Headline("corr", np.array([0.9, 0.9, 0.9]), 0.5, "the calibrated headline")
    assert reconstructions_figure(tmp_path / "c.png", recon, orig, np.zeros(3, dtype=bool), 10, h) is None
