"""The loss forms that do not underflow (reconbench/targets/losses.py, recipe option ``loss_form``): positive loss and
nonzero gradient where torch's forms give exactly 0, equal values elsewhere, closed-form gradients equal to autograd,
and recipes written before the option keep their keys (so published targets retrain as before)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from reconbench.errors import ReconbenchError
from reconbench.targets.losses import OUTPUT_GRADIENTS, get_loss
from reconbench.targets.recipe import TargetRecipe, TrainSpec

ROOT = Path(__file__).resolve().parents[3]


def _exact_ce(out: np.ndarray, y: np.ndarray) -> float:
    """Mean of log(1 + sum_{j != y} exp(z_j - z_y)) in Python floats (math.log1p, math.exp): an independent form."""
    total = 0.0
    for row, lab in zip(out.tolist(), y.tolist(), strict=True):
        total += math.log1p(sum(math.exp(z - row[lab]) for j, z in enumerate(row) if j != lab))
    return total / len(y)


def _exact_bce(out: np.ndarray, y: np.ndarray) -> float:
    return sum(math.log1p(math.exp(-(2 * t - 1) * z)) for z, t in zip(out.tolist(), y.tolist(), strict=True)) / len(y)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_multiclass_loss_stays_positive_where_the_old_form_is_exactly_zero(dtype):
    margin = 20.0 if dtype == torch.float32 else 45.0  # past where 1 + e^-margin rounds to 1 in that precision
    out = torch.tensor([[margin, 0.0, -3.0], [1.0, margin + 5.0, 2.0]], dtype=dtype)
    y = torch.tensor([0, 1])
    _, old = get_loss("ce", "multiclass")
    _, new = get_loss("ce", "multiclass", "stable")
    o_old = out.clone().requires_grad_(True)
    (g_old,) = torch.autograd.grad(old(o_old, y), o_old)
    o_new = out.clone().requires_grad_(True)
    loss = new(o_new, y)
    (g_new,) = torch.autograd.grad(loss, o_new)
    own = (torch.arange(2), y)
    assert float(old(out, y)) == 0.0 and float(g_old[own].abs().max()) == 0.0  # the failure being fixed: the own
    # class's logit gets no gradient (softmax_y - 1 rounds to 0), only the wrong classes a vanishing push down
    assert float(loss.detach()) > 0
    assert float(loss.detach()) == pytest.approx(_exact_ce(out.double().numpy(), y.numpy()), rel=1e-12)
    assert bool((g_new[own] < 0).all()) and g_new.dtype == dtype  # the own class is pushed up again


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_binary_loss_stays_positive_where_the_old_form_is_exactly_zero(dtype):
    margin = 20.0 if dtype == torch.float32 else 40.0
    out = torch.tensor([[margin], [margin + 3.0]], dtype=dtype)  # positives: sigmoid(z) - 1 rounds to 0
    y = torch.tensor([1.0, 1.0], dtype=dtype)
    _, old = get_loss("bce", "binary")
    _, new = get_loss("bce", "binary", "stable")
    o = out.clone().requires_grad_(True)
    (g_old,) = torch.autograd.grad(old(o, y), o)
    o = out.clone().requires_grad_(True)
    loss = new(o, y)
    (g_new,) = torch.autograd.grad(loss, o)
    assert float(g_old.abs().max()) == 0.0
    assert float(loss.detach()) == pytest.approx(_exact_bce(out.double().reshape(-1).numpy(), y.double().numpy()), rel=1e-12)
    assert bool((g_new != 0).all())


@pytest.mark.parametrize(("name", "task"), [("ce", "multiclass"), ("bce", "binary")])
def test_the_stable_form_equals_the_old_one_where_that_one_does_not_underflow(name, task):
    gen = torch.Generator().manual_seed(0)
    out = torch.randn(16, 4 if task == "multiclass" else 1, generator=gen, dtype=torch.float64) * 3
    y = torch.randint(0, 4, (16,), generator=gen) if task == "multiclass" else (torch.rand(16, generator=gen) < .5).double()
    _, old = get_loss(name, task)
    _, new = get_loss(name, task, "stable")
    assert float(new(out, y)) == pytest.approx(float(old(out, y)), rel=1e-13)
    a = out.clone().requires_grad_(True)
    b = out.clone().requires_grad_(True)
    (ga,) = torch.autograd.grad(old(a, y), a)
    (gb,) = torch.autograd.grad(new(b, y), b)
    np.testing.assert_allclose(gb.numpy(), ga.numpy(), rtol=1e-10, atol=1e-16)


@pytest.mark.parametrize(("name", "task"), [("ce", "multiclass"), ("bce", "binary")])
@pytest.mark.parametrize("scale", [1.0, 30.0])
def test_the_closed_form_gradient_is_the_autograd_one(name, task, scale):
    """The trainer's closed-form loop uses OUTPUT_GRADIENTS; it must be the derivative of the loss it reports."""
    gen = torch.Generator().manual_seed(1)
    out = torch.randn(9, 3 if task == "multiclass" else 1, generator=gen, dtype=torch.float64) * scale
    y = torch.randint(0, 3, (9,), generator=gen) if task == "multiclass" else (torch.rand(9, generator=gen) < .5).double()
    _, fn = get_loss(name, task, "stable")
    o = out.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(fn(o, y), o)
    np.testing.assert_allclose(OUTPUT_GRADIENTS[fn](out, y).numpy(), g.numpy(), rtol=1e-12, atol=1e-300)


def test_recipes_that_do_not_name_the_form_are_legacy_and_keep_their_keys():
    """Every published card's recipe reads back as legacy with the key it was stored under; a new recipe built in
    code is stable, and naming the form changes the key only when it is not legacy."""
    cards = sorted((ROOT / "leaderboards").glob("*/targets/*.json"))[:40]
    assert cards
    for path in cards:
        card = json.loads(path.read_text())
        recipe = TargetRecipe.from_dict(card["recipe"])
        assert recipe.train.loss_form == "legacy"
        assert recipe.key() == card["recipe_key"], path.name
    assert TrainSpec().loss_form == "stable"
    base = TargetRecipe.from_dict({})
    named = TargetRecipe.from_dict({"train": {"loss_form": "legacy"}})
    stable = TargetRecipe.from_dict({"train": {"loss_form": "stable"}})
    assert base.key() == named.key() != stable.key()
    assert TargetRecipe.from_dict(stable.to_dict()).train.loss_form == "stable"
    with pytest.raises(ReconbenchError, match="loss_form"):
        TargetRecipe.from_dict({"train": {"loss_form": "exact"}})


def test_the_command_line_names_the_loss_form() -> None:
    """--loss-form stable reaches the recipe (a recipe of its own: another key); legacy is the recipe as before."""
    from reconbench.cli.recipe_options import recipe_from_options

    plain = recipe_from_options({"dataset": "digits", "task": "binary"})
    stable = recipe_from_options({"dataset": "digits", "task": "binary", "loss_form": "stable"})
    legacy = recipe_from_options({"dataset": "digits", "task": "binary", "loss_form": "legacy"})
    assert stable.train.loss_form == "stable" and stable.key() != plain.key()
    assert legacy.key() == plain.key() and plain.train.loss_form == "legacy"
