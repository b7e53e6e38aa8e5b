"""Loo et al.'s weight-change reconstruction (docs/method/loo-ntk.md): knowing theta_0 and theta_f, match
theta_f - theta_0 to a combination of candidate gradients, at theta_f alone or at both ends (``both_kernels``).

One Adam over the candidates and the duals, the softplus sharpness ramped from 11 to 200 as in the reference. The
search runs of a cell that differ only in the learning rate advance as one vmap-ed computation
(:mod:`reconbench.attack.ntk`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from reconbench import citations, hookimpl
from reconbench.attack.lr_batches import advance_by_lr, run_alone
from reconbench.attack.ntk import NTKProblem, batched_value_and_grad, beta_at, objective
from reconbench.config import LogUniform, option
from reconbench.errors import DivergedError, IncompatibleError
from reconbench.interfaces import Attack, AttackOutput, AttackTarget, ProgressFn, RunDone, ThreatModel


@dataclass
class LooNTKConfig:
    steps: int = option(2000, "Adam steps on candidates and duals (reference: 80,000)", ge=0)
    lr: float = option(0.02, "Adam learning rate of candidates and duals (reference 0.02)", gt=0)
    both_kernels: bool = option(False, "also match with gradients at theta_0, with their own duals a' (the "
                                       "reference's fine-tuning runs use it)")
    init_scale: float = option(0.2, "starting candidates x ~ N(0, init_scale^2), handed to the gaussian init "
                                    "regime (reference 0.2)", gt=0)
    dual_init: float = option(0.5, "starting duals a, a' ~ U(-dual_init, dual_init) (reference 0.5)", ge=0)
    beta_ramp: float = option(20000.0, "softplus sharpness beta = min(10 + 10^(step / beta_ramp), beta_max) "
                                       "(reference 20,000)", gt=0)
    beta_max: float = option(200.0, "largest softplus sharpness (reference 200)", gt=10)
    box_weight: float = option(0.1, "weight of the box penalty keeping pixels in [0, 1] (reference 0.1)", ge=0)
    sparsity: float = option(0.0, "weight of mean |a| + mean |a'| (reference default 0)", ge=0)
    eval_every: int = option(50, "record the loss in the trace every this many steps", ge=1)


@dataclass(frozen=True)
class LooNTK(Attack[LooNTKConfig]):
    name: str = "loo_ntk"
    paper: str | None = citations.LOO_2024
    description: str = ("Loo et al. 2024: match theta_f - theta_0 to a combination of candidate gradients at "
                        "theta_f (and theta_0 with both_kernels), softplus ramp, Adam (reads theta0)")
    needs: frozenset[str] = frozenset({"mean_image"})
    threat: ThreatModel = ThreatModel(initial_weights=True)
    config_cls: type[LooNTKConfig] = LooNTKConfig
    default_search_runs: int = 4
    default_recipe: dict[str, Any] | None = field(default_factory=lambda: {
        "problem": {"dataset": "digits", "task": "binary", "n_per_class": 5},
        "family": "mlp_bias", "model": {"widths": [200, 200]}, "train": {"steps": 2000, "lr": 0.05}})
    smoke_config: dict[str, Any] | None = field(default_factory=lambda: {"steps": 3})

    def search_space(self) -> dict[str, Any]:
        return {"lr": LogUniform(1e-3, 0.1)}

    def init_overrides(self, config: LooNTKConfig, init_name: str) -> dict[str, Any]:
        return {"scale": config.init_scale} if init_name == "gaussian" else {}

    def check(self, target: AttackTarget) -> None:
        if target.initial_model is None:
            raise IncompatibleError(f"{self.name} needs the target's initial weights; run it through the harness, "
                                    "which hands them to an attack whose threat model reads them")
        from reconbench import plugins

        if not plugins.model(target.family).swappable_activation:
            raise IncompatibleError(f"{self.name} replaces ReLU by softplus in the forward pass, which the "
                                    f"{target.family!r} family does not allow; use a family with a swappable "
                                    "activation (mlp, mlp_bias, conv, random_features)")

    def run(self, target: AttackTarget, x0: torch.Tensor, labels: torch.Tensor, config: LooNTKConfig, *,
            generator: torch.Generator, progress: ProgressFn | None = None) -> AttackOutput:
        return run_alone(self.run_batch, target, x0, labels, config, generator=generator, progress=progress)

    def run_batch(self, target: AttackTarget, x0s: list[torch.Tensor], labels: torch.Tensor, configs: list[Any], *,
                  generators: list[torch.Generator], progress: ProgressFn | None = None,
                  on_done: RunDone | None = None) -> None:
        advance_by_lr(configs, labels, on_done, lambda ids: optimise(
            target, [x0s[i] for i in ids], [configs[i] for i in ids], [generators[i] for i in ids], progress))


def ntk_problem(target: AttackTarget) -> NTKProblem:
    assert target.initial_model is not None
    mean = target.knowledge.mean_image
    shape = target.knowledge.input_shape
    mean_t = (mean if mean is not None else torch.zeros(shape)).to(target.device, target.dtype).reshape(shape)
    return NTKProblem.of(target.model, target.initial_model.to(target.device, target.dtype), mean_t)


def optimise(target: AttackTarget, x0s: list[torch.Tensor], configs: list[LooNTKConfig],
             generators: list[torch.Generator], progress: ProgressFn | None = None) -> list[AttackOutput | Exception]:
    """Adam on R runs at once (the configs differ only in ``lr``)."""
    cfg = configs[0]
    problem = ntk_problem(target)
    loss = objective(problem, cfg.both_kernels, cfg.sparsity, cfg.box_weight)
    k = target.knowledge.out_dim
    dt, dev = target.dtype, target.device
    x = torch.stack(x0s).to(dev, dt)
    m = x.shape[1]
    duals = [(torch.rand((2, m, k), generator=g, dtype=torch.float64) * 2 - 1) * cfg.dual_init for g in generators]
    a = torch.stack([d[0] for d in duals]).to(dev, dt)
    a0 = torch.stack([d[1] for d in duals]).to(dev, dt)
    state = [x, a, a0]
    lr = torch.tensor([c.lr for c in configs], dtype=dt, device=dev)
    b1, b2, eps = 0.9, 0.999, 1e-8
    m1 = [torch.zeros_like(t) for t in state]
    m2 = [torch.zeros_like(t) for t in state]
    runs = len(x0s)
    traces: list[list[dict[str, float]]] = [[] for _ in range(runs)]
    total = stat = torch.full((runs,), math.inf)
    for step in range(cfg.steps + 1):
        beta = beta_at(step, cfg.beta_ramp, cfg.beta_max)
        grads, (total_t, stat_t) = batched_value_and_grad(problem, loss, beta)(*state)
        total, stat = total_t.detach().cpu(), stat_t.detach().cpu()
        if step % cfg.eval_every == 0 or step == cfg.steps:
            for r in range(runs):
                traces[r].append({"step": float(step), "loss": float(total[r]), "stationarity": float(stat[r]),
                                  "beta": beta})
        if step == cfg.steps or not bool(torch.isfinite(total).any()):
            break
        t = step + 1
        with torch.no_grad():  # Adam, one learning rate per run (torch's update rule, written out for the batch)
            for i, g in enumerate(grads):
                m1[i] = b1 * m1[i] + (1 - b1) * g
                m2[i] = b2 * m2[i] + (1 - b2) * g * g
                rate = (lr / (1 - b1 ** t)).reshape(-1, *[1] * (g.dim() - 1))
                state[i] = state[i] - rate * m1[i] / ((m2[i] / (1 - b2 ** t)).sqrt() + eps)
        if progress is not None:
            progress(step + 1, cfg.steps, {"loss": float(total.min())})
    x, a, a0 = state
    out: list[AttackOutput | Exception] = []
    for r in range(runs):
        if not math.isfinite(float(total[r])) or not bool(torch.isfinite(x[r]).all()):
            out.append(DivergedError(f"loo_ntk run diverged (loss {float(total[r])}); lower lr"))
            continue
        multipliers = torch.cat([a[r].reshape(-1), a0[r].reshape(-1)]) if cfg.both_kernels else a[r].reshape(-1)
        out.append(AttackOutput(candidates=x[r].detach().clone(), labels=torch.zeros(m, dtype=torch.long),
                                final_loss=float(total[r]), multipliers=multipliers.detach().clone(),
                                trace=traces[r], steps=cfg.steps,
                                message=f"stationarity {float(stat[r]):.4g} of ||theta_f - theta_0||^2 "
                                        f"{float(sum((d ** 2).sum() for d in problem.delta.values())):.4g}"
                                        + (", both kernels" if cfg.both_kernels else "")))
    return out


@hookimpl
def register_attacks(register):  # type: ignore[no-untyped-def]
    register(LooNTK())
