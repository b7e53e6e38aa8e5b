"""The lower-level (training) problem E(x, y; theta) on a flat parameter vector, and its derivatives.

Parameters are handled as one flat vector theta (the order of ``model.named_parameters()``), so that the inner
solver, the conjugate-gradient adjoint and the upper loss ||theta* - theta||^2 are plain vector algebra. The network
is evaluated with :func:`torch.func.functional_call` on the unflattened views, and every derivative comes from
:mod:`torch.func` (no hand-derived second derivatives).

torch.func's first derivative in a process imports torch._dynamo (about 2 s of CPU: functorch's ``_autograd_grad``
enters ``torch._dynamo.compiled_autograd._disable()``). Plain ``torch.autograd.grad`` would avoid it, but it is not
the same arithmetic: functorch's backward of ``binary_cross_entropy_with_logits`` (the binary loss) rounds
differently from autograd's (by one or two units in the last place), and the inner solves and line searches of the
outer loop can turn such a difference into a different attack. So the derivatives stay with torch.func; a replacement
must reproduce its results bit for bit.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch.func import functional_call, grad, vjp

from reconbench.nets import Activation, TargetNet
from reconbench.targets.losses import LossFn


@dataclass(frozen=True)
class ParamLayout:
    """Names and shapes of a model's parameters, to move between a flat vector and a parameter dict."""

    names: tuple[str, ...]
    shapes: tuple[torch.Size, ...]

    @classmethod
    def of(cls, model: torch.nn.Module) -> ParamLayout:
        named = list(model.named_parameters())
        return cls(tuple(n for n, _ in named), tuple(p.shape for _, p in named))

    @property
    def sizes(self) -> list[int]:
        return [s.numel() for s in self.shapes]

    @property
    def numel(self) -> int:
        return sum(self.sizes)

    def flatten(self, model: torch.nn.Module) -> torch.Tensor:
        params = dict(model.named_parameters())
        return torch.cat([params[n].detach().reshape(-1) for n in self.names])

    def unflatten(self, theta: torch.Tensor) -> dict[str, torch.Tensor]:
        chunks = torch.split(theta, self.sizes)
        return {n: c.view(s) for n, c, s in zip(self.names, chunks, self.shapes, strict=True)}

    def fan_in(self, name: str) -> int:
        """Inputs per unit of the layer a parameter belongs to (a bias takes its weight's fan-in)."""
        shapes = dict(zip(self.names, self.shapes, strict=True))
        weight = name[: -len("bias")] + "weight" if name.endswith("bias") else name
        shape = shapes.get(weight, shapes[name])
        return max(1, shape[1:].numel()) if len(shape) > 1 else 1


def softplus_surrogate(beta: float) -> Activation:
    """ReLU's smooth surrogate softplus_beta(z) = log(1 + exp(beta z)) / beta (-> ReLU as beta -> infinity).

    Its second derivative is nonzero everywhere, so E is twice differentiable and the Hessian of the lower
    problem exists; ReLU's would be zero almost everywhere and undefined at the kinks.
    """
    return functools.partial(F.softplus, beta=beta)


def task_targets(labels: torch.Tensor, task: str, dtype: torch.dtype) -> torch.Tensor:
    """Loss targets from task labels, as the trainer builds them (reconbench.data.Problem.targets)."""
    if task == "multiclass":
        return labels.long()
    if task == "regression":
        return 2.0 * labels.to(dtype) - 1.0
    return labels.to(dtype)


@dataclass
class LowerProblem:
    """E(x, y; theta) = (1/m) sum_i loss(Phi(x_i; theta), y_i) + (wd / 2) ||theta||^2, with y fixed.

    ``activation`` replaces ReLU in the forward pass (None keeps the model's own); the trainer's coupled weight
    decay ``wd`` minimises exactly this regulariser.
    """

    model: TargetNet
    loss_fn: LossFn
    targets: torch.Tensor
    weight_decay: float = 0.0
    activation: Activation | None = None
    layout: ParamLayout = field(init=False)

    def __post_init__(self) -> None:
        self.layout = ParamLayout.of(self.model)

    def energy(self, theta: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """E(x, y; theta)."""
        if self.activation is None:
            out = functional_call(self.model, self.layout.unflatten(theta), (x,))
        else:
            with self.model.use_activation(self.activation):
                out = functional_call(self.model, self.layout.unflatten(theta), (x,))
        e = self.loss_fn(out, self.targets)
        if self.weight_decay:
            e = e + 0.5 * self.weight_decay * theta.dot(theta)
        return e

    def grad_theta(self, theta: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """grad_theta E(x, y; theta)."""
        return grad(self.energy, argnums=0)(theta, x)

    def hessian_operator(self, theta: torch.Tensor, x: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor]:
        """v -> grad^2_theta E(x, y; theta) v, linearised once and reused for every product.

        Reverse-over-reverse (the vjp of the gradient; H is symmetric, so v^T H = (H v)^T): it works for every
        training loss, whereas forward-over-reverse fails on losses without forward-mode rules (huber).
        """
        pullback = vjp(lambda th: self.grad_theta(th, x), theta)[1]
        return lambda v: pullback(v)[0]

    def mixed_product(self, theta: torch.Tensor, x: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
        """grad_x < grad_theta E(x, y; theta), p > with theta and p held fixed (= (d^2 E / d theta dx)^T p)."""
        pullback = vjp(lambda xx: self.grad_theta(theta, xx), x)[1]
        return pullback(p)[0]
