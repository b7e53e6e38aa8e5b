"""Model cards: weights as safetensors plus a JSON card. Loading a card never executes pickled code."""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from reconbench import __version__, plugins
from reconbench.data import Problem
from reconbench.errors import ModelCardError, ReconbenchError
from reconbench.interfaces import Knowledge
from reconbench.nets import TargetNet
from reconbench.preflight import card_size
from reconbench.provenance import save_tensors_atomic, write_json
from reconbench.records.model_card import CARD_FILE as CARD_RECORD_FILE
from reconbench.records.model_card import CardData
from reconbench.targets.data_files import file_digest
from reconbench.targets.problems import build_problem
from reconbench.targets.recipe import DTYPES, TargetRecipe, recorded_recipe
from reconbench.targets.training import TrainResult

CARD_FORMAT = "reconbench-card/1"
CARD_FILE, WEIGHTS_FILE, MEAN_FILE = "card.json", "weights.safetensors", "mean_image.safetensors"
LEGACY_PREFIXES = ("module.", "_module.", "_orig_mod.")


@dataclass
class ModelCard:
    path: Path
    data: dict[str, Any]
    #: ``data`` read strictly as its record (:func:`check_card_data` gives it; else read on first use)
    checked: CardData | None = field(default=None, repr=False, compare=False)

    @property
    def record(self) -> CardData:
        """The card's JSON as its typed record, read once."""
        if self.checked is None:
            self.checked = read_card_record(self.data, self.path)
        return self.checked

    @property
    def recipe(self) -> TargetRecipe:
        return recorded_recipe(self.data["recipe"])

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
            class_counts=list(self.data["class_counts"]), loss=self.record.metrics.loss_name,
            weight_decay=float(self.data["recipe"]["train"]["weight_decay"]), mean_image=self.mean_image(),
        )

    def mean_image(self) -> torch.Tensor:
        tensors = _load_tensors(self.path / MEAN_FILE, self.data["mean_image"]["sha256"])
        if "mean" not in tensors:
            raise ModelCardError(f"{self.path / MEAN_FILE} holds no `mean` tensor; re-train the target")
        _check_floats(tensors, self.path / MEAN_FILE)
        return tensors["mean"]

    def load_model(self, dtype: torch.dtype | None = None) -> TargetNet:
        """Rebuild the architecture from the card and load the weights, checking hashes, names and shapes."""
        card_size(self.data)  # refuses an architecture that cannot fit in memory, before building it
        family = plugins.model(self.data["family"])
        model = family.build(tuple(self.data["input_shape"]), int(self.data["out_dim"]), dict(self.data["model_spec"]))
        state = _load_tensors(self.path / WEIGHTS_FILE, self.data["weights"]["sha256"])
        _check_floats(state, self.path / WEIGHTS_FILE)
        _check_state(model, state, self.path)
        model.load_state_dict(state)
        return model.to(dtype or self.dtype).eval()

    def initial_model(self, dtype: torch.dtype | None = None) -> TargetNet:
        """The target's weights before training, regenerated from the recipe: the family's init drawn from the
        training seed and cast to the training dtype, exactly as the trainer starts
        (:func:`reconbench.targets.training.build_model`)."""
        card_size(self.data)
        family = plugins.model(self.data["family"])
        gen = torch.Generator().manual_seed(self.recipe.train.seed)
        model = family.build(tuple(self.data["input_shape"]), int(self.data["out_dim"]), dict(self.data["model_spec"]),
                             generator=gen)
        return model.to(self.dtype).to(dtype or self.dtype).eval()

    def problem(self, data_root: str | Path | None = None) -> Problem:
        """Rebuild the training problem (needs the data set) and check that it matches the recorded indices."""
        problem = build_problem(self.recipe.problem, data_root)
        where = f"{self.path}: the training subset rebuilt from {self.recipe.problem.dataset!r}"
        if problem.train_indices.tolist() != self.data["problem"]["indices"]["train"]:
            raise ModelCardError(f"{where} selects other images than the card records; the data files differ from "
                                 "those the target was trained on (point --data-root at the original files)")
        recorded = self.record.problem.train_sha256
        if recorded is not None and recorded != training_pixels_sha256(problem):
            raise ModelCardError(f"{where} has other pixel values or labels than the target was trained on (hash "
                                 "of the selected images differs); the data files were changed or replaced, "
                                 "restore the original files")
        for key, got in (("train_labels", problem.train_labels.tolist()), ("num_classes", problem.num_classes),
                         ("class_counts", problem.class_counts), ("out_dim", problem.out_dim)):
            stored = self.data["problem"]["train_labels"] if key == "train_labels" else self.data[key]
            if stored != got:
                raise ModelCardError(f"{where} gives {key} {_short(got)}, but the card says {_short(stored)}; the card "
                                     "was edited or belongs to other data. Re-train, or restore the original card")
        return problem


def _short(v: object) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def training_pixels_sha256(problem: Problem) -> str:
    """sha256 of the selected training images (float64, C order) and their labels: the content a target saw."""
    h = hashlib.sha256(np.ascontiguousarray(problem.train_images, dtype=np.float64).tobytes())
    h.update(np.ascontiguousarray(problem.train_labels, dtype=np.int64).tobytes())
    return h.hexdigest()


def content_sha256(data: Mapping[str, Any]) -> str:
    """sha256 of every card field that determines scores (recipe, problem, shapes, classes, file hashes), over the
    JSON as written (a field the card lacks hashes as null)."""
    fields = {k: data.get(k) for k in HASHED_FIELDS}
    return hashlib.sha256(json.dumps(fields, sort_keys=True, default=_json_default).encode()).hexdigest()


#: the card field holding :func:`metrics_sha256` (cards written before it have none and are read as before)
METRICS_HASH_FIELD = "metrics_sha256"


def metrics_sha256(data: Mapping[str, Any]) -> str:
    """sha256 of the card's ``metrics`` (train and test error, the per-image margins, the convergence certificate:
    what evaluations and the regime gate read), beside ``content_sha256``, which does not cover them: that hash is
    recorded in every result and board, so it keeps its definition."""
    text = json.dumps(data["metrics"], sort_keys=True, default=_json_default, allow_nan=True)
    return hashlib.sha256(text.encode()).hexdigest()


#: integer buffers a released model may carry: BatchNorm's step counter (unused by the forward pass in eval mode)
INTEGER_BUFFERS = ("num_batches_tracked",)


def _check_floats(tensors: dict[str, torch.Tensor], where: Path) -> None:
    for k, v in tensors.items():
        if k.rsplit(".", 1)[-1] in INTEGER_BUFFERS and not v.is_floating_point() and v.dtype != torch.bool:
            continue
        if v.dtype not in (torch.float32, torch.float64):
            raise ModelCardError(f"{where}: tensor {k!r} has dtype {str(v.dtype).replace('torch.', '')}; released "
                                 "weights must be float32 or float64. Re-train, or convert the weights")
        if not bool(torch.isfinite(v).all()):
            raise ModelCardError(f"{where}: tensor {k!r} holds NaN or infinite values; the target diverged or the "
                                 "file was damaged. Re-train it (lower --lr, or check the defense options)")


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


def write_card_tensors(out: Path, model: TargetNet, problem: Problem) -> dict[str, torch.Tensor]:
    """The weights and mean image of a card's folder ``out``, its card.json removed first: until the new card is
    complete the folder holds no card, never one whose weights are not its own (each file is written whole or not
    at all: provenance.write_bytes_atomic). The weights written, by name."""
    out.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    (out / CARD_FILE).unlink(missing_ok=True)
    save_tensors_atomic(state, out / WEIGHTS_FILE)
    save_tensors_atomic({"mean": torch.as_tensor(problem.mean).contiguous()}, out / MEAN_FILE)
    return state


def save_card(out_dir: str | Path, recipe: TargetRecipe, problem: Problem, result: TrainResult,
              weights_from: ModelCard | None = None, *,
              machine: Mapping[str, Any] | None | Literal["here"] = "here") -> ModelCard:
    """Write the weights, mean image and card of a trained target to ``out_dir``. The card records the machine of
    this process's training, or, given ``weights_from`` (the card whose weights the training started from and kept:
    a release-only defense's undefended target, maybe trained by another process), that card's (none where it
    records none); ``machine``: the machine that trained the weights where it was not this process (a target trained
    in pieces: its last piece's), None where it is not known (the card leaves the field out)."""
    out = Path(out_dir)
    state = write_card_tensors(out, result.model, problem)
    family = plugins.model(recipe.family)
    spec = {**family.default_spec(), **recipe.model}
    data: dict[str, Any] = {
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
    data["problem"]["train_sha256"] = training_pixels_sha256(problem)
    data["p_over_dn"] = p_over_dn(result.model, problem)
    data["content_sha256"] = content_sha256(data)
    data[METRICS_HASH_FIELD] = metrics_sha256(data)
    if weights_from is not None:
        trained_on = weights_from.data.get(TRAINING_MACHINE_FIELD)
    else:
        trained_on = training_machine() if machine == "here" else machine
    if trained_on is not None:
        data[TRAINING_MACHINE_FIELD] = dict(trained_on)
    write_json(out / CARD_FILE, data)
    return ModelCard(out, data)


#: the card field recording the BLAS path, torch version and processor of the training (not in content_sha256)
TRAINING_MACHINE_FIELD = "training_machine"


def training_machine() -> dict[str, Any]:
    """The machine side of a training in this process, as a card records it (``TrainingMachine``): torch's BLAS,
    MKL's version and kernel branch and whether MKL's fast path is on (as ``reconbench doctor`` and every run's
    provenance name them, ``reconbench/blas.py``), torch's version and the processor."""
    from reconbench import blas, fast_blas

    lib = blas.torch_blas()
    version = lib["mkl_version"].split("-")[0].strip() if lib["mkl_version"] else None
    return {"blas": lib["blas"], "mkl_version": version, "branch": blas.mkl_branch(),
            "fast_path": fast_blas.active(), "torch_version": torch.__version__, "processor": blas.cpu_model(),
            "cpu_capability": lib["cpu_capability"]}


def p_over_dn(model: TargetNet, problem: Problem) -> dict[str, float | int]:
    """The axis of Iurada et al.'s law: p trained parameters (frozen buffers such as random features excluded) over
    d n, the input dimension times the number of training points (docs/method/projection-law.md#the-law)."""
    p = sum(q.numel() for q in model.parameters())
    d, n = math.prod(problem.image_shape), problem.n
    return {"p": p, "d": d, "n": n, "ratio": p / (d * n)}


def card_p_over_dn(data: Mapping[str, Any] | CardData) -> dict[str, float | int] | None:
    """A card's ``p_over_dn``; for a card written before it was recorded, the same numbers from the card's trained
    parameter count, input shape and class counts (None when the card lacks one of them)."""
    card = data if isinstance(data, CardData) else read_card_record(data, "a model card")
    if card.p_over_dn is not None:
        return dict(card.p_over_dn.to_dict())
    p, shape, counts = card.metrics.param_count, card.input_shape, card.class_counts
    if p is None or not shape or not counts:
        return None
    d, n = math.prod(int(s) for s in shape), sum(int(c) for c in counts)
    return {"p": p, "d": d, "n": n, "ratio": p / (d * n)}


def _json_default(o: object) -> Any:
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
    if not p.is_file():
        raise ModelCardError(f"{p} is a folder, not a model card file; pass the folder written by `reconbench train` "
                             "(it holds the file card.json)")
    try:
        data = json.loads(p.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ModelCardError(f"{p} is not valid JSON ({exc}); restore the card written by `reconbench train`") from exc
    return ModelCard(p.parent, data, check_card_data(data, p))


def read_card_record(data: object, where: Path | str) -> CardData:
    """A card's JSON read strictly as its record: a key it does not name or a value of the wrong type is a one-line
    :class:`ModelCardError` naming the file, the field and the fix."""
    try:
        return CARD_RECORD_FILE.decode(data, where)
    except ModelCardError:
        raise
    except ReconbenchError as exc:
        raise ModelCardError(str(exc)) from None


def check_card_data(data: object, where: Path | str) -> CardData:
    """Schema of a card: the fields the harness reads, with their types; and the content hash when recorded. The
    card's record, read strictly."""
    if not isinstance(data, dict):
        raise ModelCardError(f"{where}: a model card is a JSON object, got a {type(data).__name__}; restore the card "
                             "written by `reconbench train`")
    stamp = CARD_RECORD_FILE.stamp(data)
    if stamp != CARD_FORMAT:
        raise ModelCardError(f"{where} is not a reconbench model card (format {stamp!r}, expected {CARD_FORMAT})")
    missing = [k for k in REQUIRED_FIELDS if k not in data]
    if missing:
        raise ModelCardError(f"{where}: field {missing[0]} is missing; the card is damaged or was edited. Re-train, "
                             "or restore the original card")
    card = read_card_record(data, where)
    for key, value, kind in _schema(card):
        if not _fits(value, kind):
            raise ModelCardError(f"{where}: field {key} is {_short(value)}, expected {kind}; the card is damaged or "
                                 "was edited. Re-train, or restore the original card")
    shape = card.input_shape or []
    if not (len(shape) == 3 and all(s >= 1 for s in shape)):
        raise ModelCardError(f"{where}: input_shape {shape} is not (C, H, W); restore the original card")
    if card.content_sha256 is not None and card.content_sha256 != content_sha256(data):
        raise ModelCardError(f"{where}: the card's fields do not match its content_sha256 (a field that determines "
                             "scores was edited); re-train, or restore the original card")
    if card.metrics_sha256 is not None and card.metrics_sha256 != metrics_sha256(data):
        raise ModelCardError(f"{where}: the card's metrics (test error, margins, certificate) do not match its "
                             f"{METRICS_HASH_FIELD} (they were edited); re-train, or restore the original card")
    recipe_hash = card.recipe.key() if card.recipe is not None else None
    if recipe_hash != card.recipe_key:
        raise ModelCardError(f"{where}: recipe_key {card.recipe_key!r} does not match its recipe (hash {recipe_hash}); "
                             "the card was edited. Re-train, or restore the original card")
    return card


def _fits(value: object, kind: str) -> bool:
    if kind == "an object":
        return isinstance(value, Mapping)
    if kind == "a recipe":
        return isinstance(value, TargetRecipe)
    if kind == "a string":
        return isinstance(value, str)
    if kind == "a positive integer":
        return isinstance(value, int) and not isinstance(value, bool) and value >= 1
    if kind == "a list of integers":
        return isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    if kind == "a 64-digit sha256":
        return isinstance(value, str) and len(value) == 64
    return True


#: the card fields the harness reads: a card lacking one is refused (their types are the record's)
REQUIRED_FIELDS = ("recipe", "recipe_key", "family", "model_spec", "task", "num_classes", "out_dim", "input_shape",
                   "class_counts", "problem", "weights", "mean_image", "metrics")


def _schema(card: CardData) -> tuple[tuple[str, object, str], ...]:
    """(dotted field, its value, expected kind) of every card field the harness reads, beyond its JSON type."""
    return (
        ("recipe", card.recipe, "a recipe"), ("recipe_key", card.recipe_key, "a string"), ("family", card.family, "a string"),
        ("model_spec", card.model_spec, "an object"), ("task", card.task, "a string"),
        ("num_classes", card.num_classes, "a positive integer"), ("out_dim", card.out_dim, "a positive integer"),
        ("input_shape", card.input_shape, "a list of integers"),
        ("class_counts", card.class_counts, "a list of integers"),
        ("problem.indices.train", card.problem.indices.train, "a list of integers"),
        ("problem.train_labels", card.problem.train_labels, "a list of integers"),
        ("weights.sha256", None if card.weights is None else card.weights.sha256, "a 64-digit sha256"),
        ("mean_image.sha256", None if card.mean_image is None else card.mean_image.sha256, "a 64-digit sha256"),
    )
#: card fields covered by content_sha256
HASHED_FIELDS = ("recipe", "recipe_key", "family", "model_spec", "homogeneity_degree", "task", "num_classes",
                 "out_dim", "input_shape", "class_counts", "problem", "weights", "mean_image")


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
