"""Built-in initialisation regimes for attack candidates."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from reconbench import hookimpl
from reconbench.config import option
from reconbench.problems import Problem


@dataclass
class GaussianConfig:
    scale: float = option(1e-3, "standard deviation of x ~ N(0, scale^2) in the centred space (Haim/Buzaglo)")


@dataclass(frozen=True)
class Gaussian:
    name: str = "gaussian"
    description: str = "x ~ N(0, scale^2 I) in the centred space: the Haim/Buzaglo default"
    oracle: bool = False
    config_cls: type = GaussianConfig

    def is_oracle(self, config: Any) -> bool:
        return False

    def make(self, problem: Problem, labels: torch.Tensor, config: GaussianConfig, *,
             generator: torch.Generator, dtype: torch.dtype) -> torch.Tensor:
        shape = (len(labels), *problem.image_shape)
        return torch.randn(shape, generator=generator, dtype=torch.float64).mul_(config.scale).to(dtype)


@hookimpl
def register_inits(register):  # type: ignore[no-untyped-def]
    register(Gaussian())
