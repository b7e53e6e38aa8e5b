"""The bilevel objective's energy and derivatives (layer-by-layer forward, plain autograd) against functional_call and
torch.func, bit for bit, for every training loss; the inner L-BFGS without torch._dynamo's guards against torch's own;
and a bilevel solve that imports no torch._dynamo."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from torch.func import functional_call, grad, vjp

from reconbench import plugins
from reconbench.attack.bilevel import LowerProblem, softplus_surrogate, solve_lower
from reconbench.attack.bilevel.lbfgs import InnerLBFGS
from reconbench.attack.bilevel.objective import bce_with_logits_as_decomposed
from reconbench.targets.losses import LOSSES

pytestmark = pytest.mark.usefixtures("one_torch_thread")   # tiny problems: one torch thread

TASK = {"bce": "binary", "ce": "multiclass", "mse": "regression", "l25": "regression", "huber": "regression"}


def problem(loss: str, family: str, dtype: torch.dtype, seed: int) -> tuple[LowerProblem, torch.Tensor]:
    """A small model on 6 random 1x3x3 images, weight decay 0.05, the loss's own kind of targets."""
    gen = torch.Generator().manual_seed(seed)
    classes = 3 if loss == "ce" else 1
    spec = {"widths": [7]} if family == "mlp_bias" else {}
    net = plugins.get("models", family).build((1, 3, 3), classes, spec, generator=gen).to(dtype)
    x = 2.0 * torch.randn(6, 1, 3, 3, generator=gen, dtype=dtype)
    if loss == "ce":
        y = torch.randint(0, 3, (6,), generator=gen)
    elif loss == "bce":
        y = (torch.rand(6, generator=gen) > 0.5).to(dtype)
    else:
        y = 2.0 * torch.randn(6, generator=gen, dtype=dtype)
    act = softplus_surrogate(3.0) if family == "mlp_bias" else None
    return LowerProblem(net, LOSSES[loss][0], y, weight_decay=0.05, activation=act), x


def reference_energy(lower: LowerProblem, theta: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """E as the objective computed it before: the model's own forward through functional_call, the fused loss."""
    with lower.model.use_activation(lower.activation or lower.model.activation):
        out = functional_call(lower.model, lower.layout.unflatten(theta), (x,))
    return lower.loss_fn(out, lower.targets) + 0.5 * lower.weight_decay * theta.dot(theta)


def torch_func_derivatives(lower: LowerProblem, theta: torch.Tensor, x: torch.Tensor, v: torch.Tensor,
                           p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """grad_theta E, H v and grad_x <grad_theta E, p>, as the objective took them before: torch.func on
    :func:`reference_energy`."""
    def g(th: torch.Tensor, xx: torch.Tensor) -> torch.Tensor:
        return grad(lambda t, z: reference_energy(lower, t, z), argnums=0)(th, xx)
    hv = vjp(lambda th: g(th, x), theta)[1](v)[0]
    mixed = vjp(lambda xx: g(theta, xx), x)[1](p)[0]
    return g(theta, x), hv, mixed


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("family", ["affine", "mlp_bias"])
@pytest.mark.parametrize("loss", sorted(LOSSES))
def test_autograd_derivatives_equal_torch_func_bit_for_bit(loss, family, dtype):
    for seed in range(3):
        lower, x = problem(loss, family, dtype, seed)
        gen = torch.Generator().manual_seed(100 + seed)
        theta = torch.randn(lower.layout.numel, generator=gen, dtype=dtype)
        v = torch.randn(lower.layout.numel, generator=gen, dtype=dtype)
        p = torch.randn(lower.layout.numel, generator=gen, dtype=dtype)
        want_g, want_hv, want_mixed = torch_func_derivatives(lower, theta, x, v, p)
        hess = lower.hessian_operator(theta, x)
        assert lower.chain is not None                 # the layer-by-layer forward is the one under test
        assert torch.equal(lower.energy(theta, x), reference_energy(lower, theta, x))
        assert torch.equal(lower.grad_theta(theta, x), want_g)
        assert torch.equal(hess(v), want_hv)
        assert torch.equal(hess(v), want_hv)          # the linearisation is reusable
        assert torch.equal(lower.mixed_product(theta, x, p), want_mixed)


def test_decomposed_bce_is_the_fused_loss_to_rounding():
    gen = torch.Generator().manual_seed(0)
    z = 30.0 * torch.randn(1000, generator=gen, dtype=torch.float64)
    y = (torch.rand(1000, generator=gen) > 0.5).double()
    fused = torch.nn.functional.binary_cross_entropy_with_logits(z, y)
    torch.testing.assert_close(bce_with_logits_as_decomposed(z, y), fused, rtol=1e-14, atol=0.0)


def test_grad_theta_composes_with_torch_func():
    lower, x = problem("bce", "mlp_bias", torch.float64, 0)
    theta = torch.randn(lower.layout.numel, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    jac = torch.func.jacrev(lower.grad_theta, argnums=0)(theta, x)      # the Hessian, dense
    v = torch.randn(lower.layout.numel, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    torch.testing.assert_close(jac @ v, lower.hessian_operator(theta, x)(v), rtol=1e-12, atol=1e-14)


def torch_lbfgs(lower: LowerProblem, x: torch.Tensor, start: torch.Tensor, max_iter: int, tol: float,
                history: int) -> tuple[torch.Tensor, dict]:
    """torch.optim.LBFGS, as solve_lower configured it before, on the reference energy: (theta, its state)."""
    theta = start.clone().requires_grad_(True)
    opt = torch.optim.LBFGS([theta], lr=1.0, max_iter=max_iter, max_eval=max(2 * max_iter, 1), tolerance_grad=tol,
                            tolerance_change=0.0, history_size=history, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        opt.zero_grad(set_to_none=False)
        e = reference_energy(lower, theta, x)
        e.backward()
        return e

    opt.step(closure)
    return theta.detach(), opt.state[theta]


@pytest.mark.parametrize(("family", "loss", "max_iter", "tol", "history"),
                         [("affine", "bce", 60, 1e-12, 20), ("mlp_bias", "bce", 60, 1e-12, 20),
                          ("mlp_bias", "bce", 200, 1e-13, 3), ("mlp_bias", "mse", 40, 1e-9, 5),
                          ("mlp_bias", "ce", 7, 1e-12, 20), ("affine", "huber", 100, 1e-10, 2)])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_inner_lbfgs_takes_torch_lbfgs_iterates(family, loss, max_iter, tol, history, dtype):
    """solve_lower's L-BFGS (layer-by-layer energy, host recursion scalars) against torch's on the reference energy:
    the same iterations, evaluations and final parameters, bit for bit, in float64 and in float32 (where scalars
    rounded in float64 drift apart); short histories exercise the shifting."""
    for seed in range(4):
        lower, x = problem(loss, family, dtype, 10 + seed)
        start = torch.randn(lower.layout.numel, generator=torch.Generator().manual_seed(seed), dtype=dtype)
        ours = solve_lower(lower, x, start, max_iter=max_iter, tol=tol, history=history)
        want, state = torch_lbfgs(lower, x, start, max_iter, tol, history)
        assert ours.iterations == int(state["n_iter"])
        assert torch.equal(ours.theta, want), (seed, float((ours.theta - want).abs().max()))


def test_inner_lbfgs_refuses_what_it_does_not_implement():
    theta = torch.zeros(3, requires_grad=True)
    with pytest.raises(ValueError, match="strong-Wolfe"):
        InnerLBFGS([theta], line_search_fn=None).step(lambda: theta.sum())


def test_bilevel_solve_imports_no_torch_dynamo():
    """The point of the autograd path: a process that runs the attack's inner solve, adjoint and hypergradient never
    imports torch._dynamo (about 1 s of CPU), nor torch's symbolic shapes with sympy (0.3 s)."""
    script = """
import sys, torch
from reconbench import plugins
from reconbench.attack.bilevel import LowerProblem, hypergradient, softplus_surrogate, solve_lower
from reconbench.targets.losses import LOSSES
gen = torch.Generator().manual_seed(0)
net = plugins.get("models", "mlp_bias").build((1, 3, 3), 1, {"widths": [7]}, generator=gen).double()
x = torch.randn(6, 1, 3, 3, generator=gen, dtype=torch.float64)
y = (torch.rand(6, generator=gen) > 0.5).double()
lower = LowerProblem(net, LOSSES["bce"][0], y, weight_decay=0.05, activation=softplus_surrogate(3.0))
start = torch.randn(lower.layout.numel, generator=gen, dtype=torch.float64)
sol = solve_lower(lower, x, start, max_iter=20, newton_steps=2)
hypergradient(lower, x, sol.theta, torch.zeros_like(sol.theta))
print(sorted(m for m in ("torch._dynamo", "torch.fx.experimental.symbolic_shapes", "sympy") if m in sys.modules))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
