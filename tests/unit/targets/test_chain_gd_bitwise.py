"""The closed-form chain step against its earlier formulation: the same weights to the last bit (cached targets are
keyed by their recipe, so a recipe must keep training to the same weights), and the output gradients for fixed
targets against the per-call ones."""

from __future__ import annotations

import pytest
import torch
from _helpers.chain_step_before_threshold import StepBeforeThreshold

from reconbench import plugins
from reconbench.targets.chain_gd import ChainGD, chain_layers
from reconbench.targets.losses import OUTPUT_GRADIENTS, fixed_target_gradient, get_loss


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.detach().reshape(-1).view(torch.int64 if t.dtype == torch.float64 else torch.int32)


def _problem(task: str, n: int, k: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, int]:
    gen = torch.Generator().manual_seed(3)
    x = torch.rand(n, 1, 8, 8, generator=gen, dtype=torch.float64).to(dtype)
    labels = torch.arange(n) % (k if task == "multiclass" else 2)
    y = labels if task == "multiclass" else labels.to(dtype)
    return x, y, k if task == "multiclass" else 1


@pytest.mark.parametrize(("family", "widths", "task", "form", "wd", "dtype"), [
    ("mlp", [40], "multiclass", "legacy", 0.0, torch.float64),       # the README's target: ce, no weight decay
    ("mlp", [30, 20], "multiclass", "stable", 1e-2, torch.float64),
    ("mlp_bias", [30, 20, 10], "binary", "legacy", 0.0, torch.float64),
    ("mlp_bias", [30], "binary", "stable", 1e-2, torch.float64),
    ("mlp", [30, 20], "regression", "legacy", 1e-3, torch.float64),
    ("mlp_bias", [30, 20], "multiclass", "legacy", 1e-2, torch.float32),  # the float32 loop: first layer applied
    ("affine", None, "binary", "legacy", 0.0, torch.float64),
])
def test_step_equals_its_earlier_formulation_bit_for_bit(family, widths, task, form, wd, dtype):
    x, y, out_dim = _problem(task, 9, 3, dtype)
    _, loss_fn = get_loss(None, task, form)
    spec = {"widths": widths} if widths is not None else {}
    nets = [plugins.get("models", family).build((1, 8, 8), out_dim, spec, generator=torch.Generator().manual_seed(0))
            .to(dtype) for _ in range(2)]
    assert all(torch.equal(a, b) for a, b in zip(nets[0].parameters(), nets[1].parameters(), strict=True))
    loops = [cls(chain_layers(net), x, y, loss_fn, wd, factorise_first=dtype == torch.float64)  # type: ignore[arg-type]
             for cls, net in ((ChainGD, nets[0]), (StepBeforeThreshold, nets[1]))]
    start = [p.detach().clone() for p in nets[0].parameters()]
    for step in range(60):
        lr = 0.5 if step % 3 else 0.05  # a changing step size, as under the inverse-loss schedule
        values = []
        for loop in loops:
            loss, dz = loop.loss_and_grad()
            values.append(loss)
            loop.step(dz, lr)
        assert torch.equal(_bits(values[0]), _bits(values[1])), f"the loss differs at step {step}"
    for loop in loops:
        loop.sync()
    for (name, a), b, a0 in zip(nets[0].named_parameters(), nets[1].parameters(), start, strict=True):
        assert not torch.equal(a, a0), f"{name} must move for the comparison to mean anything"
        assert torch.equal(_bits(a), _bits(b)), f"{name} differs from the earlier step's"


@pytest.mark.parametrize(("name", "task", "form"), [("ce", "multiclass", "legacy"), ("ce", "multiclass", "stable"),
                                                    ("bce", "binary", "legacy"), ("bce", "binary", "stable"),
                                                    ("mse", "regression", "legacy")])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_fixed_target_gradient_equals_the_per_call_one(name, task, form, dtype):
    _, fn = get_loss(name, task, form)
    k = 4 if task == "multiclass" else 1
    gen = torch.Generator().manual_seed(1)
    out = (torch.randn(12, k, generator=gen, dtype=torch.float64) * 30).to(dtype)  # saturated entries included
    out[0] = 0.0
    y = torch.arange(12) % k if task == "multiclass" else (torch.arange(12) % 2).to(dtype)
    grad = fixed_target_gradient(fn, y, k, dtype)
    assert grad is not None
    assert torch.equal(_bits(grad(out)), _bits(OUTPUT_GRADIENTS[fn](out, y)))


def test_fixed_target_gradient_is_none_without_a_closed_form():
    _, huber = get_loss("huber", "regression")
    assert fixed_target_gradient(huber, torch.zeros(3), 1, torch.float64) is None
