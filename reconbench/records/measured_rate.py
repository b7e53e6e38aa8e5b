"""A rate measured on a slice: what one cell's phase achieved on the device (``finished.json``'s
``measured`` rows, appended by ``bench --unpack`` from each pack), which a later plan prefers over the probe's.

``steps`` are the batched steps completed and ``seconds`` their wall time; ``weights`` is the target network's
parameter count, so the rate per unit of the planner's work (``reconbench.bench.slice_costs``) is
``seconds / (steps x runs x m x weights)``.
"""

from __future__ import annotations

from dataclasses import dataclass

from reconbench.records.record import Record


@dataclass(frozen=True)
class MeasuredRate(Record):
    """One cell's measured phase on a slice."""

    cell: str
    phase: str
    precision: str
    runs: int
    m: int
    weights: int
    steps: int
    seconds: float
    device: str

    @property
    def units_per_step(self) -> float:
        """The planner's attack units of one batched step: runs x candidates x weights."""
        return float(self.runs) * self.m * self.weights

    @property
    def rate(self) -> float | None:
        """Seconds per unit of work; None where nothing was timed (no step completed, or no time)."""
        if self.steps <= 0 or self.seconds <= 0 or self.units_per_step <= 0:
            return None
        return self.seconds / (self.steps * self.units_per_step)
