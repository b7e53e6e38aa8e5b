"""runkel_bilevel: the implicit hypergradient against finite differences and a dense implicit-function formula,
the conjugate-gradient adjoint against a direct solve, and the ground-truth fixed point on a trained affine model."""

from __future__ import annotations

import math

import pytest
import torch
from reconbench_plugins.bilevel import BilevelConfig, draw_theta0

from reconbench import plugins
from reconbench.attack.bilevel import (
    LowerProblem,
    ParamLayout,
    conjugate_gradient,
    hypergradient,
    softplus_surrogate,
    solve_lower,
    upper_loss,
)
from reconbench.data import ProblemSpec
from reconbench.errors import IncompatibleError
from reconbench.interfaces import Attack, AttackTarget, Knowledge
from reconbench.runs import RunSpec, run_attack
from reconbench.targets.cache import get_or_train
from reconbench.targets.losses import get_loss
from reconbench.targets.recipe import TargetRecipe, TrainSpec

F64 = torch.float64
TIGHT = {"tol": 1e-14, "max_iter": 500, "newton_steps": 10, "cg_rtol": 1e-12, "cg_max_iter": 500}


pytestmark = pytest.mark.usefixtures("one_torch_thread")   # tiny problems: one torch thread


def tiny_problem(family: str, loss: str = "bce", seed: int = 0):
    """Three 1x2x2 images, a tiny model, weight decay 0.1 (so theta(x) is a strict local minimiser)."""
    gen = torch.Generator().manual_seed(seed)
    spec = {"widths": [5]} if family == "mlp_bias" else {}
    net = plugins.get("models", family).build((1, 2, 2), 1, spec, generator=gen).to(F64)
    x = torch.randn(3, 1, 2, 2, generator=gen, dtype=F64)
    y = torch.tensor([0.0, 1.0, 1.0], dtype=F64) if loss == "bce" else torch.tensor([-1.0, 1.0, 1.0], dtype=F64)
    act = softplus_surrogate(3.0) if family == "mlp_bias" else None
    lower = LowerProblem(net, get_loss(loss, "binary" if loss == "bce" else "regression")[1], y,
                         weight_decay=0.1, activation=act)
    theta_star = torch.randn(lower.layout.numel, generator=gen, dtype=F64)
    theta_start = torch.randn(lower.layout.numel, generator=gen, dtype=F64)  # random: no symmetric saddle
    return lower, x, theta_star, theta_start


def central_differences(lower, x, theta_star, theta_at_x, h=1e-4):
    """d/dx ||theta* - theta(x)||^2, every coordinate, each theta(x +- h e_i) re-solved from theta(x)."""
    fd = torch.zeros_like(x)
    for i in range(x.numel()):
        e = torch.zeros(x.numel(), dtype=F64)
        e[i] = h
        e = e.view_as(x)
        up = upper_loss(solve_lower(lower, x + e, theta_at_x, **TIGHT).theta, theta_star)
        down = upper_loss(solve_lower(lower, x - e, theta_at_x, **TIGHT).theta, theta_star)
        fd.view(-1)[i] = (up - down) / (2 * h)
    return fd


@pytest.mark.slow
@pytest.mark.parametrize(("family", "loss"), [("affine", "bce"), ("affine", "mse"), ("mlp_bias", "bce")])
def test_hypergradient_matches_central_finite_differences(family, loss):
    lower, x, theta_star, start = tiny_problem(family, loss)
    sol = solve_lower(lower, x, start, **TIGHT)
    assert sol.grad_inf < 1e-12
    hg = hypergradient(lower, x, sol.theta, theta_star, damping=0.0, cg_rtol=1e-13, cg_max_iter=500)
    assert not hg.adjoint.negative_curvature
    fd = central_differences(lower, x, theta_star, sol.theta)
    rel = float((hg.grad_x - fd).norm() / fd.norm())
    assert rel < 1e-4, rel
    # and the sign: a small step along minus the hypergradient lowers the upper loss
    before = upper_loss(sol.theta, theta_star)
    after = upper_loss(solve_lower(lower, x - 1e-3 * hg.grad_x / hg.grad_x.norm(), sol.theta, **TIGHT).theta,
                       theta_star)
    assert after < before


def test_hypergradient_matches_the_dense_implicit_function_formula():
    """dtheta/dx = -H^{-1} d(grad_theta E)/dx with H and the mixed Jacobian built densely by torch.func."""
    lower, x, theta_star, start = tiny_problem("mlp_bias", seed=3)
    theta = solve_lower(lower, x, start, **TIGHT).theta
    H = torch.func.hessian(lower.energy, argnums=0)(theta, x)
    mixed = torch.func.jacrev(lower.grad_theta, argnums=1)(theta, x).reshape(len(theta), -1)
    dtheta_dx = -torch.linalg.solve(H, mixed)
    expected = (dtheta_dx.T @ (2 * (theta - theta_star))).view_as(x)
    got = hypergradient(lower, x, theta, theta_star, cg_rtol=1e-14, cg_max_iter=500).grad_x
    torch.testing.assert_close(got, expected, rtol=1e-8, atol=1e-10)


def test_conjugate_gradient_against_a_direct_solve_and_negative_curvature():
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(12, 12, generator=gen, dtype=F64)
    spd = a @ a.T + 0.1 * torch.eye(12, dtype=F64)
    b = torch.randn(12, generator=gen, dtype=F64)
    res = conjugate_gradient(lambda v: spd @ v, b, damping=0.5, rtol=1e-12, max_iter=100)
    torch.testing.assert_close(res.solution, torch.linalg.solve(spd + 0.5 * torch.eye(12, dtype=F64), b))
    assert res.rel_residual <= 1e-12 and not res.negative_curvature
    indefinite = torch.diag(torch.tensor([1.0, -2.0, 3.0], dtype=F64))
    res = conjugate_gradient(lambda v: indefinite @ v, torch.tensor([0.0, 1.0, 0.0], dtype=F64))
    assert res.negative_curvature and res.iterations == 1


def test_inner_solve_reaches_the_stationary_point_of_a_strongly_convex_problem():
    lower, x, _, start = tiny_problem("affine")
    for method, kw in (("lbfgs", {}), ("gd", {"lr": 0.5, "max_iter": 20000, "tol": 1e-10})):
        sol = solve_lower(lower, x, start, method=method, **{**TIGHT, "newton_steps": 0, **kw})
        assert sol.grad_inf <= 1e-8, method
    a = solve_lower(lower, x, start, **TIGHT).theta
    b = solve_lower(lower, x, torch.zeros_like(start), **TIGHT).theta  # unique minimiser: start does not matter
    torch.testing.assert_close(a, b, rtol=0, atol=1e-10)


@pytest.fixture(scope="module")
def affine_card(tmp_path_factory):
    """An affine binary target on digits trained by the reconbench trainer with weight decay (strongly convex)."""
    recipe = TargetRecipe(problem=ProblemSpec(task="binary", n_per_class=5, n_test_per_class=5), family="affine",
                          train=TrainSpec(lr=2.0, steps=1500, weight_decay=0.05, eval_every=1500))
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return get_or_train(recipe, tmp_path_factory.mktemp("cache"), quiet=True)
    finally:
        torch.set_num_threads(before)


def test_ground_truth_start_stays_at_the_ground_truth_on_an_affine_model(affine_card, tmp_path):
    problem = affine_card.problem()
    spec = RunSpec(attack="runkel_bilevel", init="ground_truth", candidates=problem.n,
                   attack_config={"outer_steps": 10, "outer_lr": 0.5, "theta0": "uniform", "inner_tol": 1e-12,
                                  "keep_best": False})
    result = run_attack(affine_card, spec, tmp_path, problem=problem, quiet=True)
    from safetensors.torch import load_file

    out = load_file(str(tmp_path / "runs" / "run-000.safetensors"))
    x_gt = problem.x_train(F64)
    assert result["init_is_oracle"] is True
    upper = [r["final_loss"] for r in result["runs"]][0]
    assert upper < 1e-12  # theta(x_gt) is theta*: the training problem is strongly convex
    # every candidate stays on its training image (ground-truth init matches labels and order by class)
    dist = (out["candidates"] - out["x0"]).flatten(1).norm(dim=1) / x_gt.flatten(1).norm(dim=1).mean()
    assert float(dist.max()) < 1e-4
    d_train = torch.cdist(out["candidates"].flatten(1), x_gt.flatten(1))
    assert sorted(d_train.argmin(dim=1).tolist()) == list(range(problem.n))


def test_upper_loss_decreases_from_a_uniform_start(affine_card):
    attack = plugins.get("attacks", "runkel_bilevel")
    problem = affine_card.problem()
    target = AttackTarget(model=affine_card.load_model(F64), family="affine", homogeneity_degree=1,
                          knowledge=affine_card.knowledge())
    labels = torch.as_tensor(problem.train_labels).sort().values
    x0 = plugins.get("inits", "uniform").make(problem, labels, plugins.get("inits", "uniform").config_cls(),
                                              generator=torch.Generator().manual_seed(0), dtype=F64)
    for opt, lr, search in (("sgd", 0.5, True), ("sgd", 0.5, False), ("adam", 0.01, False)):
        cfg = BilevelConfig(outer_steps=15, outer_lr=lr, outer_optimizer=opt, line_search=search)
        out = attack.run(target, x0, labels, cfg, generator=torch.Generator().manual_seed(0))
        ups = [r["upper_loss"] for r in out.trace]
        assert len(ups) == 16 and out.stopped == "completed"
        assert ups[-1] < 0.5 * ups[0], (opt, ups)
        assert math.isclose(out.final_loss, min(ups))
        assert "cold start" in out.message and "theta0=uniform" in out.message


def _affine_decoy_start(card):
    """runkel_bilevel, the affine target, its sorted labels, and decoy images as starting candidates."""
    problem = card.problem()
    target = AttackTarget(model=card.load_model(F64), family="affine", homogeneity_degree=1,
                          knowledge=card.knowledge())
    labels = torch.as_tensor(problem.train_labels).sort().values
    return plugins.get("attacks", "runkel_bilevel"), target, labels, problem.x_decoy(F64)[: len(labels)]


def test_warm_start_reuses_the_previous_solution(affine_card):
    attack, target, labels, x0 = _affine_decoy_start(affine_card)
    cold = attack.run(target, x0, labels, BilevelConfig(outer_steps=4, outer_lr=1e-3),
                      generator=torch.Generator().manual_seed(0))
    warm = attack.run(target, x0, labels, BilevelConfig(outer_steps=4, outer_lr=1e-3, warm_start=True),
                      generator=torch.Generator().manual_seed(0))
    assert sum(r["inner_iters"] for r in warm.trace[1:]) < sum(r["inner_iters"] for r in cold.trace[1:])
    assert "warm start" in warm.message
    for a, b in zip(cold.trace, warm.trace, strict=True):  # strongly convex: the same theta(x) either way
        assert math.isclose(a["upper_loss"], b["upper_loss"], rel_tol=1e-6)


def test_time_budget_stops_the_run_and_keeps_the_best_iterate(affine_card):
    attack, target, labels, x0 = _affine_decoy_start(affine_card)
    out = attack.run(target, x0, labels, BilevelConfig(outer_steps=50, outer_lr=1e-3, max_seconds=1e-9),
                     generator=torch.Generator().manual_seed(0))
    # the budget is checked after each outer step: a budget already spent stops before the first x update
    assert out.stopped == "early_stop" and len(out.trace) == 1 and "max_seconds" in out.message
    assert torch.equal(out.candidates, x0) and math.isclose(out.final_loss, out.trace[0]["upper_loss"])


def test_inner_iteration_budget_stops_where_the_work_runs_out_on_any_machine(affine_card):
    attack, target, labels, x0 = _affine_decoy_start(affine_card)
    free = attack.run(target, x0, labels, BilevelConfig(outer_steps=4, outer_lr=1e-3),
                      generator=torch.Generator().manual_seed(0))
    budget = int(free.trace[2]["inner_iters_total"])   # the work the unbudgeted run had done at outer step 2
    capped = attack.run(target, x0, labels, BilevelConfig(outer_steps=4, outer_lr=1e-3, max_inner_iters=budget),
                        generator=torch.Generator().manual_seed(0))
    assert capped.stopped == "early_stop" and capped.steps == 2 and len(capped.trace) == 3
    assert f"max_inner_iters={budget}" in capped.message
    for a, b in zip(free.trace[:3], capped.trace, strict=True):   # the same run until the budget ran out
        assert a["upper_loss"] == b["upper_loss"] and a["inner_iters_total"] == b["inner_iters_total"]


def _target(family: str, spec: dict) -> AttackTarget:
    net = plugins.get("models", family).build((1, 8, 8), 1, spec)
    return AttackTarget(model=net, family=family, homogeneity_degree=None,
                        knowledge=Knowledge(task="binary", num_classes=2, out_dim=1, input_shape=(1, 8, 8),
                                            class_counts=[2, 2], loss="bce", weight_decay=0.0))


def test_check_names_the_mismatch_and_the_alternative():
    attack = plugins.get("attacks", "runkel_bilevel")
    assert isinstance(attack, Attack)
    assert attack.needs == {"labels", "loss", "weight_decay"}
    attack.check(_target("affine", {}))
    attack.check(_target("mlp_bias", {"widths": [7]}))
    with pytest.raises(IncompatibleError, match="haim_binary_kkt"):
        attack.check(_target("mlp", {"widths": [7, 7]}))
    with pytest.raises(IncompatibleError, match="exactly one hidden layer; this target has 2"):
        attack.check(_target("mlp_bias", {"widths": [7, 7]}))


def test_theta0_draws():
    net = plugins.get("models", "mlp_bias").build((1, 4, 4), 1, {"widths": [9]})
    layout = ParamLayout.of(net)
    gen = torch.Generator().manual_seed(0)
    uni = draw_theta0(layout, BilevelConfig(), gen, F64)
    assert uni.shape == (layout.numel,) and float(uni.min()) >= 0.0 and float(uni.max()) <= 1.0
    assert abs(float(uni.mean()) - 0.5) < 0.05
    star = torch.randn(layout.numel, dtype=F64)
    assert torch.equal(draw_theta0(layout, BilevelConfig(theta0="released"), gen, F64, star), star)
    default = layout.unflatten(draw_theta0(layout, BilevelConfig(theta0="default"), gen, F64))
    bounds = {"layers.0.weight": 1 / 4, "layers.0.bias": 1 / 4, "layers.1.weight": 1 / 3, "layers.1.bias": 1 / 3}
    for name, bound in bounds.items():
        assert float(default[name].abs().max()) <= bound
        assert float(default[name].abs().max()) > 0.5 * bound
