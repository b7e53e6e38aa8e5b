"""The trainer reaches zero training error; the certificate separates a converged model from random inputs."""

from __future__ import annotations

import math

import pytest
import torch

from reconbench.data import ProblemSpec
from reconbench.errors import DivergedError, ReconbenchError
from reconbench.targets.certificate import fit_stationarity
from reconbench.targets.problems import build_problem
from reconbench.targets.recipe import TargetRecipe, TrainSpec
from reconbench.targets.training import train


@pytest.mark.slow
def test_binary_digits_reaches_zero_training_error():
    recipe = TargetRecipe(problem=ProblemSpec(task="binary", n_per_class=10), model={"widths": [64, 64]},
                          train=TrainSpec(lr=0.05, steps=1500, schedule="inverse_loss"))
    res = train(recipe, build_problem(recipe.problem), quiet=True, with_certificate=False)
    assert res.metrics["train_error"] == 0.0
    assert all(m > 0 for m in res.metrics["margins"])  # y * Phi > 0 for every training image
    assert res.history[0]["loss"] > res.history[-1]["loss"]


@pytest.mark.slow
def test_certificate_small_at_truth_for_a_converged_model():
    # With weight decay the stationary point satisfies theta = sum_i lambda_i grad(...) exactly.
    recipe = TargetRecipe(problem=ProblemSpec(task="multiclass", n_per_class=3, num_classes=4),
                          model={"widths": [32]}, train=TrainSpec(lr=0.5, steps=4000, weight_decay=1e-2))
    res = train(recipe, build_problem(recipe.problem), quiet=True)
    cert = res.metrics["certificate"]
    assert cert["residual_at_train"] < 1e-2
    assert cert["residual_at_random"] > 100 * cert["residual_at_train"]


def test_certificate_matches_a_direct_least_squares_fit():
    """Independent check: build J row by row with autograd and solve with torch.linalg.lstsq."""
    torch.manual_seed(0)
    from reconbench import plugins

    net = plugins.get("models", "mlp").build((1, 4, 4), 1, {"widths": [6]}).double()
    x = torch.randn(5, 1, 4, 4, dtype=torch.float64)
    labels = torch.tensor([0, 1, 0, 1, 1])
    fit = fit_stationarity(net, x, labels, "regression")
    rows = []
    for i in range(5):
        g = torch.autograd.grad(net(x[i:i + 1]).sum(), list(net.parameters()))
        rows.append(torch.cat([t.reshape(-1) for t in g]))
    J = torch.stack(rows)
    theta = torch.cat([p.detach().reshape(-1) for p in net.parameters()])
    lam = torch.linalg.lstsq(J.T, theta[:, None]).solution
    resid = (J.T @ lam).squeeze() - theta
    expected = float(resid.pow(2).sum() / theta.pow(2).sum())
    assert math.isclose(fit.relative_residual, expected, rel_tol=1e-6, abs_tol=1e-12)
    sizes = [p.numel() for p in net.parameters()]
    names = [n for n, _ in net.named_parameters()]
    for name, r_part, t_part in zip(names, resid.split(sizes), theta.split(sizes), strict=True):
        assert math.isclose(fit.layer_residuals[name], float(r_part.pow(2).sum() / t_part.pow(2).sum()),
                            rel_tol=1e-6, abs_tol=1e-12)
        assert math.isclose(fit.layer_norm_share[name], float(t_part.pow(2).sum() / theta.pow(2).sum()), rel_tol=1e-12)


def test_learned_part_residual_sees_through_the_initial_weights():
    """An affine model's gradients do not depend on its weights: theta = theta0 + sum_i c_i y_i (x_i, 1) with c >= 0
    is exactly stationary in its learned part, while theta itself (theta0 random and large) is not."""
    from reconbench import plugins
    from reconbench.targets.certificate import certificate

    gen = torch.Generator().manual_seed(3)
    family = plugins.get("models", "affine")
    start = family.build((1, 4, 4), 1, {}, generator=gen).double()
    net = family.build((1, 4, 4), 1, {}, generator=torch.Generator().manual_seed(3)).double()
    x = torch.randn(6, 1, 4, 4, dtype=torch.float64, generator=gen)
    labels = torch.tensor([0, 1, 0, 1, 1, 0])
    y = 2.0 * labels.double() - 1.0
    c = torch.rand(6, dtype=torch.float64, generator=gen) + 0.5
    with torch.no_grad():
        net.linear.weight += 0.01 * (c * y) @ x.reshape(6, -1)
        net.linear.bias += 0.01 * (c * y).sum()
    cert = certificate(net, x, labels, "binary", init=start)
    assert cert["learned"]["residual_at_train"] < 1e-12  # the expansion v.v - 2 b.lam + lam G lam cancels to ~eps
    assert cert["learned"]["residual_at_random"] > 1e-3
    assert cert["residual_at_train"] > 0.5                     # theta0 (16 random weights) is not in the span
    # with weight decay GD keeps d * theta0 of the start (d = prod_t (1 - lr_t wd)): the learned part is theta - d theta0
    decayed = family.build((1, 4, 4), 1, {}).double()
    with torch.no_grad():  # 0.3 theta0 + the same learned part
        for p, q, q0 in zip(decayed.parameters(), net.parameters(), start.parameters(), strict=True):
            p.copy_(q - 0.7 * q0)
    assert certificate(decayed, x, labels, "binary", init=start, init_decay=0.3)["learned"]["residual_at_train"] < 1e-12
    assert certificate(decayed, x, labels, "binary", init=start)["learned"]["residual_at_train"] > 1e-3
    assert math.isclose(cert["learned"]["share_of_theta"],
                        sum(float((a - b).pow(2).sum()) for a, b in zip(net.parameters(), start.parameters(), strict=True))
                        / sum(float(p.pow(2).sum()) for p in net.parameters()), rel_tol=1e-12)


def test_nan_guard_stops_with_a_clear_message():
    recipe = TargetRecipe(problem=ProblemSpec(task="regression", n_per_class=5), model={"widths": [32]},
                          train=TrainSpec(lr=1e6, steps=200))
    with pytest.raises(DivergedError, match="lower --lr"):
        train(recipe, build_problem(recipe.problem), quiet=True, with_certificate=False)


def test_stalled_samples_counts_float32_gradient_underflow():
    # Independent prediction: BCE's gradient wrt a logit z is sigmoid(z) - y. It is exactly 0 in float32 for a
    # positive sample once float32 sigmoid(z) rounds to 1, and never 0 for a negative one (sigmoid(z) stays
    # representable); float64 resolves margins up to about 36.
    from reconbench.targets.losses import get_loss
    from reconbench.targets.training import build_model, stalled_samples

    recipe = TargetRecipe(problem=ProblemSpec(task="binary", n_per_class=10), model={"widths": [16, 16]})
    problem = build_problem(recipe.problem)
    model = build_model(recipe, problem).double()
    with torch.no_grad():
        out = model(problem.x_train(torch.float64)).reshape(-1)
        model.linear_chain()[-1].weight.mul_(30.0 / out.abs().max())  # logits spread over [-30, 30]
        out32 = model.float()(problem.x_train(torch.float32)).reshape(-1)
    labels = torch.as_tensor(problem.train_labels)
    expected = int(((labels == 1) & (torch.sigmoid(out32) == 1.0)).sum())
    assert expected > 0, "the fixture must put some positive samples past float32's resolution"
    _, bce = get_loss("bce", "binary")
    assert stalled_samples(model, problem, bce, torch.float32) == expected
    assert stalled_samples(model.double(), problem, bce, torch.float64) == 0


def plain_autograd_gd(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, loss_fn, spec: TrainSpec) -> None:
    """The papers' loop written plainly: autograd gradients, theta <- theta - lr_t (grad + wd theta)."""
    params = list(model.parameters())
    for _ in range(spec.steps):
        loss = loss_fn(model(x), y)
        value = float(loss.detach())
        mult = min(spec.schedule_cap, spec.schedule_threshold / value) \
            if spec.schedule == "inverse_loss" and 0 < value < spec.schedule_threshold else 1.0
        grads = torch.autograd.grad(loss, params)
        with torch.no_grad():
            for p, g in zip(params, grads, strict=True):
                p.sub_(spec.lr * mult * (g + spec.weight_decay * p))


@pytest.mark.parametrize("family, model, task, train_opts", [
    ("mlp", {"widths": [24, 16]}, "binary", {"schedule": "inverse_loss", "schedule_threshold": 0.6}),
    ("mlp_bias", {"widths": [24]}, "multiclass", {"weight_decay": 1e-2, "lr": 0.2}),
    ("mlp", {"widths": [24, 16], "init_scale": 0.1, "first_only": False}, "regression", {"weight_decay": 1e-3}),
    ("affine", {}, "binary", {}),
])
def test_trainer_matches_a_plain_autograd_loop(monkeypatch, family, model, task, train_opts):
    """The trainer's closed-form chain steps (first layer factorised through the inputs' Gram matrix) give the
    weights of plain autograd GD. Tolerance: 40 steps of float64 rounding (about 1e-16 relative per operation),
    amplified by the dynamics; a wrong term in any gradient moves the weights by far more than 1e-9."""
    from reconbench.targets import chain_gd
    from reconbench.targets.losses import get_loss
    from reconbench.targets.training import build_model

    steps_taken = []
    original = chain_gd.ChainGD.step
    monkeypatch.setattr(chain_gd.ChainGD, "step", lambda self, *a: steps_taken.append(1) or original(self, *a))
    spec = TrainSpec(lr=train_opts.pop("lr", 0.05), steps=40, eval_every=7, **train_opts)
    problem_spec = ProblemSpec(task=task, n_per_class=4, num_classes=3 if task == "multiclass" else None)
    recipe = TargetRecipe(problem=problem_spec, family=family, model=model, train=spec)
    problem = build_problem(problem_spec)
    trained = train(recipe, problem, quiet=True, with_certificate=False).model
    assert len(steps_taken) == spec.steps, "the closed-form path must run for this model family"

    reference = build_model(recipe, problem).double()
    plain_autograd_gd(reference, problem.x_train(torch.float64), problem.targets(problem.train_labels, torch.float64),
                      get_loss(None, task)[1], spec)
    for (name, a), b in zip(trained.named_parameters(), reference.parameters(), strict=True):
        assert not torch.equal(b, build_model(recipe, problem).double().get_parameter(name)), "weights must move"
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9 * float(b.abs().max()))


def test_float32_recipes_keep_the_autograd_loop_unless_they_ask(monkeypatch):
    """Float32 targets train by the autograd loop unless their recipe names float32_trainer = "closed_form" (targets
    trained before the option keep their weights); the option enters a float32 recipe's key only when set, and never
    a float64 one's (both trainers are the closed-form loop there)."""
    from reconbench.targets import chain_gd

    steps_taken = []
    original = chain_gd.ChainGD.step
    monkeypatch.setattr(chain_gd.ChainGD, "step", lambda self, *a: steps_taken.append(1) or original(self, *a))
    spec = ProblemSpec(task="binary", n_per_class=4)
    for dtype, trainer, expected in (("float32", "autograd", 0), ("float32", "closed_form", 10),
                                     ("float64", "autograd", 10)):
        steps_taken.clear()
        recipe = TargetRecipe(problem=spec, model={"widths": [16]},
                              train=TrainSpec(steps=10, dtype=dtype, float32_trainer=trainer))
        train(recipe, build_problem(spec), quiet=True, with_certificate=False)
        assert len(steps_taken) == expected, (dtype, trainer)
    for dtype in ("float32", "float64"):
        plain = TargetRecipe(problem=spec, train=TrainSpec(dtype=dtype))
        closed = TargetRecipe(problem=spec, train=TrainSpec(dtype=dtype, float32_trainer="closed_form"))
        assert "float32_trainer" not in plain.to_dict()["train"]
        assert (plain.key() == closed.key()) == (dtype == "float64")
        assert TargetRecipe.from_dict(closed.to_dict()).key() == closed.key()


@pytest.mark.parametrize("family, model, task, train_opts", [
    ("mlp", {"widths": [24, 16]}, "binary", {"schedule": "inverse_loss", "schedule_threshold": 0.6}),
    ("mlp_bias", {"widths": [24]}, "multiclass", {"weight_decay": 1e-2, "lr": 0.2}),
    ("mlp", {"widths": [24, 16], "init_scale": 0.1, "first_only": False}, "regression", {"weight_decay": 1e-3}),
    ("affine", {}, "binary", {}),
])
def test_float32_closed_form_trainer_matches_autograd_to_float32_rounding(monkeypatch, family, model, task,
                                                                          train_opts):
    """The closed-form loop in float32 and the plain autograd loop in float32 each end within float32 rounding of
    the plain loop in float64. Bound: 40 steps, each rounding every weight's update once at float32's epsilon
    (1.2e-7) relative to the largest weight, added up without amplification: 40 x 1.2e-7 = 4.8e-6 of the largest
    weight (observed: under 1e-6 for both loops). A wrong term in a gradient moves the weights by far more (checked:
    they moved by more than 100 times the bound)."""
    from reconbench.targets import chain_gd
    from reconbench.targets.losses import get_loss
    from reconbench.targets.training import build_model

    steps_taken = []
    original = chain_gd.ChainGD.step
    monkeypatch.setattr(chain_gd.ChainGD, "step", lambda self, *a: steps_taken.append(1) or original(self, *a))
    spec = TrainSpec(lr=train_opts.pop("lr", 0.05), steps=40, eval_every=7, dtype="float32",
                     float32_trainer="closed_form", **train_opts)
    problem_spec = ProblemSpec(task=task, n_per_class=4, num_classes=3 if task == "multiclass" else None)
    recipe = TargetRecipe(problem=problem_spec, family=family, model=model, train=spec)
    problem = build_problem(problem_spec)
    trained = train(recipe, problem, quiet=True, with_certificate=False).model
    assert len(steps_taken) == spec.steps, "the closed-form path must run in float32 when the recipe asks for it"

    loss = get_loss(None, task)[1]
    loops = {}
    for dtype in (torch.float32, torch.float64):
        net = build_model(recipe, problem).to(dtype)
        plain_autograd_gd(net, problem.x_train(dtype), problem.targets(problem.train_labels, dtype), loss, spec)
        loops[dtype] = net
    bound = spec.steps * torch.finfo(torch.float32).eps
    start = build_model(recipe, problem).double()
    for (name, a), b32, b64 in zip(trained.named_parameters(), loops[torch.float32].parameters(),
                                   loops[torch.float64].parameters(), strict=True):
        assert a.dtype == torch.float32
        scale = float(b64.abs().max())
        assert float((b64 - start.get_parameter(name)).abs().max()) > 100 * bound * scale, "weights must move"
        for got in (a, b32):
            assert float((got.double() - b64).abs().max()) <= bound * scale, name


def test_published_recipes_keep_their_keys():
    """The options added to TrainSpec stay out of a recipe's dict at their defaults, so the recipes of published
    cells still hash to the keys recorded in them (and cached targets stay valid)."""
    from pathlib import Path

    from reconbench.bench.runner import read_cell
    from reconbench.targets.cards import recorded_recipe

    cells = sorted((Path(__file__).parents[3] / "leaderboards" / "cpu-mini" / "cells").glob("*.json"))[:5]
    assert cells, "the published cpu-mini cells are the independent record of recipe keys"
    for path in cells:
        rec = read_cell(path)   # a slim entry reads its recipe from the board's model card
        assert rec is not None
        target = rec["target"]
        assert recorded_recipe(target["recipe"]).key() == target["recipe_key"]


def test_training_stops_once_the_gate_passes():
    spec = ProblemSpec(task="binary", n_per_class=4)
    base = {"lr": 0.05, "steps": 600, "certify_every": 100, "schedule": "inverse_loss"}
    with pytest.raises(ReconbenchError, match="set certify_every"):
        TargetRecipe(problem=spec, model={"widths": [16]}, train=TrainSpec(steps=10, stop_at_gate=0.5)).validate()
    never = TargetRecipe(problem=spec, model={"widths": [16]}, train=TrainSpec(**base, stop_at_gate=1e-300))
    res = train(never, build_problem(spec), quiet=True, with_certificate=False)
    checks = [h for h in res.history if "certificate" in h]
    assert [h["step"] for h in checks] == [100, 200, 300, 400, 500]  # every 100 steps, none after the last step
    assert res.metrics["stopped_by"] == "steps" and res.metrics["steps_run"] == 600
    # a threshold the first check already meets (its own value) stops training there
    first = checks[0]["gate_value"]
    gated = TargetRecipe(problem=spec, model={"widths": [16]}, train=TrainSpec(**base, stop_at_gate=first))
    res = train(gated, build_problem(spec), quiet=True, with_certificate=False)
    assert res.metrics["stopped_by"] == "gate" and res.metrics["steps_run"] == 100
    assert "stop_at_gate" in gated.to_dict()["train"]
    assert "stop_at_gate" not in TargetRecipe().to_dict()["train"]


@pytest.mark.parametrize("name,task", [("bce", "binary"), ("ce", "multiclass"), ("mse", "regression")])
def test_closed_form_output_gradients_equal_autograd(name: str, task: str) -> None:
    """The trainer's one-line loss derivatives agree with autograd on the loss itself, to float64 rounding."""
    from reconbench.targets.losses import OUTPUT_GRADIENTS, get_loss

    _, fn = get_loss(name, task)
    gen = torch.Generator().manual_seed(3)
    n, k = 7, (4 if task == "multiclass" else 1)
    z = (torch.randn(n, k, generator=gen, dtype=torch.float64) * 5).requires_grad_(True)
    if task == "multiclass":
        y = torch.randint(0, k, (n,), generator=gen)
    elif task == "binary":
        y = torch.randint(0, 2, (n,), generator=gen).double()
    else:
        y = torch.randint(0, 2, (n,), generator=gen).double() * 2 - 1
    (expected,) = torch.autograd.grad(fn(z, y), z)
    got = OUTPUT_GRADIENTS[fn](z.detach(), y)
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected, rtol=1e-13, atol=1e-16)
    assert not torch.equal(got, torch.zeros_like(got))


def test_a_training_time_defense_decay_is_what_the_learned_part_removes():
    """Coupled weight decay keeps prod_t (1 - lr wd) of the initial weights (constant lr: (1 - lr wd)^steps); the
    weight_decay defense adds its own wd to the recipe's, so the certificate's d must count both."""
    lr, wd_recipe, wd_defense, steps = 0.05, 1e-3, 4e-2, 30
    recipe = TargetRecipe(problem=ProblemSpec(task="binary", n_per_class=4), model={"widths": [8]},
                          train=TrainSpec(lr=lr, steps=steps, weight_decay=wd_recipe, dtype="float64"),
                          defense="weight_decay", defense_config={"weight_decay": wd_defense})
    result = train(recipe, build_problem(recipe.problem), quiet=True)
    assert result.metrics["steps_run"] == steps
    expected = (1.0 - lr * (wd_recipe + wd_defense)) ** steps
    assert math.isclose(result.metrics["certificate"]["learned"]["init_decay"], expected, rel_tol=1e-12)
    assert not math.isclose(expected, (1.0 - lr * wd_recipe) ** steps, rel_tol=1e-3)   # the defense's decay matters
