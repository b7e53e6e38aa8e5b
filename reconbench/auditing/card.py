"""The audited release as the run pipeline reads a target: a model card built in memory from the owner's weights,
architecture and data, so that ``reconbench.runs`` attacks it and ``reconbench.evaluation`` scores it exactly as it
does a target reconbench trained."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from reconbench import plugins
from reconbench.auditing.model import check_layers, fit_state, fold_input_factor
from reconbench.data import Problem
from reconbench.interfaces import Knowledge
from reconbench.nets import TargetNet
from reconbench.targets.cards import ModelCard
from reconbench.targets.losses import get_loss, margins


@dataclass
class AuditCard(ModelCard):
    """A card whose weights come from the owner's file and whose problem is the owner's data."""

    state: dict[str, torch.Tensor] = field(default_factory=dict)
    factor: Any = None                                   # (C,) input factor scale / std, folded into the model
    built: Problem | None = None

    @property
    def dtype(self) -> torch.dtype:
        return torch.float64

    def knowledge(self) -> Knowledge:
        assert self.built is not None
        p = self.built
        return Knowledge(task=p.task, num_classes=p.num_classes, out_dim=p.out_dim, input_shape=p.image_shape,
                         class_counts=p.class_counts, loss=self.data["metrics"]["loss_name"],
                         weight_decay=None, mean_image=self.mean_image())  # the owner's weight decay is not known

    def mean_image(self) -> torch.Tensor:
        assert self.built is not None
        return torch.as_tensor(self.built.mean)

    def load_model(self, dtype: torch.dtype | None = None) -> TargetNet:
        family = plugins.model(self.data["family"])
        model = family.build(tuple(self.data["input_shape"]), int(self.data["out_dim"]), dict(self.data["model_spec"]))
        check_layers(model, self.data["family"])
        model = model.double()  # before loading: float64 weights keep every digit
        model.load_state_dict(fit_state(model, self.state, "the weights"))
        model = fold_input_factor(model, self.data["family"], self.factor)
        return model.to(dtype or torch.float64).eval()

    def problem(self, data_root: str | Path | None = None) -> Problem:
        assert self.built is not None
        return self.built


def audit_card(out: Path, family: str, spec: dict[str, Any], state: dict[str, torch.Tensor], problem: Problem,
               factor: object, loss: str | None, weights_sha256: str, record: dict[str, Any]) -> AuditCard:
    """The in-memory card of an audit; ``recipe_key`` hashes the weights, the data and the preprocessing."""
    fam = plugins.model(family)
    loss_name, loss_fn = get_loss(loss, problem.task)
    data: dict[str, Any] = {
        "family": family, "model_spec": spec, "task": problem.task, "num_classes": problem.num_classes,
        "out_dim": problem.out_dim, "input_shape": list(problem.image_shape), "class_counts": problem.class_counts,
        "homogeneity_degree": fam.homogeneity_degree(spec) if family != "timm" and ":" not in family else None,
        "recipe": record, "metrics": {"loss_name": loss_name},
    }
    data["recipe_key"] = "audit-" + hashlib.sha256(json.dumps(
        {"weights": weights_sha256, **record}, sort_keys=True, default=str).encode()).hexdigest()[:12]
    data["content_sha256"] = None
    card = AuditCard(out, data, state=state, factor=factor, built=problem)
    model = card.load_model()
    with torch.no_grad():
        x = problem.x_train(torch.float64)
        y = torch.as_tensor(problem.train_labels)
        outputs = model(x)
        data["metrics"].update({
            "margins": margins(outputs, y, problem.task).tolist(),
            "train_loss": float(loss_fn(outputs, problem.targets(problem.train_labels))),
            "param_count": model.param_count(),
        })
    return card
