"""The figure of a run's attack loss, one curve per search run."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from reconbench.records.cell import SearchRun
from reconbench.runs.seconds import search_run

#: the largest attack loss drawn on the log-scale trace plot
LOG_PLOT_MAX = 1e100


def plot_traces(runs: Sequence[SearchRun | Mapping[str, object]], path: Path, title: str) -> Path | None:
    """One curve of the attack loss per run (log scale); None when no run recorded a trace."""
    rows = [(run.run, run.trace or []) for run in map(search_run, runs)]
    if not any(trace for _, trace in rows):
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for run, trace in rows:
        # a log axis cannot place ticks for values near the float range's end (a diverging run): leave them out
        # a trace row is the attack's own free-form dict (interfaces.AttackOutput.trace): a row may lack the loss
        points = [(t["step"], t["loss"]) for t in trace if 0 < t.get("loss", math.nan) < LOG_PLOT_MAX]
        if points:
            ax.plot(*zip(*points, strict=True), label=f"run {run}", lw=1)
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("attack loss")
    ax.set_title(title)
    if len(rows) <= 12:
        ax.legend(fontsize=6, ncol=2)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
