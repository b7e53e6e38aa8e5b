"""Where and how a cell ran, as it records it (``provenance`` of a cell record; ``bench/runner.py`` writes it): the
commit and version, the device, and the precision policy of its attack and scores (``reconbench/precision.py``).
Open records: the other keys (host, library versions, ...) are kept as written (``extra``)."""

from __future__ import annotations

from dataclasses import dataclass

from reconbench.records.record import Record


@dataclass(frozen=True)
class PrecisionPolicy(Record):
    """The dtypes a run used: the attack's matrix products, the loss accumulation, the scores, the training (a
    target's card records the training part)."""

    OPEN = True

    attack_matmul: str | None = None
    loss_accumulation_dtype: str | None = None
    evaluation_dtype: str | None = None
    training_dtype: str | None = None


@dataclass(frozen=True)
class CellProvenance(Record):
    """The commit and version a cell ran at, its device and precision policy."""

    OPEN = True

    git_commit: str | None = None
    reconbench_version: str | None = None
    device: str | None = None
    precision: PrecisionPolicy | None = None
