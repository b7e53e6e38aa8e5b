"""The metadata of a batched-training checkpoint (the ``reconbench`` entry of the safetensors header that
``targets/batched_training.py`` writes): the settings a checkpoint must match to be resumed, the step it reached, its
loss history, which targets diverged, and the caller's notes.

Version 1 (``reconbench-batched-training/1``) holds one loss, learning rate and weight decay for all its targets.
Version 2 (``reconbench-batched-training/2``) holds them one per target, as lists: a stack whose targets train with
their own settings. A checkpoint whose targets share all three (every one-target checkpoint, as training in pieces
writes them) is still written as version 1, so the files of readers that know only version 1 stay readable to them;
version 1 reads unchanged, since a single value is one of the forms version 2 allows."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from reconbench.records.model_card import TrainingMachine
from reconbench.records.record import FileFormat, Record

CHECKPOINT_FORMAT = "reconbench-batched-training/1"
#: the version whose loss, lr and weight decay may be one per target
PER_TARGET_FORMAT = "reconbench-batched-training/2"


@dataclass(frozen=True)
class HistoryPoint(Record):
    """The loss of each target of the checkpoint before a step."""

    step: int
    loss: list[float]


@dataclass(frozen=True)
class TrainerSettings(Record):
    """What a checkpoint must match to be resumed: the number of targets, n, loss, learning rate, weight decay (each
    one value for all targets, or one per target), the host's read interval, dtype, layer widths, input dimensions and
    the sha256 of the training data."""

    format: str
    targets: int
    n: int
    loss: str | list[str]
    lr: float | list[float]
    weight_decay: float | list[float]
    loss_every: int
    dtype: str
    widths: list[int]
    input_dims: list[int]
    data_sha256: str


@dataclass(frozen=True)
class TrainingCheckpoint(TrainerSettings):
    """A checkpoint's metadata: its settings, step, history, divergence notes, the sha256 of the initial first-layer
    weights and the caller's notes (checkpoints written before these two were kept read without them)."""

    step: int = 0
    history: list[HistoryPoint] = field(default_factory=list)
    diverged: list[str | None] = field(default_factory=list)
    base_sha256: str | None = None
    #: how the trainer kept the first layer's pre-activations (``batched_training.FIRST_LAYER``); None: written before
    #: it was recorded, when they were a second copy stepped alongside the factorised weights
    first_layer: str | None = None
    #: the caller's own notes (free-form JSON; ``extra`` in the file, a name the base record keeps for itself)
    notes: Mapping[str, Any] = field(default_factory=dict)


def _read_form(data: dict[str, Any]) -> dict[str, Any]:
    """The file's ``extra`` (the caller's notes) as the record's ``notes``."""
    return {("notes" if k == "extra" else k): v for k, v in data.items()}


#: the door of a checkpoint's metadata
TRAINING_CHECKPOINT: FileFormat[TrainingCheckpoint] = FileFormat(
    TrainingCheckpoint, "format", {CHECKPOINT_FORMAT: _read_form, PER_TARGET_FORMAT: _read_form},
    fix="pass a file that BatchedChainGD.save wrote, or restart the training")


@dataclass(frozen=True)
class PieceRun(Record):
    """One piece that advanced a target's training: the device type it ran on (``cpu``, ``cuda``), the device's name
    (the GPU's, or the processor), the steps it covered (from, to), its seconds, and the machine side of the process
    (``TrainingMachine``). A span of steps trained before pieces were recorded is one run with every field but
    ``steps`` and ``seconds`` null: unknown."""

    steps: list[int]
    device: str | None = None
    device_name: str | None = None
    seconds: float | None = None
    machine: TrainingMachine | None = None


@dataclass(frozen=True)
class PieceNotes(Record):
    """The notes training in pieces (``targets/resumable.py``) keeps in each target's checkpoint: the seconds spent
    training it so far, in how many pieces, and each piece that advanced it, in order (``runs``; a checkpoint
    written before they were recorded has none: its pieces' devices and machines are unknown)."""

    seconds: float = 0.0
    pieces: int = 0
    runs: list[PieceRun] | None = None
