"""The executor of a slice: cells one after the other in this process, each started only when its estimated cost
(``reconbench.bench.slice_costs``) fits before the deadline; the others are left for the next slice."""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from reconbench.bench.executors import CellJob, Finished, Outcome, RunContext, Started
from reconbench.bench.runner import SerialExecutor, TargetPool, run_cell
from reconbench.bench.slice_costs import CellWork, CostModel, Slot, cell_work
from reconbench.preflight import TargetSize
from reconbench.targets.cache import cache_dir
from reconbench.targets.cards import CARD_FILE


@dataclass
class Deferred:
    """A cell the slice did not start: its estimate and the seconds that were left."""

    cell_id: str
    estimate: float
    left: float


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

    def check(self, ctx: RunContext) -> None:
        SerialExecutor().check(ctx)

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "deadline_seconds": self.deadline,
                "safety": {"factor": self.model.factor, "seconds": self.model.extra}}

    def elapsed(self) -> float:
        return self.clock() - self.start

    def run(self, jobs: Sequence[CellJob], ctx: RunContext) -> Generator[Outcome, None, None]:
        targets = TargetPool(ctx.out, ctx.cache, ctx.data_root, ctx.quiet, ctx.device)
        cached = cache_dir(ctx.cache) / "targets"
        slot = Slot(self.model, self.deadline,
                    trained={k for k in self.sizes if (cached / k / CARD_FILE).exists()})
        for job in jobs:
            work: CellWork = cell_work(job.cell, self.sizes[job.cell.recipe.key()])
            if not slot.fits(work, self.elapsed()):
                self.deferred.append(Deferred(job.cell.cell_id, slot.estimate(work), self.deadline - self.elapsed()))
                continue
            trains = work.target_key not in slot.trained
            self.started_cells[job.cell.cell_id] = slot.estimate(work)
            yield Started(job.cell)
            rec = run_cell(job.cell, ctx.suite, job.spec, ctx.out, targets, invocation=ctx.invocation,
                           data_root=ctx.data_root, quiet=ctx.quiet)
            self.model.observe(work, trains, rec)
            slot.trained.add(work.target_key)
            yield Finished(job.cell, rec)
