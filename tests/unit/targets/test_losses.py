"""The regression losses of Buzaglo et al. (MSE, L2.5, Huber): values and gradients against closed forms, a target
trained with each reaches zero training error, and the general-loss attack runs on each."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from reconbench.data import ProblemSpec
from reconbench.runs import RunSpec, run_attack
from reconbench.targets.cache import get_or_train
from reconbench.targets.losses import get_loss
from reconbench.targets.problems import build_problem
from reconbench.targets.recipe import TargetRecipe, TrainSpec
from reconbench.targets.training import train

REGRESSION_LOSSES = ["mse", "l25", "huber"]


def closed_form(name: str, e: np.ndarray) -> tuple[float, np.ndarray]:
    """(mean loss, d loss / d output) for residuals e = output - target, written out by hand in numpy."""
    n = e.size
    if name == "mse":
        return float(np.mean(e**2)), 2 * e / n
    if name == "l25":
        return float(np.mean(np.abs(e) ** 2.5)), 2.5 * np.abs(e) ** 1.5 * np.sign(e) / n
    # Huber with delta = 1 (torch.nn.HuberLoss's default, which Buzaglo et al. used)
    small = np.abs(e) <= 1.0
    value = np.where(small, 0.5 * e**2, np.abs(e) - 0.5)
    grad = np.where(small, e, np.sign(e)) / n
    return float(np.mean(value)), grad


@pytest.mark.parametrize("name", REGRESSION_LOSSES)
def test_loss_value_and_gradient_match_the_closed_form(name):
    gen = torch.Generator().manual_seed(3)
    y = torch.where(torch.rand(40, generator=gen, dtype=torch.float64) < 0.5, -1.0, 1.0).double()
    out = (3 * torch.randn(40, 1, generator=gen, dtype=torch.float64)).requires_grad_(True)
    _, fn = get_loss(name, "regression")
    value = fn(out, y)
    (grad,) = torch.autograd.grad(value, out)
    e = (out.detach().reshape(-1) - y).numpy()
    assert (np.abs(e) < 1).any() and (np.abs(e) > 1).any()  # both Huber branches are exercised
    ref_value, ref_grad = closed_form(name, e)
    assert float(value.detach()) == pytest.approx(ref_value, rel=1e-12)
    np.testing.assert_allclose(grad.reshape(-1).numpy(), ref_grad, rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("name", REGRESSION_LOSSES)
def test_loss_gradient_matches_finite_differences(name):
    gen = torch.Generator().manual_seed(5)
    y = torch.ones(7, dtype=torch.float64)
    out = 2 * torch.randn(7, 1, generator=gen, dtype=torch.float64)
    _, fn = get_loss(name, "regression")
    assert torch.autograd.gradcheck(lambda o: fn(o, y), (out.requires_grad_(True),), eps=1e-6, atol=1e-7)


def test_loss_gradient_is_zero_and_finite_at_an_exact_fit():
    """|e|^2.5 has derivative 0 at e = 0; a naive pow/abs chain must not give NaN there."""
    y = torch.tensor([1.0, -1.0], dtype=torch.float64)
    for name in REGRESSION_LOSSES:
        out = y.clone()[:, None].requires_grad_(True)
        (grad,) = torch.autograd.grad(get_loss(name, "regression")[1](out, y), out)
        assert torch.equal(grad, torch.zeros_like(grad)), name


def regression_recipe(loss: str, steps: int = 300) -> TargetRecipe:
    return TargetRecipe(problem=ProblemSpec(dataset="digits", task="regression", n_per_class=5, n_test_per_class=5),
                        model={"widths": [32]},
                        train=TrainSpec(loss=loss, lr=0.05, steps=steps, weight_decay=1e-4, eval_every=1000))


@pytest.mark.parametrize("name", REGRESSION_LOSSES)
def test_training_with_each_loss_reaches_zero_training_error(name):
    recipe = regression_recipe(name)
    res = train(recipe, build_problem(recipe.problem), quiet=True, with_certificate=False)
    assert res.metrics["loss_name"] == name
    assert res.metrics["train_error"] == 0.0
    # the fit is close, not only on the right side of 0: every |Phi - y| well below 1
    assert max(res.metrics["margins"]) < 0.1
    assert res.history[0]["loss"] > 100 * res.metrics["train_loss"]


@pytest.mark.parametrize("name", REGRESSION_LOSSES)
def test_general_loss_wd_runs_on_each_loss(name, tmp_path):
    card = get_or_train(regression_recipe(name, steps=150), quiet=True)
    assert card.knowledge().loss == name
    spec = RunSpec(attack="general_loss_wd", attack_config={"steps": 20, "eval_every": 10}, search_runs=1, seed=0)
    result = run_attack(card, spec, tmp_path / "res", quiet=True)
    assert result["failed_runs"] == []
    rec = result["runs"][0]
    assert rec["steps"] > 0 and math.isfinite(rec["final_loss"])
    assert result["evaluation"]["summary"]["n_train"] == 10
