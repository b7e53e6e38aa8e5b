"""Trivial baselines, registered as ordinary attacks: what an attacker gets without running an attack.

They read only what any attacker has (the released weights and the input shape) and go through the same pipeline,
evaluation and leaderboards as the attacks, so every table shows how far an attack is above them
(docs/calibration.md):

* ``weight_rows``: the rows of the first layer's weight matrix, both signs, reshaped to images. Each row is the
  direction a first-layer neuron responds to; after training on few images these often resemble training images
  (Haim et al. show rows of a trained MLP next to their reconstructions).
* ``init_only``: the starting candidates, returned unchanged: what the init regime alone scores (partition and
  mixture starts are real images; a gaussian start is noise).
* ``data_prior``: class prototypes and blurred averages of the starting candidates of each label
  (reconbench/evaluation/prior.py): with a ``partition`` start, non-member images of the same distribution, so
  the row shows what the data prior alone scores, without any member information (docs/calibration.md#the-data-prior).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from reconbench import hookimpl
from reconbench.config import option
from reconbench.errors import IncompatibleError
from reconbench.evaluation.prior import prior_candidates
from reconbench.interfaces import Attack, AttackOutput, AttackTarget, NoOptions, ProgressFn, ThreatModel

ALL_TASKS = frozenset({"binary", "multiclass", "regression"})

#: the target `reconbench run --attack BASELINE` trains without --model: the quick start's (multiclass_kkt's default
#: target, kept equal by a test), a fully connected digits MLP trained in seconds, so a baseline's numbers sit beside
#: the quick start's attack on the same cached target
QUICK_START_TARGET: dict[str, Any] = {
    "problem": {"dataset": "digits", "task": "multiclass", "n_per_class": 1},
    "family": "mlp", "model": {"widths": [1000]},
    "train": {"steps": 5000, "lr": 0.05, "schedule": "inverse_loss"}}


def _quick_start_target() -> dict[str, Any] | None:
    return copy.deepcopy(QUICK_START_TARGET)


def first_image_layer(target: AttackTarget) -> nn.Linear | None:
    """The first fully connected layer that reads the flattened image (None if the model has no such layer)."""
    size = 1
    for s in target.knowledge.input_shape:
        size *= int(s)
    for module in target.model.modules():
        if isinstance(module, nn.Linear) and module.in_features == size:
            return module
    return None


def signed_rows(weight: torch.Tensor, importance: torch.Tensor, m: int) -> torch.Tensor:
    """m rows taken from [w_1, -w_1, w_2, -w_2, ...] in decreasing importance (cycled if m > 2h)."""
    order = torch.argsort(importance, descending=True, stable=True)
    rows = weight[order]
    both = torch.stack([rows, -rows], 1).reshape(-1, weight.shape[1])
    idx = torch.arange(m) % both.shape[0]
    return both[idx]


@dataclass
class WeightRowsConfig:
    rms: float = option(0.2, "each row is scaled to this root-mean-square pixel value (centred space); the matching "
                             "and correlation are scale-free, the displayed SSIM is not")
    rank: str = option("outgoing", "which rows first: outgoing (|row| times the norm of its outgoing weights, "
                                   "when the next layer reads it directly) or norm (|row| only)")


@dataclass(frozen=True)
class WeightRows(Attack[WeightRowsConfig]):
    name: str = "weight_rows"
    description: str = ("baseline: first-layer weight rows, both signs, as images (most important rows first); "
                        "reads only the weights")
    needs: frozenset[str] = frozenset()
    threat: ThreatModel = ThreatModel()   # final weights only
    tasks: frozenset[str] = ALL_TASKS
    config_cls: type[WeightRowsConfig] = WeightRowsConfig
    default_recipe: dict[str, Any] | None = field(default_factory=_quick_start_target)

    def check(self, target: AttackTarget) -> None:
        if first_image_layer(target) is None:
            raise IncompatibleError(f"weight_rows needs a fully connected first layer reading the flattened image; "
                                    f"the {target.family!r} model has none (use init_only as its baseline)")

    def run(self, target: AttackTarget, x0: torch.Tensor, labels: torch.Tensor, config: WeightRowsConfig, *,
            generator: torch.Generator, progress: ProgressFn | None = None) -> AttackOutput:
        if config.rank not in ("outgoing", "norm"):
            raise IncompatibleError(f"weight_rows.rank must be outgoing or norm, got {config.rank!r}")
        layer = first_image_layer(target)
        if layer is None:
            self.check(target)
            raise AssertionError("unreachable")
        with torch.no_grad():
            weight = layer.weight.detach().to(x0.dtype).to(x0.device)
            importance = weight.norm(dim=1)
            outgoing = _outgoing_norms(target, layer) if config.rank == "outgoing" else None
            if outgoing is not None:
                importance = importance * outgoing.to(importance)
            rows = signed_rows(weight, importance, x0.shape[0])
            rms = rows.pow(2).mean(1, keepdim=True).sqrt()
            rows = rows / torch.where(rms > 0, rms, torch.ones_like(rms)) * config.rms
        if progress is not None:
            progress(1, 1)
        return AttackOutput(candidates=rows.reshape(x0.shape).clone(), labels=labels.clone(), final_loss=0.0,
                            steps=0, message="first-layer weight rows")


def _outgoing_norms(target: AttackTarget, layer: nn.Linear) -> torch.Tensor | None:
    """Column norms of the layer that reads ``layer``'s units, when the model is a plain chain of linear layers."""
    chain = target.model.linear_chain()
    if not chain or chain[0] is not layer:
        return None
    nxt = chain[1] if len(chain) > 1 else None
    return None if nxt is None else nxt.weight.detach().norm(dim=0)


@dataclass(frozen=True)
class InitOnly(Attack[NoOptions]):
    name: str = "init_only"
    description: str = "baseline: the starting candidates returned unchanged (what the init regime alone scores)"
    needs: frozenset[str] = frozenset()
    threat: ThreatModel = ThreatModel()   # final weights only
    tasks: frozenset[str] = ALL_TASKS
    config_cls: type[NoOptions] = NoOptions
    default_recipe: dict[str, Any] | None = field(default_factory=_quick_start_target)

    def run(self, target: AttackTarget, x0: torch.Tensor, labels: torch.Tensor, config: NoOptions, *,
            generator: torch.Generator, progress: ProgressFn | None = None) -> AttackOutput:
        if progress is not None:
            progress(1, 1)
        return AttackOutput(candidates=x0.detach().clone(), labels=labels.clone(), final_loss=0.0, steps=0,
                            message="starting candidates, unchanged")


@dataclass
class DataPriorConfig:
    seed: int = option(0, "seed of the random averages and blurs (the search's generator is not used, so a run is "
                          "reproducible from this alone)", ge=0)


@dataclass(frozen=True)
class DataPrior(Attack[DataPriorConfig]):
    name: str = "data_prior"
    description: str = ("baseline: class prototypes and blurred averages of the starting candidates of each label "
                        "(with a partition start: non-member images); no member information")
    needs: frozenset[str] = frozenset({"labels"})
    threat: ThreatModel = ThreatModel(labels=True)   # the labels of the candidates it averages
    tasks: frozenset[str] = ALL_TASKS
    config_cls: type[DataPriorConfig] = DataPriorConfig
    default_recipe: dict[str, Any] | None = field(default_factory=_quick_start_target)

    def run(self, target: AttackTarget, x0: torch.Tensor, labels: torch.Tensor, config: DataPriorConfig, *,
            generator: torch.Generator, progress: ProgressFn | None = None) -> AttackOutput:
        rng = np.random.default_rng([config.seed, int(x0.shape[0])])
        lab = labels.detach().cpu().numpy().astype(np.int64)
        cand = prior_candidates(x0.detach().cpu(), lab, lab, rng).to(x0.dtype).to(x0.device)
        if progress is not None:
            progress(1, 1)
        return AttackOutput(candidates=cand, labels=labels.clone(), final_loss=0.0, steps=0,
                            message="class prototypes and blurred averages of the starting candidates")


@dataclass(frozen=True)
class ReluKinks(Attack[NoOptions]):
    """Smorodinsky, Vardi and Safran's one-dimensional reading: a two-layer ReLU net on scalar inputs is piecewise
    linear with a kink at -b_j / w_j for each hidden unit; near max margin the kinks sit at training points. On
    d-dimensional inputs a unit's kink is the hyperplane w_j . x + b_j = 0, and its candidate is the point of that
    hyperplane nearest the origin, -b_j w_j / ||w_j||^2 (the same point when d = 1);
    docs/method/shallow-theorems.md#one-dimensional-data-the-kinks-are-at-training-points."""

    name: str = "relu_kinks"
    description: str = ("baseline: the kinks of the first ReLU layer, -b_j w_j / ||w_j||^2 (-b_j / w_j on scalar "
                        "inputs), units with the largest |outgoing weight| x ||(w_j, b_j)|| first; reads only the "
                        "weights")
    needs: frozenset[str] = frozenset()
    threat: ThreatModel = ThreatModel()   # final weights only
    tasks: frozenset[str] = ALL_TASKS
    config_cls: type[NoOptions] = NoOptions
    default_recipe: dict[str, Any] | None = field(default_factory=_quick_start_target)
    theorems: frozenset[str] = frozenset({"one_dimensional_kinks"})

    def check(self, target: AttackTarget) -> None:
        layer = first_image_layer(target)
        if layer is None or layer.bias is None:
            raise IncompatibleError(f"relu_kinks reads the kinks of a fully connected first layer with a bias; the "
                                    f"{target.family!r} model has none (use weight_rows or init_only as its baseline)")

    def run(self, target: AttackTarget, x0: torch.Tensor, labels: torch.Tensor, config: NoOptions, *,
            generator: torch.Generator, progress: ProgressFn | None = None) -> AttackOutput:
        self.check(target)
        layer = first_image_layer(target)
        assert layer is not None and layer.bias is not None
        with torch.no_grad():
            w, b = layer.weight.detach().to(x0), layer.bias.detach().to(x0)
            norm2 = (w ** 2).sum(dim=1)
            out = _outgoing_norms(target, layer)
            importance = torch.sqrt(norm2 + b ** 2) * (out.to(w) if out is not None else 1.0)
            importance = torch.where(norm2 > 0, importance, torch.zeros_like(importance))
            order = torch.argsort(importance, descending=True)[: max(1, int((importance > 0).sum()))]
            kinks = -b[order, None] * w[order] / torch.where(norm2[order] > 0, norm2[order], 1.0)[:, None]
            picked = kinks[torch.arange(x0.shape[0]) % len(kinks)]   # fewer kinks than candidates: repeated
        if progress is not None:
            progress(1, 1)
        return AttackOutput(candidates=picked.reshape(x0.shape).clone(), labels=labels.clone(), final_loss=0.0,
                            steps=0, message="kinks of the first ReLU layer")


BASELINES = [WeightRows(), InitOnly(), DataPrior(), ReluKinks()]


@hookimpl
def register_attacks(register):  # type: ignore[no-untyped-def]
    for attack in BASELINES:
        register(attack)
