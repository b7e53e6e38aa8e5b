"""Comparing cell records across runs: what a cell computed, without when, where and how fast it ran."""

from __future__ import annotations

import re
from typing import Any

# Fields that say when, where and how fast a cell ran, not what it computed: left out of the comparisons.
TIMING_AND_HOST = {
    "wall_seconds",  # the cell's wall time
    "cpu_seconds",  # the CPU time of the process that ran it
    "attack_seconds",  # the sum of its search runs' times
    "seconds",  # a search run's time (runs[*]) and the certificate's time (target.train_metrics.certificate)
    "load_or_train_seconds",  # target: time to train or load
    "train_seconds",  # target: training time (target and target.train_metrics)
    "finished",  # the finish time stamp
    "provenance",  # versions, git commit, host CPU, time stamp
    "machine",  # the host that ran the cell
    "record_sha256",  # the seal: a hash over the whole record, timings included
}


def comparable(rec: Any) -> Any:
    """A cell record without its timing and host fields; durations inside messages ("200 steps in 0.2s") masked."""
    if isinstance(rec, dict):
        return {k: comparable(v) for k, v in rec.items() if k not in TIMING_AND_HOST}
    if isinstance(rec, list):
        return [comparable(v) for v in rec]
    if isinstance(rec, str):
        return re.sub(r"\b\d+(\.\d+)?s\b", "<t>s", rec)
    if isinstance(rec, float) and rec != rec:
        return "nan"  # NaN == NaN for the comparison
    return rec
