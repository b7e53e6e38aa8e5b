"""A rate measured on a slice: what one cell's phase achieved on the device (``finished.json``'s
``measured`` rows, appended by ``bench --unpack`` from each pack), which a later plan prefers over the probe's.

An ``attack`` row: ``steps`` are the batched steps completed and ``seconds`` their wall time; ``weights`` is the
target network's parameter count, so the rate per unit of the planner's work (``reconbench.bench.slice_costs``) is
``seconds / (steps x runs x m x weights)``.

An ``evaluation`` row of a cell evaluated whole, and a ``train`` row of a training piece, carry the planner's units of
the work they timed in ``units`` (the evaluation's pooled candidates x training images x pixels; the piece's
target-steps x the resumable trainer's units of one target-step), so their rate is ``seconds / units``; a ``train``
row also says how many targets trained as one stack (``targets``) and counts target-steps in ``steps``. Both fields
are optional: a row written before them reads with 0 (no rate), as before.
"""

from __future__ import annotations

from dataclasses import dataclass

from reconbench.records.record import Record

#: the phases whose rate is ``seconds / units`` (the attack's is per batched step)
UNIT_PHASES = ("evaluation", "train")


@dataclass(frozen=True)
class MeasuredRate(Record):
    """One cell's measured phase on a slice (or one training piece: ``cell`` then names its stack's targets)."""

    cell: str
    phase: str
    precision: str
    runs: int
    m: int
    weights: int
    steps: int
    seconds: float
    device: str
    units: float = 0.0   # the planner's units of the timed work (evaluation, train); 0: not recorded
    targets: int = 0     # a train row: the targets stacked in its piece

    @property
    def units_per_step(self) -> float:
        """The planner's attack units of one batched step: runs x candidates x weights."""
        return float(self.runs) * self.m * self.weights

    @property
    def rate(self) -> float | None:
        """Seconds per unit of work; None where nothing was timed (no step completed, no time, or no units: a row
        of a phase around the attack, or one written before its units were recorded)."""
        if self.seconds <= 0:
            return None
        if self.phase in UNIT_PHASES:
            return self.seconds / self.units if self.units > 0 else None
        if self.steps <= 0 or self.units_per_step <= 0:
            return None
        return self.seconds / (self.steps * self.units_per_step)
