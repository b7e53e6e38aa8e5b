"""A results folder's ledger of finished cells (``finished.json``, ``reconbench-finished-cells/2``, written by
``bench --unpack``): the cells finished there with their keys, the training states of targets still in training,
which a slice on another machine reads instead of the records, and the rows every merged slice measured
(``measured``: what the next plan's costs are made from). Version 1 (no ``measured``) reads as version 2 without
rows; a version-1 reader refuses version 2 by its stamp, in one line."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from reconbench.records.record import FileFormat, Record, unchanged
from reconbench.records.slice_manifest import Measured


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
    """A results folder's ``finished.json``: the suite (name, file sha256), its finished cells by id, and the
    training states by recipe key."""

    SCHEMA = "reconbench-finished-cells/2"

    format: str
    suite: str
    suite_sha256: str | None = None
    cells: Mapping[str, LedgerCell] = field(default_factory=dict)
    training: Mapping[str, LedgerState] = field(default_factory=dict)
    measured: list[Measured] = field(default_factory=list)


def _from_v1(data: dict[str, Any]) -> dict[str, Any]:
    """A version-1 ledger: the same fields, no measured rows."""
    return {**data, "format": FinishedLedger.SCHEMA}


#: the door of a results folder's finished.json
FINISHED_LEDGER_FILE: FileFormat[FinishedLedger] = FileFormat(
    FinishedLedger, "format", {FinishedLedger.SCHEMA: unchanged, "reconbench-finished-cells/1": _from_v1},
    fix="pass the finished.json that `reconbench bench SUITE --unpack` wrote into the results folder")
