"""A model card written out as an owner outside reconbench holds a model: plain weights and npz data, the input to
``reconbench audit`` (and the other half of the conversion check, docs/audit.md#the-conversion-check)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import save_file

from reconbench import plugins
from reconbench.provenance import check_writable
from reconbench.targets.cards import ModelCard
from reconbench.targets.training import build_model


def _images(unit: np.ndarray, uint8: bool) -> np.ndarray:
    """(N, C, H, W) images in [0, 1] as the file stores them: uint8 when the data set does (exact: k / 255), else
    float32 (exact for data sets stored as float32, such as digits' k / 16), channels last."""
    out = np.round(unit * 255.0).astype(np.uint8) if uint8 else unit.astype(np.float32)
    return out[:, 0] if out.shape[1] == 1 else np.ascontiguousarray(out.transpose(0, 2, 3, 1))


def toml_value(v: object) -> str:
    """A value as ``--model-set`` parses it back (TOML)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k} = {toml_value(x)}" for k, x in v.items()) + "}"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, str):
        return json.dumps(v)
    return repr(v)


def export_card(card: ModelCard, out: str | Path, data_root: str | Path | None = None) -> dict[str, Any]:
    """Write ``weights.safetensors``, ``init.safetensors`` (θ0, rebuilt from the recipe's seed), ``train.npz`` and
    ``held.npz`` (the decoys, then the held-out pool, in the order the card's problem holds them) into ``out``;
    returns their paths and the audit command."""
    folder = Path(out)
    problem = card.problem(data_root)
    check_writable(folder, "--out")
    uint8 = problem.source_images is not None and problem.source_images.dtype == np.uint8
    paths = {"weights": folder / "weights.safetensors", "init_weights": folder / "init.safetensors",
             "train": folder / "train.npz", "held_out": folder / "held.npz"}

    def tensors(model: torch.nn.Module) -> dict[str, torch.Tensor]:
        return {k: v.detach().contiguous() for k, v in model.state_dict().items()}

    save_file(tensors(card.load_model()), str(paths["weights"]))
    save_file(tensors(build_model(card.recipe, problem)), str(paths["init_weights"]))
    np.savez(paths["train"], images=_images(problem.train_images, uint8), labels=problem.train_labels)
    pool = problem.held_out_images(np.arange(len(problem.held_out_indices)))
    np.savez(paths["held_out"], images=_images(np.concatenate([problem.decoy_images, pool]), uint8),
             labels=np.concatenate([problem.decoy_labels, problem.held_out_labels]))
    family = card.data["family"]
    defaults = plugins.model(family).default_spec()
    spec = {k: v for k, v in card.data["model_spec"].items() if defaults.get(k, object()) != v}
    cert = card.record.metrics.certificate
    decay = cert.learned.init_decay if cert is not None and cert.learned is not None else 1.0
    args = ["reconbench", "audit", str(paths["weights"]), "--family", family]
    for k, v in spec.items():
        args += ["--model-set", f"{k}={toml_value(v)}"]
    args += ["--train", str(paths["train"]), "--held-out", str(paths["held_out"]), "--task", card.task,
             "--preprocess", "mean=train", "--loss", str(card.data["metrics"]["loss_name"]),
             "--init-weights", str(paths["init_weights"])]
    if decay != 1.0:
        args += ["--init-decay", repr(float(decay))]
    return {**paths, "command": shlex.join(args)}
