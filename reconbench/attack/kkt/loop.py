"""The optimisation loop shared by the KKT attacks (docs/method/kkt-attacks.md#loop-and-defaults).

    minimise over x (m candidates) and lambda:
        L = L_stat(x, lambda) + L_prior(x) + L_lambda(lambda)
        L_stat   = sum_p || theta_p - grad_p (1/m) sum_i s_i ||^2     (stationarity.py; s_i from the attack)
        L_prior  = sum_{i,k} max(0, x_ik - 1)^2 + max(0, -1 - x_ik)^2   (the box [-1, 1], centred space)
        L_lambda = classification: 5 sum_i max(0, lambda_min - lambda_i)^2; regression: 0
    with separate SGD-momentum(0.9) optimisers for x (lr eta_x) and lambda (lr eta_lambda), no clipping and
    no clamping.

A non-finite loss stops the run with a clear message; the candidates of the last finite step are returned.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import torch

from reconbench.attack import watch
from reconbench.attack.kkt.convergence import ConvergenceRule
from reconbench.attack.kkt.stationarity import make_engine
from reconbench.config import option
from reconbench.interfaces import AttackOutput, AttackTarget, ProgressFn

Coefficients = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
Penalty = Callable[[torch.Tensor], torch.Tensor]


@dataclass
class StationarityConfig:
    """Options every KKT attack shares. Defaults: see each attack; reference values in the help texts."""

    steps: int = option(3000, "iterations E (the papers: 50000; reference default 1000)")
    lr: float = option(0.01, "eta_x: learning rate of the candidates' SGD-momentum")
    init_scale: float = option(1e-3, "s_x: starting candidates x ~ N(0, s_x^2 I) in the centred space; the "
                                     "pipeline passes it to the `gaussian` init regime")
    alpha: float = option(100.0, "alpha of the surrogate ReLU: exact forward, sigma(alpha z) backward "
                                 "(reference default 300)")
    lambda_lr: float = option(1e-4, "eta_lambda: learning rate of the multipliers' SGD-momentum "
                                    "(reference 1e-4)")
    momentum: float = option(0.9, "momentum of both optimisers (reference 0.9)")
    box: float = option(1.0, "the box prior [-box, box] in the centred space (squared hinge, summed)")
    inverse_m: bool = option(True, "the reference's 1/m factor on the candidate sum (m candidates, not n)")
    eval_every: int = option(100, "record the loss terms in the trace every this many steps (reference R)")
    engine: Literal["auto", "autograd", "gram"] = option(
        "auto", "auto: the closed-form Gram engine for linear-chain models (mlp, mlp_bias, affine), autograd "
                "double backward otherwise; both compute the same loss and gradient")
    forward: Literal["relu", "softplus"] = option(
        "relu", "surrogate forward: relu (reference: exact outputs) or softplus_alpha (smooth; not the "
                "reference)")
    sync_every: int = option(0, "batched search: check finiteness, snapshot and report progress every K steps; a "
                                "diverging run loses at most K steps (0: 1 on the CPU, where it costs nothing, "
                                "100 on CUDA)")
    max_batch: int = option(0, "batched search: most runs advanced together (0: as many as fit in memory; the "
                               "chunking is recorded with each run)")
    cuda_graph: bool = option(True, "batched search on CUDA: replay the step of the closed-form engine as a "
                                    "CUDA graph")
    tf32: bool = option(False, "CUDA float32 only: allow TF32 matmuls (faster, about 1e-3 relative error per "
                               "product; an explicit opt-in, recorded with each run)")
    rescale: Literal["none", "init_norm"] = option(
        "none", "none: attack the released weights as they are; init_norm: first multiply every parameter by one "
                "factor c so that ||theta|| is the expected norm of the architecture's default initialisation. For a "
                "target homogeneous of degree L in its parameters this keeps the KKT points in x (the multipliers "
                "absorb c^(2-L)) and brings the loss and its gradient to the scale the learning rates are set for: "
                "weights that grew far from that scale (e.g. under DP-SGD's noise) otherwise diverge at step 0. The "
                "factor is read from the released weights alone and recorded in each run's message")
    early_stop: float = option(0.0, "stop a run once converged: its windowed mean loss and its candidates each changed "
                                    "by at most this share over the last early_stop_window steps (0: off, all steps "
                                    "run; recorded with the run; docs/method/kkt-attacks.md#early-stop)",
                               ge=0, omit_default=True)
    early_stop_window: int = option(200, "steps per window of the early_stop rule (tested every window from "
                                         "twice this on)", ge=1, omit_default=True)


def box_prior(x: torch.Tensor, half_width: float) -> torch.Tensor:
    """sum max(0, x - b)^2 + max(0, -b - x)^2 over all m * D entries."""
    return ((x - half_width).clamp_min(0) ** 2).sum() + ((-half_width - x).clamp_min(0) ** 2).sum()


def lambda_floor_penalty(lam: torch.Tensor, lambda_min: float, weight: float) -> torch.Tensor:
    """weight * sum max(0, lambda_min - lambda)^2: a soft floor, not a clamp (reference weight 5)."""
    return weight * ((lambda_min - lam).clamp_min(0) ** 2).sum()


def run_stationarity_attack(target: AttackTarget, x0: torch.Tensor, labels: torch.Tensor, lam0: torch.Tensor,
                            coefficients: Coefficients, lambda_penalty: Penalty, cfg: StationarityConfig, *,
                            progress: ProgressFn | None = None) -> AttackOutput:
    """Minimise L over candidates and multipliers; ``coefficients(outputs, lambda)`` gives the rows C_i of
    s_i = C_i . Phi(x_i).

    ``outputs`` are detached (m, out_dim) network outputs, so an attack can pick e.g. the largest wrong logit.
    """
    model = target.model
    m = len(x0)
    engine, engine_used = make_engine(model, cfg.alpha, cfg.forward, cfg.engine)
    scale = 1.0 / m if cfg.inverse_m else 1.0
    theta_sq = float(sum((p.detach().double() ** 2).sum() for p in model.parameters()))

    x = x0.detach().clone().to(target.dtype).requires_grad_(True)
    lam = lam0.detach().clone().to(x).requires_grad_(True)
    opt_x = torch.optim.SGD([x], lr=cfg.lr, momentum=cfg.momentum)
    opt_lam = torch.optim.SGD([lam], lr=cfg.lambda_lr, momentum=cfg.momentum)

    def attack_loss(x: torch.Tensor, lam: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        out, stationarity = engine(x)
        terms = {"stationarity": stationarity(scale * coefficients(out.detach(), lam)),
                 "prior": box_prior(x, cfg.box), "lambda_penalty": lambda_penalty(lam)}
        return terms["stationarity"] + terms["prior"] + terms["lambda_penalty"], terms

    def record(step: int, loss: float, terms: dict[str, torch.Tensor]) -> dict[str, float]:
        row = {"step": float(step), "loss": loss, **{k: float(v.detach()) for k, v in terms.items()}}
        row["stationarity_relative"] = row["stationarity"] / theta_sq
        return row

    trace: list[dict[str, float]] = []
    stopped, message, t0 = "completed", "", time.perf_counter()
    last_good = (x.detach().clone(), lam.detach().clone())
    done = 0
    rule = ConvergenceRule.of(cfg)
    early_stop: dict[str, Any] | None = None
    window_sum, window_means, x_sum, x_means = 0.0, [math.nan], torch.zeros_like(x.detach()), [x.detach()]
    watcher = watch.current()   # a slice's progress lines and its stop at the deadline (every 10 steps)
    if watcher is not None:
        watcher.begin(1, m, cfg.steps, x.dtype, bool(torch.backends.cuda.matmul.allow_tf32), x.device)
    for step in range(cfg.steps):
        if watcher is not None and step % 10 == 0:
            watcher.at(step)
        loss, terms = attack_loss(x, lam)
        value = loss.detach().item()
        if not math.isfinite(value):
            stopped = "diverged"
            stat = float(terms["stationarity"].detach())
            message = (f"attack loss became {value} at step {step} (stationarity {stat}); returning the "
                       f"candidates of step {max(step - 1, 0)}. Lower lr (now {cfg.lr}), lambda_lr (now "
                       f"{cfg.lambda_lr}) or alpha (now {cfg.alpha})")
            break
        if rule is not None and step > 0:   # L(x_step), the loss after `step` updates
            window_sum += value
            x_sum += x.detach()
            if step % rule.window == 0:
                window_means.append(window_sum / rule.window)
                x_means = [x_means[-1], x_sum / rule.window]
                window_sum, x_sum = 0.0, torch.zeros_like(x_sum)
                if rule.tests_at(step, cfg.steps):
                    means = torch.tensor(window_means[-1:-3:-1], dtype=torch.float64)
                    changes = rule.changes(means[:1], means[1:], x_means[-1][None], x_means[-2][None])
                    if bool(rule.converged(*changes)[0]):
                        stopped, done = "converged", step
                        early_stop = rule.record(step, cfg.steps, float(changes[0][0]), float(changes[1][0]))
                        break   # x_step is returned; its row is the trace's final one
        last_good = (x.detach().clone(), lam.detach().clone())
        x.grad, lam.grad = torch.autograd.grad(loss, [x, lam])  # only x and lambda: theta gets no gradient
        opt_x.step()
        opt_lam.step()
        done = step + 1
        if step % cfg.eval_every == 0:
            trace.append(record(step, value, terms))
        if progress is not None and (step % 10 == 0 or step == cfg.steps - 1):
            progress(step + 1, cfg.steps, {"loss": value})

    if watcher is not None:
        watcher.end(done)
    x_out, lam_out = (x.detach(), lam.detach()) if stopped in ("completed", "converged") else last_good
    final_loss, final_terms = attack_loss(x_out, lam_out)
    final = float(final_loss.detach())
    trace.append(record(done, final, final_terms))
    if stopped == "completed" and not math.isfinite(final):
        stopped, message = "diverged", f"attack loss is {final} after the last step; lower lr (now {cfg.lr})"
    if stopped == "completed":
        message = (f"engine {engine_used}; {cfg.steps} steps in {time.perf_counter() - t0:.1f}s; final "
                   f"stationarity {trace[-1]['stationarity_relative']:.4g} of ||theta||^2")
    elif stopped == "converged" and rule is not None:
        message = (f"engine {engine_used}; {rule.message(done, cfg.steps)} in {time.perf_counter() - t0:.1f}s; "
                   f"final stationarity {trace[-1]['stationarity_relative']:.4g} of ||theta||^2")
    else:
        message = f"engine {engine_used}; {message}"
    return AttackOutput(candidates=x_out.detach(), labels=labels,
                        final_loss=final if math.isfinite(final) else math.inf,
                        multipliers=lam_out.detach(), trace=trace, steps=done,
                        stopped=stopped, message=message, early_stop=early_stop)
