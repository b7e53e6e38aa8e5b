"""Loo et al.'s weight-change objective (docs/method/loo-ntk.md#objective), batched over search runs.

With m candidates x_j, duals a (m x K) and the network f_beta (every ReLU replaced in the forward pass by
softplus_beta, so that every derivative below is a true derivative),

    G(x, a; theta) = grad_theta [ (1 / (m K)) sum_{j,k} a_jk f_beta,k(x_j; theta) ]
    L_stat = sum over parameter tensors || (theta_f - theta_0) - G(x, a; theta_f) [- G(x, a'; theta_0)] ||^2

(the bracket with ``both_kernels``), plus the box penalty 0.1 / (H W C) sum relu(x - (1 - mu))^2 + relu(-mu - x)^2
and an optional sparsity s (mean |a| + mean |a'|). G is taken with ``torch.func.grad`` inside the loss, the loss is
differentiated again in (x, a, a') and the whole is ``vmap``-ed over runs: one computation for all runs of a cell on
any torch device.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.func import functional_call, grad, vmap

from reconbench.attack.kkt.surrogate import softplus_alpha
from reconbench.nets import TargetNet


def beta_at(step: int, ramp: float, beta_max: float) -> float:
    """The softplus sharpness at a step: min(10 + 10^(step / ramp), beta_max) (the reference's ramp, ramp 20,000)."""
    exponent = step / ramp
    return beta_max if exponent >= math.log10(beta_max) else min(10.0 + 10.0 ** exponent, beta_max)


def box_penalty(x: torch.Tensor, mean: torch.Tensor, weight: float = 0.1) -> torch.Tensor:
    """weight / (H W C) sum over candidates and pixels of relu(x - (1 - mu))^2 + relu(-mu - x)^2, on the last three
    axes of x (any leading axes summed)."""
    hwc = math.prod(x.shape[-3:])
    over = torch.relu(x - (1.0 - mean)) ** 2 + torch.relu(-mean - x) ** 2
    return weight * over.sum() / hwc


@dataclass
class NTKProblem:
    """What the objective holds fixed: both weight sets (with their buffers), the weight change, the mean image."""

    model: TargetNet
    initial: TargetNet
    params_f: dict[str, torch.Tensor]
    params_0: dict[str, torch.Tensor]
    buffers_f: dict[str, torch.Tensor]
    buffers_0: dict[str, torch.Tensor]
    delta: dict[str, torch.Tensor]
    mean: torch.Tensor

    @classmethod
    def of(cls, model: TargetNet, initial: TargetNet, mean: torch.Tensor) -> NTKProblem:
        pf = {n: p.detach() for n, p in model.named_parameters()}
        p0 = {n: p.detach().to(pf[n]) for n, p in initial.named_parameters()}
        return cls(model=model, initial=initial, params_f=pf, params_0=p0,
                   buffers_f={n: b.detach() for n, b in model.named_buffers()},
                   buffers_0={n: b.detach() for n, b in initial.named_buffers()},
                   delta={n: pf[n] - p0[n] for n in pf}, mean=mean)


Objective = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


def _dual_term(params: dict[str, torch.Tensor], buffers: dict[str, torch.Tensor], net: TargetNet,
               x: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    out = functional_call(net, (params, buffers), (x,)).reshape(a.shape)
    return (a * out).sum() / a.numel()


#: G(x, a; params) = grad_params (1 / (m K)) sum_{j,k} a_jk f_k(x_j; params), as a dict of parameter tensors;
#: called as dual_gradient(params, buffers, net, x, a)
dual_gradient = grad(_dual_term)


def objective(problem: NTKProblem, both_kernels: bool, sparsity: float = 0.0, box_weight: float = 0.1) -> Objective:
    """(x (m, C, H, W), a (m, K), a' (m, K)) -> (total loss, L_stat) for one run, at the activation in use."""

    def loss(x: torch.Tensor, a: torch.Tensor, a0: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        g = dual_gradient(problem.params_f, problem.buffers_f, problem.model, x, a)
        if both_kernels:
            g0 = dual_gradient(problem.params_0, problem.buffers_0, problem.initial, x, a0)
            g = {n: g[n] + g0[n] for n in g}
        stat = sum(((problem.delta[n] - g[n]) ** 2).sum() for n in g)
        total = stat + box_penalty(x, problem.mean, box_weight)
        if sparsity > 0:
            total = total + sparsity * (a.abs().mean() + (a0.abs().mean() if both_kernels else 0.0))
        return total, stat  # type: ignore[return-value]

    return loss


def batched_value_and_grad(problem: NTKProblem, loss: Objective, beta: float
                           ) -> Callable[[torch.Tensor, torch.Tensor, torch.Tensor],
                                         tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor, torch.Tensor]]]:
    """For R runs at once (leading axis): ((dL/dx, dL/da, dL/da'), (L, L_stat)) with softplus_beta in both nets."""
    from torch.func import grad_and_value

    def act(z: torch.Tensor) -> torch.Tensor:
        return softplus_alpha(z, beta)

    one = grad_and_value(loss, argnums=(0, 1, 2), has_aux=True)

    def run(x: torch.Tensor, a: torch.Tensor, a0: torch.Tensor
            ) -> tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor, torch.Tensor]]:
        with problem.model.use_activation(act), problem.initial.use_activation(act):
            grads, (total, stat) = vmap(one)(x, a, a0)
        return grads, (total, stat)

    return run
