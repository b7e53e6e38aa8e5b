"""Iurada et al.'s projection-loss attack on the head (docs/method/projection-law.md).

Minimises L(X) = ||(I - P_H(X)) (W - W0)^T||^2 / ||W - W0||^2 over m candidates X, where H(X) holds the features the
model's head reads and W - W0 is what training moved the head: the fraction of the head's change that the candidates'
features cannot explain. Plain SGD with momentum on X, every candidate put back on the sphere of radius ``radius``
after each step (the reference's gauge), stop at L <= ``tol``. The search runs of a cell advance as one batch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from reconbench import citations, hookimpl
from reconbench.attack.lr_batches import advance_by_lr, run_alone
from reconbench.attack.projection import check_head, head_features, head_layer, head_vector, projection_loss
from reconbench.config import Limit, LogUniform, option
from reconbench.errors import DivergedError, IncompatibleError
from reconbench.interfaces import Attack, AttackOutput, AttackTarget, ProgressFn, RunDone, ThreatModel


@dataclass
class ProjectionConfig:
    LIMITS: ClassVar[dict[str, Limit]] = {}
    steps: int = option(3000, "most SGD steps on the candidates (reference: 10^6, stopping at tol)", ge=0)
    lr: float = option(5.0, "learning rate of the candidates' SGD (reference: 20 on synthetic data, 2000 on "
                            "CIFAR-10; 5 recovers the theory track's random-features problems)", gt=0)
    momentum: float = option(0.9, "SGD momentum (reference 0.9)", ge=0, lt=1)
    radius: float = option(0.0, "every candidate is rescaled to this norm after each step (centred space); 0: "
                                "sqrt(d), the reference's sphere", ge=0)
    tol: float = option(1e-10, "stop once the loss is at most this (reference 1e-7, at float32 round-off)", ge=0)
    jitter: float = option(0.0, "ridge added to the candidates' Gram matrix, relative to its mean diagonal (a Gram "
                                "that is singular in the working precision always gets at least 1e-12)", ge=0)
    eval_every: int = option(50, "record the loss in the trace every this many steps", ge=1)


@dataclass(frozen=True)
class ProjectionLaw(Attack[ProjectionConfig]):
    name: str = "projection_law"
    paper: str | None = citations.IURADA_2026
    description: str = ("Iurada et al. 2026: projection loss on the head, ||(I - P_H(X)) (W - W0)||^2 / ||W - W0||^2 "
                        "over n candidates on the sphere (reads theta0 and n)")
    threat: ThreatModel = ThreatModel(initial_weights=True, n=True)
    config_cls: type[ProjectionConfig] = ProjectionConfig
    candidate_factor: int = 1
    default_search_runs: int = 4
    default_recipe: dict[str, Any] | None = field(default_factory=lambda: {
        "problem": {"dataset": "digits", "task": "binary", "n_per_class": 5},
        "family": "random_features", "model": {"width": 4000},
        "train": {"steps": 2000, "lr": 0.01}})
    smoke_config: dict[str, Any] | None = field(default_factory=lambda: {"steps": 20})
    #: problems of reconbench.theory whose known outcome this attack must reproduce
    theorems: frozenset[str] = frozenset({"random_features_law"})

    def search_space(self) -> dict[str, Any]:
        return {"lr": LogUniform(0.5, 2000.0)}

    def check(self, target: AttackTarget) -> None:
        if target.initial_model is None:
            raise IncompatibleError(f"{self.name} needs the target's initial weights; run it through the harness, "
                                    "which hands them to an attack whose threat model reads them")
        shape = target.knowledge.input_shape
        probe = torch.randn((2, *shape), dtype=target.dtype, generator=torch.Generator().manual_seed(0))
        check_head(target.model, probe.to(target.device))
        if not float((head_change(target) ** 2).sum()) > 0:
            raise IncompatibleError(f"{self.name}: the head did not move in training (W = W0); there is nothing to "
                                    "project. Train the target, or attack it with weight_rows")

    def run(self, target: AttackTarget, x0: torch.Tensor, labels: torch.Tensor, config: ProjectionConfig, *,
            generator: torch.Generator, progress: ProgressFn | None = None) -> AttackOutput:
        return run_alone(self.run_batch, target, x0, labels, config, generator=generator, progress=progress)

    def run_batch(self, target: AttackTarget, x0s: list[torch.Tensor], labels: torch.Tensor, configs: list[Any], *,
                  generators: list[torch.Generator], progress: ProgressFn | None = None,
                  on_done: RunDone | None = None) -> None:
        advance_by_lr(configs, labels, on_done,
                      lambda ids: optimise(target, [x0s[i] for i in ids], [configs[i] for i in ids], progress))


def head_change(target: AttackTarget) -> torch.Tensor:
    """W - W0 of the head, (K, q)."""
    assert target.initial_model is not None
    w = head_vector(head_layer(target.model))
    w0 = head_vector(head_layer(target.initial_model)).to(w)
    return w - w0


def _on_sphere(x: torch.Tensor, radius: float) -> torch.Tensor:
    """Each candidate (row of x, (R, m, d)) rescaled to ``radius``; a zero candidate stays zero."""
    norm = x.norm(dim=-1, keepdim=True)
    return torch.where(norm > 0, x * (radius / norm.clamp_min(torch.finfo(x.dtype).tiny)), x)


def optimise(target: AttackTarget, x0s: list[torch.Tensor], configs: list[ProjectionConfig],
             progress: ProgressFn | None = None) -> list[AttackOutput | Exception]:
    """SGD with momentum on R runs at once (the configs differ only in ``lr``)."""
    cfg = configs[0]
    model, head = target.model, head_layer(target.model)
    w = head_change(target)
    shape = x0s[0].shape
    d = math.prod(shape[1:])
    radius = cfg.radius or math.sqrt(d)
    lr = torch.tensor([c.lr for c in configs], dtype=target.dtype, device=target.device)[:, None, None]
    x = _on_sphere(torch.stack([x0.reshape(len(x0), -1) for x0 in x0s]).to(target.device, target.dtype), radius)
    runs = len(x0s)
    buf = torch.zeros_like(x)
    active = torch.ones(runs, dtype=torch.bool, device=x.device)
    steps = [0] * runs
    traces: list[list[dict[str, float]]] = [[] for _ in range(runs)]
    losses = torch.full((runs,), math.inf, dtype=target.dtype)
    jitters = torch.zeros(runs, dtype=target.dtype)
    for p in model.parameters():
        p.requires_grad_(False)
    for step in range(cfg.steps + 1):
        xg = x.detach().requires_grad_(True)
        h, _ = head_features(model, head, xg.reshape(runs * shape[0], *shape[1:]))
        loss, used = projection_loss(h.reshape(runs, shape[0], -1), w, cfg.jitter)
        losses = torch.where(active.cpu(), loss.detach().cpu(), losses)
        jitters = torch.maximum(jitters, used.detach().cpu())
        done = losses <= cfg.tol
        for r in range(runs):
            if bool(active[r]) and (step % cfg.eval_every == 0 or bool(done[r]) or step == cfg.steps):
                traces[r].append({"step": float(step), "loss": float(losses[r])})
        active &= ~done.to(active.device) & torch.isfinite(loss.detach())
        if step == cfg.steps or not bool(active.any()):
            break
        (grad,) = torch.autograd.grad(loss[active].sum(), xg)
        with torch.no_grad():
            buf = torch.where(active[:, None, None], cfg.momentum * buf + grad, buf)
            moved = _on_sphere(x - lr * buf, radius)
            x = torch.where(active[:, None, None], moved, x)
        for r in range(runs):
            steps[r] += int(active[r])
        if progress is not None:
            progress(step + 1, cfg.steps, {"loss": float(losses.min())})
    out: list[AttackOutput | Exception] = []
    for r in range(runs):
        cand = x[r].detach().reshape(shape)
        if not math.isfinite(float(losses[r])) or not bool(torch.isfinite(cand).all()):
            out.append(DivergedError(f"projection_law run diverged at step {steps[r]} (loss {float(losses[r])}); "
                                     "lower lr"))
            continue
        stopped = "early_stop" if float(losses[r]) <= cfg.tol else "completed"
        note = f"; Gram jitter {float(jitters[r]):.3g} x mean diagonal" if float(jitters[r]) > 0 else ""
        out.append(AttackOutput(candidates=cand.clone(), labels=torch.zeros(shape[0], dtype=torch.long),
                                final_loss=float(losses[r]), trace=traces[r], steps=steps[r], stopped=stopped,
                                message=f"projection loss {float(losses[r]):.3g} on the sphere of radius "
                                        f"{radius:.4g}{note}"))
    return out


@hookimpl
def register_attacks(register):  # type: ignore[no-untyped-def]
    register(ProjectionLaw())
