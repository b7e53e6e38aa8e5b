"""runkel_bilevel: training-data reconstruction as a bilevel problem (Runkel et al., arXiv 2412.08544).

    min_x ||theta* - theta(x)||^2   s.t.  theta(x) in argmin_theta E(x, y; theta)

E is the released model's training objective (its loss, mean over the m candidates, plus the training weight
decay), evaluated with ReLU replaced by softplus_beta so that it is twice differentiable. Each outer iteration
solves the training problem at the current candidates, solves H p = grad_theta l by conjugate gradients on
Hessian-vector products, and steps x along minus the implicit hypergradient. The maths is in
:mod:`reconbench.attack.bilevel`; notes: docs/method/bilevel.md#algorithm.

The attack reads the released weights theta*, the candidate labels, the loss name and the weight decay; never a
training image. theta0 (the start of every inner solve) is drawn by the attack: it does not know the one used in
training.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import torch

from reconbench import citations, hookimpl
from reconbench.attack.bilevel import (
    InnerResult,
    LowerProblem,
    ParamLayout,
    hypergradient,
    softplus_surrogate,
    solve_lower,
    task_targets,
    upper_loss,
)
from reconbench.config import Limit, LogUniform, option
from reconbench.errors import DivergedError, IncompatibleError
from reconbench.interfaces import Attack, AttackOutput, AttackTarget, ProgressFn, ThreatModel
from reconbench.targets.losses import get_loss

FAMILIES = ("affine", "mlp_bias")


@dataclass
class BilevelConfig:
    LIMITS: ClassVar[dict[str, Limit]] = {
        "outer_steps": Limit(ge=1), "outer_lr": Limit(gt=0), "max_backtracks": Limit(ge=0),
        "stop_upper": Limit(ge=0), "max_seconds": Limit(ge=0), "max_inner_iters": Limit(ge=0), "inner_max_iter": Limit(ge=1),
        "inner_tol": Limit(ge=0), "inner_lr": Limit(gt=0), "inner_history": Limit(ge=1),
        "inner_newton_steps": Limit(ge=0), "damping": Limit(ge=0), "cg_rtol": Limit(gt=0),
        "cg_max_iter": Limit(ge=1), "softplus_beta": Limit(gt=0), "clip": Limit(gt=0),
    }
    outer_steps: int = option(100, "outer iterations (one inner solve + one adjoint solve + one x step each)")
    outer_lr: float = option(1.0, "step eta of the outer update of x (centred pixel units); with line_search "
                                  "the first trial step")
    outer_optimizer: Literal["sgd", "adam"] = option(
        "sgd", "outer update: sgd is the paper's x <- x - outer_lr * hypergradient (no momentum); adam rescales "
               "every coordinate, so it moves x even where the hypergradient is merely tiny (e.g. at the "
               "ground truth with an inexact inner solve)")
    line_search: bool = option(True, "sgd: pick eta at every step by backtracking (halve until the upper loss "
                                     "drops by 1e-4 eta ||g||^2, Armijo; the next step first tries 2 eta); "
                                     "False: fixed eta = outer_lr")
    max_backtracks: int = option(20, "line search: most inner solves per outer step before it stops")
    keep_best: bool = option(True, "return the outer iterate with the lowest upper loss (reads only theta*), "
                                   "else the last one")
    stop_upper: float = option(0.0, "stop once the upper loss ||theta* - theta(x)||^2 falls below this (0: never)")
    max_seconds: float = option(0.0, "time budget of the run in seconds, checked after every outer step and "
                                     "between the line search's inner solves: once exceeded the run stops "
                                     "(early_stop) and keeps its best iterate so far (0: no budget). What a run "
                                     "does then depends on the machine and its load: for interactive use; "
                                     "benchmark suites cap max_inner_iters instead")
    max_inner_iters: int = option(0, "work budget of the run: the most inner-solver iterations in all (every inner "
                                     "solve, line-search trials included), checked where max_seconds is; the same "
                                     "on every machine (0: no budget)")
    theta0: Literal["uniform", "default", "zeros", "released"] = option(
        "uniform", "start of the inner solves: uniform draws every parameter from U(theta0_low, theta0_high) "
                   "(the paper: U(0, 1)); default uses PyTorch's Linear init U(+-1/sqrt(fan_in)); zeros; released "
                   "starts at the released weights theta* (public, so not an oracle; retraining then stays in "
                   "theta*'s basin instead of another one related by, e.g., a permutation of hidden units)")
    theta0_low: float = option(0.0, "theta0 = uniform: lower end")
    theta0_high: float = option(1.0, "theta0 = uniform: upper end")
    warm_start: bool = option(False, "False (the paper): every inner solve starts from theta0; True: from the "
                                     "previous outer iterate's solution (the first from theta0)")
    inner_method: Literal["lbfgs", "gd"] = option(
        "lbfgs", "inner solver: lbfgs (torch.optim.LBFGS, strong-Wolfe line search) or gd (full-batch GD)")
    inner_max_iter: int = option(1000, "most iterations of one inner solve")
    inner_tol: float = option(1e-9, "inner solve stops once max |grad_theta E| <= inner_tol")
    inner_lr: float = option(1.0, "inner step: initial L-BFGS step (1 is standard) or the GD learning rate")
    inner_history: int = option(20, "L-BFGS history size")
    inner_newton_steps: int = option(
        5, "Newton-CG steps after the inner solver while max |grad_theta E| > inner_tol (torch's L-BFGS line "
           "search stops refining near 1e-9); they use the adjoint's damping and CG settings")
    adjoint: Literal["cg"] = option("cg", "adjoint solver: conjugate gradients on torch.func Hessian-vector "
                                          "products (reverse over reverse)")
    damping: float = option(1e-6, "delta in (H + delta I) p = grad_theta l; keeps the solve defined where H is "
                                  "singular or indefinite")
    cg_rtol: float = option(1e-6, "CG stops once ||residual|| <= cg_rtol * ||grad_theta l||")
    cg_max_iter: int = option(200, "most CG iterations per adjoint solve")
    softplus_beta: float = option(20.0, "ReLU surrogate softplus_beta(z) = log(1 + exp(beta z)) / beta in the "
                                        "lower problem (mlp_bias; the affine model has no activation)")
    clip: float | None = option(None, "project x onto |x| <= clip (centred space) after each step; 1.0 contains "
                                      "every [0, 1] image whatever the mean; None: no projection")


def draw_theta0(layout: ParamLayout, config: BilevelConfig, generator: torch.Generator,
                dtype: torch.dtype, theta_star: torch.Tensor | None = None) -> torch.Tensor:
    """The attacker's own start of the inner solves (it does not know the training init)."""
    if config.theta0 == "released":
        if theta_star is None:
            raise ValueError("theta0 = 'released' needs the released weights")
        return theta_star.detach().clone().to(dtype)
    if config.theta0 == "zeros":
        return torch.zeros(layout.numel, dtype=dtype)
    if config.theta0 == "uniform":
        theta = torch.rand(layout.numel, generator=generator, dtype=torch.float64)
        return (config.theta0_low + (config.theta0_high - config.theta0_low) * theta).to(dtype)
    parts = []
    for name, size in zip(layout.names, layout.sizes, strict=True):
        bound = 1.0 / math.sqrt(layout.fan_in(name))
        parts.append((torch.rand(size, generator=generator, dtype=torch.float64) * 2.0 - 1.0) * bound)
    return torch.cat(parts).to(dtype)


@dataclass(frozen=True)
class RunkelBilevel(Attack[BilevelConfig]):
    name: str = "runkel_bilevel"
    paper: str | None = citations.RUNKEL_2024
    description: str = ("Runkel et al.'s bilevel attack: min_x ||theta* - theta(x)||^2 with theta(x) the "
                        "retrained model, implicit hypergradient by CG on Hessian-vector products")
    needs: frozenset = frozenset({"labels", "loss", "weight_decay"})
    threat: ThreatModel = ThreatModel(labels=True)
    tasks: frozenset = frozenset({"binary", "multiclass", "regression"})
    config_cls: type[BilevelConfig] = BilevelConfig
    #: what `reconbench run --attack runkel_bilevel` trains without --model: a strongly convex affine target
    default_recipe: dict = field(default_factory=lambda: {
        "problem": {"dataset": "digits", "task": "binary", "n_per_class": 10},
        "family": "affine", "train": {"steps": 3000, "lr": 0.5, "weight_decay": 1e-2}})
    #: the conformance suite's tiny target (the default homogeneous mlp is not a family this attack handles)
    conformance_family: str = "mlp_bias"
    smoke_config: dict = field(default_factory=lambda: {"outer_steps": 2, "inner_max_iter": 50,
                                                        "cg_max_iter": 20, "theta0": "default"})

    def search_space(self) -> dict[str, Any]:
        return {"outer_lr": LogUniform(1e-3, 1e-1)}

    def check(self, target: AttackTarget) -> None:
        if target.family not in FAMILIES:
            raise IncompatibleError(
                f"runkel_bilevel handles the affine and one-hidden-layer mlp_bias families (the paper's models); "
                f"this target is {target.family!r}. For the homogeneous mlp family use haim_binary_kkt, or train "
                "an mlp_bias target with one hidden layer (--family mlp_bias --widths W)")
        layers = target.model.linear_chain()
        if target.family == "mlp_bias" and (layers is None or len(layers) != 2):
            depth = "?" if layers is None else len(layers) - 1
            raise IncompatibleError(
                f"runkel_bilevel handles mlp_bias with exactly one hidden layer; this target has {depth}. "
                "Train it with a single width (--family mlp_bias --widths W) or use haim_binary_kkt for deeper MLPs")

    def run(self, target: AttackTarget, x0: torch.Tensor, labels: torch.Tensor, config: BilevelConfig, *,
            generator: torch.Generator, progress: ProgressFn | None = None) -> AttackOutput:
        """Outer iterations: inner solve, record, stop tests, adjoint + hypergradient, outer step (_OuterRun)."""
        state = _OuterRun(target, x0, labels, config, generator)
        try:
            state.start()
            for k in range(config.outer_steps + 1):
                upper, record = state.record(k, progress)
                if k == config.outer_steps or state.should_stop(k, upper):
                    break
                g = state.hypergradient(k, record)
                if g is None or not state.outer_step(k, g, upper, record):
                    break
        except DivergedError as exc:
            state.stopped, state.note = "diverged", str(exc)
        return state.output()


class _OuterRun:
    """The state of one bilevel run and its named steps (Runkel et al.'s outer loop; module docstring)."""

    def __init__(self, target: AttackTarget, x0: torch.Tensor, labels: torch.Tensor, config: BilevelConfig,
                 generator: torch.Generator) -> None:
        knowledge, dtype = target.knowledge, target.dtype
        _, loss_fn = get_loss(knowledge.loss, knowledge.task)
        self.config, self.dtype, self.labels = config, dtype, labels
        self.activation = softplus_surrogate(config.softplus_beta) if target.family != "affine" else None
        self.lower = LowerProblem(model=target.model, loss_fn=loss_fn,
                                  targets=task_targets(labels, knowledge.task, dtype).to(target.device),
                                  weight_decay=float(knowledge.weight_decay or 0.0), activation=self.activation)
        self.theta_star = self.lower.layout.flatten(target.model).to(dtype)
        self.theta0 = draw_theta0(self.lower.layout, config, generator, dtype, self.theta_star).to(target.device)
        self.x = x0.detach().clone().to(dtype)
        self.adam = torch.optim.Adam([self.x.requires_grad_(True)], lr=config.outer_lr) \
            if config.outer_optimizer == "adam" else None
        self.trace: list[dict[str, float]] = []
        self.stopped, self.steps, self.note, self.eta = "completed", 0, "", config.outer_lr
        self.best_x, self.best_upper = self.x.detach().clone(), math.inf
        self.started = time.perf_counter()
        self.inner_iters = 0   # iterations of every inner solve so far (max_inner_iters)
        self.sol: InnerResult | None = None

    # -- pieces ---------------------------------------------------------------------------------------------
    def inner(self, at: torch.Tensor, previous: torch.Tensor) -> InnerResult:
        """theta(at): from theta0 (the paper) or, warm, from the previous solution."""
        c = self.config
        sol = solve_lower(self.lower, at, previous if c.warm_start else self.theta0, method=c.inner_method,
                          max_iter=c.inner_max_iter, tol=c.inner_tol, lr=c.inner_lr, history=c.inner_history,
                          newton_steps=c.inner_newton_steps, damping=c.damping, cg_rtol=c.cg_rtol,
                          cg_max_iter=c.cg_max_iter)
        self.inner_iters += sol.iterations
        return sol

    def project(self, z: torch.Tensor) -> torch.Tensor:
        return z if self.config.clip is None else z.clamp(-self.config.clip, self.config.clip)

    def over_budget(self) -> bool:
        c = self.config
        return ((c.max_seconds > 0 and time.perf_counter() - self.started > c.max_seconds)
                or (c.max_inner_iters > 0 and self.inner_iters >= c.max_inner_iters))

    def budget(self) -> str:
        """The budget that ran out, as the run's message names it."""
        if self.config.max_inner_iters > 0 and self.inner_iters >= self.config.max_inner_iters:
            return f"inner-iteration budget max_inner_iters={self.config.max_inner_iters} ({self.inner_iters} used)"
        return f"time budget max_seconds={self.config.max_seconds:g}"

    @property
    def solution(self) -> InnerResult:
        assert self.sol is not None, "start() solves the inner problem first"
        return self.sol

    # -- the steps of one outer iteration -----------------------------------------------------------------
    def start(self) -> None:
        """1. the inner solve at x^0."""
        self.sol = self.inner(self.x.detach(), self.theta0)

    def record(self, k: int, progress: ProgressFn | None) -> tuple[float, dict[str, float]]:
        """l(theta*, theta(x^k)) into the trace; the best iterate so far is kept."""
        sol = self.solution
        self.t0 = time.perf_counter()
        upper = upper_loss(sol.theta, self.theta_star)
        record = {"step": float(k), "loss": upper, "upper_loss": upper, "inner_energy": sol.energy,
                  "inner_iters": float(sol.iterations), "inner_iters_total": float(self.inner_iters),
                  "inner_grad_inf": sol.grad_inf, "elapsed": time.perf_counter() - self.started}
        self.trace.append(record)
        if upper < self.best_upper:
            self.best_upper, self.best_x = upper, self.x.detach().clone()
        if progress is not None:
            progress(k, self.config.outer_steps, {"loss": upper})
        return upper, record

    def should_stop(self, k: int, upper: float) -> bool:
        """The early stops: the upper loss under stop_upper, or the time budget spent."""
        if self.config.stop_upper > 0 and upper < self.config.stop_upper:
            self.stopped = "early_stop"
            return True
        if self.over_budget():
            self.stopped = "early_stop"
            self.note = f"{self.budget()} reached after {k} outer step(s)"
            return True
        return False

    def hypergradient(self, k: int, record: dict[str, float]) -> torch.Tensor | None:
        """2. adjoint p = (H + delta I)^{-1} 2 (theta - theta*); 3. hypergradient -grad_x <grad E, p>. None when
        it is not finite (the run is then diverged)."""
        c = self.config
        hg = hypergradient(self.lower, self.x.detach(), self.solution.theta, self.theta_star, damping=c.damping,
                           cg_rtol=c.cg_rtol, cg_max_iter=c.cg_max_iter)
        g = hg.grad_x.to(self.dtype)
        record.update({"cg_iters": float(hg.adjoint.iterations), "cg_rel_residual": hg.adjoint.rel_residual,
                       "cg_negative_curvature": float(hg.adjoint.negative_curvature),
                       "hypergrad_norm": float(g.norm())})
        if not bool(torch.isfinite(g).all()):
            self.stopped, self.note = "diverged", f"non-finite hypergradient at outer step {k}"
            return None
        return g

    def outer_step(self, k: int, g: torch.Tensor, upper: float, record: dict[str, float]) -> bool:
        """x^{k+1} = x^k - eta g (adam, fixed eta or Armijo backtracking), then 1. the inner solve at x^{k+1};
        False when the line search found no decrease (the run stops)."""
        if self.adam is not None:
            self.adam.zero_grad(set_to_none=False)
            self.x.grad = g
            self.adam.step()
            with torch.no_grad():
                self.x.copy_(self.project(self.x))
            self.sol, evals = self.inner(self.x.detach(), self.solution.theta), 1
        elif not self.config.line_search:
            self.x = self.project(self.x.detach() - self.eta * g)
            self.sol, evals = self.inner(self.x, self.solution.theta), 1
        else:
            accepted, evals = self.line_search(k, g, upper)
            if not accepted:
                return False
        record.update({"eta": self.eta, "inner_solves": float(evals), "seconds": time.perf_counter() - self.t0})
        self.steps = k + 1
        return True

    def line_search(self, k: int, g: torch.Tensor, upper: float) -> tuple[bool, int]:
        """eta by backtracking: halve until l drops by 1e-4 eta ||g||^2 (Armijo); the step first tries 2 eta."""
        c = self.config
        self.eta, evals = 2.0 * self.eta if k > 0 else self.eta, 0
        slope = float(g.pow(2).sum())
        while evals < c.max_backtracks:
            if evals and self.over_budget():
                break                                   # out of time: no decrease found in budget
            x_try = self.project(self.x.detach() - self.eta * g)
            sol_try, evals = self.inner(x_try, self.solution.theta), evals + 1
            if upper_loss(sol_try.theta, self.theta_star) <= upper - 1e-4 * self.eta * slope:
                self.x, self.sol = x_try, sol_try
                return True, evals
            self.eta *= 0.5
        self.stopped = "early_stop"
        self.note = f"line search found no decrease at outer step {k} (eta down to {self.eta:.2e})"
        if self.over_budget():
            self.note = f"{self.budget()} reached during the line search of outer step {k}"
        return False, evals

    def output(self) -> AttackOutput:
        """The best (or last) iterate, and a message naming every choice the run made."""
        c = self.config
        final_x = self.best_x if c.keep_best else self.x.detach().clone()
        final_upper = self.best_upper if c.keep_best else (self.trace[-1]["upper_loss"] if self.trace else math.inf)
        first = self.trace[0]["upper_loss"] if self.trace else math.nan
        note = self.note
        if not self.lower.weight_decay:
            note = ("no weight decay: on separable data the lower problem has no minimiser, so theta(x) is where the "
                    f"inner solve stopped (inner_max_iter) and the implicit gradient is only approximate. {note}")
        surrogate = "none (affine)" if self.activation is None else f"softplus beta={c.softplus_beta}"
        outer = "adam" if self.adam is not None else ("sgd with Armijo backtracking" if c.line_search else "sgd")
        message = (f"upper loss {first:.3e} -> {final_upper:.3e} ({'best' if c.keep_best else 'last'} "
                   f"iterate); outer {outer}; inner {c.inner_method} from theta0={c.theta0} "
                   f"({'warm' if c.warm_start else 'cold'} start), tol {c.inner_tol:g}; adjoint cg "
                   f"rtol {c.cg_rtol:g}, damping {c.damping:g}; ReLU surrogate {surrogate}. {note}").strip()
        return AttackOutput(candidates=final_x.detach(), labels=self.labels, final_loss=final_upper,
                            trace=self.trace, steps=self.steps, stopped=self.stopped, message=message)


@hookimpl
def register_attacks(register):  # type: ignore[no-untyped-def]
    register(RunkelBilevel())
