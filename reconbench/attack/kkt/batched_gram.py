"""The Gram engine for R independent runs at once, with its gradient written out (no autograd).

Same function as :func:`reconbench.attack.kkt.stationarity.gram_engine`, for candidates x of shape (R, m, D)
and a per-run surrogate slope alpha (R, 1, 1). With H_0 = x, Z_k = H_k W_k^T + b_k, H_{k+1} = act(Z_k),
S_k = sigma(alpha Z_k), D_{L-1} = C and D_{k-1} = (D_k W_k) * S_{k-1}, run r's stationarity term is

    L_stat = ||theta||^2 + sum_k ( -2 <D_k, Z_k> + <D_k D_k^T, G_k> ),     G_k = H_k H_k^T (+ 1 with a bias)

Its reverse-mode derivative, by hand (docs/kkt_attacks.md, "The batched engine"):

* multiplier side, k = 0 .. L-1: Dbar_k = -2 Z_k + 2 G_k D_k + (Dbar_{k-1} * S_{k-1}) W_k^T, and the slope
  path adds Zbar_{k-1} += Dbar_{k-1} * (D_k W_k) * alpha S_{k-1} (1 - S_{k-1}); Dbar_{L-1} is dL/dC;
* candidate side, k = L-1 .. 0: Zbar_k += -2 D_k, Hbar_k = 2 (D_k D_k^T) H_k + Zbar_k W_k, and the activation
  passes Hbar_k back as Zbar_{k-1} += Hbar_k * S_{k-1} (the surrogate slope, as the autograd engines do).

With ``layer_form="auto"`` (opt-in, see :data:`LayerForm`), a layer whose Gram matrices cost more than its
weight-shaped cross term J_k = H_k^T D_k (in_k x out_k) - the output layer, with 1 output or a few classes - takes
the factored form <D_k D_k^T, G_k> = ||J_k||^2, G_k D_k =
H_k J_k and P_k H_k = D_k J_k^T: the same numbers summed in another order, with fewer operations
(:func:`factored_is_cheaper`).

Hand-written because autograd's graph of this step cannot be replayed by a CUDA graph as cheaply as plain tensor
code, and on the CPU it saves autograd's bookkeeping; tests check it against both autograd engines.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from reconbench.attack.kkt.surrogate import Forward


@dataclass
class GramForward:
    """What the forward pass keeps for the residual and its gradient (views of the engine's workspace: valid until
    the next call of :meth:`BatchedGram.forward`)."""

    inputs: list[torch.Tensor]   # H_k, (R, m, in_k)
    pre: list[torch.Tensor]      # Z_k, (R, m, out_k); a hidden layer's is overwritten by value_and_grad (Dbar_k)
    slopes: list[torch.Tensor]   # S_k = sigma(alpha Z_k) for the hidden layers

    @property
    def outputs(self) -> torch.Tensor:
        return self.pre[-1]


class Workspace:
    """Every array one step writes, allocated once for a batch shape (R, m) and reused by every later step: a step
    allocates nothing of the size of a layer, so the memory allocator has no work (and a CUDA graph replays it).

    An array whose value is not read again holds the next one of its shape (a smaller working set, which keeps
    more of the weights in the processor's caches): a hidden Gram layer's Z_k becomes Dbar_k's start, D_k W_k
    becomes alpha S (1 - S) and then Hbar_k, and D_k becomes Zbar_k."""

    def __init__(self, r: int, m: int, dims: list[int], dtype: torch.dtype, device: torch.device,
                 factored: list[bool] | None = None) -> None:
        def new(*shape: int) -> torch.Tensor:
            return torch.empty(*shape, dtype=dtype, device=device)

        n = len(dims) - 1
        self.key = (r, m)
        #: per layer: whether its residual terms go through J_k = H_k^T D_k instead of the Gram matrices
        self.factored = [False] * n if factored is None else factored
        #: per layer: whether Z_k's array holds Dbar_k and D_k's holds Zbar_k (a hidden layer of the Gram form)
        self.shared = [k < n - 1 and not self.factored[k] for k in range(n)]
        self.cross = [new(r, dims[k], dims[k + 1]) if self.factored[k] else new(0) for k in range(n)]   # J_k
        self.cross_sq = [new(r, dims[k], dims[k + 1]) if self.factored[k] else new(0) for k in range(n)]
        self.col_sums = [new(r, 1, dims[k + 1]) for k in range(n)]    # 1^T D_k (a layer with a bias, factored)
        self.pre = [new(r, m, dims[k + 1]) for k in range(n)]          # Z_k, then Dbar_k (shared)
        self.hidden = [new(r, m, dims[k + 1]) for k in range(n - 1)]   # H_{k+1}
        self.slopes = [new(r, m, dims[k + 1]) for k in range(n - 1)]   # S_k
        # D_k W_k (k >= 1), then alpha S_{k-1} (1 - S_{k-1}), then Hbar_k; Hbar_0 (dL/dx) has an array of its own
        self.back = [new(r, m, dims[k]) if k > 0 else new(0) for k in range(n)]
        self.deltas = [new(r, m, dims[k + 1]) for k in range(n - 1)]   # D_k for k < L-1, then Zbar_k (shared)
        self.grams = [new(r, m, m) for _ in range(n)]                  # G_k
        self.outer = [new(r, m, m) for _ in range(n)]                  # P_k = D_k D_k^T
        self.square = new(r, m, m)                                      # P_k * G_k, for <P_k, G_k>
        #: scratch, flat: D_k * Z_k for <D_k, Z_k>, then Dbar_{k-1} * S_{k-1} (carried), then the box prior's parts
        self.products = new(r * m * max(dims))
        self.zbar = [self.deltas[k] if self.shared[k] else new(r, m, dims[k + 1]) for k in range(n)]
        self.dbar = [self.pre[k] if self.shared[k] else new(r, m, dims[k + 1]) for k in range(n)]
        self.carried = [self.scratch(r, m, dims[k + 1]) for k in range(n - 1)]   # (Dbar_k * S_k), read at once
        self.hbar = [new(r, m, dims[0]), *self.back[1:]]
        self.dots = new(2 * n, r, 1, 1)                                 # <D_k, Z_k>, <P_k, G_k>
        self.box = self.scratch(r, m, dims[0])          # the box prior's parts (batched.py, after value_and_grad)

    def scratch(self, *shape: int) -> torch.Tensor:
        """A contiguous array of this shape at the start of :attr:`products`."""
        return self.products[:math.prod(shape)].view(shape)

    def product_buffer(self, like: torch.Tensor) -> torch.Tensor:
        """:meth:`scratch` of ``like``'s shape."""
        return self.scratch(*like.shape)


#: how the per-run sums <a[r], b[r]> (the stationarity term's <D_k, Z_k> and <P_k, G_k>, the box prior's sum of
#: squares) are taken: "auto" (the default) and "reduce" as a product then a sum per run on every device; "bmm" as
#: a batched 1 x N by N x 1 product (an A/B option: a GPU ran it by default until its first probe showed an
#: R-independent 5.4 ms per step that only these products can explain, docs/performance.md; benchmarks/gpu/step_ab.py
#: times both). On the CPU "auto" is the form every published number came from.
DotForm = Literal["auto", "reduce", "bmm"]


def _reduces(a: torch.Tensor, dots: DotForm) -> bool:
    return dots != "bmm"


def run_dot(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, buf: torch.Tensor | None = None,
            dots: DotForm = "auto") -> torch.Tensor:
    """<a[r], b[r]> for every run r into ``out`` (R, 1, 1): the product into ``buf`` (a's shape; a temporary
    without it) and a sum per run, because MKL runs the batched 1 x N by N x 1 product about ten times slower than
    that and a GPU runs it on few multiprocessors (docs/performance.md); ``dots="bmm"``: as that batched product,
    with no temporary of a's size."""
    r = a.shape[0]
    if _reduces(a, dots):
        prod = torch.mul(a, b) if buf is None else torch.mul(a, b, out=buf)
        torch.sum(prod.reshape(r, -1), dim=1, out=out.view(r))
        return out
    return torch.bmm(a.reshape(r, 1, -1), b.reshape(r, -1, 1), out=out)


def run_sum_of_squares(a: torch.Tensor, out: torch.Tensor, dots: DotForm = "auto") -> torch.Tensor:
    """<a[r], a[r]> for every run r into ``out`` (R, 1, 1); overwrites ``a`` with its squares where it sums them
    (the CPU, or ``dots="reduce"``; the callers do not read it again), so that no temporary of a's size is needed."""
    r = a.shape[0]
    if _reduces(a, dots):
        torch.sum(a.square_().reshape(r, -1), dim=1, out=out.view(r))
        return out
    return torch.bmm(a.reshape(r, 1, -1), a.reshape(r, -1, 1), out=out)


#: elements per block of ``sum_of_squares``
SQUARES_BLOCK = 1 << 16


def sum_of_squares(t: torch.Tensor) -> float:
    """||t||^2 accumulated in float64, in blocks of :data:`SQUARES_BLOCK` elements (each converted to float64,
    squared and summed) rather than as float64 copies of the whole tensor, whose fresh pages cost more than the
    arithmetic. Each block is a pairwise sum (BLAS's dot product accumulates with an error about 100 times larger at
    a million terms, too much for a value from which the stationarity term subtracts). One float64 block is
    allocated per call and reused: converted into (``copy_``) and squared in place (``mul_``, the product that
    ``square`` computes), so the blocks' sums are the numbers of a fresh ``to(float64).square()`` per block."""
    flat = t.detach().reshape(-1)
    total = 0.0
    buf = torch.empty(min(SQUARES_BLOCK, flat.numel()), dtype=torch.float64, device=flat.device)
    for block in flat.split(SQUARES_BLOCK):
        part = buf[:block.numel()].copy_(block)
        total += float(part.mul_(part).sum())
    return total


#: how a layer's residual terms are computed: "gram" keeps the Gram matrices in every layer (the default: the
#: published cells' numbers, bit for bit); "auto" picks per layer by the operation count (:func:`factored_is_cheaper`),
#: 3-5% faster at m = 200 on 784-1000-1000-1, but its other rounding, amplified over a search's steps, moves counts of
#: re-run cells (a run diverging at another step, an image crossing a threshold), so it is not the default
LayerForm = Literal["auto", "gram"]


def factored_is_cheaper(m: int, d_in: int, d_out: int) -> bool:
    """Whether a layer's terms cost fewer operations through J = H^T D (in x out) than through the Gram matrices.

    Per run, the Gram form forms G = H H^T and P = D D^T and multiplies G D and P H: 4 m^2 (in + out) operations;
    the factored form forms J = H^T D and multiplies H J and D J^T: 6 m in out. <P, G> = ||J||^2, G D = H J and
    P H = D J^T are the same numbers summed in another order. For a narrow layer (the output layer: out = 1 or the
    number of classes) the factored form is the cheaper one at every m >= 2; for 1000 x 1000 hidden layers the Gram
    form is, up to m = 750.
    """
    return 6 * m * d_in * d_out < 4 * m * m * (d_in + d_out)


class BatchedGram:
    """L_stat and its gradients for a linear chain of layers, over R runs of m candidates each.

    Written for the CPU's BLAS as much as for the GPU: every product by a weight matrix is a plain (NN) product of
    contiguous arrays, ``x W^T`` as ``x @ Wt`` with ``Wt = W^T`` stored contiguous and ``a W`` as ``a @ W``, the
    layout in which the BLAS kernels for m x k by k x n products with small m run fastest on an optimised BLAS
    (docs/performance.md); scalings and sums that follow a product are folded into it (``addmm``/``baddbmm``:
    C = alpha A B + beta C); element-wise work is done in place in a workspace allocated once per batch shape, with
    the products that fuse two passes (``addcmul``) where there is one; and the per-run sums are batched products.
    Each of these changes only the rounding of the sums, not the function.
    """

    def __init__(self, layers: list[nn.Linear], forward: Forward, dtype: torch.dtype, device: torch.device,
                 layer_form: LayerForm = "gram", dots: DotForm = "auto") -> None:
        self.layer_form = layer_form
        self.dots: DotForm = dots
        self.weights = [layer.weight.detach().to(dtype=dtype, device=device).contiguous() for layer in layers]
        self.weights_t = [w.T.contiguous() for w in self.weights]   # (in, out): x W^T as x @ Wt
        self.biases = [None if layer.bias is None else layer.bias.detach().to(dtype=dtype, device=device)
                       for layer in layers]
        self.theta_sq = sum(sum_of_squares(w) + (0.0 if b is None else sum_of_squares(b))
                            for w, b in zip(self.weights, self.biases, strict=True))
        self.smooth = forward == "softplus"
        self.dims = [self.weights[0].shape[1], *(w.shape[0] for w in self.weights)]
        self.dtype, self.device = dtype, device
        self.ws: Workspace | None = None

    def workspace(self, r: int, m: int) -> Workspace:
        if self.ws is None or self.ws.key != (r, m):
            factored = [self.layer_form == "auto" and factored_is_cheaper(m, d_in, d_out)
                        for d_in, d_out in zip(self.dims[:-1], self.dims[1:], strict=True)]
            self.ws = Workspace(r, m, self.dims, self.dtype, self.device, factored)
        return self.ws

    # -- the products by the weights: rows of all runs, one product per layer (a cross-target engine, whose runs
    # read different weights, overrides these three: reconbench/attack/cross_target.py) --------------------------
    def times_wt(self, k: int, a: torch.Tensor, out: torch.Tensor) -> None:
        """out = a W_k^T (+ b_k) for (R, m, in_k) ``a``."""
        b = self.biases[k]
        if b is None:
            torch.mm(a.flatten(0, 1), self.weights_t[k], out=out.view(-1, out.shape[-1]))
        else:
            torch.addmm(b, a.flatten(0, 1), self.weights_t[k], out=out.view(-1, out.shape[-1]))

    def times_w(self, k: int, a: torch.Tensor, out: torch.Tensor) -> None:
        """out = a W_k for (R, m, out_k) ``a``."""
        torch.mm(a.reshape(-1, a.shape[-1]), self.weights[k], out=out.view(-1, out.shape[-1]))

    def add_times_wt(self, k: int, a: torch.Tensor, out: torch.Tensor) -> None:
        """out += a W_k^T for (R, m, in_k) ``a``."""
        out.view(-1, out.shape[-1]).addmm_(a.reshape(-1, a.shape[-1]), self.weights_t[k])

    def forward(self, x: torch.Tensor, alpha: torch.Tensor) -> GramForward:
        """x: (R, m, D) flat candidates; alpha: (R, 1, 1)."""
        ws = self.workspace(x.shape[0], x.shape[1])
        inputs: list[torch.Tensor] = [x]
        last = len(self.weights) - 1
        for k in range(len(self.weights)):
            z, h_in = ws.pre[k], inputs[-1]
            self.times_wt(k, h_in, z)
            if k < last:
                h, s = ws.hidden[k], ws.slopes[k]
                if self.smooth:   # softplus_alpha(z) = relu(z) + log1p(exp(-alpha |z|)) / alpha
                    torch.abs(z, out=h).mul_(-alpha).exp_().log1p_().div_(alpha).add_(z.clamp_min(0))
                else:
                    torch.clamp_min(z, 0, out=h)
                torch.mul(z, alpha, out=s).sigmoid_()
                inputs.append(h)
        return GramForward(inputs, list(ws.pre), list(ws.slopes))

    def value_and_grad(self, fw: GramForward, coeffs: torch.Tensor,
                       alpha: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """L_stat per run (R,), dL/dx (R, m, D) and dL/dC (R, m, out) for the (already scaled) coefficients C.
        dL/dx and dL/dC are views of the workspace: valid until the next call."""
        n = len(self.weights)
        r, m = coeffs.shape[0], coeffs.shape[1]
        ws = self.workspace(r, m)
        deltas = [*ws.deltas, coeffs]   # D_k
        # each layer's terms as soon as its D_k is known (while D_k is still in the caches), from the outputs down
        self._layer_terms(n - 1, fw, deltas, ws)
        for k in reversed(range(1, n)):
            self.times_w(k, deltas[k], ws.back[k])    # D_k W_k
            torch.mul(ws.back[k], fw.slopes[k - 1], out=deltas[k - 1])
            self._layer_terms(k - 1, fw, deltas, ws)
        parts = ws.dots.reshape(n, 2, r)
        total = self.theta_sq - 2.0 * parts[:, 0].sum(dim=0) + parts[:, 1].sum(dim=0)
        # multiplier side: Dbar_k = -2 Z_k + 2 G_k D_k + (Dbar_{k-1} * S_{k-1}) W_k^T, from the input layer up
        # (Zbar_k starts as -2 D_k; for a hidden layer the -2 D_k is added to the slope path in the same pass:
        # -2 D is exact, so slope + (-2 D) rounds as (-2 D) + slope did)
        torch.mul(deltas[n - 1], -2.0, out=ws.zbar[n - 1])
        dbar = self._residual_adjoint(0, fw, deltas, ws)
        for k in range(1, n):
            s = fw.slopes[k - 1]
            torch.mul(dbar, s, out=ws.carried[k - 1])
            dbar.mul_(ws.back[k])                                           # dbar is not needed after, nor D_k W_k
            sg = torch.addcmul(s, s, s, value=-1.0, out=ws.back[k]).mul_(alpha)   # alpha S (1 - S)
            slope_path = dbar.mul_(sg)
            torch.add(slope_path, deltas[k - 1], alpha=-2.0, out=ws.zbar[k - 1])   # D_{k-1}'s array (shared)
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

    def _layer_terms(self, k: int, fw: GramForward, deltas: list[torch.Tensor], ws: Workspace) -> None:
        """Layer k's parts of the loss, <D_k, Z_k> and <P_k, G_k>, into ``ws.dots``, with G_k and P_k (or J_k)."""
        h, d = fw.inputs[k], deltas[k]
        run_dot(d, fw.pre[k], ws.dots[2 * k], ws.product_buffer(d), self.dots)
        if ws.factored[k]:   # <P_k, G_k> = ||H_k^T D_k||^2 (+ ||1^T D_k||^2 with a bias: G_k's ones)
            torch.bmm(h.transpose(1, 2), d, out=ws.cross[k])
            run_dot(ws.cross[k], ws.cross[k], ws.dots[2 * k + 1], ws.cross_sq[k], self.dots)
            if self.biases[k] is not None:
                torch.sum(d, dim=1, keepdim=True, out=ws.col_sums[k])
                ws.dots[2 * k + 1].add_(ws.col_sums[k].square().sum(dim=(1, 2), keepdim=True))
            return
        torch.bmm(h, h.transpose(1, 2), out=ws.grams[k])
        if self.biases[k] is not None:
            ws.grams[k].add_(1.0)
        torch.bmm(d, d.transpose(1, 2), out=ws.outer[k])
        run_dot(ws.outer[k], ws.grams[k], ws.dots[2 * k + 1], ws.square, self.dots)

    def _residual_adjoint(self, k: int, fw: GramForward, deltas: list[torch.Tensor], ws: Workspace) -> torch.Tensor:
        """Dbar_k's start -2 Z_k + 2 G_k D_k (factored: G_k D_k = H_k J_k (+ 1 (1^T D_k))): for a hidden layer of the
        Gram form in Z_k's own array (``baddbmm_`` runs the kernel that ``baddbmm(..., out=)`` runs after copying Z_k
        into ``out``, so the numbers are the same), else into ``ws.dbar[k]`` (the output layer's Z_k is the outputs,
        which the caller reads after this)."""
        if ws.shared[k]:   # in Z_k's array: the product that the out= form runs after copying Z_k into out
            return fw.pre[k].baddbmm_(ws.grams[k], deltas[k], beta=-2.0, alpha=2.0)
        if not ws.factored[k]:
            return torch.baddbmm(fw.pre[k], ws.grams[k], deltas[k], beta=-2.0, alpha=2.0, out=ws.dbar[k])
        dbar = torch.baddbmm(fw.pre[k], fw.inputs[k], ws.cross[k], beta=-2.0, alpha=2.0, out=ws.dbar[k])
        if self.biases[k] is not None:
            dbar.add_(ws.col_sums[k], alpha=2.0)
        return dbar
