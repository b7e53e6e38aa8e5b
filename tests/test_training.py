"""The trainer reaches zero training error; the certificate separates a converged model from random inputs."""

from __future__ import annotations

import math

import pytest
import torch

from reconbench.errors import DivergedError
from reconbench.targets.certificate import fit_stationarity
from reconbench.targets.problems import ProblemSpec, build_problem
from reconbench.targets.training import TargetRecipe, TrainSpec, train


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
    expected = float(((J.T @ lam).squeeze() - theta).pow(2).sum() / theta.pow(2).sum())
    assert math.isclose(fit.relative_residual, expected, rel_tol=1e-6, abs_tol=1e-12)


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
