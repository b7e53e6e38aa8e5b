"""Cells whose search runs advance together across targets (``reconbench bench --cross-target``).

The cells still run one after the other through :func:`reconbench.bench.runner.run_cell` (same records, same
evaluation); only their attack computation is pooled, in three passes:

1. every cell's target is trained or loaded, and the cell runs up to the batch of search runs it asks its attack for,
   which a :class:`~reconbench.attack.cross_target.CrossBroker` collects (the cell stops there, having written
   nothing);
2. the collected batches advance together, those of targets of one shape in one batched computation
   (:func:`reconbench.attack.cross_target.run_cross_target`);
3. every cell runs again, its batch answered from pass 2, and is evaluated and recorded as usual.

A cell whose batch was not collected (it failed before asking, or a later round of a multi-round search) runs its
attack itself in pass 3.
"""

from __future__ import annotations

import contextlib
from collections.abc import Generator, Iterable, Sequence

from reconbench.attack.cross_target import Collected, CrossBroker, brokering
from reconbench.bench.executors import CellJob, Finished, Outcome, RunContext, Started
from reconbench.bench.runner import SerialExecutor, TargetPool, run_cell
from reconbench.runs.execute import RunGroupDone, only_runs, run_attack


def collect(jobs: Sequence[CellJob], ctx: RunContext, targets: TargetPool, broker: CrossBroker,
            runs: Iterable[int] | None = None) -> None:
    """Pass 1: each job's target, and the batch its cell asks for (a job that fails here fails again, recorded, in
    pass 3). ``runs``: only these search runs of the jobs' cells (a slice's group of runs,
    ``reconbench.runs.execute.only_runs``): the batch holds those alone."""
    with brokering(broker):
        for job in jobs:
            target = targets.get(job.cell)
            if target.error is not None or target.card is None:
                continue
            broker.current = job.cell.cell_id
            try:
                with only_runs(runs) if runs is not None else contextlib.nullcontext():
                    run_attack(target.card, job.spec, ctx.out / "work" / job.cell.cell_id, data_root=ctx.data_root,
                               quiet=True, problem=target.problem)
            except (Collected, RunGroupDone):   # asked for its batch; or a group whose runs are all written already
                pass
            except Exception:  # recorded when the cell runs for real (pass 3)  # noqa: S110
                pass
    broker.current = ""


def run_together(jobs: Sequence[CellJob], ctx: RunContext,
                 targets: TargetPool) -> Generator[Outcome, None, None]:
    """The three passes over ``jobs``; yields each cell's events as pass 3 reaches it."""
    broker = CrossBroker()
    collect(jobs, ctx, targets, broker)
    broker.run()
    with brokering(broker):
        for job in jobs:
            broker.current = job.cell.cell_id
            yield Started(job.cell)
            rec = run_cell(job.cell, ctx.suite, job.spec, ctx.out, targets, invocation=ctx.invocation,
                           data_root=ctx.data_root, quiet=ctx.quiet)
            yield Finished(job.cell, rec)


class CrossTargetExecutor(SerialExecutor):
    """The serial executor whose cells' attack computations are pooled across targets (module docstring)."""

    name = "serial-cross-target"

    def run(self, jobs: Sequence[CellJob], ctx: RunContext) -> Generator[Outcome, None, None]:
        targets = TargetPool(ctx.out, ctx.cache, ctx.data_root, ctx.quiet, ctx.device)
        yield from run_together(jobs, ctx, targets)
