"""The batched step with its element-wise work fused against the step before the fusion
(tests/_helpers/step_before_fusion.py) and against closed forms: same gradients, same loss to rounding."""

from __future__ import annotations

import math
from typing import Literal

import pytest
import torch
from _helpers.step_before_fusion import StepBeforeFusion, box_before_fusion

from reconbench import plugins
from reconbench.attack.kkt.batched import _box_value_and_add_grad
from reconbench.attack.kkt.batched_gram import SQUARES_BLOCK, BatchedGram, LayerForm, factored_is_cheaper, sum_of_squares

#: float64: the losses differ only in the order of ||theta||^2's and the box prior's sums, a few units of rounding
#: of the largest term; float32: the same sums, at float32's rounding (6e-8) times the handful of terms that cancel
LOSS_REL = {torch.float64: 1e-13, torch.float32: 1e-5}


def _engines(family: str, forward: Literal["relu", "softplus"], dtype: torch.dtype,
             layer_form: LayerForm = "gram") -> tuple[BatchedGram, BatchedGram]:
    gen = torch.Generator().manual_seed(7)
    spec = {"mlp": {"widths": [48, 64], "init_scale": None}, "mlp_bias": {"widths": [48, 64]}}[family]
    net = plugins.get("models", family).build((1, 4, 8), 3, spec, generator=gen).to(dtype)
    chain = net.linear_chain()
    return (BatchedGram(chain, forward, dtype, torch.device("cpu"), layer_form),
            StepBeforeFusion(chain, forward, dtype, torch.device("cpu"), "gram"))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("family", ["mlp", "mlp_bias"])
@pytest.mark.parametrize("forward", ["relu", "softplus"])
def test_the_fused_step_gives_the_gradients_of_the_step_before_it_bit_for_bit(dtype, family, forward):
    """The fused passes add -2 D_k, which is exact, in another position of a two-term sum, so the gradients are
    identical (tolerance: exact equality); the loss differs by the rounding of ||theta||^2's summation order. (Both
    with the Gram matrices in every layer: the factored output layer is the next test's.)"""
    new, old = _engines(family, forward, dtype)
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(3, 10, 32, generator=gen, dtype=torch.float64).to(dtype)
    c = torch.randn(3, 10, 3, generator=gen, dtype=torch.float64).to(dtype)
    alpha = torch.tensor([3.0, 10.0, 0.7], dtype=dtype).reshape(-1, 1, 1)
    for step in range(2):   # a second step reuses the workspace
        xs = x * (1 + step)
        want = [t.clone() for t in old.value_and_grad(old.forward(xs, alpha), c, alpha)]
        got = new.value_and_grad(new.forward(xs, alpha), c, alpha)
        assert torch.equal(got[1], want[1]) and torch.equal(got[2], want[2])
        assert torch.allclose(got[0], want[0], rtol=LOSS_REL[dtype], atol=0)


#: the factored output layer against the float64 Gram form: the same products of at most 64 terms summed in another
#: order, carried through the backward chain (3 layers). float64 observed: gradients <= 9e-16 of their largest
#: magnitude, the loss <= 1.2e-14 of ||theta||^2; bound 1e-13 (a few hundred units of rounding). float32 (its own
#: rounding against float64 included) observed <= 6e-7 and 4e-6; bound 1e-4, the same count of float32 units
FACTORED_REL = {torch.float64: 1e-13, torch.float32: 1e-4}


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("family", ["mlp", "mlp_bias"])
@pytest.mark.parametrize("forward", ["relu", "softplus"])
def test_the_factored_output_layer_gives_the_gram_forms_value_and_gradients_to_rounding(dtype, family, forward):
    """<P, G> = ||H^T D||^2, G D = H (H^T D) and P H = D (H^T D)^T (with a bias, G's ones add 1^T D): the engine
    that picks the factored form for its narrow output layer (3 outputs, m = 10) against the all-Gram engine, on
    the same inputs, in both precisions; the float64 engine is also the float32 one's reference."""
    auto, _ = _engines(family, forward, dtype, "auto")
    gram, _ = _engines(family, forward, torch.float64, "gram")
    gen = torch.Generator().manual_seed(3)
    x64 = torch.randn(3, 10, 32, generator=gen, dtype=torch.float64)
    c64 = torch.randn(3, 10, 3, generator=gen, dtype=torch.float64)
    a64 = torch.tensor([3.0, 10.0, 0.7], dtype=torch.float64).reshape(-1, 1, 1)
    for step in range(2):   # a second step reuses the workspace
        x = (x64 * (1 + step)).to(dtype)
        want = [t.clone() for t in gram.value_and_grad(gram.forward(x.double(), a64), c64.to(dtype).double(), a64)]
        got = auto.value_and_grad(auto.forward(x, a64.to(dtype)), c64.to(dtype), a64.to(dtype))
        assert auto.workspace(3, 10).factored == [False, False, True]
        rel = FACTORED_REL[dtype]
        # the loss: relative to ||theta||^2, the scale of the sum it is computed as
        assert float((got[0].double() - want[0]).abs().max()) <= rel * auto.theta_sq
        for g, w in zip(got[1:], want[1:], strict=True):
            assert float((g.double() - w).abs().max()) <= rel * float(w.abs().max())


def test_the_factored_form_is_chosen_where_it_needs_fewer_operations():
    """The counts 6 m in out (factored) and 4 m^2 (in + out) (Gram) against the crossovers they imply: an output
    layer of 1 is factored for every m >= 2, a 1000 x 1000 layer up to m = 750 keeps the Gram form."""
    assert not factored_is_cheaper(1, 1000, 1) and all(factored_is_cheaper(m, 1000, 1) for m in (2, 40, 200, 1000))
    assert not factored_is_cheaper(750, 1000, 1000) and factored_is_cheaper(751, 1000, 1000)
    assert not factored_is_cheaper(40, 784, 1000) and not factored_is_cheaper(200, 1000, 1000)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_the_box_prior_in_one_pass_equals_its_two_parts(dtype):
    """Entries above, below and inside the box; the gradient is that of the two-part form bit for bit and the
    closed form 2 (x - box) / 2 (x + box) / 0; the value is the two-part sum to rounding (one sum instead of two)."""
    gen = torch.Generator().manual_seed(5)
    x = (3 * torch.randn(2, 6, 50, generator=gen, dtype=torch.float64)).to(dtype)
    box = torch.tensor([1.0, 2.5], dtype=dtype).reshape(-1, 1, 1)
    g0 = torch.randn(x.shape, generator=gen, dtype=torch.float64).to(dtype)
    got_grad, want_grad = g0.clone(), g0.clone()
    got = _box_value_and_add_grad(x, box, got_grad)
    want = box_before_fusion(x, box, want_grad)
    assert torch.equal(got_grad, want_grad)
    xd, bd = x.double(), box.double()
    closed = torch.where(xd > bd, xd - bd, torch.where(xd < -bd, xd + bd, torch.zeros_like(xd)))
    from_zero = torch.zeros_like(x)
    _box_value_and_add_grad(x, box, from_zero)
    # 2 (x - box) rounded once to dtype: within one unit of rounding of the float64 value
    assert torch.allclose(from_zero.double(), 2 * closed, rtol=torch.finfo(dtype).eps, atol=0)
    exact = [math.fsum(v * v for v in closed[r].flatten().tolist()) for r in range(2)]
    eps = torch.finfo(dtype).eps
    for r in range(2):
        assert abs(float(got[r]) - exact[r]) <= 300 * eps * exact[r]   # 300 terms: the sum's rounding bound
        assert abs(float(got[r]) - float(want[r])) <= 300 * eps * exact[r]


def test_sum_of_squares_is_exact_to_float64_rounding_across_blocks():
    """Against math.fsum (correctly rounded) on a tensor of several blocks, float32 and float64."""
    gen = torch.Generator().manual_seed(1)
    for dtype in (torch.float32, torch.float64):
        t = torch.randn(2 * SQUARES_BLOCK + 17, generator=gen, dtype=torch.float64).to(dtype)
        exact = math.fsum(v * v for v in t.double().tolist())
        assert sum_of_squares(t) == pytest.approx(exact, rel=1e-14)
    assert sum_of_squares(torch.zeros(0)) == 0.0
