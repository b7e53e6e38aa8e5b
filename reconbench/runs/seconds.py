"""The attack time of a cell's search runs, counted once: a run that advanced alone records its own seconds; runs
that advanced together in one batch (the KKT attacks' ``run_batch``) each record the time from the batch's start to
their own end, so their clocks overlap and the batch counts once, as its longest member."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def attack_seconds(runs: Iterable[Mapping[str, Any]]) -> float:
    """Seconds the runs took together: the runs without a batch summed, plus each batch's longest run."""
    alone = 0.0
    batches: dict[tuple[int, ...], float] = {}
    for r in runs:
        seconds = float(r.get("seconds") or 0.0)
        batch = r.get("batch")
        if batch is None:
            alone += seconds
            continue
        key = tuple(batch.get("runs") or [r.get("run")])
        batches[key] = max(batches.get(key, 0.0), seconds)
    return alone + sum(batches.values())


def summed_seconds(runs: Iterable[Mapping[str, Any]]) -> float:
    """Every run's seconds summed, a batch's overlapping clocks included: how cells written before
    :func:`attack_seconds` recorded their attack time (a batch of R runs counted about R times)."""
    return float(sum(float(r.get("seconds") or 0.0) for r in runs))
