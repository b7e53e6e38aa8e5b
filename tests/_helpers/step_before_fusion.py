"""The batched Gram step as it was before its element-wise work was fused (the -2 D_k pass of every layer, the box
prior's two parts, ||theta||^2 as one float64 copy): the reference the current step must match to rounding
(tests/unit/attack/test_kkt_step_fusion.py)."""
from __future__ import annotations

import torch

from _helpers.gram_step_before_sharing import StepBeforeSharing
from reconbench.attack.kkt.batched_gram import GramForward, run_dot, run_sum_of_squares


class StepBeforeFusion(StepBeforeSharing):
    """:class:`BatchedGram` with the earlier ``value_and_grad`` and ||theta||^2 (same products; the workspace with an
    array per quantity, which this step's order of writes needs)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)   # type: ignore[arg-type]
        self.theta_sq = sum(float((w.double() ** 2).sum()) + (0.0 if b is None else float((b.double() ** 2).sum()))
                            for w, b in zip(self.weights, self.biases, strict=True))

    def value_and_grad(self, fw: GramForward, coeffs: torch.Tensor,
                       alpha: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        n = len(self.weights)
        r, m = coeffs.shape[0], coeffs.shape[1]
        ws = self.workspace(r, m)
        deltas = [*ws.deltas, coeffs]
        for k in reversed(range(1, n)):
            self.times_w(k, deltas[k], ws.back[k])
            torch.mul(ws.back[k], fw.slopes[k - 1], out=deltas[k - 1])
        for k in range(n):
            h, d = fw.inputs[k], deltas[k]
            torch.bmm(h, h.transpose(1, 2), out=ws.grams[k])
            if self.biases[k] is not None:
                ws.grams[k].add_(1.0)
            torch.bmm(d, d.transpose(1, 2), out=ws.outer[k])
            run_dot(d, fw.pre[k], ws.dots[2 * k], ws.zbar[k])
            run_dot(ws.outer[k], ws.grams[k], ws.dots[2 * k + 1], ws.square)
        parts = ws.dots.reshape(n, 2, r)
        total = self.theta_sq - 2.0 * parts[:, 0].sum(dim=0) + parts[:, 1].sum(dim=0)
        for k in range(n):
            torch.mul(deltas[k], -2.0, out=ws.zbar[k])
        dbar = torch.baddbmm(fw.pre[0], ws.grams[0], deltas[0], beta=-2.0, alpha=2.0, out=ws.dbar[0])
        for k in range(1, n):
            s, sg = fw.slopes[k - 1], ws.slope_grads[k - 1]
            torch.mul(dbar, s, out=ws.carried[k - 1])
            torch.addcmul(s, s, s, value=-1.0, out=sg).mul_(alpha)
            ws.zbar[k - 1].add_(dbar.mul_(ws.back[k]).mul_(sg))
            dbar = torch.baddbmm(fw.pre[k], ws.grams[k], deltas[k], beta=-2.0, alpha=2.0, out=ws.dbar[k])
            self.add_times_wt(k, ws.carried[k - 1], dbar)
        hbar = fw.inputs[0]
        for k in reversed(range(n)):
            hbar = ws.hbar[k]
            self.times_w(k, ws.zbar[k], hbar)
            hbar.baddbmm_(ws.outer[k], fw.inputs[k], alpha=2.0)
            if k > 0:
                ws.zbar[k - 1].addcmul_(hbar, fw.slopes[k - 1])
        return total, hbar, dbar


def box_before_fusion(x: torch.Tensor, box: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    """The box prior's value per run and its gradient added to ``grad``, as two parts (above and below)."""
    r = x.shape[0]
    sq = torch.empty(2, r, 1, 1, dtype=x.dtype, device=x.device)
    above = torch.sub(x, box).clamp_min_(0)
    grad.add_(above, alpha=2.0)
    run_sum_of_squares(above, sq[0])
    below = torch.add(x, box).clamp_max_(0)
    grad.add_(below, alpha=2.0)
    run_sum_of_squares(below, sq[1])
    return sq[0].reshape(r) + sq[1].reshape(r)
