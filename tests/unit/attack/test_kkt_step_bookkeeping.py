"""The work an evaluation of the batched KKT step does besides the engine, each shortcut against the plain form it
replaces: the box clamp, the multipliers' penalty with its gradient, the multiclass direction asked for twice, and a
loop that holds the evaluation's arrays instead of copying them. Every comparison is bit for bit: the shortcuts
compute the same numbers in the same order."""

from __future__ import annotations

import math

import pytest
import torch

from plugins.kkt_attacks import BinaryKKTConfig, BinaryTerms, MulticlassKKTConfig, MulticlassTerms, PairTerms, SignedTerms
from reconbench.attack.kkt.batched import _box_value_and_add_grad, clamp_to_box


def _x(dtype: torch.dtype) -> torch.Tensor:
    gen = torch.Generator().manual_seed(11)
    x = (3 * torch.randn(3, 5, 40, generator=gen, dtype=torch.float64)).to(dtype)
    x[0, 0, :4] = torch.tensor([math.nan, math.inf, -math.inf, -0.0], dtype=dtype)
    return x


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("boxes", [[1.0, 1.0, 1.0], [0.5, 2.0, 1.25]])
def test_clamp_to_box_is_torch_clamp_with_tensor_bounds_bit_for_bit(dtype, boxes):
    """Per-run boxes (maximum then minimum) and a shared box (number bounds) against torch.clamp with the per-run
    tensors, on entries inside, above and below the box and on nan, +-inf and -0."""
    x = _x(dtype)
    box = torch.tensor(boxes, dtype=dtype).reshape(-1, 1, 1)
    want = torch.clamp(x, min=-box, max=box)
    common = boxes[0] if len(set(boxes)) == 1 else None
    for shared in {common, None}:
        got = clamp_to_box(x, box, -box, torch.empty_like(x), shared)
        assert torch.equal(got.isnan(), want.isnan())
        assert torch.equal(got.nan_to_num(), want.nan_to_num())
        number = ~want.isnan()   # -0 stays -0 (a nan's sign bit is no number's)
        assert torch.equal(torch.signbit(got[number]), torch.signbit(want[number]))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_the_box_prior_with_a_shared_box_equals_it_with_per_run_bounds(dtype):
    x = _x(dtype)[1:]   # finite entries
    box = torch.full((2, 1, 1), 1.5, dtype=dtype)
    g0 = torch.randn(x.shape, generator=torch.Generator().manual_seed(2), dtype=torch.float64).to(dtype)
    shared_grad, plain_grad = g0.clone(), g0.clone()
    shared = _box_value_and_add_grad(x, box, shared_grad, common=1.5)
    plain = _box_value_and_add_grad(x, box, plain_grad)
    assert torch.equal(shared, plain) and torch.equal(shared_grad, plain_grad)


def _lam(shape: tuple[int, ...]) -> torch.Tensor:
    gen = torch.Generator().manual_seed(5)
    return torch.rand(shape, generator=gen, dtype=torch.float64) * 0.3 - 0.05   # some below the floor, some below 0


def test_penalty_and_grad_equal_penalty_and_penalty_grad_bit_for_bit():
    """Per-run floors and weights (lambda_min, lambda_penalty_weight differ between runs) for every terms class."""
    labels = torch.tensor([0, 1, 2, 0, 1, 2])
    like = torch.zeros(1, dtype=torch.float64)
    binary = [BinaryKKTConfig(lambda_min=0.05, lambda_penalty_weight=5.0),
              BinaryKKTConfig(lambda_min=0.2, lambda_penalty_weight=0.5)]
    multi = [MulticlassKKTConfig(lambda_min=0.05, lambda_penalty_weight=5.0),
             MulticlassKKTConfig(lambda_min=0.2, lambda_penalty_weight=0.5)]
    cases = [(BinaryTerms(labels % 2, binary, like), _lam((2, 6))),
             (MulticlassTerms(labels, multi, 3, like), _lam((2, 6))),
             (PairTerms(labels, multi, 3, like), _lam((2, 6, 2))),
             (SignedTerms(), _lam((2, 6)))]
    for terms, lam in cases:
        pen, grad = terms.penalty_and_grad(lam.clone())
        assert torch.equal(pen, terms.penalty(lam)) and torch.equal(grad, terms.penalty_grad(lam))
    # and against the definition w sum max(0, floor - lambda)^2, d/dlambda = -2 w max(0, floor - lambda)
    lam = _lam((2, 6))
    pen, grad = cases[0][0].penalty_and_grad(lam)
    for r, (floor, w) in enumerate(((0.05, 5.0), (0.2, 0.5))):
        short = [max(0.0, floor - v) for v in lam[r].tolist()]
        assert float(pen[r]) == pytest.approx(w * math.fsum(s * s for s in short), rel=1e-14)
        assert grad[r].tolist() == [-2.0 * w * s for s in short]


def test_the_multiclass_direction_is_computed_once_per_evaluation_and_again_when_the_outputs_change():
    """coefficients then lambda_vjp on the same outputs reuse one direction; outputs written in place (as the
    engine's workspace is at every step) or another tensor get a new one: each result equals that of a fresh
    terms object, which has no direction to reuse."""
    labels = torch.tensor([0, 1, 2, 0, 1, 2])
    like = torch.zeros(1, dtype=torch.float64)
    cfgs = [MulticlassKKTConfig(), MulticlassKKTConfig()]
    gen = torch.Generator().manual_seed(9)
    out = torch.randn(2, 6, 3, generator=gen, dtype=torch.float64)
    lam, cbar = _lam((2, 6)), torch.randn(2, 6, 3, generator=gen, dtype=torch.float64)
    terms = MulticlassTerms(labels, cfgs, 3, like)
    calls = []
    scatter = torch.Tensor.scatter

    def counting(self: torch.Tensor, *args: object, **kwargs: object) -> torch.Tensor:
        calls.append(1)
        return scatter(self, *args, **kwargs)   # type: ignore[arg-type]

    for step in range(3):
        if step == 1:
            out.mul_(-1.0).add_(0.3)   # in place: the largest wrong output moves
        if step == 2:
            out = out.clone()[:, torch.randperm(6, generator=gen)]   # another tensor
        calls.clear()
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(torch.Tensor, "scatter", counting)
            coeffs = terms.coefficients(out, lam)
            vjp = terms.lambda_vjp(out, cbar)
        assert len(calls) == 1
        fresh = MulticlassTerms(labels, cfgs, 3, like)
        assert torch.equal(coeffs, fresh.coefficients(out, lam))
        fresh = MulticlassTerms(labels, cfgs, 3, like)
        assert torch.equal(vjp, fresh.lambda_vjp(out, cbar))
