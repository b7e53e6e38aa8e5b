"""The lower-level (training) problem E(x, y; theta) on a flat parameter vector, and its derivatives.

Parameters are handled as one flat vector theta (the order of ``model.named_parameters()``), so that the inner
solver, the conjugate-gradient adjoint and the upper loss ||theta* - theta||^2 are plain vector algebra. The network
is evaluated with :func:`torch.func.functional_call` on the unflattened views, and every derivative comes from
automatic differentiation (no hand-derived second derivatives).

The derivatives are taken with ``torch.autograd.grad`` (reverse mode, and reverse over reverse for the Hessian and
mixed products), with the same arithmetic as :mod:`torch.func`'s ``grad`` and ``vjp`` bit for bit, so that a process
that runs the attack does not import torch._dynamo (about 1 s of CPU: functorch's backward enters
``torch._dynamo.compiled_autograd._disable()``). The one operation the two differentiate differently is
``binary_cross_entropy_with_logits`` (the binary loss): torch.func differentiates its decomposition into elementwise
primitives, plain autograd its fused backward, and the two round apart by one or two units in the last place, which
the inner solves and line searches of the outer loop can turn into a different attack. The derivatives here therefore
differentiate that same decomposition (:func:`bce_with_logits_as_decomposed`); the energy's value keeps the fused
loss. tests/unit/attack/test_bilevel_derivatives.py compares every loss's gradient, Hessian-vector and mixed products
with torch.func's, bit for bit. Inside a torch.func transform (a test that takes ``jacrev`` of ``grad_theta``) the
derivatives come from torch.func itself, so they compose.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch.func import functional_call

from reconbench.nets import Activation, TargetNet
from reconbench.targets.losses import LOSSES, LossFn


def bce_with_logits_as_decomposed(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The binary loss mean(BCE-with-logits(out, y)) written as the elementwise primitives torch.func differentiates.

    max(-z, 0) + (1 - y) z + log(exp(-max(-z, 0)) + exp(-z - max(-z, 0))): the same value as the fused loss up to
    rounding, and autograd's derivatives of it (first and second order) equal torch.func's of the fused loss bit
    for bit (module docstring).
    """
    z = out.reshape(-1)
    max_val = (-z).clamp_min(0)
    return ((1 - y) * z + max_val + ((-max_val).exp() + (-z - max_val).exp()).log()).mean()


def _chain_parameter_names(model: TargetNet) -> list[tuple[str, str | None]] | None:
    """(weight name, bias name or None) of each layer of the model's linear chain (TargetNet.linear_chain), or None
    when the model declares none (its forward then runs through functional_call)."""
    layers = model.linear_chain()
    if layers is None:
        return None
    prefix = {id(module): name for name, module in model.named_modules()}
    names: list[tuple[str, str | None]] = []
    for layer in layers:
        if not isinstance(layer, torch.nn.Linear) or id(layer) not in prefix:
            return None
        at = prefix[id(layer)] + "." if prefix[id(layer)] else ""
        names.append((at + "weight", None if layer.bias is None else at + "bias"))
    return names


def _in_functorch_transform() -> bool:
    """Whether a torch.func transform (grad, vjp, jacrev, vmap) is active around the caller."""
    return torch._C._functorch.peek_interpreter_stack() is not None


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
    chain: list[tuple[str, str | None]] | None = field(init=False)

    def __post_init__(self) -> None:
        self.layout = ParamLayout.of(self.model)
        self.chain = _chain_parameter_names(self.model)

    def forward(self, theta: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """Phi(x; theta). A model that declares its linear chain runs it here layer by layer, the same
        ``F.linear`` and activation calls as its own forward pass on the same parameter views, so the same numbers
        and graph; ``functional_call``'s parameter swapping cost about as much as the small network's forward."""
        params = self.layout.unflatten(theta)
        if self.chain is None:
            if self.activation is None:
                return functional_call(self.model, params, (x,))
            with self.model.use_activation(self.activation):
                return functional_call(self.model, params, (x,))
        act = self.model.activation if self.activation is None else self.activation
        h = x.flatten(1)
        for i, (weight, bias) in enumerate(self.chain):
            if i:
                h = act(h)
            h = F.linear(h, params[weight], None if bias is None else params[bias])
        return h

    def energy(self, theta: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """E(x, y; theta)."""
        return self._energy(theta, x, self.loss_fn)

    def _energy(self, theta: torch.Tensor, x: torch.Tensor, loss_fn: LossFn) -> torch.Tensor:
        e = loss_fn(self.forward(theta, x), self.targets)
        if self.weight_decay:
            e = e + 0.5 * self.weight_decay * theta.dot(theta)
        return e

    def _derivative_energy(self, theta: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """E with the loss in the form whose autograd derivatives equal torch.func's (module docstring)."""
        bce = LOSSES["bce"][0]
        return self._energy(theta, x, bce_with_logits_as_decomposed if self.loss_fn is bce else self.loss_fn)

    def _grad_graph(self, theta: torch.Tensor, x: torch.Tensor, *,
                    through_x: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(grad_theta E with its graph kept for a second derivative, the theta and x it was taken at); x is a
        variable of that graph only when ``through_x`` (the mixed product)."""
        with torch.enable_grad():
            th = theta.detach().requires_grad_(True)
            xx = x.detach().requires_grad_(through_x)
            (g,) = torch.autograd.grad(self._derivative_energy(th, xx), th, create_graph=True)
        return g, th, xx

    def grad_theta(self, theta: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """grad_theta E(x, y; theta)."""
        if _in_functorch_transform():
            return torch.func.grad(self.energy, argnums=0)(theta, x)
        with torch.enable_grad():
            th = theta.detach().requires_grad_(True)
            (g,) = torch.autograd.grad(self._derivative_energy(th, x.detach()), th)
        return g

    def hessian_operator(self, theta: torch.Tensor, x: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor]:
        """v -> grad^2_theta E(x, y; theta) v, linearised once and reused for every product.

        Reverse-over-reverse (the vjp of the gradient; H is symmetric, so v^T H = (H v)^T): it works for every
        training loss, whereas forward-over-reverse fails on losses without forward-mode rules (huber). The graph of
        the gradient is kept for the products (a few times the network's activations), as torch.func's vjp keeps it.
        Each product differentiates the scalar g . v, whose backward hands v * 1 = v (exact) to the gradient's
        graph: the same numbers as passing v as the output gradient, which would import
        torch.fx.experimental.symbolic_shapes (0.3 s of CPU with sympy) for autograd's shape check.
        """
        g, th, _ = self._grad_graph(theta, x, through_x=False)

        def product(v: torch.Tensor) -> torch.Tensor:
            (hv,) = torch.autograd.grad(g.dot(v), th, retain_graph=True, allow_unused=True)
            return torch.zeros_like(th) if hv is None else hv.detach()

        return product

    def mixed_product(self, theta: torch.Tensor, x: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
        """grad_x < grad_theta E(x, y; theta), p > with theta and p held fixed (= (d^2 E / d theta dx)^T p)."""
        g, _, xx = self._grad_graph(theta, x, through_x=True)
        (mixed,) = torch.autograd.grad(g.dot(p), xx, allow_unused=True)
        return torch.zeros_like(xx) if mixed is None else mixed.detach()
