"""The batched Gram step whose workspace lets one array hold two quantities in turn, against the step with an array
per quantity (tests/_helpers/gram_step_before_sharing.py): the same kernels on the same values, so the loss, dL/dx
and dL/dC must be the same numbers, bit for bit, in both precisions; and ||theta||^2 from one reused float64 block
against the fresh block per step it replaces."""

from __future__ import annotations

from typing import Literal

import pytest
import torch
from _helpers.gram_step_before_sharing import StepBeforeSharing, sum_of_squares_before_sharing

from plugins.kkt_attacks import BinaryKKTConfig, BinaryTerms
from reconbench import plugins
from reconbench.attack.kkt.batched import gram_evaluator
from reconbench.attack.kkt.batched_gram import SQUARES_BLOCK, BatchedGram, LayerForm, sum_of_squares


def _engines(family: str, forward: Literal["relu", "softplus"], dtype: torch.dtype, layer_form: LayerForm,
             outputs: int = 3) -> tuple[BatchedGram, StepBeforeSharing]:
    gen = torch.Generator().manual_seed(7)
    spec = {"mlp": {"widths": [48, 64], "init_scale": None}, "mlp_bias": {"widths": [48, 64]}}[family]
    net = plugins.get("models", family).build((1, 4, 8), outputs, spec, generator=gen).to(dtype)
    chain = net.linear_chain()
    return (BatchedGram(chain, forward, dtype, torch.device("cpu"), layer_form),
            StepBeforeSharing(chain, forward, dtype, torch.device("cpu"), layer_form))


def _equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal numbers, the same nans, and the same sign of every zero."""
    return (torch.equal(a.isnan(), b.isnan()) and torch.equal(a.nan_to_num(), b.nan_to_num())
            and torch.equal(torch.signbit(a[~a.isnan()]), torch.signbit(b[~b.isnan()])))


#: (m, layer form, which layers take the factored form): m = 30 makes the first hidden layer (32 -> 48) factored too
CASES = [(10, "gram", [False, False, False]), (10, "auto", [False, False, True]), (30, "auto", [True, False, True])]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("family", ["mlp", "mlp_bias"])
@pytest.mark.parametrize("forward", ["relu", "softplus"])
@pytest.mark.parametrize(("m", "layer_form", "factored"), CASES)
def test_the_shared_workspace_gives_the_step_of_the_unshared_one_bit_for_bit(dtype, family, forward, m, layer_form,
                                                                              factored):
    """Three steps in a row (the workspace reused, the inputs changed), each the loss, dL/dx and dL/dC of the step
    with an array per quantity, exactly; hidden layers of the Gram form share their arrays, factored ones do not."""
    new, old = _engines(family, forward, dtype, layer_form)
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(3, m, 32, generator=gen, dtype=torch.float64).to(dtype)
    c = torch.randn(3, m, 3, generator=gen, dtype=torch.float64).to(dtype)
    alpha = torch.tensor([3.0, 10.0, 0.7], dtype=dtype).reshape(-1, 1, 1)
    assert new.theta_sq == old.theta_sq
    for step in range(3):
        xs, cs = x * (1 + step), c * (2 - step)
        want = [t.clone() for t in old.value_and_grad(old.forward(xs, alpha), cs, alpha)]
        fw = new.forward(xs, alpha)
        outputs = fw.outputs.clone()
        got = new.value_and_grad(fw, cs, alpha)
        assert new.workspace(3, m).factored == factored
        assert new.workspace(3, m).shared == [not f for f in factored[:-1]] + [False]
        for g, w in zip(got, want, strict=True):
            assert _equal(g, w)
        assert torch.equal(fw.outputs, outputs)   # the output layer's Z_k (the outputs) is not overwritten


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_an_evaluation_with_the_shared_workspace_equals_it_with_the_unshared_one(dtype):
    """The evaluator's loss, its three parts and both gradients (the box prior adds to dL/dx, the multipliers'
    terms read the outputs after the engine) over a few momentum-free steps, exactly."""
    new, old = _engines("mlp_bias", "relu", dtype, "gram", outputs=1)
    m = 12
    labels = torch.arange(m) % 2
    like = torch.zeros(1, dtype=dtype)
    configs = [BinaryKKTConfig(lambda_min=0.05), BinaryKKTConfig(lambda_min=0.02, lambda_penalty_weight=3.0)]
    terms = BinaryTerms(labels, configs, like)
    alpha = torch.tensor([5.0, 20.0], dtype=dtype).reshape(-1, 1, 1)
    box = torch.tensor([1.0, 0.5], dtype=dtype).reshape(-1, 1, 1)
    scale = torch.tensor([1.0 / m, 1.0], dtype=dtype).reshape(-1, 1, 1)
    gen = torch.Generator().manual_seed(4)
    x0 = torch.randn(2, m, 32, generator=gen, dtype=torch.float64).to(dtype)
    lam0 = torch.rand(2, m, generator=gen, dtype=torch.float64).to(dtype)
    states = {}
    for name, engine in (("new", new), ("old", old)):
        evaluate = gram_evaluator(engine, terms, alpha, box, scale)
        x, lam, seen = x0.clone(), lam0.clone(), []
        for _ in range(4):
            loss, parts, gx, glam = evaluate(x, lam)
            seen.append([loss.clone(), parts.clone(), gx.clone(), glam.clone()])
            x = x - 1e-3 * gx
            lam = lam - 1e-3 * glam
        states[name] = seen
    for got, want in zip(states["new"], states["old"], strict=True):
        for g, w in zip(got, want, strict=True):
            assert _equal(g, w)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("n", [0, 1, 777, SQUARES_BLOCK - 1, SQUARES_BLOCK, SQUARES_BLOCK + 1, 3 * SQUARES_BLOCK + 5])
def test_sum_of_squares_from_one_block_equals_a_fresh_float64_square_per_block(dtype, n):
    gen = torch.Generator().manual_seed(n)
    t = (torch.randn(n, generator=gen, dtype=torch.float64) * 10.0 ** torch.randint(-30, 30, (n,), generator=gen)).to(dtype)
    assert sum_of_squares(t) == sum_of_squares_before_sharing(t)
    assert sum_of_squares(t.reshape(1, -1).T) == sum_of_squares_before_sharing(t)   # any shape, read in flat order
