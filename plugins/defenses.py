"""Built-in defenses: before release (weight_noise, magnitude_prune, int8_quantise) and during training (weight_decay,
early_stopping, label_smoothing, and dp_sgd in :mod:`reconbench_plugins.dp_sgd`).

docs/defenses.md states each definition; the tests check each against it. A defense's ``strength`` names the
option a privacy-utility axis varies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from reconbench_plugins.dp_sgd import DpSgd

from reconbench import hookimpl
from reconbench.config import option
from reconbench.data import Problem
from reconbench.errors import IncompatibleError, ReconbenchError
from reconbench.interfaces import Defense, TrainingRun
from reconbench.nets import TargetNet


# -- before release -------------------------------------------------------------------------------------------
@dataclass
class WeightNoiseConfig:
    relative_std: float = option(0.01, "noise std as a fraction of each tensor's RMS value (at 1000 the weights are "
                                 "already pure noise; larger values only overflow)", ge=0, le=1e3)


@dataclass(frozen=True)
class WeightNoise(Defense[WeightNoiseConfig]):
    name: str = "weight_noise"
    description: str = "adds Gaussian noise to every released weight tensor, scaled to the tensor's RMS value"
    config_cls: type[WeightNoiseConfig] = WeightNoiseConfig
    strength: str = "relative_std"

    def apply(self, model: TargetNet, problem: Problem, config: WeightNoiseConfig, *,
              generator: torch.Generator) -> None:
        with torch.no_grad():
            for p in model.parameters():
                rms = p.pow(2).mean().sqrt()
                noise = torch.randn(p.shape, generator=generator, dtype=torch.float64).to(p.dtype)
                p.add_(noise * rms * config.relative_std)


@dataclass
class PruneConfig:
    fraction: float = option(0.5, "fraction of entries (smallest magnitude, per tensor) set to zero", ge=0, lt=1)


@dataclass(frozen=True)
class MagnitudePrune(Defense[PruneConfig]):
    name: str = "magnitude_prune"
    description: str = "zeroes the smallest-magnitude fraction of every weight tensor before release"
    config_cls: type[PruneConfig] = PruneConfig
    strength: str = "fraction"

    def apply(self, model: TargetNet, problem: Problem, config: PruneConfig, *, generator: torch.Generator) -> None:
        if not 0.0 <= config.fraction < 1.0:
            raise ReconbenchError(f"magnitude_prune: fraction must be in [0, 1), got {config.fraction}")
        with torch.no_grad():
            for p in model.parameters():
                k = int(config.fraction * p.numel())
                if k > 0:
                    threshold = p.abs().flatten().kthvalue(k).values
                    p.masked_fill_(p.abs() <= threshold, 0.0)


@dataclass
class QuantiseConfig:
    bits: int = option(8, "bits of the signed integer grid (8: int8, levels -127..127)", ge=2, le=16)
    per_channel: bool = option(False, "one scale per output channel (first dimension) instead of per tensor")


@dataclass(frozen=True)
class Int8Quantise(Defense[QuantiseConfig]):
    name: str = "int8_quantise"
    description: str = ("rounds every released weight tensor to a symmetric integer grid (scale = max|w| / 127 per "
                        "tensor or channel) and releases the dequantised values")
    config_cls: type[QuantiseConfig] = QuantiseConfig
    strength: str = "bits"

    def apply(self, model: TargetNet, problem: Problem, config: QuantiseConfig, *, generator: torch.Generator) -> dict[str, Any]:
        if not 2 <= config.bits <= 16:
            raise ReconbenchError(f"int8_quantise: bits must be between 2 and 16, got {config.bits}")
        levels = 2 ** (config.bits - 1) - 1
        max_error = 0.0
        with torch.no_grad():
            for p in model.parameters():
                flat = p.reshape(p.shape[0], -1) if config.per_channel and p.dim() > 1 else p.reshape(1, -1)
                scale = flat.abs().amax(dim=1, keepdim=True) / levels
                scale = torch.where(scale > 0, scale, torch.ones_like(scale))  # an all-zero row stays zero
                q = torch.clamp(torch.round(flat / scale), -levels, levels) * scale
                max_error = max(max_error, float((q - flat).abs().max()))
                p.copy_(q.reshape(p.shape))
        return {"levels": 2 * levels + 1, "max_abs_error": max_error}


# -- during training ------------------------------------------------------------------------------------------
@dataclass
class WeightDecayConfig:
    weight_decay: float = option(5e-4, "coupled weight decay added to the recipe's (minimises L + wd/2 ||theta||^2)",
                                 ge=0)


@dataclass(frozen=True)
class WeightDecay(Defense[WeightDecayConfig]):
    name: str = "weight_decay"
    description: str = ("trains with extra coupled weight decay on every parameter; the attacker's knowledge keeps "
                        "the recipe's own weight_decay (the defender does not publish it)")
    config_cls: type[WeightDecayConfig] = WeightDecayConfig
    strength: str = "weight_decay"

    def apply(self, model: TargetNet, problem: Problem, config: WeightDecayConfig, *, generator: torch.Generator) -> None:
        return None

    def start_training(self, run: TrainingRun, config: WeightDecayConfig, *, generator: torch.Generator) -> None:
        for group in run.optimizer.param_groups:
            group["weight_decay"] = group.get("weight_decay", 0.0) + config.weight_decay
        run.records["total_weight_decay"] = run.optimizer.param_groups[0]["weight_decay"]


@dataclass
class EarlyStopConfig:
    loss_threshold: float = option(0.1, "stop once the training loss falls below this (0: never)", ge=0)
    max_fraction: float = option(1.0, "stop after at most this fraction of the recipe's step budget", gt=0, le=1)


@dataclass(frozen=True)
class EarlyStopping(Defense[EarlyStopConfig]):
    name: str = "early_stopping"
    description: str = ("stops training before convergence: once the training loss is below a threshold, or after "
                        "a fraction of the step budget (the KKT attacks need a converged model)")
    config_cls: type[EarlyStopConfig] = EarlyStopConfig
    strength: str = "loss_threshold"

    def apply(self, model: TargetNet, problem: Problem, config: EarlyStopConfig, *, generator: torch.Generator) -> None:
        return None

    def start_training(self, run: TrainingRun, config: EarlyStopConfig, *, generator: torch.Generator) -> None:
        run.records.update(stopped_at_step=None, reason="budget")

    def after_step(self, run: TrainingRun, step: int, loss: float, config: EarlyStopConfig) -> bool:
        if config.loss_threshold > 0 and loss < config.loss_threshold:
            run.records.update(stopped_at_step=step + 1, reason=f"training loss {loss:.4g} < {config.loss_threshold:g}")
            return True
        if step + 1 >= config.max_fraction * run.steps:
            run.records.update(stopped_at_step=step + 1, reason=f"{config.max_fraction:g} of {run.steps} steps")
            return True
        return False


@dataclass
class LabelSmoothingConfig:
    smoothing: float = option(0.1, "epsilon: targets (1 - eps) * one_hot + eps / K (K = 2 for binary)", ge=0, lt=1)


def smoothed_ce(eps: float) -> Any:
    def loss(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(out, y, label_smoothing=eps)

    return loss


@dataclass(frozen=True)
class LabelSmoothing(Defense[LabelSmoothingConfig]):
    name: str = "label_smoothing"
    description: str = "trains on smoothed targets (1 - eps) * one_hot + eps / K (binary: soft BCE targets)"
    config_cls: type[LabelSmoothingConfig] = LabelSmoothingConfig
    strength: str = "smoothing"

    def apply(self, model: TargetNet, problem: Problem, config: LabelSmoothingConfig, *, generator: torch.Generator) -> None:
        return None

    def start_training(self, run: TrainingRun, config: LabelSmoothingConfig, *, generator: torch.Generator) -> None:
        eps = config.smoothing
        if not 0.0 <= eps < 1.0:
            raise ReconbenchError(f"label_smoothing: smoothing must be in [0, 1), got {eps}")
        task = run.problem.task
        if task == "binary":
            run.targets = run.targets * (1.0 - eps) + eps / 2.0
        elif task == "multiclass":
            run.loss_fn = smoothed_ce(eps)
        else:
            raise IncompatibleError("label_smoothing: a regression target has no labels to smooth; use another defense "
                                    "(weight_decay, dp_sgd, ...)")
        run.records["smoothing"] = eps


DEFENSES = [WeightNoise(), MagnitudePrune(), Int8Quantise(), WeightDecay(), EarlyStopping(), LabelSmoothing(), DpSgd()]


@hookimpl
def register_defenses(register):  # type: ignore[no-untyped-def]
    for defense in DEFENSES:
        register(defense)
