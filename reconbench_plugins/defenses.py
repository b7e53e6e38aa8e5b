"""Built-in defenses, applied to a trained target before its weights are released."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from reconbench import hookimpl
from reconbench.config import option
from reconbench.interfaces import Defense
from reconbench.targets.nets import TargetNet
from reconbench.targets.problems import Problem


@dataclass
class WeightNoiseConfig:
    relative_std: float = option(0.01, "noise std as a fraction of each tensor's RMS value", ge=0)


@dataclass(frozen=True)
class WeightNoise(Defense):
    name: str = "weight_noise"
    description: str = "adds Gaussian noise to every released weight tensor, scaled to the tensor's RMS value"
    config_cls: type = WeightNoiseConfig

    def apply(self, model: TargetNet, problem: Problem, config: WeightNoiseConfig, *,
              generator: torch.Generator) -> None:
        with torch.no_grad():
            for p in model.parameters():
                rms = p.pow(2).mean().sqrt()
                noise = torch.randn(p.shape, generator=generator, dtype=torch.float64).to(p.dtype)
                p.add_(noise * rms * config.relative_std)


@dataclass
class PruneConfig:
    fraction: float = option(0.5, "fraction of entries (smallest magnitude, per tensor) set to zero", ge=0, lt=1)


@dataclass(frozen=True)
class MagnitudePrune(Defense):
    name: str = "magnitude_prune"
    description: str = "zeroes the smallest-magnitude fraction of every weight tensor before release"
    config_cls: type = PruneConfig

    def apply(self, model: TargetNet, problem: Problem, config: PruneConfig, *, generator: Any) -> None:
        if not 0.0 <= config.fraction < 1.0:
            from reconbench.errors import ReconbenchError

            raise ReconbenchError(f"magnitude_prune: fraction must be in [0, 1), got {config.fraction}")
        with torch.no_grad():
            for p in model.parameters():
                k = int(config.fraction * p.numel())
                if k > 0:
                    threshold = p.abs().flatten().kthvalue(k).values
                    p.masked_fill_(p.abs() <= threshold, 0.0)


@hookimpl
def register_defenses(register):  # type: ignore[no-untyped-def]
    register(WeightNoise())
    register(MagnitudePrune())
