"""The seam between the suite runner and whatever runs its cells.

The runner decides *what* runs (the cells to do, in order) and alone writes the results folder; an executor decides
*where* the cells run and reports each one as it ends. Two executors exist: ``SerialExecutor`` (in
``reconbench.bench.runner``: one cell after the other in this process, the default) and ``RayExecutor``
(``reconbench.bench.ray_executor``: one Ray task per cell, on a local instance or a cluster).

An executor's ``run`` is a generator of events:

- ``Started(cell)``: the cell began here (the serial executor only; a remote start is not observed);
- ``Finished(cell, record)``: the cell ended, ok or failed; the runner writes ``record`` as the cell's JSON;
- ``Lost(cell, reason)``: the cell did not end (its worker died, or it was cancelled); nothing is written, so the
  next ``--resume`` runs it again, from its finished search runs.

Closing the generator (the runner does on Ctrl-C or on a ``--strict`` failure) must stop the executor's work.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from reconbench.bench.cells import Cell
from reconbench.bench.suite import Suite
from reconbench.runs.spec import RunSpec


@dataclass(frozen=True)
class CellJob:
    """One cell to run, with its resolved run spec (device and dtype applied)."""

    cell: Cell
    spec: RunSpec


@dataclass(frozen=True)
class RunContext:
    """What every cell of one invocation shares."""

    suite: Suite
    out: Path  # the results folder
    invocation: int  # this invocation's number (invocations/NNN.json)
    device: str
    dtype: str
    data_root: str | None
    cache: str | None
    quiet: bool


@dataclass(frozen=True)
class Started:
    cell: Cell


@dataclass(frozen=True)
class Finished:
    cell: Cell
    record: dict[str, Any]


@dataclass(frozen=True)
class Lost:
    cell: Cell
    reason: str


Outcome = Started | Finished | Lost


class Executor(Protocol):
    name: str

    def check(self, ctx: RunContext) -> None:
        """Raise ``SuiteError`` (before anything is written) when the cells cannot run here, e.g. no GPU."""

    def describe(self) -> dict[str, Any]:
        """What the invocation record says about where the cells ran."""

    def run(self, jobs: Sequence[CellJob], ctx: RunContext) -> Generator[Outcome, None, None]:
        """Run the jobs; yield each cell's events as they happen (in any order)."""
