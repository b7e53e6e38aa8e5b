"""Random-features targets: a frozen random first layer and a trained linear head (docs/method/projection-law.md).

    f(x) = W act(V x),  V in R^{p x d} drawn N(0, 1/d) once and frozen,  W in R^{K x p} trained

V is a buffer, not a parameter: it is saved with the weights (so the release holds it) but no optimiser moves it,
and the trainer's parameter count is the head's p K. With the head started at zero (the default), gradient descent on
any loss keeps W in the span of the training features act(V x_i): the setting of Iurada et al.'s law, where the
training set is recoverable from W once p K is well above d n.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from reconbench import hookimpl
from reconbench.errors import ReconbenchError
from reconbench.interfaces import ModelFamily
from reconbench.nets import TargetNet


class RandomFeatures(TargetNet):
    """flatten -> x V^T (frozen buffer) -> act -> Linear(p, K, no bias)."""

    features: torch.Tensor

    def __init__(self, in_dim: int, width: int, out_dim: int) -> None:
        super().__init__()
        self.register_buffer("features", torch.zeros(width, in_dim))
        self.head = nn.Linear(width, out_dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.activation(x.flatten(1) @ self.features.T))


@dataclass(frozen=True)
class RandomFeaturesFamily(ModelFamily):
    name: str = "random_features"
    description: str = ("random features: a frozen random first layer V ~ N(0, 1/d) (p x d, saved as a buffer) and "
                        "a trained bias-free linear head, started at zero (Iurada et al.'s law is a theorem here)")
    swappable_activation: bool = True

    def default_spec(self) -> dict[str, Any]:
        return {"width": 1000, "head_init_scale": 0.0}

    def homogeneity_degree(self, spec: dict[str, Any]) -> int | None:
        return 1  # linear in the trained head

    def build(self, input_shape: tuple[int, int, int], out_dim: int, spec: dict[str, Any],
              generator: torch.Generator | None = None) -> TargetNet:
        unknown = sorted(set(spec) - set(self.default_spec()))
        if unknown:
            raise ReconbenchError(f"model family {self.name!r} has no option {unknown[0]!r}; its options are: "
                                  f"{', '.join(sorted(self.default_spec()))}")
        s = {**self.default_spec(), **spec}
        width, scale = s["width"], s["head_init_scale"]
        if not isinstance(width, int) or isinstance(width, bool) or width < 1:
            raise ReconbenchError(f"{self.name}: width (the number of features p) must be a positive integer, "
                                  f"got {width!r}")
        if not isinstance(scale, (int, float)) or not math.isfinite(scale) or scale < 0:
            raise ReconbenchError(f"{self.name}: head_init_scale must be a finite number >= 0, got {scale!r}")
        d = math.prod(input_shape)
        net = RandomFeatures(d, width, out_dim)
        with torch.no_grad():
            net.features.normal_(0.0, 1.0 / math.sqrt(d), generator=generator)
            if scale > 0:
                net.head.weight.normal_(0.0, 1.0, generator=generator).mul_(scale / math.sqrt(width))
            else:
                net.head.weight.zero_()
        return net


@hookimpl
def register_models(register):  # type: ignore[no-untyped-def]
    register(RandomFeaturesFamily())
