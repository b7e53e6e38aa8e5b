"""The executor of a slice: cells one after the other in this process, each started only when its estimated cost
(``reconbench.bench.slice_costs``) fits before the deadline; the others are left for the next slice."""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reconbench.bench.cross_cells import run_together
from reconbench.bench.executors import CellJob, Finished, Outcome, RunContext, Started
from reconbench.bench.runner import SerialExecutor, TargetPool, run_cell
from reconbench.bench.slice_costs import CellWork, CostModel, Slot, cell_work
from reconbench.preflight import TargetSize
from reconbench.targets.cache import cache_dir
from reconbench.targets.cards import CARD_FILE
from reconbench.targets.resumable import Piece, resumable_reason, train_piece


@dataclass
class Deferred:
    """A cell the slice did not start: its estimate and the seconds that were left."""

    cell_id: str
    estimate: float
    left: float
    note: str = ""


@dataclass
class DeadlineExecutor:
    """Runs jobs in order while they fit: a job starts only when ``elapsed + estimate <= deadline``.

    ``sizes`` holds each target's size by recipe key (the command's preflight computed them); ``clock`` returns
    seconds (monotonic) and ``start`` is when the deadline began counting."""

    deadline: float
    model: CostModel
    sizes: Mapping[str, TargetSize]
    start: float = field(default_factory=time.monotonic)
    clock: Callable[[], float] = time.monotonic
    deferred: list[Deferred] = field(default_factory=list)
    started_cells: dict[str, float] = field(default_factory=dict)   # cell id -> its estimate when it started
    name: str = "serial"
    #: the folder of training states (None: targets train whole, as outside a slice); a target the resumable
    #: trainer takes (reconbench.targets.resumable) trains there in pieces, whatever the deadline leaves it
    states: Path | None = None
    #: pool the attack computations of the cells that fit across targets (reconbench.bench.cross_cells)
    cross_target: bool = False
    pieces: list[Piece] = field(default_factory=list)   # what the resumable trainer did in this slice

    def check(self, ctx: RunContext) -> None:
        SerialExecutor().check(ctx)

    def elapsed(self) -> float:
        return self.clock() - self.start

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "deadline_seconds": self.deadline,
                "safety": {"factor": self.model.factor, "seconds": self.model.extra},
                "training_in_pieces": self.states is not None, "cross_target": self.cross_target}

    def _defer(self, slot: Slot, work: CellWork, job: CellJob, note: str = "") -> None:
        self.deferred.append(Deferred(job.cell.cell_id, slot.estimate(work), self.deadline - self.elapsed(), note))

    def _train_in_pieces(self, job: CellJob, work: CellWork, slot: Slot, ctx: RunContext) -> Piece | None:
        """Train (or continue) the job's target with the resumable trainer for what the deadline leaves after the
        cell's own estimate (all that is left when the cell cannot run in this slice anyway); None: no time."""
        assert self.states is not None
        recipe = job.cell.recipe
        after = self.model.estimate(work, False)   # the cell once its target is trained
        left = self.deadline - self.elapsed()
        seconds = left - after if left - after > 0 else left - self.model.extra
        if seconds <= 0:
            return None
        card_dir = cache_dir(ctx.cache) / "targets" / recipe.key()
        try:
            piece = train_piece(recipe, card_dir, self.states, seconds=seconds, data_root=ctx.data_root,
                                device=ctx.device, clock=self.clock)
        except Exception:   # the cell records the failure when it runs (its target trains again there)
            return None
        self.pieces.append(piece)
        return piece

    def run(self, jobs: Sequence[CellJob], ctx: RunContext) -> Generator[Outcome, None, None]:
        targets = TargetPool(ctx.out, ctx.cache, ctx.data_root, ctx.quiet, ctx.device)
        cached = cache_dir(ctx.cache) / "targets"
        slot = Slot(self.model, self.deadline,
                    trained={k for k in self.sizes if (cached / k / CARD_FILE).exists()})
        stopped: set[str] = set()   # targets whose training stopped at the deadline in this slice
        together: list[CellJob] = []
        for job in jobs:
            work: CellWork = cell_work(job.cell, self.sizes[job.cell.recipe.key()])
            key = work.target_key
            if self.states is not None and key not in slot.trained and resumable_reason(job.cell.recipe) is None:
                piece = None if key in stopped else self._train_in_pieces(job, work, slot, ctx)
                if piece is None or not piece.finished:
                    stopped.add(key)
                    note = "" if piece is None else f"its target trained to step {piece.step} of {piece.steps}"
                    self._defer(slot, work, job, note)
                    continue
                slot.trained.add(key)
            if self.cross_target:   # chosen now, run together below: the estimates taken so far count as spent
                if not slot.fits(work, self.elapsed() + slot.spent):
                    self._defer(slot, work, job)
                    continue
                self.started_cells[job.cell.cell_id] = slot.estimate(work)
                slot.take(work)
                together.append(job)
                continue
            if not slot.fits(work, self.elapsed()):
                self._defer(slot, work, job)
                continue
            trains = work.target_key not in slot.trained
            self.started_cells[job.cell.cell_id] = slot.estimate(work)
            yield Started(job.cell)
            rec = run_cell(job.cell, ctx.suite, job.spec, ctx.out, targets, invocation=ctx.invocation,
                           data_root=ctx.data_root, quiet=ctx.quiet)
            self.model.observe(work, trains, rec)
            slot.trained.add(work.target_key)
            yield Finished(job.cell, rec)
        if together:
            yield from run_together(together, ctx, targets)
