"""The closed-form batched Gram engine as of commit 599614b (transposed weight layout, a new array per operation):
the reference the current engine must match to rounding (tests/unit/attack/test_kkt_batched.py)."""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from reconbench.attack.kkt.surrogate import Forward


@dataclass
class GramForward:
    """What the forward pass keeps for the residual and its gradient."""

    inputs: list[torch.Tensor]   # H_k, (R, m, in_k)
    pre: list[torch.Tensor]      # Z_k, (R, m, out_k)
    slopes: list[torch.Tensor]   # S_k = sigma(alpha Z_k) for the hidden layers

    @property
    def outputs(self) -> torch.Tensor:
        return self.pre[-1]


class ReferenceGram:
    """L_stat and its gradients for a linear chain of layers, over R runs of m candidates each.

    Written for the CPU's BLAS as much as for the GPU: every product by a weight matrix passes the matrix as the
    transpose of a contiguous array (``W`` for x W^T, a contiguous copy of W^T for x W), the layout in which the BLAS
    kernels for m x k by k x n products with small m run fastest (benchmarks/bench_step_ab.py); scalings and sums
    that follow a product are folded into it (``baddbmm``/``addmm_``: C = alpha A B + beta C); and element-wise
    updates are done in place. Each of these changes only the rounding of the sums, not the function.
    """

    def __init__(self, layers: list[nn.Linear], forward: Forward, dtype: torch.dtype, device: torch.device) -> None:
        self.weights = [layer.weight.detach().to(dtype=dtype, device=device) for layer in layers]
        self.weights_t = [w.T.contiguous() for w in self.weights]   # (in, out): x W as x (W^T)^T
        self.biases = [None if layer.bias is None else layer.bias.detach().to(dtype=dtype, device=device)
                       for layer in layers]
        self.theta_sq = sum(float((w.double() ** 2).sum()) + (0.0 if b is None else float((b.double() ** 2).sum()))
                            for w, b in zip(self.weights, self.biases, strict=True))
        self.smooth = forward == "softplus"

    def forward(self, x: torch.Tensor, alpha: torch.Tensor) -> GramForward:
        """x: (R, m, D) flat candidates; alpha: (R, 1, 1)."""
        inputs, pre, slopes = [x], [], []
        last = len(self.weights) - 1
        for k, (w, b) in enumerate(zip(self.weights, self.biases, strict=True)):
            z = torch.nn.functional.linear(inputs[-1], w, b)   # as the sequential engine (same rounding)
            pre.append(z)
            if k < last:
                if self.smooth:   # softplus_alpha(z), as in surrogate.softplus_alpha
                    inputs.append(z.clamp_min(0) + torch.log1p(torch.exp(-alpha * z.abs())) / alpha)
                else:
                    inputs.append(z.clamp_min(0))
                slopes.append(torch.sigmoid(alpha * z))
        return GramForward(inputs, pre, slopes)

    def _times_w(self, a: torch.Tensor, k: int) -> torch.Tensor:
        """a W_k for a of shape (R, m, out_k)."""
        return torch.matmul(a, self.weights_t[k].T)

    def value_and_grad(self, fw: GramForward, coeffs: torch.Tensor,
                       alpha: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """L_stat per run (R,), dL/dx (R, m, D) and dL/dC (R, m, out) for the (already scaled) coefficients C."""
        n = len(self.weights)
        deltas: list[torch.Tensor] = [coeffs] * n   # D_k
        back: list[torch.Tensor] = [coeffs] * n     # D_k W_k, k >= 1
        for k in reversed(range(1, n)):
            back[k] = self._times_w(deltas[k], k)
            deltas[k - 1] = back[k] * fw.slopes[k - 1]
        grams, outer = [], []
        total = torch.full(coeffs.shape[:1], self.theta_sq, dtype=coeffs.dtype, device=coeffs.device)
        for k in range(n):
            h, d = fw.inputs[k], deltas[k]
            g = torch.bmm(h, h.transpose(1, 2))
            if self.biases[k] is not None:
                g.add_(1.0)
            p = torch.bmm(d, d.transpose(1, 2))
            grams.append(g)
            outer.append(p)
            total = total - 2.0 * (d * fw.pre[k]).sum(dim=(1, 2)) + (p * g).sum(dim=(1, 2))
        # multiplier side: Dbar_k = -2 Z_k + 2 G_k D_k + (Dbar_{k-1} * S_{k-1}) W_k^T, from the input layer up
        zbar: list[torch.Tensor] = [d * -2.0 for d in deltas]
        dbar = torch.baddbmm(fw.pre[0], grams[0], deltas[0], beta=-2.0, alpha=2.0)
        for k in range(1, n):
            s = fw.slopes[k - 1]
            carried = dbar * s
            slope_path = dbar.mul_(back[k]).mul_(alpha * s * (1.0 - s))   # dbar is not needed after this
            zbar[k - 1].add_(slope_path)
            dbar = torch.baddbmm(fw.pre[k], grams[k], deltas[k], beta=-2.0, alpha=2.0)
            dbar.flatten(0, 1).addmm_(carried.flatten(0, 1), self.weights[k].T)
        cbar = dbar
        # candidate side: Hbar_k = 2 P_k H_k + Zbar_k W_k, from the outputs down to x
        hbar = fw.inputs[0]
        for k in reversed(range(n)):
            hbar = torch.baddbmm(self._times_w(zbar[k], k), outer[k], fw.inputs[k], alpha=2.0)
            if k > 0:
                zbar[k - 1].addcmul_(hbar, fw.slopes[k - 1])
        return total, hbar, cbar
