"""A guard for the hostile-input tests: every refusal must come before any optimiser exists (the ``no_work``
fixture in conftest.py applies it)."""

from __future__ import annotations

from typing import Any

import pytest
import torch


class WorkStarted(BaseException):
    """Raised by the guard when an optimiser is built, i.e. training or an attack began."""


def refuse_optimisers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make building any optimiser raise :class:`WorkStarted`."""

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise WorkStarted("an optimiser was built: work started before the input was refused")

    for name in ("SGD", "Adam", "LBFGS"):
        monkeypatch.setattr(torch.optim, name, refuse)
