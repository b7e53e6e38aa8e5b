"""DP-SGD through Opacus: per-sample gradient clipping and Gaussian noise, with the privacy spent reported.

The harness trains full-batch (every step uses all n training images), so the sampling rate is q = 1 and the
training run is T compositions of a Gaussian mechanism with noise multiplier sigma. Opacus' RDP accountant reports
epsilon at the configured delta; the card records (epsilon, delta, the RDP order used, sigma, C, q, T).

Opacus computes per-sample gradients with its layer hooks where it has them and with functorch otherwise; batch
normalisation mixes samples, so targets with BatchNorm layers are refused (DP-SGD is undefined there).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any

import torch

from reconbench.config import option
from reconbench.data import Problem
from reconbench.errors import IncompatibleError, ReconbenchError
from reconbench.interfaces import Defense, TrainingRun
from reconbench.nets import TargetNet

INSTALL_HINT = "pip install 'reconbench[dp]'"
# Opacus' per-sample hooks fire on module outputs because the training images do not require gradients: expected.
warnings.filterwarnings("ignore", message="Full backward hook is firing when gradients are computed with respect to module")


@dataclass
class DpSgdConfig:
    noise_multiplier: float = option(1.0, "sigma: noise std divided by the clipping norm (0: clipping only, no privacy)",
                                     ge=0)
    max_grad_norm: float = option(1.0, "C: each sample's gradient is clipped to this L2 norm", gt=0)
    delta: float = option(1e-5, "delta at which epsilon is reported", gt=0, lt=1)


def _opacus() -> Any:
    try:
        import opacus
    except ImportError:
        raise ReconbenchError(f"the dp_sgd defense needs the opacus package; install it with {INSTALL_HINT}") from None
    return opacus


def epsilon_spent(noise_multiplier: float, sample_rate: float, steps: int, delta: float) -> tuple[float | None, float | None]:
    """(epsilon, RDP order) from Opacus' RDP accountant; (None, None) without noise (no finite guarantee)."""
    if noise_multiplier <= 0 or steps == 0:
        return (None, None) if noise_multiplier <= 0 else (0.0, None)
    from opacus.accountants import RDPAccountant

    acc = RDPAccountant()
    acc.history.append((noise_multiplier, sample_rate, steps))
    eps, order = acc.get_privacy_spent(delta=delta)
    return float(eps), float(order)


@dataclass(frozen=True)
class DpSgd(Defense[DpSgdConfig]):
    name: str = "dp_sgd"
    description: str = ("DP-SGD (Opacus): per-sample gradient clipping to C and Gaussian noise sigma*C each step; "
                        "reports epsilon at delta (RDP accountant, full batch: q = 1)")
    config_cls: type[DpSgdConfig] = DpSgdConfig
    strength: str = "noise_multiplier"

    def apply(self, model: TargetNet, problem: Problem, config: DpSgdConfig, *, generator: torch.Generator) -> None:
        return None

    def start_training(self, run: TrainingRun, config: DpSgdConfig, *, generator: torch.Generator) -> None:
        opacus = _opacus()
        from opacus.optimizers import DPOptimizer
        from opacus.validators import ModuleValidator

        bn = [type(m).__name__ for m in run.model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
        if bn:
            raise IncompatibleError(f"dp_sgd: the target has {bn[0]} layers, which mix samples, so per-sample "
                                    "gradients (and DP-SGD) are undefined; use a family without batch norm "
                                    "(mlp, conv, timm_vit) or another defense")
        errors = [str(e) for e in ModuleValidator.validate(run.model, strict=False)]
        if errors:
            raise IncompatibleError(f"dp_sgd: Opacus cannot train this model: {errors[0]}")
        n = len(run.targets)
        dp_model = opacus.GradSampleModule(run.model, batch_first=True, loss_reduction="mean", strict=False)
        seed = int(torch.randint(0, 2**62, (1,), generator=generator))
        noise_gen = torch.Generator(device=run.x.device).manual_seed(seed)
        run.optimizer = DPOptimizer(run.optimizer, noise_multiplier=config.noise_multiplier,
                                    max_grad_norm=config.max_grad_norm, expected_batch_size=n, loss_reduction="mean",
                                    generator=noise_gen)
        run.records.update(sample_rate=1.0, steps=0, batch_size=n, delta=config.delta,
                           noise_multiplier=config.noise_multiplier, max_grad_norm=config.max_grad_norm,
                           accountant="opacus RDP")
        run.model = dp_model

    def after_step(self, run: TrainingRun, step: int, loss: float, config: DpSgdConfig) -> bool:
        run.records["steps"] = step + 1
        return False

    def end_training(self, run: TrainingRun, config: DpSgdConfig) -> None:
        to_standard = getattr(run.model, "to_standard_module", None)
        if callable(to_standard):
            run.model = to_standard()  # removes Opacus' hooks and per-sample gradient buffers
        eps, order = epsilon_spent(config.noise_multiplier, 1.0, int(run.records["steps"]), config.delta)
        run.records.update(epsilon=eps, rdp_order=order,
                           note=None if eps is not None else "noise_multiplier 0: clipping only, no finite epsilon")
        if eps is not None and not math.isfinite(eps):
            run.records["epsilon"] = None
