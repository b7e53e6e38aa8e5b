"""Model cards: weights as safetensors plus a JSON card. Loading a card never executes pickled code."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from reconbench import __version__, plugins
from reconbench.errors import ModelCardError
from reconbench.interfaces import Knowledge
from reconbench.targets.data_files import file_digest
from reconbench.targets.nets import TargetNet
from reconbench.targets.problems import Problem, build_problem
from reconbench.targets.training import DTYPES, TargetRecipe, TrainResult

CARD_FORMAT = "reconbench-card/1"
CARD_FILE, WEIGHTS_FILE, MEAN_FILE = "card.json", "weights.safetensors", "mean_image.safetensors"
LEGACY_PREFIXES = ("module.", "_module.", "_orig_mod.")


@dataclass
class ModelCard:
    path: Path
    data: dict[str, Any]

    @property
    def recipe(self) -> TargetRecipe:
        return TargetRecipe.from_dict(self.data["recipe"])

    @property
    def task(self) -> str:
        return str(self.data["task"])

    @property
    def dtype(self) -> torch.dtype:
        return DTYPES[self.data["recipe"]["train"]["dtype"]]

    def knowledge(self) -> Knowledge:
        """Everything public about the release; the harness hands an attack only what it declares it needs."""
        return Knowledge(
            task=self.task, num_classes=int(self.data["num_classes"]), out_dim=int(self.data["out_dim"]),
            input_shape=tuple(self.data["input_shape"]),  # type: ignore[arg-type]
            class_counts=list(self.data["class_counts"]), loss=self.data["metrics"].get("loss_name"),
            weight_decay=float(self.data["recipe"]["train"]["weight_decay"]), mean_image=self.mean_image(),
        )

    def mean_image(self) -> torch.Tensor:
        return _load_tensors(self.path / MEAN_FILE, self.data["mean_image"]["sha256"])["mean"]

    def load_model(self, dtype: torch.dtype | None = None) -> TargetNet:
        """Rebuild the architecture from the card and load the weights, checking hashes, names and shapes."""
        family = plugins.get("models", self.data["family"])
        model = family.build(tuple(self.data["input_shape"]), int(self.data["out_dim"]), dict(self.data["model_spec"]))
        state = _load_tensors(self.path / WEIGHTS_FILE, self.data["weights"]["sha256"])
        _check_state(model, state, self.path)
        model.load_state_dict(state)
        return model.to(dtype or self.dtype).eval()

    def problem(self, data_root: str | Path | None = None) -> Problem:
        """Rebuild the training problem (needs the data set) and check that it matches the recorded indices."""
        problem = build_problem(self.recipe.problem, data_root)
        if problem.train_indices.tolist() != self.data["problem"]["indices"]["train"]:
            raise ModelCardError(
                f"{self.path}: the training subset rebuilt from {self.recipe.problem.dataset!r} differs from the one "
                "recorded in the card; the data files differ from those the target was trained on")
        return problem


def _load_tensors(path: Path, sha256: str | None) -> dict[str, torch.Tensor]:
    if not path.exists():
        raise ModelCardError(f"{path} is missing; a model card needs its {path.name} beside card.json")
    if sha256 and file_digest(path, "sha256") != sha256:
        raise ModelCardError(f"{path} does not match the sha256 recorded in card.json; the file was changed or "
                             "belongs to another card. Re-train, or restore the original file")
    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError) as exc:
        raise ModelCardError(f"{path} is not a readable safetensors file ({exc})") from exc


def _check_state(model: torch.nn.Module, state: dict[str, torch.Tensor], where: Path | str) -> None:
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    got = {k: tuple(v.shape) for k, v in state.items()}
    missing, extra = sorted(set(expected) - set(got)), sorted(set(got) - set(expected))
    if missing or extra:
        raise ModelCardError(f"{where}: weights do not match the card's architecture "
                             f"(missing {missing[:4]}, unexpected {extra[:4]})")
    bad = [k for k in expected if expected[k] != got[k]]
    if bad:
        k = bad[0]
        raise ModelCardError(f"{where}: tensor {k!r} has shape {got[k]} in the weights but {expected[k]} in the "
                             "card's architecture; the card and its weights belong to different models")


def save_card(out_dir: str | Path, recipe: TargetRecipe, problem: Problem, result: TrainResult) -> ModelCard:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().contiguous().cpu() for k, v in result.model.state_dict().items()}
    save_file(state, str(out / WEIGHTS_FILE))
    save_file({"mean": torch.as_tensor(problem.mean).contiguous()}, str(out / MEAN_FILE))
    family = plugins.get("models", recipe.family)
    spec = {**family.default_spec(), **recipe.model}
    data = {
        "format": CARD_FORMAT,
        "reconbench_version": __version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "recipe": recipe.to_dict(),
        "recipe_key": recipe.key(),
        "family": recipe.family,
        "model_spec": spec,
        "homogeneity_degree": family.homogeneity_degree(spec),
        "task": problem.task,
        "num_classes": problem.num_classes,
        "out_dim": problem.out_dim,
        "input_shape": list(problem.image_shape),
        "class_counts": problem.class_counts,
        "problem": {"spec": problem.spec.to_dict(), "indices": problem.indices_record(),
                    "train_labels": problem.train_labels.tolist()},
        "weights": {"file": WEIGHTS_FILE, "sha256": file_digest(out / WEIGHTS_FILE, "sha256"),
                    "tensors": {k: list(v.shape) for k, v in state.items()}},
        "mean_image": {"file": MEAN_FILE, "sha256": file_digest(out / MEAN_FILE, "sha256")},
        "metrics": result.metrics,
        "history": result.history,
    }
    (out / CARD_FILE).write_text(json.dumps(data, indent=1, default=_json_default))
    return ModelCard(out, data)


def _json_default(o: Any) -> Any:
    if isinstance(o, (np.integer, np.floating)):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def load_card(path: str | Path) -> ModelCard:
    p = Path(path)
    if p.is_dir():
        p = p / CARD_FILE
    if not p.exists():
        raise ModelCardError(f"no model card at {p}; pass the folder written by `reconbench train` (it holds card.json)")
    try:
        data = json.loads(p.read_text())
    except json.JSONDecodeError as exc:
        raise ModelCardError(f"{p} is not valid JSON ({exc})") from exc
    if data.get("format") != CARD_FORMAT:
        raise ModelCardError(f"{p} is not a reconbench model card (format {data.get('format')!r}, expected {CARD_FORMAT})")
    return ModelCard(p.parent, data)


def load_legacy_checkpoint(path: str | Path, model: torch.nn.Module) -> torch.nn.Module:
    """Load a reference-code ``.pth`` checkpoint into ``model``, only through ``torch.load(weights_only=True)``.

    The ``module.``, ``_module.`` and ``_orig_mod.`` prefixes (DataParallel, Opacus, torch.compile) are stripped,
    the legacy ``convnet`` name is mapped to ``layers``, and a ``{"state_dict": ...}`` wrapper is unwrapped.
    """
    try:
        obj = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises UnpicklingError, RuntimeError, ... for unsafe or corrupt files
        raise ModelCardError(f"{path}: cannot be loaded with weights_only=True ({exc}); reconbench never unpickles "
                             "arbitrary objects. Convert it to safetensors where you trust it") from exc
    state = obj.get("state_dict", obj) if isinstance(obj, dict) else None
    if not isinstance(state, dict):
        raise ModelCardError(f"{path}: expected a state dict, got {type(obj).__name__}")
    clean = {}
    for k, v in state.items():
        changed = True
        while changed:
            changed = False
            for pre in LEGACY_PREFIXES:
                if k.startswith(pre):
                    k, changed = k[len(pre):], True
        if k.startswith("convnet."):
            k = "layers." + k[len("convnet."):]
        clean[k] = v
    _check_state(model, clean, path)
    model.load_state_dict(clean)
    return model
