"""The inner solve's L-BFGS: torch's ``torch.optim.LBFGS`` step for step, with the same iterates bit for bit.

Two things differ from torch's class, neither in a number (tests/unit/attack/test_bilevel_derivatives.py runs both on
random problems and compares every iterate):

* the parameter group is added without ``Optimizer.add_param_group``'s torch._dynamo guard, which matters only under
  torch.compile and whose first call imports torch._dynamo (about 1 s of CPU);
* :meth:`InnerLBFGS.step` keeps the two-loop recursion's scalars (alpha_i, beta_i, rho_i) as host scalars of the
  parameters' precision where torch keeps 0-dim tensors: Python floats for float64, numpy float32 scalars for
  float32 (each operation on them is rounded once to that precision, as torch's 0-dim operations are; Python floats
  on float32 problems would round in float64 and drift apart), and ``add_`` reads its ``alpha`` as that number in
  both; torch's version spends three extra tensor operations per history entry and iteration, a third of the
  recursion's time on the bilevel attack's small parameter vectors. Other precisions are refused.

The step is written for the one way :func:`~reconbench.attack.bilevel.implicit.solve_lower` uses it (one parameter
tensor, the strong-Wolfe line search, minimising); anything else is refused. Hand-written for the speed above: the
rest of the step (the history update, the first step size, the stopping rules, torch's own line search
``_strong_wolfe``) is torch's, in torch's order.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch.optim.lbfgs import _strong_wolfe

#: the host scalar type of the recursion's scalars, by the parameters' dtype
SCALARS: dict[torch.dtype, Callable[[float], Any]] = {torch.float64: float, torch.float32: np.float32}


class InnerLBFGS(torch.optim.LBFGS):
    """``torch.optim.LBFGS(..., line_search_fn="strong_wolfe")`` over one tensor (module docstring)."""

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        inspect.unwrap(torch.optim.Optimizer.add_param_group)(self, param_group)

    @torch.no_grad()
    def step(self, closure: Callable[[], torch.Tensor]) -> torch.Tensor:  # type: ignore[override]
        group = self.param_groups[0]
        if len(self.param_groups) != 1 or len(self._params) != 1 or group["line_search_fn"] != "strong_wolfe" \
                or group.get("maximize", False):
            raise ValueError("InnerLBFGS takes one tensor, the strong-Wolfe line search and minimises; use "
                             "torch.optim.LBFGS for anything else")
        scalar = SCALARS.get(self._params[0].dtype)
        if scalar is None:
            raise ValueError(f"InnerLBFGS takes float64 or float32 parameters, not {self._params[0].dtype}; use "
                             "torch.optim.LBFGS")
        closure = torch.enable_grad()(closure)
        lr = group["lr"]
        max_iter, max_eval = group["max_iter"], group["max_eval"]
        tolerance_grad, tolerance_change = group["tolerance_grad"], group["tolerance_change"]
        history_size = group["history_size"]
        state = self.state[self._params[0]]
        state.setdefault("func_evals", 0)
        state.setdefault("n_iter", 0)

        orig_loss = closure()
        loss = float(orig_loss)
        current_evals = 1
        state["func_evals"] += 1
        flat_grad = self._gather_flat_grad()
        if flat_grad.abs().max() <= tolerance_grad:
            return orig_loss

        d, t = state.get("d"), state.get("t")
        old_dirs, old_stps, ro = state.get("old_dirs"), state.get("old_stps"), state.get("ro")
        H_diag = state.get("H_diag")
        prev_flat_grad, prev_loss = state.get("prev_flat_grad"), state.get("prev_loss")
        n_iter = 0
        while n_iter < max_iter:
            n_iter += 1
            state["n_iter"] += 1
            # the search direction
            if state["n_iter"] == 1:
                d = flat_grad.neg()
                old_dirs, old_stps, ro = [], [], []
                H_diag = 1
            else:
                y = flat_grad.sub(prev_flat_grad)
                s = d.mul(t)
                ys = y.dot(s)
                if ys > 1e-10:
                    if len(old_dirs) == history_size:
                        old_dirs.pop(0)
                        old_stps.pop(0)
                        ro.pop(0)
                    old_dirs.append(y)
                    old_stps.append(s)
                    ro.append(scalar(1.0) / scalar(ys.item()))    # torch's 1.0 / ys, in its precision
                    H_diag = ys / y.dot(y)
                num_old = len(old_dirs)
                if "al" not in state:
                    state["al"] = [scalar(0.0)] * history_size
                al = state["al"]
                q = flat_grad.neg()
                for i in range(num_old - 1, -1, -1):
                    al[i] = scalar(old_stps[i].dot(q).item()) * ro[i]
                    q.add_(old_dirs[i], alpha=float(-al[i]))
                d = r = torch.mul(q, H_diag)
                for i in range(num_old):
                    be_i = scalar(old_dirs[i].dot(r).item()) * ro[i]
                    r.add_(old_stps[i], alpha=float(al[i] - be_i))
            if prev_flat_grad is None:
                prev_flat_grad = flat_grad.clone(memory_format=torch.contiguous_format)
            else:
                prev_flat_grad.copy_(flat_grad)
            prev_loss = loss
            # the step length: torch's first guess, then its strong-Wolfe line search
            t = min(1.0, 1.0 / flat_grad.abs().sum()) * lr if state["n_iter"] == 1 else lr
            gtd = flat_grad.dot(d)
            if gtd > -tolerance_change:
                break
            x_init = self._clone_param()

            def obj_func(x: list[torch.Tensor], t: float, d: torch.Tensor) -> tuple[float, torch.Tensor]:
                return self._directional_evaluate(closure, x, t, d)

            loss, flat_grad, t, ls_func_evals = _strong_wolfe(obj_func, x_init, t, d, loss, flat_grad, gtd,
                                                              max_ls=max_eval - current_evals)
            self._add_grad(t, d)
            opt_cond = flat_grad.abs().max() <= tolerance_grad
            current_evals += ls_func_evals
            state["func_evals"] += ls_func_evals
            # the stopping rules
            if n_iter == max_iter or current_evals >= max_eval or opt_cond:
                break
            if d.mul(t).abs().max() <= tolerance_change:
                break
            if abs(loss - prev_loss) < tolerance_change:
                break
        state.update(d=d, t=t, old_dirs=old_dirs, old_stps=old_stps, ro=ro, H_diag=H_diag,
                     prev_flat_grad=prev_flat_grad, prev_loss=prev_loss)
        return orig_loss
