"""An external reconbench attack plugin: the 'naive' baseline of the reference code (docs/method/kkt-attacks.md#naive-baseline).

It maximises the margin between the two classes' outputs, L = -(mean_{y=+1} Phi - mean_{y=-1} Phi) + box prior,
with plain gradient descent on the candidates. It has no multipliers and needs only the labels.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from reconbench import hookimpl
from reconbench.config import LogUniform, option
from reconbench.errors import IncompatibleError
from reconbench.interfaces import Attack, AttackOutput, AttackTarget, ThreatModel


@dataclass
class NaiveConfig:
    steps: int = option(500, "gradient steps on the candidates", ge=1)
    lr: float = option(0.01, "learning rate of the candidates", gt=0)


@dataclass(frozen=True)
class NaiveAttack(Attack):
    name: str = "naive_margin"
    description: str = "class-output maximisation with a box prior (the reference's 'naive' baseline)"
    needs: frozenset = frozenset({"labels"})
    threat: ThreatModel = ThreatModel(labels=True)   # reads the training labels besides the weights
    tasks: frozenset = frozenset({"binary"})
    config_cls: type = NaiveConfig

    def search_space(self) -> dict[str, Any]:
        return {"lr": LogUniform(1e-4, 1e-1)}

    def check(self, target: AttackTarget) -> None:
        if target.knowledge.out_dim != 1:
            raise IncompatibleError(f"{self.name} needs a single-output binary model; use multiclass_kkt instead")

    def run(self, target: AttackTarget, x0: torch.Tensor, labels: torch.Tensor, config: NaiveConfig, *,
            generator: torch.Generator, progress: Any = None) -> AttackOutput:
        x = x0.clone().requires_grad_(True)
        opt = torch.optim.SGD([x], lr=config.lr)
        pos, neg = labels == 1, labels == 0
        trace = []
        for step in range(config.steps):
            out = target.model(x).reshape(-1)
            prior = (x - 1).clamp(min=0).pow(2).sum() + (-1 - x).clamp(min=0).pow(2).sum()
            loss = -(out[pos].mean() - out[neg].mean()) + prior
            opt.zero_grad()
            loss.backward()
            opt.step()
            if step % 100 == 0 or step == config.steps - 1:
                trace.append({"step": float(step), "loss": float(loss)})
                if progress:
                    progress(step + 1, config.steps, {"loss": float(loss)})
        return AttackOutput(candidates=x.detach(), labels=labels, final_loss=float(loss), trace=trace,
                            steps=config.steps)


@hookimpl
def register_attacks(register):  # type: ignore[no-untyped-def]
    register(NaiveAttack())
