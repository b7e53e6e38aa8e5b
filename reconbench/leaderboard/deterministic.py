"""What a cell or a model card holds that a run on another machine reproduces, and what it does not.

A board compares records made elsewhere (an outside submission, a re-run) with its own on what is deterministic:
the recipe and its hash, the weights' sha256, the cell's settings, the counts and scores that re-derive from the
candidates. Wall-clock seconds (``train_seconds``, the certificate's ``seconds``, a run's ``seconds``) and the device a
target was trained on (``train_device``; ``trained_in``, the pieces of a target trained in pieces) depend on the
machine and its load, never on the result, and are left out of every such comparison (:func:`without_timings`); the
weights' sha256 already tells whether the device changed the numbers. A value shown in a refusal is cut to one
short line (:func:`short_repr`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

#: fields of a model card's metrics that describe how long training took and where, not what it produced (the
#: device, and the pieces a target trained in pieces ran, each with its device and seconds)
MACHINE_FIELDS = frozenset({"train_device", "trained_in"})
#: the longest value a one-line refusal shows
SHORT = 60


def is_timing(key: str) -> bool:
    """A wall-clock field (``seconds``, ``train_seconds``, ``attack_seconds`` ...) or the machine's device."""
    return key == "seconds" or key.endswith("_seconds") or key in MACHINE_FIELDS


def without_timings(value: object) -> Any:
    """``value`` with every wall-clock and device field left out, at any depth."""
    if isinstance(value, Mapping):
        return {k: without_timings(v) for k, v in value.items() if not is_timing(str(k))}
    if isinstance(value, list):
        return [without_timings(v) for v in value]
    return value


def first_difference(want: object, got: object, close: Callable[[Any, Any], bool],
                     prefix: str = "") -> tuple[str, Any, Any] | None:
    """The first field (dotted path, sorted order) where ``got`` differs from ``want`` under ``close(a, b)``, with
    both values; None when they agree."""
    if isinstance(want, Mapping) and isinstance(got, Mapping):
        for k in sorted(set(want) | set(got), key=str):
            a, b = (want[k] if k in want else None), (got[k] if k in got else None)
            if (found := first_difference(a, b, close, f"{prefix}{k}.")) is not None:
                return found
        return None
    if close(want, got):
        return None
    return prefix.rstrip("."), want, got


def short_repr(value: object, limit: int = SHORT) -> str:
    """``repr(value)`` on one line, cut to ``limit`` characters."""
    text = " ".join(repr(value).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
