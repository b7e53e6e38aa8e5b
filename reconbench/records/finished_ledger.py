"""A results folder's ledger of finished cells (``finished.json``, ``reconbench-finished-cells/1``, written by
``bench --unpack``): the cells finished there with their keys, and the training states of targets still in
training, which a slice on another machine reads instead of the records."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from reconbench.records.measured_rate import MeasuredRate
from reconbench.records.record import FileFormat, Record, unchanged


@dataclass(frozen=True)
class LedgerCell(Record):
    """A finished cell: its key (a cell whose key no longer matches the suite runs again) and status."""

    cell_key: str | None = None
    status: str | None = None


@dataclass(frozen=True)
class LedgerState(Record):
    """A training state the results folder keeps: its file (relative to the folder), sha256, step and dtype."""

    file: str
    sha256: str
    step: int = 0
    dtype: str = ""


@dataclass(frozen=True)
class FinishedLedger(Record):
    """A results folder's ``finished.json``: the suite (name, file sha256), its finished cells by id, the
    training states by recipe key, and the rates the slices measured (:mod:`~reconbench.records.measured_rate`)."""

    SCHEMA = "reconbench-finished-cells/1"

    format: str
    suite: str
    suite_sha256: str | None = None
    cells: Mapping[str, LedgerCell] = field(default_factory=dict)
    training: Mapping[str, LedgerState] = field(default_factory=dict)
    measured: list[MeasuredRate] = field(default_factory=list)   # rates the slices measured, oldest first


#: the door of a results folder's finished.json
FINISHED_LEDGER_FILE: FileFormat[FinishedLedger] = FileFormat(
    FinishedLedger, "format", {FinishedLedger.SCHEMA: unchanged},
    fix="pass the finished.json that `reconbench bench SUITE --unpack` wrote into the results folder")
