"""The attack time of a cell's search runs, counted once: a run that advanced alone records its own seconds; runs
that advanced together in one batch (the KKT attacks' ``run_batch``) each record the time from the batch's start to
their own end, so their clocks overlap and the batch counts once, as its longest member."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping

from reconbench.records.cell import SearchRun


def search_run(r: SearchRun | Mapping[str, object]) -> SearchRun:
    """A run record as read from a run's JSON (``runs/execute.py`` writes it), or the record itself."""
    return r if isinstance(r, SearchRun) else SearchRun.from_dict(r, "a search run's record")


def attack_seconds(runs: Iterable[SearchRun | Mapping[str, object]]) -> float:
    """Seconds the runs took together: the runs without a batch summed, plus each batch's longest run."""
    alone = 0.0
    batches: defaultdict[tuple[int | None, ...], float] = defaultdict(float)
    for run in map(search_run, runs):
        seconds = float(run.seconds or 0.0)
        key = run.batch_key
        if key is None:
            alone += seconds
            continue
        batches[key] = max(batches[key], seconds)
    return alone + sum(batches.values())


def summed_seconds(runs: Iterable[SearchRun | Mapping[str, object]]) -> float:
    """Every run's seconds summed, a batch's overlapping clocks included: how cells written before
    :func:`attack_seconds` recorded their attack time (a batch of R runs counted about R times)."""
    return float(sum(float(run.seconds or 0.0) for run in map(search_run, runs)))
