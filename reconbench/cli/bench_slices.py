"""The slice options of `reconbench bench` (``--deadline``, ``--pack``, ``--unpack``, ``--plan``): what they print,
the pack written after every cell, the merge (docs/slices.md)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from reconbench.bench.cells import expand
from reconbench.bench.executors import Executor
from reconbench.bench.runner import BenchReport, next_invocation_number
from reconbench.bench.slice_executor import NOT_CARRIED, DeadlineExecutor, Deferred
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
from reconbench.records.slice_manifest import DeferredCell, SliceCosts, SliceManifest

#: seconds of a slice's deadline kept for writing its pack
PACK_RESERVE_SECONDS = 10.0


def check_pack_folder(pack: Path) -> None:
    if pack.exists() and (not pack.is_dir() or any(pack.iterdir())):
        raise ReconbenchError(f"--pack {pack} is not an empty folder; pass a new or empty folder")


def left_said(d: Deferred) -> str:
    """The seconds that were left for a deferred cell when the slice decided, and when that was."""
    if d.pending > 0:
        return (f"{d.left:.1f}s left when decided at {d.at:.1f}s: {d.left + d.pending:.1f}s less {d.pending:.1f}s "
                "estimated for the cells chosen to run before it")
    return f"{d.left:.1f}s left when decided at {d.at:.1f}s"


def say_deferred(ex: DeadlineExecutor, report: BenchReport, deadline: float | None) -> None:
    """What the deadline left for the next run: every cell not started, and why."""
    if not ex.deferred:
        return
    cheapest = min(ex.deferred, key=lambda d: d.estimate)
    if not report.ran and not ex.pieces and not ex.stopped and not ex.groups and all(
            d.note.startswith(NOT_CARRIED) for d in ex.deferred):
        click.echo(f"nothing ran: the training states of all {len(ex.deferred)} cell(s)' targets were not carried (named "
                   "above); carry them with the ledger (benchmarks/gpu/travel_size.py --suite prints the carry list)")
        return
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
        click.echo(f"  {what}: {d.cell_id}  (estimated {d.estimate:.1f}s, {left_said(d)}{why})")
    for p in ex.pieces:
        if p.finished:
            continue
        size = p.state.stat().st_size if p.state is not None and p.state.exists() else 0
        parts = -(-size // STATE_PART_BYTES)
        how = f", in {parts} parts of at most {STATE_PART_BYTES:,} bytes" if parts > 1 else ""
        click.echo(f"  target {p.recipe_key}: trained to step {p.step} of {p.steps}; its state goes in the pack"
                   f"{how} and the next slice continues it")


class SlicePacker:
    """Writes the slice's pack (``reconbench.bench.slice_pack``) after every cell, so that a command killed at its
    time limit leaves what finished, and once more at the end (``complete``)."""

    def __init__(self, pack: Path, suite: Suite, out: Path, ex: Executor, device: str | None,
                 dtype: str | None, started: float, elsewhere: dict[str, dict[str, Any]],
                 max_files: int = MAX_FILES, data_root: str | None = None) -> None:
        self.pack, self.suite, self.out, self.ex, self.started, self.elsewhere = pack, suite, out, ex, started, elsewhere
        self.data_root = data_root   # the training data the figure pairs are taken with (None: RECONBENCH_DATA)
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
                          groups=ex.groups if isinstance(ex, DeadlineExecutor) else (), data_root=self.data_root)


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
