"""A results folder's ledger of finished cells (``finished.json``, ``reconbench-finished-cells/3``, written by
``bench --unpack``): the cells finished there with their keys, the training states of targets still in training
(with the card that travelled beside a final state, ``LedgerState.card``), which a slice on another machine reads
instead of the records, the rows every merged slice measured (``measured``: what the next plan's costs are made
from), and the search runs held of cells whose runs slices ran in groups (``partial``). Version 2 reads as version 3
with no card beside any state, version 1 also without ``measured`` and ``partial``; an older reader refuses a newer
version by its stamp, in one line."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from reconbench.records.measured_rate import MeasuredRate
from reconbench.records.record import FileFormat, Record, unchanged


@dataclass(frozen=True)
class LedgerCell(Record):
    """A finished cell: its key (a cell whose key no longer matches the suite runs again) and status."""

    cell_key: str | None = None
    status: str | None = None


@dataclass(frozen=True)
class LedgerCard(Record):
    """The card JSON of a target whose training ended, kept beside its final state (relative file and sha256): a
    later slice restores the target's card from it instead of rebuilding it (docs/slices.md)."""

    file: str
    sha256: str


@dataclass(frozen=True)
class LedgerState(Record):
    """A training state the results folder keeps: its file (relative to the folder), sha256, step and dtype, and the
    card that travelled beside it (None: none did)."""

    file: str
    sha256: str
    step: int = 0
    dtype: str = ""
    card: LedgerCard | None = None


@dataclass(frozen=True)
class LedgerRuns(Record):
    """The search runs of a cell not yet evaluated that the results folder holds (``work/<cell id>/runs/``), merged
    from slices that ran them in groups: the cell's key when they ran, its runs in all, and those held."""

    cell_key: str
    search_runs: int
    runs: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class FinishedLedger(Record):
    """A results folder's ``finished.json``: the suite (name, file sha256), its finished cells by id, the
    training states by recipe key, and the rates the slices measured (:mod:`~reconbench.records.measured_rate`)."""

    SCHEMA = "reconbench-finished-cells/3"

    format: str
    suite: str
    suite_sha256: str | None = None
    cells: Mapping[str, LedgerCell] = field(default_factory=dict)
    training: Mapping[str, LedgerState] = field(default_factory=dict)
    measured: list[MeasuredRate] = field(default_factory=list)   # rates the slices measured, oldest first
    partial: Mapping[str, LedgerRuns] = field(default_factory=dict)


def _from_v1(data: dict[str, Any]) -> dict[str, Any]:
    """A version-1 ledger: the same fields (its ``measured`` rows too, where it has them), no runs of cells split
    across slices, no card beside any state."""
    return {**data, "format": FinishedLedger.SCHEMA}


def _from_v2(data: dict[str, Any]) -> dict[str, Any]:
    """A version-2 ledger: the same fields; no card travelled beside any of its states."""
    return {**data, "format": FinishedLedger.SCHEMA}


#: the door of a results folder's finished.json
FINISHED_LEDGER_FILE: FileFormat[FinishedLedger] = FileFormat(
    FinishedLedger, "format", {FinishedLedger.SCHEMA: unchanged, "reconbench-finished-cells/2": _from_v2,
                                          "reconbench-finished-cells/1": _from_v1},
    fix="pass the finished.json that `reconbench bench SUITE --unpack` wrote into the results folder")
