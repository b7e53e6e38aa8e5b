"""Numbers a cell records of its target (the regime residuals, the training margins, the training loss), by the name
a suite's ``[leaderboard] target_columns`` gives them: what a board shows per row beside the attack's numbers."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from reconbench.records.cell import TargetInfo
from reconbench.records.record import number


@dataclass(frozen=True)
class TargetQuantity:
    """One number of a cell's target: its column label, direction, format, the values it can take, and how it is
    read from the cell's target record (None: the target's card does not record it)."""

    label: str
    higher_is_better: bool
    fmt: str
    bounds: tuple[float | None, float | None]
    read: Callable[[TargetInfo], float | None]


def _regime(t: TargetInfo, test: str) -> float | None:
    fit = t.metrics.regime.fit(test)
    return None if fit is None else number(fit.residual)


def _margin_set_size(t: TargetInfo) -> float | None:
    theta = t.metrics.regime.theta
    return None if theta is None or theta.margin_set is None else float(len(theta.margin_set))


#: the quantities a suite may name; the residuals are norm ratios ‖v − Jᵀλ‖/‖v‖ with the best λ ≥ 0, so in [0, 1]
TARGET_QUANTITIES: dict[str, TargetQuantity] = {
    "theta_residual": TargetQuantity("θ residual (NNLS)", False, ".3g", (0.0, 1.0), lambda t: _regime(t, "theta")),
    "learned_residual": TargetQuantity("learned-part residual (NNLS)", False, ".3g", (0.0, 1.0),
                                       lambda t: _regime(t, "learned")),
    # lower is better: fewer training images carry the multipliers of the theta fit (docs/regime.md)
    "margin_set_size": TargetQuantity("margin set size", False, ".1f", (0.0, None), _margin_set_size),
    "margin_min": TargetQuantity("least training margin", True, ".3g", (None, None), lambda t: number(t.margin_min)),
    "margin_max": TargetQuantity("largest training margin", True, ".3g", (None, None), lambda t: number(t.margin_max)),
    "train_loss": TargetQuantity("training loss", False, ".2e", (0.0, None), lambda t: number(t.metrics.final_loss)),
}


def target_value(target: TargetInfo, name: str) -> float | None:
    """The named quantity of a cell's target (None: not recorded, or not a finite number)."""
    return TARGET_QUANTITIES[name].read(target)
