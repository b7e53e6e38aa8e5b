"""Built-in target model families: mlp (the papers' homogeneous MLP), mlp_bias, affine, conv."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from reconbench import hookimpl
from reconbench.errors import ReconbenchError
from reconbench.interfaces import ModelFamily
from reconbench.nets import TargetNet, init_linear_default_


def _check_spec(family: str, spec: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(spec) - set(defaults))
    if unknown:
        raise ReconbenchError(f"model family {family!r} has no option {unknown[0]!r}; "
                              f"its options are: {', '.join(sorted(defaults))}")
    return {**defaults, **spec}


class MLP(TargetNet):
    """flatten -> Linear(+bias) -> act -> [Linear(bias=hidden_bias) -> act]... -> Linear(bias=output_bias)."""

    def __init__(self, in_dim: int, widths: list[int], out_dim: int, hidden_bias: bool, output_bias: bool) -> None:
        super().__init__()
        dims = [in_dim, *widths, out_dim]
        biases = [True] + [hidden_bias] * (len(widths) - 1) + [output_bias]
        self.layers = nn.ModuleList(nn.Linear(a, b, bias=bb) for a, b, bb in zip(dims[:-1], dims[1:], biases, strict=True))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.flatten(1)
        for layer in self.layers[:-1]:
            h = self.activation(layer(h))
        return self.layers[-1](h)

    def linear_chain(self) -> list[nn.Linear]:
        return [layer for layer in self.layers if isinstance(layer, nn.Linear)]


@dataclass(frozen=True)
class MlpFamily(ModelFamily):
    name: str = "mlp"
    description: str = ("the papers' homogeneous ReLU MLP: first layer with bias, no other biases, "
                        "first layer drawn N(0,1)*init_scale")
    swappable_activation: bool = True
    biases_everywhere: bool = False

    def default_spec(self) -> dict[str, Any]:
        if self.biases_everywhere:
            return {"widths": [1000], "init_scale": None}
        return {"widths": [1000, 1000], "init_scale": 1e-4, "first_only": True}

    def homogeneity_degree(self, spec: dict[str, Any]) -> int | None:
        if self.biases_everywhere:
            return None
        return len(_check_spec(self.name, spec, self.default_spec())["widths"]) + 1

    def build(self, input_shape: tuple[int, int, int], out_dim: int, spec: dict[str, Any],
              generator: torch.Generator | None = None) -> TargetNet:
        s = _check_spec(self.name, spec, self.default_spec())
        widths = [int(w) for w in s["widths"]]
        if not widths or any(w < 1 for w in widths):
            raise ReconbenchError(f"{self.name}: widths must be a non-empty list of positive integers, got {widths}")
        net = MLP(math.prod(input_shape), widths, out_dim,
                  hidden_bias=self.biases_everywhere, output_bias=self.biases_everywhere)
        chain = net.linear_chain()
        for layer in chain:
            init_linear_default_(layer, generator)
        scale = s.get("init_scale")
        if scale is not None:
            with torch.no_grad():  # reference order: b1 redrawn, then W1 (docs/method/targets.md#weight-initialisation)
                first = chain[0]
                assert first.bias is not None  # the first layer always has a bias
                first.bias.normal_(0.0, 1.0, generator=generator).mul_(scale)
                first.weight.normal_(0.0, 1.0, generator=generator).mul_(scale)
                if not s.get("first_only", True):
                    for layer in chain[1:]:
                        layer.weight.normal_(0.0, 1.0, generator=generator).mul_(scale)
        return net


class Affine(TargetNet):
    def __init__(self, in_dim: int, out_dim: int) -> None:
        super().__init__()
        self.linear = nn.Linear(in_dim, out_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x.flatten(1))

    def linear_chain(self) -> list[nn.Linear]:
        return [self.linear]


@dataclass(frozen=True)
class AffineFamily(ModelFamily):
    name: str = "affine"
    description: str = "an affine classifier Phi(x) = W x + b (Runkel et al.'s linear setting)"
    swappable_activation: bool = True  # it has no activation, so swapping is a no-op

    def default_spec(self) -> dict[str, Any]:
        return {}

    def homogeneity_degree(self, spec: dict[str, Any]) -> int | None:
        return 1

    def build(self, input_shape: tuple[int, int, int], out_dim: int, spec: dict[str, Any],
              generator: torch.Generator | None = None) -> TargetNet:
        _check_spec(self.name, spec, {})
        net = Affine(math.prod(input_shape), out_dim)
        init_linear_default_(net.linear, generator)
        return net


class ConvNet(TargetNet):
    """Conv(kernel, channels, +bias) -> act -> flatten -> Linear(hidden) -> act -> Linear(out); no other biases."""

    def __init__(self, input_shape: tuple[int, int, int], out_dim: int, channels: int, kernel: int, stride: int,
                 hidden: int) -> None:
        super().__init__()
        c, h, w = input_shape
        self.conv = nn.Conv2d(c, channels, kernel, stride=stride, bias=True)
        ho, wo = (h - kernel) // stride + 1, (w - kernel) // stride + 1
        if ho < 1 or wo < 1:
            raise ReconbenchError(f"conv: kernel {kernel} with stride {stride} does not fit {h}x{w} images")
        self.fc = nn.Linear(channels * ho * wo, hidden, bias=False)
        self.out = nn.Linear(hidden, out_dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.activation(self.conv(x)).flatten(1)
        return self.out(self.activation(self.fc(h)))


@dataclass(frozen=True)
class ConvFamily(ModelFamily):
    name: str = "conv"
    description: str = "Conv(kernel, channels)-hidden-out as in Buzaglo et al.'s CNN experiments (bias on the conv only)"
    swappable_activation: bool = True

    def default_spec(self) -> dict[str, Any]:
        return {"channels": 16, "kernel": 3, "stride": 1, "hidden": 1000, "init_scale": 1e-4}

    def homogeneity_degree(self, spec: dict[str, Any]) -> int | None:
        return 3

    def build(self, input_shape: tuple[int, int, int], out_dim: int, spec: dict[str, Any],
              generator: torch.Generator | None = None) -> TargetNet:
        s = _check_spec(self.name, spec, self.default_spec())
        net = ConvNet(input_shape, out_dim, int(s["channels"]), int(s["kernel"]), int(s["stride"]), int(s["hidden"]))
        for layer in (net.conv, net.fc, net.out):
            init_linear_default_(layer, generator)
        if s["init_scale"] is not None:
            with torch.no_grad():
                assert net.conv.bias is not None
                net.conv.bias.normal_(0.0, 1.0, generator=generator).mul_(s["init_scale"])
                net.conv.weight.normal_(0.0, 1.0, generator=generator).mul_(s["init_scale"])
        return net


FAMILIES = [
    MlpFamily(),
    MlpFamily(name="mlp_bias", description="a ReLU MLP with biases in every layer (Runkel et al.'s one-hidden-layer net)",
              biases_everywhere=True),
    AffineFamily(),
    ConvFamily(),
]


@hookimpl
def register_models(register):  # type: ignore[no-untyped-def]
    for family in FAMILIES:
        register(family)
