"""Cells whose search runs slices ran in groups, evaluated where the merge gathered all their runs.

A slice that runs some of a cell's runs writes them and does not evaluate the cell (its evaluation pools every run);
``--unpack`` keeps each group's runs in ``work/<cell id>/runs/``, and once all are there it evaluates the cell here
(:func:`evaluate_gathered`): the runs are read back as a resumed run reads them (their run keys name the spec they
ran with, the device included), no attack step runs and the target's weights are not needed (its card, which
travelled with the runs, and the training data are). The record is the one an unsplit run writes, but for its
timings, machine and the runs' batch records.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from reconbench.attack.candidates import candidate_labels, default_m
from reconbench.bench.cells import Cell, expand
from reconbench.bench.runner import STATUS_OK, Target, run_cell, target_info, write_cell
from reconbench.bench.suite import Suite
from reconbench.config import build_config
from reconbench.data import Problem
from reconbench.errors import ReconbenchError
from reconbench.interfaces import Knowledge
from reconbench.records.slice_manifest import RunGroup, SliceManifest
from reconbench.runs.execute import draw_start, gathered_runs, start_sha256
from reconbench.runs.resolved import ResolvedRun, resolve_run
from reconbench.targets.cards import ModelCard, check_card_data, load_card
from reconbench.targets.recipe import DTYPES


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


class StartMismatch(ReconbenchError):
    """A start drawn again on the merging machine that is not the one the slice drew (its sha256 differs), or one
    that cannot be drawn here; the message names the cell, the run and the fix."""


@dataclass
class _CellDraw:
    run: ResolvedRun
    problem: Problem
    labels: torch.Tensor


class RedrawnStarts:
    """The starts of search runs that travelled without them (``RunGroup.starts``), drawn again here as the slice
    drew them (:func:`reconbench.runs.execute.draw_start`: the run's generator, its recorded init config, the
    candidates' labels, the target's problem) and checked against the sha256 the slice recorded, before anything
    is merged. ``cards``: the targets' cards by recipe key (JSON bytes, as the pack or the results folder holds
    them)."""

    def __init__(self, suite: Suite, manifest: SliceManifest, cards: Mapping[str, bytes], data_root: str | None,
                 where: Path) -> None:
        self.suite, self.manifest, self.cards, self.data_root, self.where = suite, manifest, cards, data_root, where
        self.cells = {c.cell_id: c for c in expand(suite)}
        self._drawn: dict[str, _CellDraw] = {}

    def _fix(self) -> str:
        slice_torch = self.manifest.torch or "unknown"
        return (f"merge on a machine whose torch draws as the slice's did (torch {slice_torch}; here "
                f"{torch.__version__}), or run the cell's groups again with `--carry-starts` so that their starts "
                "travel. Nothing was merged")

    def _cell(self, cell_id: str, k: int) -> _CellDraw:
        if cell_id in self._drawn:
            return self._drawn[cell_id]
        cell = self.cells[cell_id]
        key = cell.recipe.key()
        data = self.cards.get(key)
        if data is None:
            raise StartMismatch(f"{self.where}: search run {k} of cell {cell_id} travelled without its start, and the "
                                f"card of its target {key} is neither in the pack nor in the results folder; fetch the "
                                "pack again. Nothing was merged")
        path = self.where / "targets" / f"{key}.json"
        raw = json.loads(data)
        card = ModelCard(path.parent, raw, check_card_data(raw, path))
        spec = cell.run_spec(self.suite, self.manifest.device, self.manifest.dtype)
        run = resolve_run(spec, card.data["family"])
        try:
            problem = card.problem(self.data_root)
        except Exception as exc:   # the data: one line naming what is missing, nothing merged
            raise StartMismatch(f"search run {k} of cell {cell_id} travelled without its start, which is drawn again "
                                f"here from the target's problem, and that does not load ({type(exc).__name__}: "
                                f"{exc}); pass --data-root with the suite's data. Nothing was merged") from None
        # the labels as ``reconbench.runs.prepare`` fixes them, from the card's class counts (its full knowledge
        # would also read the mean image, which does not travel)
        knowledge = Knowledge(task=card.task, num_classes=int(card.data["num_classes"]),
                              out_dim=int(card.data["out_dim"]), input_shape=tuple(card.data["input_shape"]),
                              class_counts=list(card.data["class_counts"]))
        m = spec.candidates or default_m(knowledge, run.attack.candidate_factor)
        labels = candidate_labels(knowledge.task, knowledge.num_classes, m)
        self._drawn[cell_id] = _CellDraw(run, problem, labels)
        return self._drawn[cell_id]

    def start(self, group: RunGroup, k: int, record: bytes) -> torch.Tensor:
        """Run ``k``'s start in float64 (as the attack wrote it), once its sha256 in the group's ``start_dtype``
        matches the slice's."""
        drawn = self._cell(group.cell_id, k)
        dtype = DTYPES.get(group.start_dtype or "")
        if dtype is None:
            raise StartMismatch(f"{self.where}: the starts of cell {group.cell_id}'s runs are recorded in dtype "
                                f"{group.start_dtype!r}, which no slice writes; fetch the pack again. Nothing was "
                                "merged")
        init_config = build_config(drawn.run.init.config_cls, json.loads(record).get("init_config", {}),
                                   f"init {drawn.run.init.name}")
        x0, _ = draw_start(drawn.run, drawn.problem, drawn.labels, init_config, k, dtype)
        if start_sha256(x0, dtype) != group.starts[f"{k:03d}"]:
            raise StartMismatch(f"{self.where}: the start of search run {k} of cell {group.cell_id}, drawn again here, "
                                f"is not the one the slice drew (its sha256 differs); {self._fix()}")
        return x0.to(torch.float64)
