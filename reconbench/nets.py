"""The base class of target networks: a forward pass whose activation can be swapped.

The KKT attacks replace ReLU by a surrogate whose forward is exact but whose backward is smooth; every built-in
family calls ``self.activation`` in its forward pass so that this works without rebuilding the model.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
from torch import nn

Activation = Callable[[torch.Tensor], torch.Tensor]


class TargetNet(nn.Module):
    """A network Phi(x; theta) mapping (N, C, H, W) inputs to (N, out_dim) outputs."""

    def __init__(self) -> None:
        super().__init__()
        object.__setattr__(self, "activation", torch.relu)  # a plain function, never a registered submodule

    activation: Activation

    @contextmanager
    def use_activation(self, fn: Activation) -> Iterator[TargetNet]:
        """Temporarily run the forward pass with ``fn`` in place of ReLU."""
        old = self.activation
        object.__setattr__(self, "activation", fn)
        try:
            yield self
        finally:
            object.__setattr__(self, "activation", old)

    def param_count(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def linear_chain(self) -> list[nn.Linear] | None:
        """The layers L_1..L_k when the forward is exactly L_k(act(...act(L_1(x.flatten(1))))), else None.

        Families that declare it let the KKT engine use its closed-form (Gram) path; None means autograd only.
        """
        return None


def init_linear_default_(layer: nn.Linear | nn.Conv2d, generator: torch.Generator | None) -> None:
    """PyTorch's default Linear/Conv init, U(-1/sqrt(fan_in), 1/sqrt(fan_in)), drawn from ``generator``."""
    fan_in = layer.weight[0].numel()
    bound = 1.0 / fan_in**0.5
    with torch.no_grad():
        layer.weight.uniform_(-bound, bound, generator=generator)
        if layer.bias is not None:
            layer.bias.uniform_(-bound, bound, generator=generator)


class SwappableReLU(nn.Module):
    """Stands in for an ``nn.ReLU`` of a network built elsewhere (timm, an audited model) and calls the owning
    :class:`TargetNet`'s current activation, so the KKT attacks can swap it for a smooth one."""

    _owner: TargetNet

    def __init__(self, owner: TargetNet) -> None:
        super().__init__()
        object.__setattr__(self, "_owner", owner)  # not a submodule (that would make a cycle)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._owner.activation(x)


def swap_relus(module: nn.Module, owner: TargetNet) -> int:
    """Replace every ``nn.ReLU`` below ``module`` by a :class:`SwappableReLU` of ``owner``; the number replaced."""
    count = 0
    for name, child in module.named_children():
        if isinstance(child, nn.ReLU):
            setattr(module, name, SwappableReLU(owner))
            count += 1
        else:
            count += swap_relus(child, owner)
    return count
