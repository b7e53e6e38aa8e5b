"""Evaluating 10,000 candidates against 500 training images (the papers' size: CIFAR-10, 2 x 250 images).

Run with::

    RECONBENCH_DATA=../shared/data python -m pytest benchmarks/bench_evaluation.py --benchmark-enable

Uses the CIFAR-10 subset (binary vehicles/animals, 250 per class, 1,000 decoys) when ``RECONBENCH_DATA`` holds it,
else synthetic 3x32x32 images of the same sizes. Candidates: 5,000 noisy copies of training images (10 per image,
noise from 0.02 to 0.5) and 5,000 noise images, with starting points x0. The full default protocol is timed
(every metric; LPIPS reports itself unavailable here), once without and once with figures.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

from reconbench.data import Problem, ProblemSpec
from reconbench.evaluation import evaluate
from reconbench.targets.problems import build_problem

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from _helpers.evalkit import make_problem, smooth_images  # noqa: E402

N_CANDIDATES = 10_000


def _problem() -> Problem:
    root = os.environ.get("RECONBENCH_DATA")
    if root and (Path(root) / "cifar10" / "cifar10_train_subset.npz").exists():
        spec = ProblemSpec(dataset="npz:cifar10/cifar10_train_subset.npz", task="binary", n_per_class=250,
                           n_test_per_class=10)
        return build_problem(spec, root)
    train = smooth_images(500, (3, 32, 32), seed=0)
    return make_problem(train, decoys=smooth_images(1000, (3, 32, 32), seed=1))


@pytest.fixture(scope="module")
def setup():
    problem = _problem()
    g = torch.Generator().manual_seed(0)
    x = problem.x_train(torch.float64)
    n = x.shape[0]
    half = N_CANDIDATES // 2
    idx = torch.arange(half) % n
    sd = torch.linspace(0.02, 0.5, half, dtype=torch.float64)[:, None, None, None]
    copies = x[idx] + sd * torch.randn(x[idx].shape, generator=g, dtype=torch.float64)
    noise = 0.1 * torch.randn((N_CANDIDATES - half, *x.shape[1:]), generator=g, dtype=torch.float64)
    cands = torch.cat([copies, noise])
    x0 = 1e-3 * torch.randn(cands.shape, generator=g, dtype=torch.float64)
    labels = torch.div(torch.arange(N_CANDIDATES) * 2, N_CANDIDATES, rounding_mode="floor")
    return problem, cands, labels, x0


def _run(setup, out_dir=None, figures=False):
    problem, cands, labels, x0 = setup
    return evaluate(problem, cands, family="mlp", protocol={"figures": figures}, labels=labels,
                    run_ids=torch.zeros(N_CANDIDATES, dtype=torch.long), x0=x0, out_dir=out_dir, quiet=True)


def test_evaluate_10k_candidates_500_images(benchmark, setup):
    out = benchmark.pedantic(_run, args=(setup,), rounds=3, iterations=1, warmup_rounds=1)
    assert out["summary"]["n_candidates"] == N_CANDIDATES and out["summary"]["n_train"] == 500
    assert out["summary"]["reconstructed"] > 0
    assert all(m["available"] for name, m in out["metrics"].items() if name != "lpips")


def test_evaluate_10k_candidates_500_images_with_figures(benchmark, setup, tmp_path):
    out = benchmark.pedantic(_run, args=(setup, tmp_path, True), rounds=2, iterations=1)
    assert (tmp_path / "figures" / "reconstructions.png").exists()
    assert out["figures"]["reconstructions"] == "figures/reconstructions.png"
