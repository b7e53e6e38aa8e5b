"""A target's count of trained parameters against its data (``p_over_dn`` of a model card, of a cell's target and
of a run's target; ``targets/cards.py`` computes it): p trained parameters, input dimension d, n training points,
and the ratio p / (d n)."""

from __future__ import annotations

from dataclasses import dataclass

from reconbench.records.record import Record


@dataclass(frozen=True)
class ParameterRatio(Record):
    """p, d, n and p / (d n)."""

    p: int | None = None
    d: int | None = None
    n: int | None = None
    ratio: float | None = None
