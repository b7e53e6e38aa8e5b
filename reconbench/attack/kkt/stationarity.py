"""The stationarity ("KKT") term shared by the three attacks (docs/method/kkt-attacks.md#stationarity-objective).

Every attack writes its per-candidate terms as s_i = C_i . Phi(x_i), with a coefficient row C_i that does not
depend on theta (binary: C_i = lambda_i y_i; multiclass: lambda_i (e_{y_i} - e_{j*}); regression: lambda_i),
already scaled by 1/m. The term is

    L_stat = sum over parameter tensors p of || theta_p - g_p ||_F^2,   g = grad_theta sum_i C_i . Phi(x_i)

where every ReLU derivative inside g, and inside the gradient of L_stat with respect to x, is the surrogate
slope sigma(alpha z). Two engines compute exactly this function and its gradient:

* ``autograd`` (any family whose forward calls ``self.activation``): g from ``torch.autograd.grad`` with
  ``create_graph=True`` through the surrogate ReLU, as the reference does;
* ``gram`` (families that declare a :meth:`~reconbench.nets.TargetNet.linear_chain`): for a linear layer with
  input H (m x d), pre-activation Z = H W^T + b and back-propagated signal delta (m x k), g_W = delta^T H and
  g_b = delta^T 1, so

      ||W - delta^T H||^2 + ||b - delta^T 1||^2
          = ||W||^2 + ||b||^2 - 2 <delta, Z> + <delta delta^T, H H^T + 1 1^T>

  which needs m x m Gram matrices instead of the (k x d) gradient, and one backward pass instead of a double
  one. delta runs backwards as delta_{l-1} = (delta_l W_l) * sigma(alpha Z_{l-1}), starting from delta_L = C.

An engine is called on candidates x and returns the network outputs and a function C -> L_stat.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import torch
from torch import nn

from reconbench.attack.kkt.surrogate import Forward, surrogate_relu, surrogate_slope
from reconbench.errors import IncompatibleError
from reconbench.nets import TargetNet

EngineName = Literal["auto", "autograd", "gram"]
Residual = Callable[[torch.Tensor], torch.Tensor]
Engine = Callable[[torch.Tensor], tuple[torch.Tensor, Residual]]


def autograd_engine(model: TargetNet, alpha: float, forward: Forward = "relu") -> Engine:
    """The reference computation: g by autograd with create_graph=True, differentiated again by the caller."""
    params = [p.requires_grad_(True) for p in model.parameters()]
    theta = [p.detach() for p in params]
    act = surrogate_relu(alpha, forward)

    def engine(x: torch.Tensor) -> tuple[torch.Tensor, Residual]:
        with model.use_activation(act):
            out = model(x).reshape(len(x), -1)

        def residual(coeffs: torch.Tensor) -> torch.Tensor:
            g = torch.autograd.grad(out, params, grad_outputs=coeffs, create_graph=True, allow_unused=True)
            return sum(((t - gp) ** 2).sum() if gp is not None else (t ** 2).sum()
                       for t, gp in zip(theta, g, strict=True))  # type: ignore[return-value]

        return out, residual

    return engine


def gram_engine(layers: list[nn.Linear], alpha: float, forward: Forward = "relu") -> Engine:
    """The same L_stat for L_k(act(...act(L_1(x)))) in closed form (module docstring); one backward pass."""
    weights = [layer.weight.detach() for layer in layers]
    biases = [layer.bias.detach() if layer.bias is not None else None for layer in layers]
    theta_sq = sum(float((w ** 2).sum()) + (float((b ** 2).sum()) if b is not None else 0.0)
                   for w, b in zip(weights, biases, strict=True))
    act = surrogate_relu(alpha, forward)

    def engine(x: torch.Tensor) -> tuple[torch.Tensor, Residual]:
        inputs, pre = [x.flatten(1)], []
        for k, (w, b) in enumerate(zip(weights, biases, strict=True)):
            z = torch.nn.functional.linear(inputs[-1], w, b)
            pre.append(z)
            if k < len(weights) - 1:
                inputs.append(act(z))  # exact ReLU values, surrogate slope in the backward (as in autograd)

        def residual(coeffs: torch.Tensor) -> torch.Tensor:
            total = torch.zeros((), dtype=x.dtype, device=x.device) + theta_sq
            delta = coeffs
            for k in reversed(range(len(weights))):
                h = inputs[k]
                gram_h = h @ h.T
                if biases[k] is not None:
                    gram_h = gram_h + 1.0
                total = total - 2.0 * (delta * pre[k]).sum() + ((delta @ delta.T) * gram_h).sum()
                if k > 0:
                    delta = (delta @ weights[k]) * surrogate_slope(pre[k - 1], alpha)
            return total

        return pre[-1], residual

    return engine


def full_chain(model: TargetNet) -> list[nn.Linear] | None:
    """The model's declared linear chain, if it holds every parameter of the model."""
    chain = model.linear_chain()
    if chain is None:
        return None
    covered = sum(p.numel() for layer in chain for p in layer.parameters())
    return chain if covered == sum(p.numel() for p in model.parameters()) else None


def make_engine(model: TargetNet, alpha: float, forward: Forward = "relu",
                kind: EngineName = "auto") -> tuple[Engine, str]:
    """``auto``: the Gram engine when the model declares a linear chain holding all its parameters, else
    autograd.

    Returns the engine and the name of the one chosen.
    """
    chain = full_chain(model)
    if kind == "gram" and chain is None:
        raise IncompatibleError(f"engine 'gram' needs a model made of linear layers and activations only "
                                f"({type(model).__name__} is not); use engine=autograd or engine=auto")
    if kind == "autograd" or chain is None:
        return autograd_engine(model, alpha, forward), "autograd"
    return gram_engine(chain, alpha, forward), "gram"
