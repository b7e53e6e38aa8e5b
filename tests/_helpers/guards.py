"""Helpers of the hostile-input tests: a guard that every refusal comes before any optimiser exists (the ``no_work``
fixture in conftest.py applies it), and a tiny card trained through the command line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch


class WorkStarted(BaseException):
    """Raised by the guard when an optimiser is built, i.e. training or an attack began."""


def refuse_optimisers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make building any optimiser raise :class:`WorkStarted`."""

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise WorkStarted("an optimiser was built: work started before the input was refused")

    # subclasses, not functions: a module imported under the guard may still subclass an optimiser (the bilevel
    # attack's inner L-BFGS), and a plugin that failed to import would stay failed in the cached plugin host
    for name in ("SGD", "Adam", "LBFGS"):
        monkeypatch.setattr(torch.optim, name, type(name, (getattr(torch.optim, name),), {"__init__": refuse}))


def trained_card(root: Path, train_args: list[str]) -> Path:
    """A card trained by ``reconbench train`` under ``root`` (its own target cache there); returns its folder."""
    from reconbench.cli import main

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RECONBENCH_CACHE", str(root / "cache"))
        try:
            main(["train", *train_args, "--out", str(root / "card"), "-q"])
        except SystemExit as exc:
            assert not exc.code
    return root / "card"


def default_sigint() -> None:
    """For a child process that must see Ctrl-C: Python leaves SIGINT alone (no KeyboardInterrupt) when it starts
    with the signal ignored, which it inherits from a parent where some library set SIG_IGN."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)
