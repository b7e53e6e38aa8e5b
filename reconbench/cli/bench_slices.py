"""The slice options of `reconbench bench` (``--deadline``, ``--pack``, ``--unpack``, ``--plan``): what they print,
the pack written after every cell, the merge (docs/slices.md)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from reconbench.bench.cells import Cell, expand
from reconbench.bench.executors import Executor
from reconbench.bench.runner import BenchReport, next_invocation_number
from reconbench.bench.slice_costs import (
    RUN_SECONDS_TARGET,
    CellWork,
    CostModel,
    SlicePlan,
    break_even_budget,
    break_even_speed,
    cell_work,
    plan_slices,
    run_step_seconds,
    target_training_seconds,
)
from reconbench.bench.slice_executor import DeadlineExecutor
from reconbench.bench.slice_pack import (
    LEDGER_FILE,
    MAX_FILES,
    STATE_PART_BYTES,
    STATES_FOLDER,
    remaining_cells,
    unpack,
    write_pack,
)
from reconbench.bench.suite import Suite
from reconbench.errors import ReconbenchError
from reconbench.preflight import TargetSize
from reconbench.records.cost_table import CostTable
from reconbench.records.finished_ledger import FINISHED_LEDGER_FILE
from reconbench.records.slice_manifest import DeferredCell, SliceCosts, SliceManifest

#: seconds of a slice's deadline kept for writing its pack
PACK_RESERVE_SECONDS = 10.0


def check_pack_folder(pack: Path) -> None:
    if pack.exists() and (not pack.is_dir() or any(pack.iterdir())):
        raise ReconbenchError(f"--pack {pack} is not an empty folder; pass a new or empty folder")


def say_deferred(ex: DeadlineExecutor, report: BenchReport, deadline: float | None) -> None:
    """What the deadline left for the next run: every cell not started, and why."""
    if not ex.deferred:
        return
    cheapest = min(ex.deferred, key=lambda d: d.estimate)
    if not report.ran and not ex.pieces and not ex.stopped and not ex.groups:
        click.echo(f"deadline {deadline:g}s: nothing ran; no cell fits (the cheapest of {len(ex.deferred)} is "
                   f"estimated at {cheapest.estimate:.1f}s with the safety margin, {cheapest.left:.1f}s were left); "
                   "pass a longer --deadline")
        return
    click.echo(f"deadline {deadline:g}s: {len(ex.deferred)} cell(s) left for the next run (their estimates did "
               "not fit the time left, or their targets are still training):")
    stopped = {s.cell_id for s in ex.stopped}
    for d in ex.deferred:
        why = f"; {d.note}" if d.note else ""
        what = "stopped" if d.cell_id in stopped else "not started"
        click.echo(f"  {what}: {d.cell_id}  (estimated {d.estimate:.1f}s, {d.left:.1f}s left{why})")
    for p in ex.pieces:
        if p.finished:
            continue
        size = p.state.stat().st_size if p.state is not None and p.state.exists() else 0
        parts = -(-size // STATE_PART_BYTES)
        how = f", in {parts} parts of at most {STATE_PART_BYTES:,} bytes" if parts > 1 else ""
        click.echo(f"  target {p.recipe_key}: trained to step {p.step} of {p.steps}; its state goes in the pack"
                   f"{how} and the next slice continues it")


def print_plan(suite: Suite, cells: list[Cell], sizes: dict[str, TargetSize], deadline: float, reserve: float,
               device: str, table: CostTable | None,
               progress: dict[str, float] | None = None, dtype: str | None = None) -> SlicePlan:
    """The slices ``cells`` (those still to run; ``sizes``: their targets') need, as ``--plan`` prints them: a
    slice runs with ``--pack``, so targets the resumable trainer takes train in pieces across slices (``progress``:
    the fraction of its steps each such target's travelling state has done already)."""
    works = [cell_work(c, sizes[c.recipe.key()], pieces=True, dtype=dtype or suite.dtype, device=device) for c in cells]
    model = CostModel.for_device(device, table)
    plan = plan_slices(works, model, deadline - reserve, progress=progress)
    names = {c.recipe.key(): c.target for c in cells}
    groups: dict[str, list[str]] = {}
    for w in works:
        if w.pieces and names[w.target_key] not in groups.setdefault(w.group, []):
            groups[w.group].append(names[w.target_key])

    def training(i: int) -> str:
        parts = [f"{' + '.join(groups[g])} {sec:.0f}s" for g, sec in plan.training[i].items()]
        if plan.cards[i]:
            parts.insert(0, f"{plan.cards[i]} card(s) rebuilt {plan.cards[i] * model.prior.train.fixed:.0f}s")
        return "; ".join(parts)

    rows = [(i + 1, len(ids), f"{sec:.0f}", training(i) or "-", ", ".join(ids[:3]) + (", ..." if len(ids) > 3 else ""))
            for i, (ids, sec) in enumerate(zip(plan.slices, plan.seconds, strict=True))]
    click.echo(f"suite {suite.name} on {device}, slices of {deadline:g}s ({reserve:g}s kept for the pack), "
               f"{'cost table from --costs' if table is not None else 'built-in cost table'}:")
    if rows:
        from tabulate import tabulate  # only the plan uses it (with wcwidth, about 35 ms of every bench start)

        click.echo(tabulate(rows, headers=["slice", "cells", "estimated s", "training in pieces", "first cells"],
                            tablefmt="github"))
    for cid, est in plan.unfit.items():
        click.echo(f"  fits no slice: {cid} (estimated {est:.0f}s on a bare machine)")
    by_target: dict[str, list[str]] = {}
    for c in cells:
        by_target.setdefault(c.target, []).append(c.cell_id)
    for target, ids in by_target.items():
        key = next(c.recipe.key() for c in cells if c.target == target)
        end = plan.finished_in(ids)
        trained = plan.trained_in.get(key)
        when = f"trained in pieces by slice {trained + 1}, " if trained is not None else ""
        click.echo(f"  target {target}: {when}" + (f"its {len(ids)} cell(s) done by slice {end + 1}" if end is not None
                                                   else f"{sum(1 for i in ids if i in plan.unfit)} of its cell(s) "
                                                        "fit no slice"))
    click.echo(f"{sum(len(x) for x in plan.slices)} cell(s) in {len(plan.slices)} slice(s), {len(plan.unfit)} that "
               "fit none")
    for line in break_even_lines(works, model.prior, deadline - reserve, reserve, len(plan.slices), progress, names):
        click.echo(line)
    return plan


def break_even_lines(works: list[CellWork], table: CostTable, budget: float, reserve: float, planned: int,
                     progress: dict[str, float] | None, names: dict[str, str]) -> list[str]:
    """What speed of the device the plan's count hangs on: the least speed (times the table's) at which the cells
    fit in one slice fewer than planned, and down to which they still fit in as many; each in the table's own
    terms (a target's training, a search run's step) and as a fraction of peak where the table states its own;
    then the time of one search run against :data:`RUN_SECONDS_TARGET`."""
    first = next((w for w in works if w.pieces), None)
    step = next((w for w in works if w.run_step > 0), None)

    def terms(speed: float) -> str:
        out = []
        if first is not None:
            out.append(f"training {target_training_seconds(table, first) / speed:.0f}s per target "
                       f"({names[first.target_key]})")
        if step is not None:
            out.append(f"{run_step_seconds(table, step) / speed * 1e3:.3f} ms per step of one search run "
                       f"({names[step.target_key]}, {step.runs} runs batched: "
                       f"{run_step_seconds(table, step) * step.runs / speed * 1e3:.2f} ms)")
        if table.peak_fraction is not None:
            fraction = table.peak_fraction * speed
            out.append(f"{fraction:.1%} of peak" + (" (past the peak: out of reach)" if fraction > 1 else ""))
        return ", ".join(out)

    lines = []
    for n in sorted({planned - 1, planned} - {0}):
        if n < 1 or not works:
            continue
        speed = break_even_speed(works, table, budget, n, progress)
        if speed is None:
            lines.append(f"break-even: no speed fits these cells in {n} slice(s) of {budget:g}s (fixed seconds alone "
                         "pass it)")
            continue
        lines.append(f"break-even for all {len(works)} cell(s) in {n} slice(s): a device {speed:.3f}x the table's "
                     f"speed per unit (the table: 1x): {terms(speed)}")
        if speed > 1:
            longer = break_even_budget(works, table, n, budget, 2 * budget, progress)
            lines.append(f"  or, at the table's speed, slices of {longer:g}s: --deadline {longer + reserve:g}"
                         if longer is not None else f"  (at the table's speed, no slice up to {2 * budget:g}s does)")
    if step is not None and step.steps:
        run = run_step_seconds(table, step) * step.steps
        need = run / RUN_SECONDS_TARGET   # the least speed at which one run takes the target's seconds
        lines.append(f"one search run of {names[step.target_key]} ({step.steps:,} steps): {run:.1f}s at the "
                     f"table's speed; {RUN_SECONDS_TARGET:g}s asks for at most "
                     f"{RUN_SECONDS_TARGET / step.steps * 1e3:.3f} ms per step, a device {need:.3f}x the table's"
                     + (f" ({table.peak_fraction * need:.1%} of peak)" if table.peak_fraction is not None else ""))
    return lines


def ledger_progress(ledger: Path, cells: list[Cell]) -> dict[str, float]:
    """The fraction of its steps each target's training state that the ledger lists has done (by recipe key)."""
    try:
        training = FINISHED_LEDGER_FILE.read(ledger).training
    except ReconbenchError:
        return {}   # read_ledger has checked the file already; a state it cannot read trains from the start
    steps = {c.recipe.key(): c.recipe.train.steps for c in cells}
    return {k: min(1.0, v.step / steps[k]) for k, v in training.items() if k in steps}


class SlicePacker:
    """Writes the slice's pack (``reconbench.bench.slice_pack``) after every cell, so that a command killed at its
    time limit leaves what finished, and once more at the end (``complete``)."""

    def __init__(self, pack: Path, suite: Suite, out: Path, ex: Executor, device: str | None,
                 dtype: str | None, started: float, elsewhere: dict[str, dict[str, Any]],
                 max_files: int = MAX_FILES) -> None:
        self.pack, self.suite, self.out, self.ex, self.started, self.elsewhere = pack, suite, out, ex, started, elsewhere
        self.device, self.dtype = device or suite.device, dtype or suite.dtype
        self.keys = {c.cell_id: c.key(suite, dtype) for c in expand(suite)}   # the whole suite, --only or not
        self.ran: list[str] = []
        self.max_files = max_files

    def cell(self, rec: dict[str, Any]) -> None:
        self.ran.append(rec["cell_id"])
        self.write(self.ran, complete=False)

    def write(self, ran: list[str], *, complete: bool) -> SliceManifest:
        """Write the pack; its manifest, as written."""
        ex = self.ex
        deadline = ex.deadline + PACK_RESERVE_SECONDS if isinstance(ex, DeadlineExecutor) else None
        deferred = ([DeferredCell(cell_id=d.cell_id, estimate_seconds=d.estimate, seconds_left=d.left)
                     for d in ex.deferred] if isinstance(ex, DeadlineExecutor) else [])
        costs = None
        if isinstance(ex, DeadlineExecutor):   # what the next cost table can be made from
            costs = SliceCosts(estimates=dict(ex.started_cells),
                               measured={p: [[u, sec] for u, sec in ms] for p, ms in ex.model.measured.items()})
        remaining = remaining_cells(self.out, self.keys, self.elsewhere)
        states: list[Path] = []
        if isinstance(ex, DeadlineExecutor):   # the training states this slice began or continued, while needed
            in_training = {c.recipe.key() for c in expand(self.suite) if c.cell_id in remaining}
            states = sorted({p.state for p in ex.pieces if p.state is not None and p.state.exists()
                             and p.recipe_key in in_training})
        return write_pack(self.pack, self.suite, self.out, cells=list(ran), remaining=remaining, states=states,
                          invocation=next_invocation_number(self.out) - 1, device=self.device, dtype=self.dtype,
                          deferred=deferred, deadline=deadline, elapsed=time.monotonic() - self.started,
                          complete=complete, costs=costs, max_files=self.max_files,
                          measured=ex.measured if isinstance(ex, DeadlineExecutor) else (),
                          stopped=ex.stopped if isinstance(ex, DeadlineExecutor) else (),
                          groups=ex.groups if isinstance(ex, DeadlineExecutor) else ())


def chain_on_cell(logger: Callable[[dict[str, Any]], None] | None,
                  packer: SlicePacker | None) -> Callable[[dict[str, Any]], None] | None:
    """What happens after each cell is written: the tracker's log, then the slice's pack."""
    steps = [f for f in (logger, None if packer is None else packer.cell) if f is not None]
    if not steps:
        return None

    def each(rec: dict[str, Any]) -> None:
        for f in steps:
            f(rec)

    return each


def unpack_slice(suite: Suite, pack: Path, out: Path, dtype: str | None, data_root: str | None = None) -> None:
    keys = {c.cell_id: c.key(suite, dtype) for c in expand(suite)}
    rep = unpack(pack, suite, out, keys, data_root)
    m = rep.manifest
    if not m.complete:
        click.echo(f"note: the slice of {pack} did not end (killed at its time limit?): its pack holds the "
                   f"{len(m.cells)} cell(s) it finished, which are merged")
    click.echo(f"unpacked {pack} (suite {m.suite}, {m.device}, commit {m.commit or 'unknown'}, "
               f"{m.created}): {len(rep.merged)} cell(s) merged into {out}, {len(rep.already)} already there, "
               f"candidates of {len(rep.candidates)} (float16 values)")
    for entry in m.training:
        if entry.recipe_key in rep.states:
            click.echo(f"  training state of target {entry.recipe_key} (step {entry.step}) kept in "
                       f"{out / STATES_FOLDER}: carry that folder with the ledger to continue it")
    for key in rep.cards_kept:
        click.echo(f"  note: model card {key} differs from the slice's; {out / 'targets' / (key + '.json')} was kept")
    for stopped in m.stopped:
        click.echo(f"  stopped by the slice's deadline: {stopped.cell_id} at batched step {stopped.step:,} of "
                   f"{stopped.steps:,} ({stopped.seconds:.1f}s of attack); it runs again in a later slice")
    if rep.measured:
        click.echo(f"  {rep.measured} measured row(s) added to the ledger (what the next plan's costs read)")
    for group in m.groups:
        if group.cell_id in rep.evaluated:
            click.echo(f"  search runs of {group.cell_id}: {len(group.runs)} merged, all {group.search_runs} are "
                       "here: the cell was evaluated from them and merged")
            continue
        if group.cell_id not in rep.partial:
            continue   # its cell is finished here already
        held, total = rep.partial[group.cell_id]
        why = rep.not_evaluated.get(group.cell_id)
        click.echo(f"  search runs of {group.cell_id}: {len(group.runs)} merged, {held} of {total} held in "
                   f"{out / 'work' / group.cell_id / 'runs'}" + (
                       f"; all are here, but the cell could not be evaluated ({why}): fix that and unpack again"
                       if why else "; the next slices run the others"))
    for left in m.groups_left_out:
        click.echo(f"  runs {left.runs} of {left.cell_id} did not travel ({left.reason}): a later slice runs them again")
    click.echo(f"ledger of the finished cells (a slice's --finished): {out / LEDGER_FILE}")
    if rep.remaining:
        click.echo(f"{len(rep.remaining)} cell(s) remain: run the next slice (benchmarks/gpu/README.md) or "
                   f"`reconbench bench {suite.name} --resume" + f" --out {out}`")
    else:
        click.echo(f"every cell of suite {suite.name} is in {out}")
