"""What a slice sees of its cells while they run: a progress line on stderr at most every
:data:`PROGRESS_EVERY` seconds of an attack and at each phase change of a cell, the hard stop at the deadline, and
the rows of what was measured (:class:`reconbench.records.slice_manifest.MeasuredRate`).

The attack loops tell the watcher (``reconbench.attack.watch``) when a batched computation starts, at each of their
checks and when it ends; past the stop time a check raises :class:`~reconbench.attack.watch.AttackStopped`, which
the slice's executor catches: the cell is left to do, and its measured rows say how far it came. Every line is
flushed at once: a device call returns only its output's tail, and a killed command's buffered output is lost.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TextIO

import torch

from reconbench.attack.watch import AttackStopped
from reconbench.records.measured_rate import MeasuredRate

#: seconds between two progress lines of a running attack
PROGRESS_EVERY = 30.0


def precision_name(dtype: torch.dtype, tf32: bool) -> str:
    """The attack's precision as a measured row names it: ``tf32`` (float32 with TF32 products), else the dtype."""
    name = str(dtype).removeprefix("torch.")
    return "tf32" if tf32 and dtype == torch.float32 else name


@dataclass
class Computation:
    """One batched computation of an attack (the runs of one cell, or of several in a cross-target batch)."""

    cells: list[str]
    runs: int
    m: int
    steps: int
    precision: str
    device: str
    begun: float            # the timer when its steps began
    step: int = 0           # steps done at the last check
    at: float = 0.0         # the timer at that check
    ended: bool = False
    stopped: bool = False

    @property
    def seconds(self) -> float:
        return max(self.at - self.begun, 0.0)

    def per_step(self) -> float | None:
        return self.seconds / self.step if self.step > 0 else None


@dataclass
class SliceWatch:
    """The watcher of one slice. ``clock`` and ``start``: the executor's view of time (seconds since the command
    started = ``clock() - start``); ``stop_at``: the seconds after ``start`` at which an attack stops (the slice's
    deadline less the pack's reserve)."""

    clock: Callable[[], float]
    start: float
    stop_at: float
    stream: TextIO | None = None   # None: sys.stderr at the time of writing
    #: the wall clock the computations are timed by (their rows' seconds, the seconds per batched step)
    timer: Callable[[], float] = time.perf_counter
    every: float = PROGRESS_EVERY
    computations: list[Computation] = field(default_factory=list)
    evaluations: dict[str, float] = field(default_factory=dict)   # cell id -> the clock when its evaluation began
    _labels: list[list[str]] = field(default_factory=list)
    _last_line: float = -float("inf")

    # -- lines ---------------------------------------------------------------------------------------------------
    def elapsed(self) -> float:
        return self.clock() - self.start

    def say(self, text: str) -> None:
        """One line on stderr, flushed at once."""
        print(f"slice: {text}", file=self.stream or sys.stderr, flush=True)

    def phase(self, cells: Sequence[str], what: str) -> None:
        """A phase change of ``cells`` (card rebuilt or trained, attack started, evaluation started, done)."""
        self.say(f"{_names(cells)}: {what} at {self.elapsed():.1f}s of {self.stop_at:.0f}s")

    # -- the watcher the attack loops tell -----------------------------------------------------------------------
    @contextlib.contextmanager
    def label(self, names: Sequence[str]) -> Iterator[None]:
        self._labels.append(list(names))
        try:
            yield
        finally:
            self._labels.pop()

    def begin(self, runs: int, m: int, steps: int, dtype: torch.dtype, tf32: bool, device: torch.device) -> None:
        now = self.timer()
        cells = self._labels[-1] if self._labels else ["(no cell)"]
        comp = Computation(cells, runs, m, steps, precision_name(dtype, tf32), device.type, begun=now, at=now)
        self.computations.append(comp)
        self._last_line = self.clock()
        self.phase(cells, f"attack started ({runs} run(s) of {m} candidates, {steps:,} steps, {comp.precision})")

    def at(self, step: int) -> None:
        if not self.computations:
            return
        comp = self.computations[-1]
        now = self.clock()
        comp.step, comp.at = step, self.timer()
        past = now - self.start >= self.stop_at
        if past or now - self._last_line >= self.every:
            self._last_line = now
            self.say(self.progress_line(comp, now - self.start))
        if past and step < comp.steps:
            comp.stopped = True
            self.say(f"{_names(comp.cells)}: the deadline stops the attack at batched step {step:,} of "
                     f"{comp.steps:,}; the cell is left for a later slice, what it measured goes in the pack")
            raise AttackStopped(step, comp.steps)

    def end(self, step: int) -> None:
        if not self.computations:
            return
        comp = self.computations[-1]
        comp.step, comp.at, comp.ended = step, self.timer(), True

    def evaluating(self) -> None:
        """The cells of the current label start their evaluation (``reconbench.runs.execute``)."""
        cells = self._labels[-1] if self._labels else []
        now = self.timer()
        for cell in cells:
            self.evaluations[cell] = now
        if cells:
            self.phase(cells, "evaluation started")

    def progress_line(self, comp: Computation, elapsed: float) -> str:
        """Cell id(s), batched step k of K, runs, seconds per batched step, expected end against the stop time
        (``elapsed``: the seconds since the command started)."""
        per = comp.per_step()
        if per is None:
            rate, end = "no step timed yet", ""
        else:
            expected = elapsed + per * (comp.steps - comp.step)
            verdict = "within" if expected <= self.stop_at else "PAST"
            rate = f"{per:.4g} s per batched step"
            end = f", expected end at {expected:.0f}s, {verdict} the stop at {self.stop_at:.0f}s"
        return (f"{_names(comp.cells)}: batched step {comp.step:,} of {comp.steps:,}, {comp.runs} run(s), {rate}"
                f"{end} ({elapsed:.0f}s elapsed)")

    # -- what was measured ---------------------------------------------------------------------------------------
    def of_cell(self, cell: str) -> list[Computation]:
        return [c for c in self.computations if cell in c.cells]

    def attack_rows(self, cell: str, weights: int) -> list[MeasuredRate]:
        """One ``attack`` row per computation ``cell`` took part in (its steps done and their wall time)."""
        return [MeasuredRate.written(cell=cell, phase="attack", precision=c.precision, runs=c.runs, m=c.m,
                                     weights=weights, steps=c.step, seconds=c.seconds, device=c.device)
                for c in self.of_cell(cell)]


def phase_row(cell: str, phase: str, seconds: float, device: str, weights: int, units: float = 0.0) -> MeasuredRate:
    """A row of the seconds of a phase around the attack (``card``, ``setup``, ``evaluation``); ``units``: the
    planner's units of the work timed (a whole cell's evaluation: its pooled candidates x training images x pixels),
    written only where given, so that a later plan takes a rate from it."""
    row = dict(cell=cell, phase=phase, precision="", runs=0, m=0, weights=weights, steps=0,
               seconds=max(seconds, 0.0), device=device)
    return MeasuredRate.written(**row, units=units) if units > 0 else MeasuredRate.written(**row)


def _names(cells: Sequence[str]) -> str:
    return cells[0] if len(cells) == 1 else f"{len(cells)} cells ({', '.join(cells)})"
