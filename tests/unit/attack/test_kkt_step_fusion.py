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
from reconbench.attack.kkt.batched_gram import SQUARES_BLOCK, BatchedGram, sum_of_squares

#: float64: the losses differ only in the order of ||theta||^2's and the box prior's sums, a few units of rounding
#: of the largest term; float32: the same sums, at float32's rounding (6e-8) times the handful of terms that cancel
LOSS_REL = {torch.float64: 1e-13, torch.float32: 1e-5}


def _engines(family: str, forward: Literal["relu", "softplus"], dtype: torch.dtype) -> tuple[BatchedGram, BatchedGram]:
    gen = torch.Generator().manual_seed(7)
    spec = {"mlp": {"widths": [48, 64], "init_scale": None}, "mlp_bias": {"widths": [48, 64]}}[family]
    net = plugins.get("models", family).build((1, 4, 8), 3, spec, generator=gen).to(dtype)
    chain = net.linear_chain()
    return (BatchedGram(chain, forward, dtype, torch.device("cpu")),
            StepBeforeFusion(chain, forward, dtype, torch.device("cpu")))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("family", ["mlp", "mlp_bias"])
@pytest.mark.parametrize("forward", ["relu", "softplus"])
def test_the_fused_step_gives_the_gradients_of_the_step_before_it_bit_for_bit(dtype, family, forward):
    """The fused passes add -2 D_k, which is exact, in another position of a two-term sum, so the gradients are
    identical (tolerance: exact equality); the loss differs by the rounding of ||theta||^2's summation order."""
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
