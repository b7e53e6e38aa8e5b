"""Initialisation regimes, checked against the problem's raw images rather than their own code paths."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from reconbench_plugins.inits import PAPER_GRID, mixture_grid

from reconbench import plugins
from reconbench.attack.candidates import candidate_labels
from reconbench.config import build_config
from reconbench.data import ProblemSpec
from reconbench.errors import IncompatibleError
from reconbench.interfaces import InitRegime
from reconbench.targets.problems import build_problem

REGIMES = ("gaussian", "uniform", "ground_truth", "partition", "mixture")


@pytest.fixture(scope="module")
def binary():
    return build_problem(ProblemSpec(task="binary", n_per_class=4, n_test_per_class=5))


@pytest.fixture(scope="module")
def multiclass():
    return build_problem(ProblemSpec(task="multiclass", n_per_class=3, num_classes=4, n_test_per_class=2))


def make(name, problem, m, config=None, seed=0):
    regime = plugins.get("inits", name)
    labels = candidate_labels(problem.task, problem.num_classes, m)
    cfg = build_config(regime.config_cls, config or {}, name)
    x = regime.make(problem, labels, cfg, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return x, labels, regime, cfg


def pixels(problem, x):
    """Back to pixel space ([0, 1] images)."""
    return x.numpy() + problem.mean[None]


def find_rows(pool: np.ndarray, x: np.ndarray) -> list[int]:
    """Index of the exact pool image equal to each candidate (-1 when none)."""
    flat = pool.reshape(len(pool), -1)
    out = []
    for row in x.reshape(len(x), -1):
        hits = np.flatnonzero(np.abs(flat - row).max(axis=1) < 1e-12)
        out.append(int(hits[0]) if len(hits) else -1)
    return out


@pytest.mark.parametrize("name", REGIMES)
def test_every_regime_follows_the_protocol(name, binary):
    x, labels, regime, cfg = make(name, binary, 8)
    assert isinstance(regime, InitRegime)
    assert x.shape == (8, *binary.image_shape) and x.dtype == torch.float64
    assert torch.isfinite(x).all()
    assert dataclasses.is_dataclass(regime.config_cls)
    assert regime.is_oracle(cfg) in (True, False)
    assert regime.oracle or not regime.is_oracle(cfg)  # class flag covers every configuration


def test_oracle_flags():
    assert not plugins.get("inits", "uniform").oracle and not plugins.get("inits", "partition").oracle
    gt, mix = plugins.get("inits", "ground_truth"), plugins.get("inits", "mixture")
    assert gt.oracle and gt.is_oracle(build_config(gt.config_cls, {}))
    cfg = mix.config_cls
    assert mix.oracle
    assert mix.is_oracle(cfg(l1=0.25, l2=0.75))
    assert not mix.is_oracle(cfg(l1=0.0, l2=1.0)) and not mix.is_oracle(cfg(l1=1.0, l2=0.0))


def test_uniform_is_uniform_in_pixel_space_then_centred(binary):
    x, *_ = make("uniform", binary, 400)
    px = pixels(binary, x)
    assert px.min() >= 0.0 and px.max() <= 1.0
    assert abs(px.mean() - 0.5) < 0.01 and abs(px.var() - 1 / 12) < 0.005
    y, *_ = make("uniform", binary, 400, {"low": 0.2, "high": 0.4})
    py = pixels(binary, y)
    assert py.min() >= 0.2 and py.max() <= 0.4


def test_ground_truth_takes_label_matched_training_images_and_cycles(binary):
    x, labels, *_ = make("ground_truth", binary, 16)  # m_c = 8 = 2 n_c
    rows = find_rows(binary.train_images, pixels(binary, x))
    assert -1 not in rows
    np.testing.assert_array_equal(binary.train_labels[rows], labels.numpy())
    for c in (0, 1):  # candidate k of label c is image k mod n_c of label c, in problem order
        own = np.flatnonzero(binary.train_labels == c)
        got = [r for r, lab in zip(rows, labels.tolist(), strict=True) if lab == c]
        assert got == [int(own[k % 4]) for k in range(8)]
    with pytest.raises(IncompatibleError, match="overflow='cycle'"):
        make("ground_truth", binary, 16, {"overflow": "error"})
    x, labels, *_ = make("ground_truth", binary, 8, {"overflow": "error"})
    assert sorted(find_rows(binary.train_images, pixels(binary, x))) == list(range(8))  # each exactly once


def test_ground_truth_class_blocks_multiclass(multiclass):
    x, labels, *_ = make("ground_truth", multiclass, 12)
    rows = find_rows(multiclass.train_images, pixels(multiclass, x))
    np.testing.assert_array_equal(multiclass.train_labels[rows], labels.numpy())
    assert sorted(rows) == list(range(12))


def test_partition_takes_decoys_disjoint_from_training(binary):
    x, labels, *_ = make("partition", binary, 16)
    px = pixels(binary, x)
    rows = find_rows(binary.decoy_images, px)
    assert -1 not in rows and len(set(rows)) == 16
    np.testing.assert_array_equal(binary.decoy_labels[rows], labels.numpy())
    assert find_rows(binary.train_images, px) == [-1] * 16
    assert not set(binary.decoy_indices[rows]) & set(binary.train_indices)


def test_partition_pool_too_small_names_the_option(binary):
    with pytest.raises(IncompatibleError, match="n_decoy_per_class"):
        make("partition", binary, 18)  # 9 per label, pool holds 8
    small = build_problem(ProblemSpec(task="binary", n_per_class=4, n_decoy_per_class=1, n_test_per_class=2))
    with pytest.raises(IncompatibleError, match="n_decoy_per_class"):
        make("partition", small, 4)


def test_mixture_is_the_papers_convex_combination(binary):
    m = 8
    l1, l2 = 0.25, 0.75
    x, labels, *_ = make("mixture", binary, m, {"l1": l1, "l2": l2}, seed=5)
    gt, *_ = make("ground_truth", binary, m)
    part, *_ = make("partition", binary, m)
    rnd, *_ = make("uniform", binary, m, seed=5)  # the same generator state draws the same noise
    expected = l2 * (l1 * gt + (1 - l1) * part) + (1 - l2) * rnd
    torch.testing.assert_close(x, expected, rtol=0, atol=1e-12)
    # the corners reduce to the pure regimes
    torch.testing.assert_close(make("mixture", binary, m, {"l1": 1.0, "l2": 1.0})[0], gt)
    torch.testing.assert_close(make("mixture", binary, m, {"l1": 0.0, "l2": 1.0})[0], part)
    torch.testing.assert_close(make("mixture", binary, m, {"l1": 0.7, "l2": 0.0}, seed=5)[0], rnd)


def test_mixture_pixel_blend_then_centre_equals_centred_blend(binary):
    """The weights sum to one: blending pixel images and then centring equals blending centred ones."""
    l1, l2 = 0.5, 0.25
    x, *_ = make("mixture", binary, 8, {"l1": l1, "l2": l2}, seed=2)
    gt = pixels(binary, make("ground_truth", binary, 8)[0])
    part = pixels(binary, make("partition", binary, 8)[0])
    rnd = pixels(binary, make("uniform", binary, 8, seed=2)[0])
    expected = l2 * (l1 * gt + (1 - l1) * part) + (1 - l2) * rnd
    np.testing.assert_allclose(pixels(binary, x), expected, atol=1e-12)


def test_mixture_without_partition_weight_needs_no_decoys():
    small = build_problem(ProblemSpec(task="binary", n_per_class=4, n_decoy_per_class=0, n_test_per_class=2))
    make("mixture", small, 8, {"l1": 1.0, "l2": 0.5})  # no decoy image is read
    with pytest.raises(IncompatibleError, match="n_decoy_per_class"):
        make("mixture", small, 8, {"l1": 0.5, "l2": 0.5})


def test_mixture_rejects_weights_outside_the_unit_interval(binary):
    from reconbench.errors import ReconbenchError

    with pytest.raises(ReconbenchError, match=r"l1: 1\.5 is out of range.*<= 1"):
        make("mixture", binary, 8, {"l1": 1.5, "l2": 0.5})


def test_mixture_grid_is_the_papers_5_by_5():
    grid = mixture_grid()
    assert len(grid) == 25 and len({(g["l1"], g["l2"]) for g in grid}) == 25
    assert {g["l1"] for g in grid} == set(PAPER_GRID) == {0.0, 0.25, 0.5, 0.75, 1.0}
    regime = plugins.get("inits", "mixture")
    oracle = [regime.is_oracle(build_config(regime.config_cls, g)) for g in grid]
    assert sum(oracle) == 16  # l1, l2 both in {0.25, 0.5, 0.75, 1}
    assert mixture_grid((0.0, 1.0)) == [{"l1": 0.0, "l2": 0.0}, {"l1": 1.0, "l2": 0.0},
                                        {"l1": 0.0, "l2": 1.0}, {"l1": 1.0, "l2": 1.0}]
