"""A watcher over an attack's step loop: told when a batched computation starts, at every check of its loop and when
it ends; it may stop the computation (:class:`AttackStopped`) at a check.

A slice (``reconbench.bench.slice_watch``) installs one to print progress lines and to stop an attack at the slice's
deadline; outside a slice there is none, and the loops pay one context-variable read per computation. The loops tell
the watcher only at their existing checks (every ``sync_every`` steps in the batched loop), so a watcher adds no host
synchronisation.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from contextvars import ContextVar
from typing import Protocol

import torch


class AttackStopped(BaseException):
    """The watcher stopped the computation at a check (the slice's deadline). A :class:`BaseException`, as an
    interrupt is: the code between the loop and the slice (a cell's run, its failure record) lets it through, so the
    cell is neither recorded as failed nor evaluated."""

    def __init__(self, step: int, steps: int) -> None:
        super().__init__(f"stopped at step {step} of {steps}")
        self.step, self.steps = step, steps


class Watcher(Protocol):
    def begin(self, runs: int, m: int, steps: int, dtype: torch.dtype, tf32: bool, device: torch.device) -> None:
        """A computation of ``runs`` runs of ``m`` candidates and ``steps`` steps starts its steps now."""

    def at(self, step: int) -> None:
        """``step`` steps are done (a check of the loop); may raise :class:`AttackStopped`."""

    def end(self, step: int) -> None:
        """The computation ended after ``step`` steps (all, or every run stopped earlier)."""

    def evaluating(self) -> None:
        """The attack's runs are done: the evaluation of the cell starts (``reconbench.runs.execute``)."""

    def label(self, names: Sequence[str]) -> contextlib.AbstractContextManager[None]:
        """The cells the computations started inside the block belong to."""


_WATCHER: ContextVar[Watcher | None] = ContextVar("reconbench_attack_watcher", default=None)


def current() -> Watcher | None:
    """The watcher of this context (None: outside a slice)."""
    return _WATCHER.get()


@contextlib.contextmanager
def watching(watcher: Watcher | None) -> Iterator[None]:
    """Make ``watcher`` the one the loops tell, for the duration of the block."""
    token = _WATCHER.set(watcher)
    try:
        yield
    finally:
        _WATCHER.reset(token)


@contextlib.contextmanager
def labelled(names: Sequence[str]) -> Iterator[None]:
    """The computations started in the block belong to the cells ``names`` (a cross-target batch's cells); nothing
    without a watcher."""
    watcher = _WATCHER.get()
    if watcher is None:
        yield
        return
    with watcher.label(names):
        yield
