"""The batched KKT step as it was before its avoidable work was removed: the reference the current step must equal
bit for bit on the CPU (tests/unit/attack/test_kkt_step_lean.py). Kept: the box prior's excess as x - clamp(x)
(two passes and a subtraction), the CUDA-graph step's masked update through temporaries and a copy back, with the
evaluation's gradient copied into the state, and the cross-target engine's per-run copies of the weights."""
from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from reconbench.attack.cross_target import _chain_shape
from reconbench.attack.kkt import batched
from reconbench.attack.kkt.batched_gram import BatchedGram, DotForm, LayerForm, run_sum_of_squares
from reconbench.attack.kkt.surrogate import Forward
from reconbench.errors import ReconbenchError


def box_before_softshrink(x: torch.Tensor, box: torch.Tensor, grad: torch.Tensor, buf: torch.Tensor | None = None,
                          neg_box: torch.Tensor | None = None, common: float | None = None,
                          dots: DotForm = "auto") -> torch.Tensor:
    """The box prior per run with its gradient added to ``grad``, the excess as x - clamp(x, -box, box)."""
    buf = torch.empty_like(x) if buf is None else buf
    neg_box = -box if neg_box is None else neg_box
    r = x.shape[0]
    sq = torch.empty(r, 1, 1, dtype=x.dtype, device=x.device)
    excess = torch.sub(x, batched.clamp_to_box(x, box, neg_box, buf, common), out=buf)
    grad.add_(excess, alpha=2.0)
    run_sum_of_squares(excess, sq, dots)
    return sq.reshape(r)


class StepsBeforeLean(batched.Steps):
    """The loop's steps with the CUDA-graph step as it was: x - lr buf through two temporaries, selected by
    torch.where into a third, copied back; every evaluation's gradient copied into the state's own array."""

    def write_eval(self) -> None:
        st = self.state
        self.stale = False
        loss, terms, gx, gl = self.evaluate(st.x, st.lam)
        if self.graph:
            st.loss.copy_(loss)
            st.terms.copy_(terms)
            st.grad_x.copy_(gx)
            st.grad_lam.copy_(gl)
        else:
            st.loss, st.terms, st.grad_x, st.grad_lam = loss, terms, gx, gl
        st.ok.logical_and_(torch.isfinite(loss))

    def masked(self) -> None:
        st = self.state
        torch.addcmul(st.grad_x, st.buf_x, self.mom_x, out=st.buf_x)
        torch.addcmul(st.grad_lam, st.buf_lam, self.mom_lam, out=st.buf_lam)
        st.x.copy_(torch.where(batched._expand(st.alive, st.x), st.x - self.lr_x * st.buf_x, st.x))
        st.lam.copy_(torch.where(batched._expand(st.alive, st.lam), st.lam - self.lr_lam * st.buf_lam, st.lam))
        self.write_eval()


class CrossGramPerRunCopies(BatchedGram):
    """The cross-target engine as it was: with unequal blocks, a copy of its target's weights for every run.

    When the runs come in equal contiguous blocks per target (every cell with the same number of runs), each product
    by a weight is one ``bmm`` over the T targets, the rows of a target's runs forming one matrix; otherwise each run
    gets its own copy of its target's weights (a ``bmm`` over the R runs)."""

    def __init__(self, chains: Sequence[Sequence[nn.Linear]], run_target: Sequence[int], forward: Forward,
                 dtype: torch.dtype, device: torch.device, layer_form: LayerForm = "gram",
                 dots: DotForm = "auto") -> None:
        if not chains or not run_target:
            raise ReconbenchError("a cross-target batch needs at least one target and one run")
        shape = _chain_shape(chains[0])
        for t, chain in enumerate(chains):
            if _chain_shape(chain) != shape:
                raise ReconbenchError(f"cross-target batch: target {t}'s layers {_chain_shape(chain)} differ from "
                                      f"target 0's {shape}; batch only targets of one shape")
        super().__init__(list(chains[0]), forward, dtype, device, layer_form, dots)
        per_target = [BatchedGram(list(c), forward, dtype, device) for c in chains]
        order = list(run_target)
        t_count = len(chains)
        block = len(order) // t_count if len(order) % t_count == 0 else 0
        blocked = block > 0 and order == [t for t in range(t_count) for _ in range(block)]
        index = list(range(t_count)) if blocked else order
        self.group = block if blocked else 1   # runs per row block of the batched products

        def stack(tensors: list[torch.Tensor]) -> torch.Tensor:
            return torch.stack([tensors[i] for i in index]).contiguous()

        self.weights = [stack([g.weights[k] for g in per_target]) for k in range(len(shape))]       # (B, out, in)
        self.weights_t = [stack([g.weights_t[k] for g in per_target]) for k in range(len(shape))]   # (B, in, out)
        self.biases = [None if per_target[0].biases[k] is None else
                       stack([g.biases[k] for g in per_target])[:, None, :]   # type: ignore[misc]
                       for k in range(len(shape))]
        self.theta_sqs = [per_target[t].theta_sq for t in order]
        self.theta_sq = torch.tensor(self.theta_sqs, dtype=dtype, device=device)   # type: ignore[assignment]

    def _rows(self, a: torch.Tensor) -> torch.Tensor:
        """(R, m, d) as (B, group m, d): the rows each batched product multiplies by one weight matrix."""
        return a.view(-1, self.group * a.shape[1], a.shape[2])

    def times_wt(self, k: int, a: torch.Tensor, out: torch.Tensor) -> None:
        b = self.biases[k]
        if b is None:
            torch.bmm(self._rows(a), self.weights_t[k], out=self._rows(out))
        else:
            torch.baddbmm(b, self._rows(a), self.weights_t[k], out=self._rows(out))

    def times_w(self, k: int, a: torch.Tensor, out: torch.Tensor) -> None:
        torch.bmm(self._rows(a), self.weights[k], out=self._rows(out))

    def add_times_wt(self, k: int, a: torch.Tensor, out: torch.Tensor) -> None:
        self._rows(out).baddbmm_(self._rows(a), self.weights_t[k])
