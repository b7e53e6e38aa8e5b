"""The KKT attacks' ``rescale`` option: the released weights multiplied by one factor before the attack.

For a network homogeneous of degree L in its parameters, Phi(x; c theta) = c^L Phi(x; theta), so
grad_theta Phi(x; c theta) = c^(L-1) grad_theta Phi(x; theta). If (x, lambda) satisfies the stationarity condition
theta = sum_i lambda_i y_i grad_theta Phi(x_i; theta), then (x, lambda c^(2-L)) satisfies it for c theta: the
candidates the attack looks for do not move, only the multipliers' scale does, while the attack loss scales by c^2.
``init_norm`` picks c so that ||c theta|| is the expected norm of the architecture's default initialisation
(:func:`reconbench.nets.init_linear_default_`, U(+-1/sqrt(fan_in)) for every weight and bias), a scale the
attack's learning rates suit. The factor reads only the released weights and the layer shapes.
"""

from __future__ import annotations

import copy
import dataclasses
import math

import torch
from torch import nn

from reconbench.errors import IncompatibleError
from reconbench.interfaces import AttackTarget


def default_init_norm(model: nn.Module) -> float:
    """sqrt(E ||theta||^2) under the default init: numel / (3 fan_in) per weight and bias of every Linear / Conv
    layer. Refused when a parameter belongs to another kind of layer (its default init is not this one)."""
    layers = [m for m in model.modules() if isinstance(m, (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d))]
    covered = {id(p) for m in layers for p in m.parameters(recurse=False)}
    other = [name for name, p in model.named_parameters() if id(p) not in covered]
    if other:
        raise IncompatibleError(f"rescale=init_norm knows the default init of Linear and Conv layers only; parameter "
                                f"{other[0]!r} belongs to another layer. Use rescale=none")
    total = 0.0
    for m in layers:
        fan_in = m.weight[0].numel()
        total += sum(p.numel() for p in m.parameters(recurse=False)) / (3.0 * fan_in)
    return math.sqrt(total)


def rescaled_target(target: AttackTarget, mode: str) -> tuple[AttackTarget, float]:
    """The target whose weights the attack reads, and the factor c they were multiplied by (1 for ``none``)."""
    if mode == "none":
        return target, 1.0
    if mode != "init_norm":
        raise ValueError(f"unknown rescale mode {mode!r}")
    if not target.homogeneity_degree:
        raise IncompatibleError(f"rescale=init_norm keeps the KKT points only on targets homogeneous in their "
                                f"parameters; family {target.family!r} is not. Use rescale=none")
    norm = math.sqrt(sum(float((p.detach().double() ** 2).sum()) for p in target.model.parameters()))
    if not (math.isfinite(norm) and norm > 0):
        raise IncompatibleError(f"rescale=init_norm: the released weights have norm {norm}; nothing to rescale")
    factor = default_init_norm(target.model) / norm
    model = copy.deepcopy(target.model)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(factor)
    return dataclasses.replace(target, model=model), factor
