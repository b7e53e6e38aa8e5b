"""The inner solve's L-BFGS takes torch's iterates exactly and does not import torch._dynamo."""

from __future__ import annotations

import subprocess
import sys

import torch

from reconbench.attack.bilevel.implicit import _EagerLBFGS


def _solve(cls: type[torch.optim.LBFGS]) -> tuple[torch.Tensor, int]:
    g = torch.Generator().manual_seed(3)
    a = torch.randn(12, 12, generator=g, dtype=torch.float64)
    h = a @ a.T + 0.1 * torch.eye(12, dtype=torch.float64)
    b = torch.randn(12, generator=g, dtype=torch.float64)
    theta = torch.zeros(12, dtype=torch.float64, requires_grad=True)
    opt = cls([theta], lr=1.0, max_iter=40, max_eval=80, tolerance_grad=1e-12, tolerance_change=0.0,
              history_size=5, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        if cls is torch.optim.LBFGS:
            opt.zero_grad(set_to_none=False)
        elif theta.grad is not None:
            theta.grad.zero_()
        e = 0.5 * theta @ h @ theta - b @ theta + 0.25 * theta.pow(4).sum()
        e.backward()
        return e

    opt.step(closure)
    return theta.detach().clone(), int(opt.state[theta]["n_iter"])


def test_same_iterates_as_torch_lbfgs() -> None:
    ours, n_ours = _solve(_EagerLBFGS)
    ref, n_ref = _solve(torch.optim.LBFGS)
    assert n_ours == n_ref > 1
    assert torch.equal(ours, ref)


def test_inner_solve_does_not_import_dynamo() -> None:
    code = ("import sys, torch\n"
            "from reconbench.attack.bilevel.implicit import _EagerLBFGS\n"
            "p = torch.zeros(3, dtype=torch.float64, requires_grad=True)\n"
            "o = _EagerLBFGS([p], line_search_fn='strong_wolfe')\n"
            "def c():\n"
            "    if p.grad is not None: p.grad.zero_()\n"
            "    e = ((p - 1) ** 2).sum(); e.backward(); return e\n"
            "o.step(c)\n"
            "assert 'torch._dynamo' not in sys.modules, 'torch._dynamo was imported'\n")
    subprocess.run([sys.executable, "-c", code], check=True)
