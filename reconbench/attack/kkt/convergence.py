"""The KKT attacks' recorded early stop: a run ends once its attack loss and its candidates have stopped changing.

The rule (docs/method/kkt-attacks.md#early-stop), with tolerance ``tol`` and window ``W`` steps: at every step t that
is a multiple of W, from t = 2W on and before the last planned step, a run has converged when both

    |Lbar_t - Lbar_{t-W}| <= tol |Lbar_{t-W}|        Lbar_t = mean of L(x_s) over s = t-W+1..t
    ||xbar_t - xbar_{t-W}|| <= tol ||xbar_t||       xbar_t = mean of x_s over s = t-W+1..t (Frobenius, all m)

hold, where x_s are the candidates after s updates and L the attack loss there. Both are compared as window means:
the multiclass attack's loss moves by a few percent from step to step (its largest wrong output is re-chosen every
step) and SGD with momentum 0.9 makes the candidates oscillate about the point they settle on, so that point-to-point
changes would never fall below a useful tolerance. The run then returns x_t (its steps: t) and records the rule, t
and the two relative changes measured there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

#: denominators below this are treated as this (a loss or candidates exactly at zero)
TINY = 1e-30


@dataclass(frozen=True)
class ConvergenceRule:
    """The early-stop rule of one run (see the module docstring)."""

    tol: float
    window: int

    @classmethod
    def of(cls, config: Any) -> ConvergenceRule | None:
        """The rule a KKT config asks for (its ``early_stop`` tolerance and ``early_stop_window``); None when off."""
        tol = float(getattr(config, "early_stop", 0.0))
        return cls(tol, int(config.early_stop_window)) if tol > 0 else None

    def tests_at(self, step: int, steps: int) -> bool:
        """Whether the rule is tested after ``step`` updates of a run planned for ``steps``."""
        return step >= 2 * self.window and step % self.window == 0 and step < steps

    def describe(self) -> str:
        w = self.window
        return (f"the means of the attack loss and of the candidates over the last {w} steps each within "
                f"{self.tol:g} (relative) of their means over the {w} steps before")

    def changes(self, mean_now: torch.Tensor, mean_before: torch.Tensor, x_now: torch.Tensor,
                x_before: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Per run (leading dimension R): the relative change of the windowed mean loss and of the candidates."""
        loss_change = (mean_now - mean_before).abs() / mean_before.abs().clamp_min(TINY)
        moved = (x_now - x_before).flatten(1).norm(dim=1)
        cand_change = moved / x_now.flatten(1).norm(dim=1).clamp_min(TINY)
        return loss_change, cand_change

    def converged(self, loss_change: torch.Tensor, cand_change: torch.Tensor) -> torch.Tensor:
        return (loss_change <= self.tol) & (cand_change <= self.tol)

    def record(self, step: int, steps: int, loss_change: float, cand_change: float) -> dict[str, Any]:
        """What a converged run records (``early_stop`` in its run record)."""
        return {"step": step, "planned_steps": steps, "tol": self.tol, "window": self.window, "rule": self.describe(),
                "loss_change": loss_change, "candidate_change": cand_change}

    def message(self, step: int, steps: int) -> str:
        return (f"converged at step {step} of {steps} (early_stop {self.tol:g}, window {self.window}: "
                f"{self.describe()})")
