"""The surrogate-gradient ReLU of Haim et al. (docs/method/kkt-attacks.md#surrogate-relu).

Forward: exactly max(z, 0), so the network's outputs are those of the trained ReLU network.
Backward: grad_in = grad_out * sigma(alpha z), the slope of softplus_alpha(z) = log(1 + e^{alpha z}) / alpha.

The backward is written with differentiable torch operations on the saved input, so a gradient taken with
``create_graph=True`` (the KKT term) can itself be differentiated: the second-order path carries
d/dz sigma(alpha z) = alpha sigma(alpha z) (1 - sigma(alpha z)), zero almost everywhere for a plain ReLU.

``forward="softplus"`` replaces the forward value by softplus_alpha(z) (same backward). It is *not* what the
reference does; it exists because then every derivative the engine takes is the true derivative of the loss,
which makes the engine checkable against finite differences.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import torch

Forward = Literal["relu", "softplus"]


def softplus_alpha(z: torch.Tensor, alpha: float) -> torch.Tensor:
    """log(1 + e^{alpha z}) / alpha, written so that it neither overflows nor loses the small tail."""
    return z.clamp_min(0) + torch.log1p(torch.exp(-alpha * z.abs())) / alpha


class _SurrogateReLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, z: torch.Tensor, alpha: float, smooth: bool) -> torch.Tensor:  # type: ignore[override]
        ctx.save_for_backward(z)  # saved properly (the reference keeps it on ctx: a reference cycle)
        ctx.alpha = alpha
        return softplus_alpha(z, alpha) if smooth else z.clamp_min(0)

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor) -> tuple[torch.Tensor, None, None]:  # type: ignore[override]
        (z,) = ctx.saved_tensors
        return grad_out * torch.sigmoid(ctx.alpha * z), None, None


def surrogate_relu(alpha: float, forward: Forward = "relu") -> Callable[[torch.Tensor], torch.Tensor]:
    """An activation for :meth:`~reconbench.nets.TargetNet.use_activation`: exact ReLU, sigma(alpha z)
    backward."""
    if forward not in ("relu", "softplus"):
        raise ValueError(f"surrogate forward must be 'relu' or 'softplus', got {forward!r}")
    smooth = forward == "softplus"

    def act(z: torch.Tensor) -> torch.Tensor:
        return _SurrogateReLU.apply(z, float(alpha), smooth)

    return act


def surrogate_slope(z: torch.Tensor, alpha: float) -> torch.Tensor:
    """sigma(alpha z): the slope the surrogate backward uses in place of 1[z > 0] (differentiable in z)."""
    return torch.sigmoid(alpha * z)
