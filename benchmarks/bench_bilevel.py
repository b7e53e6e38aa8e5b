"""Time of one outer iteration of runkel_bilevel on the one-hidden-layer cpu-mini target.

    RECONBENCH_DATA=../shared/data OMP_NUM_THREADS=1 \
        python -m pytest benchmarks/bench_bilevel.py --benchmark-enable --benchmark-json=bench_bilevel.json

The target is the ``cifar-mlp1-wd`` recipe of the bilevel-cpu-mini suite (reconbench/bench/suites/bilevel-cpu-mini.toml:
CIFAR-10 vehicles vs animals, 10 images per class, mlp_bias 3072-256-1, weight decay 1e-2; trained on first use and
cached), with the options of its ``runkel-mlp1-short`` attack. One outer iteration is what
the attack does per step: the adjoint p = (H + delta I)^{-1} 2 (theta - theta*) by CG on Hessian-vector products,
the hypergradient, a step of x, and the inner solve at the new x. ``warm`` starts that solve from the previous
solution (the suite's setting for this target); ``cold`` from theta0 ~ U(0, 1), as the paper does, and is timed
once because it takes minutes here. The adjoint/hypergradient part is also timed on its own.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from reconbench_plugins.bilevel import BilevelConfig, draw_theta0

from reconbench.attack.bilevel import LowerProblem, hypergradient, softplus_surrogate, solve_lower
from reconbench.bench.suite import load_suite
from reconbench.config import build_config
from reconbench.targets.losses import get_loss

SUITE = load_suite("bilevel-cpu-mini")
RECIPE = SUITE.targets["cifar-mlp1-wd"].recipe
CFG = build_config(BilevelConfig, dict(SUITE.attacks["runkel-mlp1-short"].config), "bench_bilevel")
DATA = os.environ.get("RECONBENCH_DATA") or str(Path(__file__).resolve().parents[2] / "shared" / "data")
ETA = 1.0  # one trial step of the line search (its first trial at the start of a run)


@pytest.fixture(scope="module")
def state():
    data = Path(DATA) / "cifar10" / "cifar10_train_subset.npz"
    if not data.exists():
        pytest.skip(f"needs the CIFAR-10 subset at {data} (set RECONBENCH_DATA)")
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    from reconbench.targets.cache import get_or_train

    card = get_or_train(RECIPE, data_root=DATA, quiet=True)
    problem = card.problem(DATA)
    model = card.load_model(torch.float64)
    labels = torch.as_tensor(problem.train_labels).sort().values
    lower = LowerProblem(model, get_loss("bce", "binary")[1], labels.double(), weight_decay=RECIPE.train.weight_decay,
                         activation=softplus_surrogate(CFG.softplus_beta))
    theta_star = lower.layout.flatten(model)
    from reconbench_plugins.inits import partition_images

    x = partition_images(problem, labels)               # any natural images will do for timing
    sol = solve_lower(lower, x, theta_star, **inner_kwargs())   # setup: theta(x), started at theta*
    return {"lower": lower, "x": x, "sol": sol, "theta_star": theta_star}


def inner_kwargs() -> dict:
    return {"method": CFG.inner_method, "max_iter": CFG.inner_max_iter, "tol": CFG.inner_tol, "lr": CFG.inner_lr,
            "history": CFG.inner_history, "newton_steps": CFG.inner_newton_steps, "damping": CFG.damping,
            "cg_rtol": CFG.cg_rtol, "cg_max_iter": CFG.cg_max_iter}


def adjoint_and_hypergradient(st):
    return hypergradient(st["lower"], st["x"], st["sol"].theta, st["theta_star"], damping=CFG.damping,
                         cg_rtol=CFG.cg_rtol, cg_max_iter=CFG.cg_max_iter)


def outer_iteration(st, start: torch.Tensor):
    hg = adjoint_and_hypergradient(st)
    x_new = st["x"] - ETA * hg.grad_x
    return solve_lower(st["lower"], x_new, start, **inner_kwargs())


def test_adjoint_and_hypergradient(benchmark, state):
    hg = benchmark.pedantic(adjoint_and_hypergradient, args=(state,), rounds=3, iterations=1)
    benchmark.extra_info.update({"cg_iters": hg.adjoint.iterations, "cg_rel_residual": hg.adjoint.rel_residual,
                                 "params": state["lower"].layout.numel})


def test_outer_iteration_warm(benchmark, state):
    sol = benchmark.pedantic(outer_iteration, args=(state, state["sol"].theta), rounds=3, iterations=1)
    benchmark.extra_info.update({"inner_iters": sol.iterations, "inner_grad_inf": sol.grad_inf})


def test_outer_iteration_cold(benchmark, state):
    theta0 = draw_theta0(state["lower"].layout, CFG, torch.Generator().manual_seed(0), torch.float64)
    sol = benchmark.pedantic(outer_iteration, args=(state, theta0), rounds=1, iterations=1)
    benchmark.extra_info.update({"inner_iters": sol.iterations, "inner_grad_inf": sol.grad_inf})
