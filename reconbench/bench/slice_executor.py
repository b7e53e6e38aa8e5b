"""The executor of a slice: cells one after the other in this process, each started only when its estimated cost
(``reconbench.bench.slice_costs``) fits before the deadline; the others are left for the next slice. With a folder of
training states, targets the resumable trainer takes train in pieces with the time the cells leave, several of one
shape as one stack (:meth:`DeadlineExecutor.run`; ``plan_slices`` plans the same walk), priced at its stack size
where the cost table has rates by targets stacked (:meth:`DeadlineExecutor._stack_seconds`).

While a cell's attack runs, :class:`~reconbench.bench.slice_watch.SliceWatch` prints its progress and stops it at the
deadline (less the pack's reserve): a stopped cell is not recorded (it stays to do) and the executor starts nothing
more; every cell that ran, finished or stopped, leaves its measured rows (``measured``) for the pack.

A cell of random search whose estimate passes the whole slice (or has more runs than ``runs_per_slice``) runs its
search runs in groups over several slices (:meth:`DeadlineExecutor._runs_to_do`): each group as many runs as fit the
time left, written but not evaluated (``reconbench.runs.execute.only_runs``); the runs travel in the pack
(``groups``), and the cell is evaluated where they all are merged (docs/slices.md, "Cells longer than a slice").

With ``cross_target`` the cells and groups chosen to run together are priced as the plan prices them: the runs that
share one batched computation once, at their total run count, each cell charged its share (``Slot``'s ``pooled``).

A target whose training ended in an earlier slice needs its card before its cells run: restored from the card that
travelled beside its final state where one did (the weights re-made from the state and checked,
``reconbench.targets.resumable.restore_card``), else rebuilt from the state (its stationarity certificate again);
either where the walk reaches the target's first cell, only when one of its cells, or a group of a cell's runs,
fits the time left after the card's price, and with its cells right after it, before any other card
(:meth:`DeadlineExecutor._card_first`; ``plan_slices`` decides the same)."""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from safetensors.torch import load_file

from reconbench.attack.cross_target import CrossBroker, brokering
from reconbench.attack.search import DEFAULT_SEARCH
from reconbench.attack.watch import AttackStopped, watching
from reconbench.bench.cells import Cell
from reconbench.bench.cross_cells import collect
from reconbench.bench.executors import CellJob, Finished, Outcome, RunContext, Started
from reconbench.bench.runner import SerialExecutor, TargetPool, run_cell
from reconbench.bench.slice_costs import (
    MIN_TRAINING_SECONDS,
    CellWork,
    CostModel,
    Slot,
    card_seconds,
    cell_work,
    group_share,
    restore_seconds,
    states_due,
    training_seconds,
)
from reconbench.bench.slice_pack import run_files_taken, run_tensor_bytes, runs_that_fit
from reconbench.bench.slice_watch import SliceWatch, phase_row
from reconbench.preflight import TargetSize
from reconbench.records.measured_rate import MeasuredRate
from reconbench.records.slice_manifest import RunGroup, StoppedCell
from reconbench.runs.execute import REDRAWN_INITS, RunGroupDone, only_runs, start_sha256
from reconbench.targets.cache import cache_dir
from reconbench.targets.cards import CARD_FILE
from reconbench.targets.recipe import DTYPES, TargetRecipe
from reconbench.targets.resumable import Piece, card_beside, restore_card, state_path, state_step, train_pieces

#: how a deferred cell's note begins when its target's training state was not carried to the slice
NOT_CARRIED = "its training state was not carried"


@dataclass
class Deferred:
    """A cell the slice did not start: its estimate and the seconds that were left for it when the slice decided
    (``left``: the deadline less the seconds elapsed then, ``at``, and less ``pending``, the estimates of the cells
    chosen before it to run together later in a cross-target slice)."""

    cell_id: str
    estimate: float
    left: float
    note: str = ""
    at: float = 0.0
    pending: float = 0.0


@dataclass
class DeadlineExecutor:
    """Runs jobs in order while they fit: a job starts only when ``elapsed + estimate <= deadline``; with ``states``,
    training in pieces takes the time the cells leave (:meth:`run`).

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
    #: what the slice measured of every cell that ran (finished or stopped) and of the cards it rebuilt
    measured: list[MeasuredRate] = field(default_factory=list)
    #: the cells whose attack the deadline stopped (not recorded: they stay to do)
    stopped: list[StoppedCell] = field(default_factory=list)
    #: search runs of cells held elsewhere (a ledger's ``partial``, keys checked), by cell id: not run again
    runs_done: Mapping[str, set[int]] = field(default_factory=dict)
    #: the most search runs of one cell a slice runs (None: as many as fit; a cell longer than a whole slice is split)
    runs_per_slice: int | None = None
    #: the groups of runs this slice ran (their cells not evaluated: they travel in the pack)
    groups: list[RunGroup] = field(default_factory=list)
    #: pack files the groups' run tensors and the training states may take (None: no pack, no limit); a group is as
    #: many runs as the files the states leave hold
    run_files: int | None = None
    #: carry every run's start in the pack, also where the merge could draw it again (``REDRAWN_INITS``)
    carry_starts: bool = False
    #: targets (recipe key) whose training state the ledger lists but the call did not carry, with why: their
    #: cells wait for a slice that carries it (never trained again from step 0 here)
    not_carried: Mapping[str, str] = field(default_factory=dict)
    #: the wall clock of the measured rows (``clock`` is the deadline's view of time, which a test may script)
    timer: Callable[[], float] = time.perf_counter
    watch: SliceWatch = field(init=False)
    #: the groups chosen to run in this slice's cross-target computation, not run yet (their runs take pack room)
    _pooled: dict[str, list[int]] = field(init=False, default_factory=dict)
    #: the seconds this slice took to rebuild each target's card (by recipe key): every bare slice pays them again
    _card_seconds: dict[str, float] = field(init=False, default_factory=dict)
    #: the tensor bytes of one run of each cell whose runs this slice groups (by cell id): the pack room they take
    _run_bytes: dict[str, list[int]] = field(init=False, default_factory=dict)
    #: the last walk's choices: its estimates and, in a cross-target slice, the batched computations its cells share
    slot: Slot | None = field(init=False, default=None)
    #: the pack files the training states this slice packs take (those it trained, and those of the stack it trains
    #: next): a group of runs takes only the files they leave, as ``plan_slices`` counts them
    _states: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self.watch = SliceWatch(self.clock, self.start, self.deadline, timer=self.timer)

    def check(self, ctx: RunContext) -> None:
        SerialExecutor().check(ctx)

    def elapsed(self) -> float:
        return self.clock() - self.start

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "deadline_seconds": self.deadline,
                "safety": {"factor": self.model.factor, "seconds": self.model.extra},
                "training_in_pieces": self.states is not None, "cross_target": self.cross_target}

    def _defer(self, slot: Slot, work: CellWork, job: CellJob, note: str = "", *, chosen: bool = False) -> None:
        """Leave ``job`` for the next slice, with the seconds left for it now; ``chosen``: the walk decided before
        the cells it chose to run together in a cross-target slice ran, so less their estimates (they run first)."""
        at = self.elapsed()
        pending = slot.spent if self.cross_target and chosen else 0.0
        self.deferred.append(Deferred(job.cell.cell_id, slot.estimate(work), self.deadline - at - pending, note,
                                      at=at, pending=pending))

    def _training_seconds(self, slot: Slot) -> float:
        """What the deadline leaves for training now: the time left, less the estimates of the cells chosen to run
        together later (``cross_target``) and the margin's fixed seconds."""
        pending = slot.spent if self.cross_target else 0.0
        return self.deadline - self.elapsed() - pending - self.model.extra

    def _stack_seconds(self, recipes: Sequence[TargetRecipe], works: Mapping[str, CellWork], time_left: float) -> float:
        """The seconds a stack of ``recipes`` trains for out of ``time_left``, decided as ``plan_slices`` decides:
        its training priced at its stack size (``training_seconds``: the table's rate for that many targets
        stacked, what their states have done taken off); where that training would end but the cards made at its
        end would then pass ``time_left``, it stops their price short of it (the next slice ends it and makes
        them), else it takes all of ``time_left`` (a table without a card price makes them for free). Either way
        the piece keeps the cards' price free at its end (:meth:`_cards_seconds`): a stack that steps faster than
        its price ends only where its cards still fit, else it stops before its last window."""
        assert self.states is not None
        stack = self._stack_works(recipes, works)
        progress = {r.key(): self._state_step(r) / max(r.train.steps, 1) for r in recipes}
        expected = sum(training_seconds(self.model, stack, progress).values())
        cards = self._cards_seconds(recipes, works)
        return time_left - cards if expected <= time_left < expected + cards else time_left

    @staticmethod
    def _stack_works(recipes: Sequence[TargetRecipe], works: Mapping[str, CellWork]) -> list[CellWork]:
        """One work of each target of ``recipes`` that trains in pieces."""
        keys = {r.key() for r in recipes}
        return list({w.target_key: w for w in works.values() if w.pieces and w.target_key in keys}.values())

    def _cards_seconds(self, recipes: Sequence[TargetRecipe], works: Mapping[str, CellWork]) -> float:
        """The price of the cards made when the training of ``recipes`` ends (0 where the table has no card
        price): the piece keeps them inside its seconds (``train_pieces``'s ``card_seconds``), whatever rate the
        stack turns out to step at."""
        if self.model.prior.card is None:
            return 0.0
        return sum(card_seconds(self.model.prior, w) for w in self._stack_works(recipes, works))

    def _train_group(self, recipes: list[TargetRecipe], seconds: float, ctx: RunContext,
                     cards_seconds: float = 0.0) -> list[Piece] | str:
        """Train (or continue) ``recipes`` (one batch group, one step) as one stack for at most ``seconds``, the
        cards made at its end (``cards_seconds``) included; the pieces, or why training failed (their cells are
        left for the next slice with that note)."""
        assert self.states is not None
        cards = [cache_dir(ctx.cache) / "targets" / r.key() for r in recipes]
        try:
            pieces = train_pieces(recipes, cards, self.states, seconds=seconds, data_root=ctx.data_root,
                                  device=ctx.device, clock=self.clock, card_seconds=cards_seconds)
        except Exception as exc:   # the note says why; the cells stay for the next slice
            return f"its training in pieces failed ({type(exc).__name__}: {exc})"
        self.pieces.extend(pieces)
        return pieces

    def _group_of(self, first: CellJob, waiting: Sequence[CellJob], works: Mapping[str, CellWork],
                  ready: set[str], stopped: Mapping[str, str]) -> list[TargetRecipe]:
        """The recipes that train with ``first``'s target as one stack: the targets of the waiting cells of its batch
        group, not yet trained, at the same step of their training."""
        assert self.states is not None
        group, step = works[first.cell.cell_id].group, self._state_step(first.cell.recipe)
        recipes: dict[str, TargetRecipe] = {}
        for job in waiting:
            work = works[job.cell.cell_id]
            key = work.target_key
            if (work.pieces and work.group == group and key not in ready and key not in stopped
                    and key not in recipes and self._state_step(job.cell.recipe) == step):
                recipes[key] = job.cell.recipe
        return list(recipes.values())

    def _packed_keys(self) -> set[str]:
        """The targets whose training state this slice packs: every one it trained (or rebuilt a card of)."""
        return {p.recipe_key for p in self.pieces}

    def _next_stack(self, waiting: Sequence[CellJob], works: Mapping[str, CellWork], slot: Slot,
                    stopped: Mapping[str, str]) -> set[str]:
        """The targets of the batch group whose training this slice takes next (the first waiting cell's, in the
        cells' order, whose target trains in pieces and is neither trained nor in ``stopped``), as ``plan_slices``
        counts its members."""
        pending = [works[j.cell.cell_id] for j in waiting if works[j.cell.cell_id].pieces
                   and j.cell.recipe.key() not in slot.trained and j.cell.recipe.key() not in stopped]
        return {w.target_key for w in pending if w.group == pending[0].group} if pending else set()

    def _states_fit(self, states: int) -> bool:
        """Whether ``states`` files of training states fit beside the runs this slice's groups took."""
        if self.run_files is None:
            return True
        taken = [self._run_bytes[g.cell_id] for g in self.groups for _ in g.runs if g.cell_id in self._run_bytes] + \
            [self._run_bytes[cid] for cid, runs in self._pooled.items() for _ in runs if cid in self._run_bytes]
        return run_files_taken(taken) + states <= self.run_files

    def _state_step(self, recipe: TargetRecipe) -> int:
        assert self.states is not None
        path = state_path(self.states, recipe)
        return state_step(path)[0] if path.exists() else 0

    def run(self, jobs: Sequence[CellJob], ctx: RunContext) -> Generator[Outcome, None, None]:
        """The cells whose targets need no training in pieces first (each that fits; a target trained in an earlier
        slice gets its card where the walk reaches its first cell, and its cells follow it at once), then the
        unfinished training of the first batch group in the cells' order, as one stack, with what the deadline
        leaves; when it ends, its cells join the walk again and the next group trains (``plan_slices`` plans the
        same way)."""
        targets = TargetPool(ctx.out, ctx.cache, ctx.data_root, ctx.quiet, ctx.device)
        cached = cache_dir(ctx.cache) / "targets"
        slot = Slot(self.model, self.deadline, pooled=self.cross_target,
                    trained={k for k in self.sizes if (cached / k / CARD_FILE).exists()})
        self.slot = slot
        in_pieces = self.states is not None
        works = {job.cell.cell_id: cell_work(job.cell, self.sizes[job.cell.recipe.key()], pieces=in_pieces,
                                             dtype=ctx.dtype, device=ctx.device) for job in jobs}
        stopped: dict[str, str] = dict(self.not_carried)   # target key -> why its cells wait for the next slice
        together: list[CellJob] = []
        group_runs = self._pooled   # cells of ``together`` that run a group of their runs: which
        group_runs.clear()
        waiting = list(jobs)
        # targets whose training ended in an earlier slice: each one's card is made from its final state where the
        # walk reaches its first cell, and its cells run right after it (``_card_first``), once per slice
        card_due = {j.cell.recipe.key() for j in waiting if in_pieces and works[j.cell.cell_id].pieces
                    and j.cell.recipe.key() not in slot.trained
                    and self._state_step(j.cell.recipe) >= j.cell.recipe.train.steps}
        state_of = {w.target_key: w.state_files for w in works.values() if w.pieces}
        ended = set(card_due)   # their training ended before the slice: no stack of theirs trains here
        while True:
            self._states = states_due(state_of, self._packed_keys() |
                                      self._next_stack(waiting, works, slot, {**stopped, **dict.fromkeys(ended, "")}))
            order = list(waiting)
            at = 0
            while at < len(order):
                job = order[at]
                at += 1
                work = works[job.cell.cell_id]
                key = work.target_key
                if work.pieces and key not in slot.trained:
                    if key in card_due and key not in stopped:
                        card_due.discard(key)
                        self._card_first([j for j in order[at - 1:] if works[j.cell.cell_id].target_key == key],
                                         works, slot, stopped, ctx)
                        # a card rebuilt by a training call: its final state is packed too
                        self._states = states_due(state_of, self._packed_keys() | self._next_stack(
                            waiting, works, slot, {**stopped, **dict.fromkeys(ended, "")}))
                        if key in slot.trained:   # the card's cells next, in their order, then the walk goes on
                            rest = order[at - 1:]
                            order[at - 1:] = ([j for j in rest if works[j.cell.cell_id].target_key == key]
                                              + [j for j in rest if works[j.cell.cell_id].target_key != key])
                            at -= 1
                    continue
                runs = self._runs_to_do(job, work, slot)
                if runs is not None:   # a group of the cell's runs
                    if not runs:
                        continue   # no group fits the time left
                    waiting.remove(job)
                    if self.cross_target:   # it joins the cells chosen to run together below, its estimate spent
                        share = group_share(work, len(runs))
                        self.started_cells[job.cell.cell_id] = slot.estimate(share)
                        slot.take(share)
                        together.append(job)
                        group_runs[job.cell.cell_id] = runs
                        continue
                    outcome = self._run_group(job, runs, ctx, targets, slot, works)
                    if outcome is not None:
                        yield outcome
                    if self.stopped:
                        break
                    continue
                if self.cross_target:   # chosen now, run together below: the estimates taken so far count as spent
                    if slot.fits(work, self.elapsed() + slot.spent):
                        self.started_cells[job.cell.cell_id] = slot.estimate(work)
                        slot.take(work)
                        together.append(job)
                        waiting.remove(job)
                    continue
                if not slot.fits(work, self.elapsed()):
                    continue
                trains = work.target_key not in slot.trained
                self.started_cells[job.cell.cell_id] = slot.estimate(work)
                waiting.remove(job)
                yield Started(job.cell)
                t0 = self.timer()
                self.watch.phase([job.cell.cell_id], "started" + (" (its target is trained first)" if trains else ""))
                try:
                    with watching(self.watch), self.watch.label([job.cell.cell_id]):
                        rec = run_cell(job.cell, ctx.suite, job.spec, ctx.out, targets, invocation=ctx.invocation,
                                       data_root=ctx.data_root, quiet=ctx.quiet)
                except AttackStopped as stop:
                    self._stop([job], {job.cell.cell_id: t0}, stop, ctx, slot, works)
                    break
                self.model.observe(work, trains, rec)
                slot.trained.add(work.target_key)
                self._done(job, t0, rec, ctx, work)
                yield Finished(job.cell, rec)
            if self.stopped:
                break   # the deadline stopped an attack: nothing more starts
            first = next((j for j in waiting if works[j.cell.cell_id].pieces and j.cell.recipe.key() not in
                          slot.trained and j.cell.recipe.key() not in stopped), None)
            # a piece's seconds hold its set-up (the table's fixed training seconds): at least MIN_TRAINING_SECONDS
            # of steps must be left past it, as plan_slices counts (less would spend the set-up, or pass the deadline,
            # for next to no steps)
            setup = self.model.prior.train.fixed
            seconds = self._training_seconds(slot)
            if first is None or seconds - setup < MIN_TRAINING_SECONDS:
                break
            recipes = self._group_of(first, waiting, works, slot.trained, stopped)
            seconds = self._stack_seconds(recipes, works, seconds)
            if seconds - setup < MIN_TRAINING_SECONDS:
                break
            if not self._states_fit(states_due(state_of, self._packed_keys() | {r.key() for r in recipes})):
                note = "its training state would find no pack file beside the runs this slice's groups took"
                stopped.update({r.key(): note for r in recipes})
                self.watch.say(f"training of {len(recipes)} target(s) not started: {note}")
                break
            t0 = self.timer()
            result = self._train_group(recipes, seconds, ctx, self._cards_seconds(recipes, works))
            if isinstance(result, str):
                stopped.update({r.key(): result for r in recipes})
                self.watch.say(f"training of {len(recipes)} target(s) failed: {result}")
                continue
            self._train_row(result, works, recipes, ctx)
            self.watch.say(f"{len(result)} target(s) trained as one stack in {self.timer() - t0:.1f}s: " + ", ".join(
                f"{p.recipe_key} to step {p.step:,} of {p.steps:,}" + (" (card written)" if p.finished else "")
                for p in result) + f" (at {self.elapsed():.1f}s of {self.deadline:.0f}s)")
            for piece in result:
                if piece.finished:
                    slot.trained.add(piece.recipe_key)
                else:
                    stopped[piece.recipe_key] = f"its target trained to step {piece.step} of {piece.steps}"
            if not all(p.finished for p in result):
                break   # the time is spent
        for job in waiting:
            work = works[job.cell.cell_id]
            note = stopped.get(work.target_key, "")
            if not note and work.pieces and work.target_key not in slot.trained:
                note = f"its target's training did not start ({self._state_step(job.cell.recipe)} steps done)"
            held = self.runs_done.get(job.cell.cell_id, set())
            if not note and held:
                total = int(job.cell.attack.search_runs)
                note = (f"{len(held)} of its {total} search runs are merged already" +
                        ("; the merge evaluates it where they are (unpack the last pack there again)"
                         if len(held) >= total else ""))
            self._defer(slot, work, job, note, chosen=True)
        if together and self.stopped:   # past the deadline: their attacks would stop at once
            for job in together:
                self._defer(slot, works[job.cell.cell_id], job, "the deadline stopped an attack before it started")
        elif together:
            for job in together:   # a cell whose runs share a batched computation: charged its share of it
                charged = slot.charged(job.cell.cell_id)
                if charged is not None:
                    self.started_cells[job.cell.cell_id] = charged
            yield from self._run_together(together, ctx, targets, slot, works, group_runs)

    def _train_row(self, pieces: Sequence[Piece], works: Mapping[str, CellWork], recipes: Sequence[TargetRecipe],
                   ctx: RunContext) -> None:
        """The ``train`` row of a stack's piece: its targets (``cell``: their keys), the target-steps it did, the
        seconds of its steps (its set-up aside: the table's fixed seconds price that), their units (each target's
        units of one step, as ``cell_work`` counts them, times the steps it did) and the stack's size. None where
        the piece did no step (a finished state restored)."""
        per_step = {w.target_key: w.train / max(r.train.steps, 1) for r in recipes for w in works.values()
                    if w.pieces and w.target_key == r.key()}
        done = [(p, p.step - p.begun) for p in pieces if p.step > p.begun]
        if not done:
            return
        self.measured.append(MeasuredRate(
            cell="+".join(p.recipe_key for p, _ in done), phase="train", precision=recipes[0].train.dtype, runs=0, m=0,
            weights=self._weights(recipes[0]), steps=sum(k for _, k in done), seconds=max(p.stepping for p, _ in done),
            device=ctx.device, units=sum(k * per_step.get(p.recipe_key, 0.0) for p, k in done), targets=len(pieces)))

    # -- the card of a target trained in an earlier slice ----------------------------------------------------------
    def _card_first(self, jobs: Sequence[CellJob], works: Mapping[str, CellWork], slot: Slot,
                    stopped: dict[str, str], ctx: RunContext) -> None:
        """Make the card of the finished target of ``jobs`` (its cells waiting, in order) where the walk reaches the
        first of them (the walk runs them next): restored
        from the card that travelled beside its final state, or rebuilt from the state where none did or it does
        not match (one line says why); neither when none of its cells, nor any group of a cell's runs, fits the time
        left after the card's price (its cells wait, with a note, and the time goes to other targets)."""
        assert self.states is not None
        recipe = jobs[0].cell.recipe
        key, cell, work = recipe.key(), jobs[0].cell.cell_id, works[jobs[0].cell.cell_id]
        travelled = card_beside(state_path(self.states, recipe)).is_file()
        if travelled:
            price = restore_seconds(self.model.prior, work)
            if not self._fits_after(jobs, works, slot, price):
                stopped[key] = self._no_card_note(key, "restored", price)
                return
            t0 = self.timer()
            try:
                restored = restore_card(recipe, cache_dir(ctx.cache) / "targets" / key, self.states,
                                        data_root=ctx.data_root, device=ctx.device)
            except Exception as exc:   # an unreadable card or state: the rebuild below says what is wrong, or works
                restored = f"{type(exc).__name__}: {exc}"
            seconds = self.timer() - t0
            if not isinstance(restored, str):
                slot.trained.add(key)
                self._card_seconds[key] = seconds
                self.measured.append(phase_row(cell, "card_restored", seconds, ctx.device, self._weights(recipe)))
                self.watch.phase([cell], f"card of target {key} restored from the card that travelled beside its "
                                         f"final training state in {seconds:.1f}s")
                return
            self.watch.say(f"card of target {key} not restored ({restored}): rebuilt from its final training state")
        price = card_seconds(self.model.prior, work)
        if not self._fits_after(jobs, works, slot, price):
            stopped[key] = self._no_card_note(key, "rebuilt", price)
            return
        t0 = self.timer()
        result = self._train_group([recipe], max(self._training_seconds(slot), 0.0), ctx)
        if isinstance(result, str):
            stopped[key] = result
        elif result[0].finished:
            seconds = self.timer() - t0
            slot.trained.add(key)
            self._card_seconds[key] = seconds
            self.measured.append(phase_row(cell, "card", seconds, ctx.device, self._weights(recipe)))
            self.watch.phase([cell], f"card of target {key} rebuilt from its final training state in {seconds:.1f}s")

    def _fits_after(self, jobs: Sequence[CellJob], works: Mapping[str, CellWork], slot: Slot, card: float) -> bool:
        """Whether a cell of ``jobs`` (one target's), or a group of a cell's search runs, fits the time left after
        ``card`` seconds of its target's card: the walk's tests (``Slot.fits``, :meth:`_runs_to_do`)."""
        for job in jobs:
            work = works[job.cell.cell_id]
            runs = self._runs_to_do(job, work, slot, card=card)
            if runs is not None:
                if runs:
                    return True
                continue
            if slot.fits(work, self.elapsed() + card + (slot.spent if self.cross_target else 0.0)):
                return True
        return False

    def _no_card_note(self, key: str, how: str, price: float) -> str:
        """The note of the cells of a target whose card the slice did not make (none fits after it), said once."""
        left = self.deadline - self.elapsed()
        note = (f"its target's card was not {how}: none of its cells, nor a group of their runs, fits the "
                f"{left:.1f}s left after the card's {price:.1f}s")
        self.watch.say(f"card of target {key} not {how}: none of its cells fits the {left:.1f}s left after the "
                       f"card's {price:.1f}s; they wait for a later slice")
        return note

    # -- cells whose runs are split across slices --------------------------------------------------------------------
    def _runs_to_do(self, job: CellJob, work: CellWork, slot: Slot, card: float | None = None) -> list[int] | None:
        """The runs of ``job``'s cell to run here as a group (empty: none fits the time or the pack left), or None:
        the cell runs whole, as usual (one run, a search that proposes its runs in rounds, or all its runs fit a
        slice, within ``runs_per_slice``, and none is held elsewhere). ``card``: the seconds of its target's card, not
        made yet, still to spend before it (default: the card is made, at the seconds this slice measured)."""
        cell = job.cell
        total = int(cell.attack.search_runs)
        done = self.runs_done.get(cell.cell_id, set())
        if total <= 1 or cell.attack.search != DEFAULT_SEARCH:
            return None
        left = [k for k in range(total) if k not in done]
        # a slice makes the card first (restored or rebuilt): what a whole cell must fit in
        bare = self.deadline - (self._card_seconds.get(work.target_key, 0.0) if card is None else card)
        after = 0.0 if card is None else card
        if not done and total <= (self.runs_per_slice or total) and self.model.estimate(work, False) <= bare:
            return None   # whole, evaluated here: its runs do not travel, so the pack does not bound it
        cap = min(len(left), self.runs_per_slice or total, self._runs_the_pack_holds(cell, work))
        # with the cell's own chunks (its max_batch), a group is whole chunks: each run then advances beside the runs
        # it has in an unsplit run, and its arithmetic is the same (docs/slices.md, "Cells longer than a slice")
        chunk = int(cell.attack.config.get("max_batch", 0) or 0)
        for k in range(cap, 0, -1):   # the most runs whose share of the attack fits the time left
            if chunk and k % chunk and k != len(left):
                continue
            # in a cross-target slice the cells chosen to run together later hold their estimates already
            held = slot.spent if self.cross_target else 0.0
            if slot.fits(group_share(work, k), self.elapsed() + held + after):
                return left[:k]
        return []

    def _redraws_starts(self, cell: Cell) -> bool:
        """Whether ``cell``'s runs travel without their starts (the merge draws them again)."""
        return not self.carry_starts and cell.init.regime in REDRAWN_INITS

    def _runs_the_pack_holds(self, cell: Cell, work: CellWork) -> int:
        """The runs of ``cell`` whose tensors (candidates at the attack's precision, which they travel in; the start
        too where the merge cannot draw it again; labels and multipliers) fit the pack files left to groups after the
        runs this slice's groups took (each at its own cell's size)."""
        if self.run_files is None:
            return int(cell.attack.search_runs)
        size = self.sizes[cell.recipe.key()]
        m = int(cell.attack.candidates if cell.attack.candidates is not None else 2 * size.n_train)
        itemsize = 4 if work.precision in ("float32", "tf32") else 8
        tensors = run_tensor_bytes(m, math.prod(size.input_shape), itemsize, starts=not self._redraws_starts(cell))
        self._run_bytes[cell.cell_id] = tensors
        # the runs taken already, each at its own cell's size (runs of other shapes or precisions take other room)
        taken = [self._run_bytes.get(g.cell_id, tensors) for g in self.groups for _ in g.runs] + \
            [self._run_bytes.get(cid, tensors) for cid, runs in self._pooled.items() for _ in runs]
        return runs_that_fit(tensors, self.run_files - self._states, taken)

    def _start_hashes(self, job: CellJob, ctx: RunContext, runs: Sequence[int]) -> dict[str, Any]:
        """The ``starts`` (and ``start_dtype``) of a group whose starts stay here: each written run's start hashed at
        the attack's precision (``start_sha256``); nothing where the starts travel."""
        if not self._redraws_starts(job.cell):
            return {}
        dtype = DTYPES[job.spec.dtype]
        starts = {}
        for k in runs:
            path = ctx.out / "work" / job.cell.cell_id / "runs" / f"run-{k:03d}.safetensors"
            if path.exists():   # a failed run wrote no tensors
                starts[f"{k:03d}"] = start_sha256(load_file(str(path))["x0"], dtype)
        return {"starts": starts, "start_dtype": job.spec.dtype} if starts else {}

    def _run_group(self, job: CellJob, runs: list[int], ctx: RunContext, targets: TargetPool, slot: Slot,
                   works: Mapping[str, CellWork]) -> Outcome | None:
        """Run ``runs`` of the cell, written and not evaluated; the cell stays to do (its record is written only
        where all its runs are merged). A cell that fails before its attack is recorded as failed (returned)."""
        cid, total = job.cell.cell_id, int(job.cell.attack.search_runs)
        work = works[cid]
        t0 = self.timer()
        self.watch.phase([cid], f"started: search runs {_span(runs)} of {total} as a group")
        try:
            with watching(self.watch), self.watch.label([cid]), only_runs(runs):
                rec = run_cell(job.cell, ctx.suite, job.spec, ctx.out, targets, invocation=ctx.invocation,
                               data_root=ctx.data_root, quiet=ctx.quiet)
        except AttackStopped as stop:
            self._stop([job], {cid: t0}, stop, ctx, slot, works)
            return None
        except RunGroupDone as group:
            self._group_done(job, group, t0, ctx, slot, works)
            return None
        slot.trained.add(work.target_key)
        self._done(job, t0, rec, ctx, work)
        return Finished(job.cell, rec)

    def _group_done(self, job: CellJob, group: RunGroupDone, t0: float, ctx: RunContext, slot: Slot,
                    works: Mapping[str, CellWork], setup: bool = True) -> None:
        """A group's runs are written: the group for the pack, its rows (``setup``: with its set-up row; a joint
        computation's cells have theirs already), and the cell deferred (not evaluated)."""
        cid, total = job.cell.cell_id, int(job.cell.attack.search_runs)
        work = works[cid]
        slot.trained.add(work.target_key)
        self.groups.append(RunGroup(cell_id=cid, cell_key=job.cell.key(ctx.suite, ctx.dtype), search_runs=total,
                                    runs=group.ran, **self._start_hashes(job, ctx, group.ran)))
        if setup:
            self._rows(job, t0, ctx)
        else:
            self.measured.extend(self.watch.attack_rows(cid, self._weights(job.cell.recipe)))
        held = sorted(set(group.ran) | set(self.runs_done.get(cid, set())))
        left = total - len(held)
        self._defer(slot, work, job, f"search runs {_span(group.ran)} of {total} ran as a group; "
                                     + (f"{left} left for later slices" if left else
                                        "all are run: the cell is evaluated where they are merged"))
        self.watch.phase([cid], f"group of runs {_span(group.ran)} done in {self.timer() - t0:.1f}s; its runs go "
                                "in the pack")

    def _rows(self, job: CellJob, t0: float, ctx: RunContext) -> None:
        """The set-up and attack rows of a cell that ran up to its evaluation."""
        cid = job.cell.cell_id
        weights = self._weights(job.cell.recipe)
        comps = self.watch.of_cell(cid)
        if comps and comps[0].begun >= t0:
            self.measured.append(phase_row(cid, "setup", comps[0].begun - t0, ctx.device, weights))
        self.measured.extend(self.watch.attack_rows(cid, weights))

    # -- the cells' attacks, watched -------------------------------------------------------------------------------
    def _weights(self, recipe: TargetRecipe) -> int:
        size = self.sizes.get(recipe.key())
        return int(size.parameters) if size is not None and size.parameters is not None else 0

    def _done(self, job: CellJob, t0: float, rec: Mapping[str, Any], ctx: RunContext, work: CellWork) -> None:
        """The rows of a finished cell: its set-up (start to the attack's first step), each attack computation it
        took part in, its evaluation (from its start to the record, with ``work``'s units of evaluation: all its
        search runs' candidates pooled, as the planner counts them)."""
        cid, now = job.cell.cell_id, self.timer()
        weights = self._weights(job.cell.recipe)
        comps = self.watch.of_cell(cid)
        rows = self.watch.attack_rows(cid, weights)
        evaluated = self.watch.evaluations.get(cid)
        if comps and comps[0].begun >= t0:   # its own computation (a cross-target batch's set-up is counted apart)
            self.measured.append(phase_row(cid, "setup", comps[0].begun - t0, ctx.device, weights))
        if not rows:   # an attack the loops do not tell (no KKT loop): its seconds as the record has them
            rows = [MeasuredRate.written(cell=cid, phase="attack", precision=ctx.dtype,
                                         runs=int(job.cell.attack.search_runs), m=0, weights=weights, steps=0,
                                         seconds=float(rec.get("attack_seconds") or 0.0), device=ctx.device)]
        self.measured.extend(rows)
        if evaluated is not None:
            self.measured.append(phase_row(cid, "evaluation", now - evaluated, ctx.device, weights, work.evaluate))
        self.watch.phase([cid], f"done ({rec.get('status')}) in {now - t0:.1f}s")

    def _stop(self, jobs: Sequence[CellJob], starts: Mapping[str, float], stop: AttackStopped, ctx: RunContext,
              slot: Slot, works: Mapping[str, CellWork]) -> None:
        """The cells whose attack the deadline stopped: deferred (not recorded), with their measured rows."""
        for job in jobs:
            cid = job.cell.cell_id
            weights = self._weights(job.cell.recipe)
            comps = self.watch.of_cell(cid)
            t0 = starts.get(cid)
            if t0 is not None and comps and comps[0].begun >= t0:
                self.measured.append(phase_row(cid, "setup", comps[0].begun - t0, ctx.device, weights))
            self.measured.extend(self.watch.attack_rows(cid, weights))
            last = comps[-1] if comps else None
            step, steps = (last.step, last.steps) if last is not None else (stop.step, stop.steps)
            seconds = sum(c.seconds for c in comps)
            self.stopped.append(StoppedCell(cell_id=cid, step=step, steps=steps, seconds=seconds))
            self._defer(slot, works[cid], job, f"the deadline stopped its attack at batched step {step:,} of "
                                               f"{steps:,} ({seconds:.1f}s of attack)")

    def _run_together(self, jobs: Sequence[CellJob], ctx: RunContext, targets: TargetPool, slot: Slot,
                      works: Mapping[str, CellWork],
                      group_runs: Mapping[str, list[int]] | None = None) -> Generator[Outcome, None, None]:
        """``reconbench.bench.cross_cells.run_together``'s three passes, watched: a stop in the joint computation
        defers every cell of it (none is recorded). ``group_runs``: the cells that run a group of their runs (by
        cell id), which join the joint computation with those runs only and are written, not evaluated."""
        groups = group_runs or {}
        broker = CrossBroker()
        starts: dict[str, float] = {}
        for job in jobs:   # pass 1, cell by cell: each one's set-up is timed on its own
            starts[job.cell.cell_id] = self.timer()
            if job.cell.cell_id in groups:
                self.watch.phase([job.cell.cell_id], f"started: search runs {_span(groups[job.cell.cell_id])} of "
                                                     f"{int(job.cell.attack.search_runs)} as a group, with the "
                                                     "cells that run together")
            collect([job], ctx, targets, broker, groups.get(job.cell.cell_id))
            self.measured.append(phase_row(job.cell.cell_id, "setup", self.timer() - starts[job.cell.cell_id],
                                           ctx.device, self._weights(job.cell.recipe)))
        try:
            with watching(self.watch):
                broker.run()
        except AttackStopped as stop:
            self._stop(jobs, {}, stop, ctx, slot, works)
            return
        with brokering(broker):
            for job in jobs:   # pass 3: each cell answered from the joint computation, evaluated and recorded
                cid = job.cell.cell_id
                broker.current = cid
                yield Started(job.cell)
                t0 = self.timer()
                try:   # a batch that joined none (a later round of a search) runs its attack here, watched
                    with watching(self.watch), self.watch.label([cid]), \
                            only_runs(groups[cid]) if cid in groups else contextlib.nullcontext():
                        rec = run_cell(job.cell, ctx.suite, job.spec, ctx.out, targets, invocation=ctx.invocation,
                                       data_root=ctx.data_root, quiet=ctx.quiet)
                except AttackStopped as stop:
                    self._stop([job], {cid: t0}, stop, ctx, slot, works)
                    continue
                except RunGroupDone as group:   # its runs are written: they travel, the cell is not evaluated
                    self._group_done(job, group, starts[cid], ctx, slot, works, setup=False)
                    continue
                self._done(job, t0, rec, ctx, works[cid])
                yield Finished(job.cell, rec)


def _span(runs: Sequence[int]) -> str:
    """Run numbers as a short text: ``0-7``, ``3``, ``0, 2, 5``."""
    if not runs:
        return "none"
    if list(runs) == list(range(runs[0], runs[-1] + 1)):
        return f"{runs[0]}-{runs[-1]}" if len(runs) > 1 else str(runs[0])
    return ", ".join(str(k) for k in runs)
