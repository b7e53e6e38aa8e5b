"""Inner solve, adjoint and implicit hypergradient of the bilevel reconstruction problem.

One outer iteration at x (Runkel et al., steps 1-3):

1. theta = argmin_theta E(x, y; theta)                       (:func:`solve_lower`, from a given start)
2. p = (grad^2_theta E(x, y; theta) + delta I)^{-1} grad_theta l(theta),  grad_theta l = 2 (theta - theta*)
                                                             (:func:`conjugate_gradient` on Hessian-vector products)
3. grad_x l(theta(x)) = -grad_x < grad_theta E(x, y; theta), p >   (:func:`hypergradient`)

Sign (derived): differentiating grad_theta E(x, theta(x)) = 0 in x gives H dtheta/dx = -d^2E/(dtheta dx), so
dl/dx = (dtheta/dx)^T grad_theta l = -(d^2E/(dtheta dx))^T H^{-1} grad_theta l. A descent step on x is therefore
x <- x - eta * grad_x l = x + eta * grad_x <grad_theta E, p>. tests/unit/attack/test_bilevel.py checks it by finite differences.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch

from reconbench.attack.bilevel.lbfgs import InnerLBFGS
from reconbench.attack.bilevel.objective import LowerProblem
from reconbench.errors import DivergedError


def _zero_grad(theta: torch.Tensor) -> None:
    """``Optimizer.zero_grad(set_to_none=False)`` for one leaf tensor, without that method's torch._dynamo guard."""
    if theta.grad is not None:
        if theta.grad.grad_fn is not None:
            theta.grad.detach_()
        else:
            theta.grad.requires_grad_(False)
        theta.grad.zero_()


def upper_loss(theta: torch.Tensor, theta_star: torch.Tensor) -> float:
    """l(theta*, theta) = ||theta* - theta||^2 (summed over every parameter)."""
    return float((theta_star - theta).pow(2).sum())


# -- 1. inner solve -----------------------------------------------------------------------------------------
@dataclass
class InnerResult:
    theta: torch.Tensor
    iterations: int
    grad_inf: float      # max |grad_theta E| at the returned theta
    energy: float        # E at the returned theta
    seconds: float


def solve_lower(problem: LowerProblem, x: torch.Tensor, theta_start: torch.Tensor, *,
                method: Literal["lbfgs", "gd"] = "lbfgs", max_iter: int = 500, tol: float = 1e-10,
                lr: float = 1.0, history: int = 20, newton_steps: int = 0, damping: float = 0.0,
                cg_rtol: float = 1e-10, cg_max_iter: int = 200) -> InnerResult:
    """theta ~ argmin_theta E(x, y; theta), started at ``theta_start`` (x is held fixed).

    ``lbfgs``: torch.optim.LBFGS with a strong-Wolfe line search (``lr`` is its initial step, 1 is standard), run as
    :class:`~reconbench.attack.bilevel.lbfgs.InnerLBFGS` (the same iterates);
    ``gd``: plain full-batch gradient descent with step ``lr`` (the trainer's method). Both stop after
    ``max_iter`` iterations or once max |grad_theta E| <= ``tol``. Then up to ``newton_steps`` Newton-CG steps
    (:func:`newton_polish`) run while the gradient is still above ``tol``: torch's L-BFGS line search stops
    refining near 1e-9, short of what float64 and the implicit function theorem can use.
    """
    t0 = time.perf_counter()
    x = x.detach()
    theta = theta_start.detach().clone().requires_grad_(True)
    iterations = 0
    if method == "lbfgs":
        opt = InnerLBFGS([theta], lr=lr, max_iter=max_iter, max_eval=max(2 * max_iter, 1),
                                tolerance_grad=tol, tolerance_change=0.0, history_size=history,
                                line_search_fn="strong_wolfe")

        def closure() -> torch.Tensor:
            _zero_grad(theta)
            e = problem.energy(theta, x)
            e.backward()
            return e

        opt.step(closure)
        iterations = int(opt.state[theta]["n_iter"])   # LBFGS.step sets it on its first call
    elif method == "gd":
        for _ in range(max_iter):
            g = problem.grad_theta(theta.detach(), x)
            if float(g.abs().max()) <= tol:
                break
            with torch.no_grad():
                theta -= lr * g
            iterations += 1
    else:
        raise ValueError(f"unknown inner method {method!r}")
    theta = theta.detach()
    polished = newton_polish(problem, x, theta, steps=newton_steps, tol=tol, damping=damping, cg_rtol=cg_rtol,
                             cg_max_iter=cg_max_iter)
    theta, iterations = polished[0], iterations + polished[1]
    g = problem.grad_theta(theta, x)
    e = float(problem.energy(theta, x))
    if not (math.isfinite(e) and bool(torch.isfinite(theta).all())):
        raise DivergedError(f"the inner solve ({method}) produced a non-finite E = {e}; lower the inner step or "
                            "use method 'lbfgs'")
    return InnerResult(theta=theta, iterations=iterations, grad_inf=float(g.abs().max()), energy=e,
                       seconds=time.perf_counter() - t0)


def newton_polish(problem: LowerProblem, x: torch.Tensor, theta: torch.Tensor, *, steps: int, tol: float,
                  damping: float, cg_rtol: float, cg_max_iter: int) -> tuple[torch.Tensor, int]:
    """Newton-CG steps theta <- theta - t (H + delta I)^{-1} g while max |g| > tol.

    t = 1 is taken when it lowers E or |g| (near the minimum E stops resolving the progress in floating point);
    otherwise t halves until E decreases (Armijo, c = 1e-4). CG returns a descent direction even where H is
    indefinite (it stops at negative curvature). Returns the new theta and the number of steps taken.
    """
    taken = 0
    for _ in range(steps):
        g = problem.grad_theta(theta, x)
        g_inf = float(g.abs().max())
        if g_inf <= tol or not math.isfinite(g_inf):
            break
        d = conjugate_gradient(problem.hessian_operator(theta, x), g, damping=damping, rtol=cg_rtol,
                               max_iter=cg_max_iter).solution
        e0, slope = float(problem.energy(theta, x)), float(g.dot(d))
        t, new = 1.0, theta - d
        if not (float(problem.energy(new, x)) < e0
                or float(problem.grad_theta(new, x).abs().max()) < g_inf):
            while t > 1e-8 and float(problem.energy(theta - t * d, x)) > e0 - 1e-4 * t * slope:
                t *= 0.5
            if t <= 1e-8:
                break
            new = theta - t * d
        theta = new.detach()
        taken += 1
    return theta, taken


# -- 2. adjoint ---------------------------------------------------------------------------------------------
@dataclass
class CGResult:
    solution: torch.Tensor
    iterations: int
    rel_residual: float          # ||b - (A + delta I) p|| / ||b|| as tracked by the recursion
    negative_curvature: bool     # stopped on d^T (A + delta I) d <= 0 (A indefinite at this theta)


def conjugate_gradient(matvec: Callable[[torch.Tensor], torch.Tensor], b: torch.Tensor, *, damping: float = 0.0,
                       rtol: float = 1e-8, max_iter: int = 200) -> CGResult:
    """Solve (A + damping I) p = b by conjugate gradients, A given only through ``matvec``.

    Hand-written (about fifteen lines) because it must stay in torch tensors (the products come from torch.func)
    and stop at negative curvature, which scipy's cg does not detect; it then returns the iterate so far (b itself
    when that happens at the first step), the usual truncated-Newton rule.
    """
    p = torch.zeros_like(b)
    r = b.clone()
    d = r.clone()
    rr = float(r.dot(r))
    b_norm = math.sqrt(rr)
    if b_norm == 0.0:
        return CGResult(p, 0, 0.0, False)
    k = 0
    for k in range(1, max_iter + 1):
        ad = matvec(d) + damping * d
        curvature = float(d.dot(ad))
        if curvature <= 0.0:
            return CGResult(p if k > 1 else b.clone(), k, math.sqrt(rr) / b_norm, True)
        alpha = rr / curvature
        p = p + alpha * d
        r = r - alpha * ad
        rr_new = float(r.dot(r))
        if math.sqrt(rr_new) <= rtol * b_norm:
            rr = rr_new
            break
        d = r + (rr_new / rr) * d
        rr = rr_new
    return CGResult(p, k, math.sqrt(rr) / b_norm, False)


# -- 3. hypergradient ---------------------------------------------------------------------------------------
@dataclass
class Hypergradient:
    grad_x: torch.Tensor         # grad_x l(theta(x)) (descend along minus this)
    adjoint: CGResult


def hypergradient(problem: LowerProblem, x: torch.Tensor, theta: torch.Tensor, theta_star: torch.Tensor, *,
                  damping: float = 0.0, cg_rtol: float = 1e-8, cg_max_iter: int = 200) -> Hypergradient:
    """grad_x l(theta(x)) at theta = theta(x), by implicit differentiation (see the module docstring)."""
    x, theta = x.detach(), theta.detach()
    grad_l = 2.0 * (theta - theta_star)                                   # grad_theta ||theta* - theta||^2
    adjoint = conjugate_gradient(problem.hessian_operator(theta, x), grad_l, damping=damping,
                                 rtol=cg_rtol, max_iter=cg_max_iter)    # p = (H + delta I)^{-1} grad_theta l
    grad_x = -problem.mixed_product(theta, x, adjoint.solution)          # -grad_x <grad_theta E, p>
    return Hypergradient(grad_x=grad_x, adjoint=adjoint)
