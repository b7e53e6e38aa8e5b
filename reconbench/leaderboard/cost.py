"""The cost of a board row: on which device its cells ran, in which precision, and how many device-seconds they took.

Computed from the cells a row names (never stored in results.json, so a board published before the column existed
shows it too, and ``--verify`` re-derives it with the README):

* **device**: the cell's ``provenance.device`` (``cpu``, ``cuda``) with the processor or GPU of its ``machine`` record
  (``cpu (AMD EPYC)``, ``cuda (NVIDIA H100 80GB HBM3 (80 GiB))``); several kinds in one row are joined with `` / ``;
* **precision**: the attack's matrix-product precision of the cell's recorded precision policy
  (``provenance.precision.attack_matmul``: ``float64``, ``float32`` or ``tf32``), else the cell's ``spec.dtype``;
* **device-seconds**: the sum of the row's cells' ``wall_seconds`` (the runner's wall clock for the whole cell on its
  device: loading or training its target, the attack's search runs, scoring and the held-out null). A target shared
  by several cells is trained once and counted in the cell that trained it. Wall-clock seconds on a shared machine
  include the load of everything else that ran then: they are a cost, not a speed benchmark.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from reconbench.errors import ReconbenchError
from reconbench.precision import PrecisionPolicy
from reconbench.records import CellRecord, mapping

#: the README's and the text exports' header of the cost column
COST_HEADER = "cost: device, precision, device-s"


@dataclass(frozen=True)
class RowCost:
    """What a row's cells cost: the devices, the precisions and the device-seconds of all of them together."""

    device: str
    precision: str
    device_seconds: float
    cells: int

    def text(self) -> str:
        """One table cell: ``cpu (AMD EPYC), float64, 12.3 s``."""
        if not self.cells:
            return "n/a"
        return f"{self.device}, {self.precision}, {_seconds(self.device_seconds)}"

    def fields(self) -> dict[str, str | float | int]:
        """The cost as the CSV and JSON exports write it."""
        return {"device": self.device, "precision": self.precision, "device_seconds": self.device_seconds,
                "cost_cells": self.cells}


def _seconds(s: float) -> str:
    return f"{s:.1f} s" if s < 600 else f"{s / 60:.1f} min" if s < 7200 else f"{s / 3600:.2f} h"


def cell_device(rec: CellRecord) -> str:
    """The device a cell ran on, with its processor or GPU when its machine record names one."""
    prov, machine = mapping(rec.provenance), mapping(rec.machine)
    device = str(prov["device"]) if "device" in prov else str(rec.spec["device"]) if "device" in rec.spec else "?"
    kind = machine["gpu"] if device.startswith("cuda") and "gpu" in machine else \
        machine["cpu_model"] if device == "cpu" and "cpu_model" in machine else None
    return device if not kind else f"{device} ({kind})"


def cell_precision(rec: CellRecord) -> str:
    """The attack's matrix-product precision the cell recorded, else its dtype. A cell that ran on a GPU also names
    its target's training precision and its scores' (``tf32, training float64, scores float64``): there the three
    differ by policy (reconbench/precision.py); a CPU cell's text is the attack's alone, as boards have shown it."""
    policy = rec.ran.policy
    if policy is not None and policy.attack_matmul:
        attack = str(policy.attack_matmul)
    else:
        attack = str(rec.dtype) if rec.dtype else "?"
    if not str(rec.ran.device or "").startswith("cuda"):
        return attack
    metrics = rec.target.train_metrics
    training = PrecisionPolicy.from_dict(dict(metrics.precision)) \
        if metrics is not None and not isinstance(metrics, str) and metrics.precision is not None else None
    trained = f", training {training.training_dtype}" if training is not None and training.training_dtype else ""
    scores = str(policy.evaluation_dtype or "float64") if policy is not None else "float64"
    return f"{attack}{trained}, scores {scores}"


def row_cost(cells: Iterable[CellRecord]) -> RowCost:
    """The cost of the cells of one row (those with no record are left out)."""
    recs = list(cells)
    devices = sorted({cell_device(r) for r in recs})
    precisions = sorted({cell_precision(r) for r in recs})
    seconds = sum(float(r.wall_seconds or 0.0) for r in recs)
    return RowCost(" / ".join(devices), " / ".join(precisions), seconds, len(recs))


def cost_of(records: Mapping[str, CellRecord], cell_ids: Iterable[str]) -> RowCost:
    """The cost of a row naming ``cell_ids``, from the board's cell records."""
    return row_cost(records[c] for c in cell_ids if c in records)


def board_records(folder: Path) -> dict[str, CellRecord]:
    """The cell records of a board or results folder as stored (a slim entry is not expanded: its device, machine,
    precision and seconds are stored whole), by cell id; a file that cannot be read is left out (``--verify`` names
    it)."""
    out: dict[str, CellRecord] = {}
    for path in sorted((folder / "cells").glob("*.json")):
        try:
            out[path.stem] = CellRecord.from_dict(json.loads(path.read_text()))
        except (OSError, UnicodeDecodeError, ValueError, ReconbenchError):
            continue
    return out
