"""Cells whose search runs slices ran in groups, evaluated where the merge gathered all their runs.

A slice that runs some of a cell's runs writes them and does not evaluate the cell (its evaluation pools every run);
``--unpack`` keeps each group's runs in ``work/<cell id>/runs/``, and once all are there it evaluates the cell here
(:func:`evaluate_gathered`): the runs are read back as a resumed run reads them (their run keys name the spec they
ran with, the device included), no attack step runs and the target's weights are not needed (its card, which
travelled with the runs, and the training data are). The record is the one an unsplit run writes, but for its
timings, machine and the runs' batch records.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from reconbench.bench.cells import Cell, expand
from reconbench.bench.runner import STATUS_OK, Target, run_cell, target_info, write_cell
from reconbench.bench.suite import Suite
from reconbench.runs.execute import gathered_runs
from reconbench.targets.cards import load_card


class GatheredTargets:
    """The targets of gathered cells: each one's card from the results folder (``targets/<recipe key>.json``, as
    the slice's pack brought it) and its training data; no weights."""

    def __init__(self, out: Path, data_root: str | None) -> None:
        self.out, self.data_root = out, data_root

    def get(self, cell: Cell) -> Target:
        key = cell.recipe.key()
        t = Target()
        t0 = time.perf_counter()
        try:
            t.card = load_card(self.out / "targets" / f"{key}.json")
            t.problem = t.card.problem(self.data_root)
            t.info = target_info(key, t.card, f"targets/{key}.json", True, time.perf_counter() - t0)
        except Exception as exc:  # recorded; the caller keeps the runs and writes no record
            t.error = exc
        return t


def evaluate_gathered(suite: Suite, out: Path, cell_ids: Sequence[str], *, device: str, dtype: str,
                      invocation: int, data_root: str | None) -> tuple[list[str], dict[str, str]]:
    """Evaluate the cells ``cell_ids`` from the runs ``out`` holds (``device`` and ``dtype``: the slices'); each
    finished record is written. The cells evaluated, and why the others were not (their runs stay)."""
    cells = {c.cell_id: c for c in expand(suite)}
    targets = GatheredTargets(out, data_root)
    done: list[str] = []
    failed: dict[str, str] = {}
    for cid in cell_ids:
        cell = cells[cid]
        spec = cell.run_spec(suite, device, dtype)
        with gathered_runs():
            rec = run_cell(cell, suite, spec, out, targets, invocation=invocation, data_root=data_root, quiet=True)
        if rec["status"] != STATUS_OK:   # a failed record would mark the cell finished: none is written
            failed[cid] = f"{rec['error']['type']}: {rec['error']['message']}"
            continue
        write_cell(out, rec)
        done.append(cid)
    return done, failed
