"""The batched Gram step before its workspace shared arrays between quantities (Z_k's array holding Dbar_k, D_k W_k's
holding alpha S (1 - S) and Hbar_k, D_k's holding Zbar_k) and before ||theta||^2 reused one float64 block: the
reference the current step must equal bit for bit (tests/unit/attack/test_kkt_step_sharing.py). Only the memory
changed, so the loss, dL/dx and dL/dC must be the same numbers."""
from __future__ import annotations

import torch

from reconbench.attack.kkt.batched_gram import SQUARES_BLOCK, BatchedGram, GramForward, factored_is_cheaper, run_dot


def sum_of_squares_before_sharing(t: torch.Tensor) -> float:
    """||t||^2 accumulated in float64, in blocks of :data:`SQUARES_BLOCK` elements (each converted to float64,
    squared and summed; 512 KiB temporaries that the allocator reuses) rather than as float64 copies of the whole
    tensor, whose fresh pages cost more than the arithmetic. Each block is a pairwise sum (BLAS's dot product
    accumulates with an error about 100 times larger at a million terms, too much for a value from which the
    stationarity term subtracts)."""
    flat = t.detach().reshape(-1)
    total = 0.0
    for block in flat.split(SQUARES_BLOCK):
        total += float(block.to(torch.float64).square().sum())
    return total


class WorkspaceBeforeSharing:
    """The workspace with an array of its own for every quantity of the step (none holding two in turn)."""

    def __init__(self, r: int, m: int, dims: list[int], dtype: torch.dtype, device: torch.device,
                 factored: list[bool] | None = None) -> None:
        def new(*shape: int) -> torch.Tensor:
            return torch.empty(*shape, dtype=dtype, device=device)

        n = len(dims) - 1
        self.key = (r, m)
        #: per layer: whether its residual terms go through J_k = H_k^T D_k instead of the Gram matrices
        self.factored = [False] * n if factored is None else factored
        self.cross = [new(r, dims[k], dims[k + 1]) if self.factored[k] else new(0) for k in range(n)]   # J_k
        self.cross_sq = [new(r, dims[k], dims[k + 1]) if self.factored[k] else new(0) for k in range(n)]
        self.col_sums = [new(r, 1, dims[k + 1]) for k in range(n)]    # 1^T D_k (a layer with a bias, factored)
        self.pre = [new(r, m, dims[k + 1]) for k in range(n)]          # Z_k
        self.hidden = [new(r, m, dims[k + 1]) for k in range(n - 1)]   # H_{k+1}
        self.slopes = [new(r, m, dims[k + 1]) for k in range(n - 1)]   # S_k
        self.slope_grads = [new(r, m, dims[k + 1]) for k in range(n - 1)]   # alpha S_k (1 - S_k)
        self.back = [new(r, m, dims[k]) for k in range(n)]            # D_k W_k (k >= 1)
        self.deltas = [new(r, m, dims[k + 1]) for k in range(n - 1)]   # D_k for k < L-1
        self.grams = [new(r, m, m) for _ in range(n)]                  # G_k
        self.outer = [new(r, m, m) for _ in range(n)]                  # P_k = D_k D_k^T
        self.square = new(r, m, m)                                      # P_k * G_k, for <P_k, G_k>
        self.zbar = [new(r, m, dims[k + 1]) for k in range(n)]
        self.dbar = [new(r, m, dims[k + 1]) for k in range(n)]
        self.carried = [new(r, m, dims[k + 1]) for k in range(n - 1)]
        self.hbar = [new(r, m, dims[k]) for k in range(n)]
        self.dots = new(2 * n, r, 1, 1)                                 # <D_k, Z_k>, <P_k, G_k>
        self.box = new(r, m, dims[0])                                   # the box prior's parts (batched.py)


class StepBeforeSharing(BatchedGram):
    """:class:`BatchedGram` with the earlier workspace, ``value_and_grad`` and ||theta||^2 (the same products)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)   # type: ignore[arg-type]
        self.theta_sq = sum(sum_of_squares_before_sharing(w) + (0.0 if b is None else sum_of_squares_before_sharing(b))
                            for w, b in zip(self.weights, self.biases, strict=True))
        self.weights_t = [w.T.contiguous() for w in self.weights]
        self.old_ws: WorkspaceBeforeSharing | None = None

    def workspace(self, r: int, m: int) -> WorkspaceBeforeSharing:  # type: ignore[override]
        if self.old_ws is None or self.old_ws.key != (r, m):
            factored = [self.layer_form == "auto" and factored_is_cheaper(m, d_in, d_out)
                        for d_in, d_out in zip(self.dims[:-1], self.dims[1:], strict=True)]
            self.old_ws = WorkspaceBeforeSharing(r, m, self.dims, self.dtype, self.device, factored)
        return self.old_ws

    def value_and_grad(self, fw: GramForward, coeffs: torch.Tensor,
                       alpha: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """L_stat per run (R,), dL/dx (R, m, D) and dL/dC (R, m, out) for the (already scaled) coefficients C.
        dL/dx and dL/dC are views of the workspace: valid until the next call."""
        n = len(self.weights)
        r, m = coeffs.shape[0], coeffs.shape[1]
        ws = self.workspace(r, m)
        deltas = [*ws.deltas, coeffs]   # D_k
        for k in reversed(range(1, n)):
            self.times_w(k, deltas[k], ws.back[k])    # D_k W_k
            torch.mul(ws.back[k], fw.slopes[k - 1], out=deltas[k - 1])
        for k in range(n):
            h, d = fw.inputs[k], deltas[k]
            run_dot(d, fw.pre[k], ws.dots[2 * k], ws.zbar[k], self.dots)   # zbar is written only below
            if ws.factored[k]:   # <P_k, G_k> = ||H_k^T D_k||^2 (+ ||1^T D_k||^2 with a bias: G_k's ones)
                torch.bmm(h.transpose(1, 2), d, out=ws.cross[k])
                run_dot(ws.cross[k], ws.cross[k], ws.dots[2 * k + 1], ws.cross_sq[k], self.dots)
                if self.biases[k] is not None:
                    torch.sum(d, dim=1, keepdim=True, out=ws.col_sums[k])
                    ws.dots[2 * k + 1].add_(ws.col_sums[k].square().sum(dim=(1, 2), keepdim=True))
                continue
            torch.bmm(h, h.transpose(1, 2), out=ws.grams[k])
            if self.biases[k] is not None:
                ws.grams[k].add_(1.0)
            torch.bmm(d, d.transpose(1, 2), out=ws.outer[k])
            run_dot(ws.outer[k], ws.grams[k], ws.dots[2 * k + 1], ws.square, self.dots)
        parts = ws.dots.reshape(n, 2, r)
        total = self.theta_sq - 2.0 * parts[:, 0].sum(dim=0) + parts[:, 1].sum(dim=0)
        # multiplier side: Dbar_k = -2 Z_k + 2 G_k D_k + (Dbar_{k-1} * S_{k-1}) W_k^T, from the input layer up
        # (Zbar_k starts as -2 D_k; for a hidden layer the -2 D_k is added to the slope path in the same pass:
        # -2 D is exact, so slope + (-2 D) rounds as (-2 D) + slope did)
        torch.mul(deltas[n - 1], -2.0, out=ws.zbar[n - 1])
        dbar = self._residual_adjoint(0, fw, deltas, ws)
        for k in range(1, n):
            s, sg = fw.slopes[k - 1], ws.slope_grads[k - 1]
            torch.mul(dbar, s, out=ws.carried[k - 1])
            torch.addcmul(s, s, s, value=-1.0, out=sg).mul_(alpha)          # alpha S (1 - S)
            slope_path = dbar.mul_(ws.back[k]).mul_(sg)                     # dbar is not needed after
            torch.add(slope_path, deltas[k - 1], alpha=-2.0, out=ws.zbar[k - 1])
            dbar = self._residual_adjoint(k, fw, deltas, ws)
            self.add_times_wt(k, ws.carried[k - 1], dbar)
        # candidate side: Hbar_k = 2 P_k H_k + Zbar_k W_k, from the outputs down to x
        hbar = fw.inputs[0]
        for k in reversed(range(n)):
            hbar = ws.hbar[k]
            self.times_w(k, ws.zbar[k], hbar)
            if ws.factored[k]:   # 2 P_k H_k = 2 D_k J_k^T
                hbar.baddbmm_(deltas[k], ws.cross[k].transpose(1, 2), alpha=2.0)
            else:
                hbar.baddbmm_(ws.outer[k], fw.inputs[k], alpha=2.0)
            if k > 0:
                ws.zbar[k - 1].addcmul_(hbar, fw.slopes[k - 1])
        return total, hbar, dbar

    def _residual_adjoint(self, k: int, fw: GramForward, deltas: list[torch.Tensor],  # type: ignore[override]
                          ws: WorkspaceBeforeSharing) -> torch.Tensor:
        """Dbar_k's start -2 Z_k + 2 G_k D_k into ``ws.dbar[k]`` (factored: G_k D_k = H_k J_k (+ 1 (1^T D_k)))."""
        if not ws.factored[k]:
            return torch.baddbmm(fw.pre[k], ws.grams[k], deltas[k], beta=-2.0, alpha=2.0, out=ws.dbar[k])
        dbar = torch.baddbmm(fw.pre[k], fw.inputs[k], ws.cross[k], beta=-2.0, alpha=2.0, out=ws.dbar[k])
        if self.biases[k] is not None:
            dbar.add_(ws.col_sums[k], alpha=2.0)
        return dbar
