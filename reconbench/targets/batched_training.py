"""Several targets of one shape trained by full-batch GD as one computation, resumable from a checkpoint.

T targets whose linear chains have the same n training samples and the same layer widths (the input dimension D may
differ: it enters :mod:`reconbench.targets.chain_gd`'s factorised first layer only through the n x n Gram matrix
X Xᵀ) step together, each at its own constant learning rate, weight decay and loss (any mix of losses of one output
layout: ``bce`` and ``mse``, one output and a float target each; ``ce`` only with ``ce``): every product of
:class:`~reconbench.targets.chain_gd.ChainGD`'s step becomes a ``bmm`` over the stack of T targets (on the CPU, slices
of the stack one target at a time, for the cache: see ``_steps``), with the same operations in the same order, so
target t's weights equal training it alone to rounding (tests/unit/targets/test_batched_training.py states the
tolerance). Where the targets share lr, weight decay and loss, the stacked step passes them to the products as
scalars; where they differ, it folds each target's lr into its output gradient and multiplies by each target's decay
as (T, 1, 1) tensors (:meth:`BatchedChainGD._step_mixed`). On the CPU each target steps with its own scalars: a
target of any stack equals training it alone bit for bit there.

No host synchronisation per step: each step writes its loss into a device buffer and folds its finiteness into a
device flag; the host reads them once every ``loss_every`` = k steps (the loss history holds the loss before every
k-th step). On CUDA the k steps of one window are captured once as a CUDA graph and replayed; elsewhere (and when
capture fails, with the reason noted) the same steps run eagerly. A target whose loss turns non-finite is marked
diverged at its window and no longer counted; the batched products keep the targets' slices apart, so the others
are unaffected.

The first layer is kept as ChainGD keeps it, W_1 = s W_1(0) + C X, but its pre-activations X W_1ᵀ are made again
from C every step (:meth:`BatchedChainGD._remake_pre`, at the cost of the update it replaces) rather than stepped as
a second copy: in float32 that copy's rounding accumulated apart from C's, so the weights released differed from the
network trained (docs/regime.md, "The trainer's two copies of the first layer drifted apart").

``save``/``load`` write and read the whole state (the factorised first layer, the other layers, the step, the loss
history) as safetensors: training k steps, saving, loading into a fresh trainer and training the rest gives the
weights of one uninterrupted run exactly. Hand-written for the same reason as ``ChainGD``: no library offers a
fused full-batch step for this model class.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file
from torch import nn

from reconbench.data import Problem
from reconbench.errors import ReconbenchError
from reconbench.nets import TargetNet
from reconbench.records.training_checkpoint import CHECKPOINT_FORMAT as TRAINING_CHECKPOINT_FORMAT
from reconbench.records.training_checkpoint import (
    PER_TARGET_FORMAT,
    TRAINING_CHECKPOINT,
    TrainerSettings,
    TrainingCheckpoint,
)
from reconbench.targets.chain_gd import chain_layers
from reconbench.targets.recipe import TargetRecipe

CHECKPOINT_FORMAT = TRAINING_CHECKPOINT_FORMAT
#: the outputs and targets each loss reads: a stack mixes only losses of one layout
LOSS_LAYOUTS = {"bce": "one output, float targets", "mse": "one output, float targets",
                "ce": "one output per class, class-index targets"}
#: the training settings each target of a stack keeps for itself; every other one its recipe must share
OWN_SETTINGS = ("seed", "lr", "weight_decay", "loss")
#: k when not given: host reads every this many steps
DEFAULT_LOSS_EVERY = 100
#: how this trainer keeps the first layer's pre-activations (made again from the factorised weights every step),
#: written into the checkpoint of every target whose steps were all this trainer's (``first_layer``). A checkpoint
#: without it was written when they were a second copy stepped alongside, which drifts from X W_1ᵀ in float32 (by
#: 1-3% over 10^6 steps), in float64 only to rounding: :meth:`BatchedChainGD.load` reads both (a finished target's
#: weights are what its card is made from), ``run`` continues a float64 one (the two trainers agree there to
#: rounding) and refuses a float32 one, whose released weights are not the network its steps so far trained
FIRST_LAYER = "pre-activations recomputed from C every step"


# -- losses of T targets at once: (T,) values and dL/dz, elementwise the same operations as losses.py's ------------
def _bce(z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.binary_cross_entropy_with_logits(z.reshape(y.shape), y, reduction="none").mean(dim=1)


def _bce_grad(z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return ((torch.sigmoid(z.reshape(y.shape)) - y) / y.shape[1]).reshape(z.shape)


def _mse(z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return ((z.reshape(y.shape) - y) ** 2).mean(dim=1)


def _mse_grad(z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return (2.0 / y.shape[1] * (z.reshape(y.shape) - y)).reshape(z.shape)


def _ce(z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(z.transpose(1, 2), y, reduction="none").mean(dim=1)


#: loss name -> (value per target, gradient wrt the outputs); cross-entropy's gradient needs the label index, below
BATCH_LOSSES: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {"bce": _bce, "mse": _mse, "ce": _ce}


class BatchedChainGD:
    """T targets' training state, stepped in place; ``run(steps)`` advances every live target by ``steps``."""

    def __init__(self, models: list[TargetNet], xs: list[torch.Tensor], ys: list[torch.Tensor],
                 loss: str | Sequence[str], lr: float | Sequence[float], weight_decay: float | Sequence[float] = 0.0,
                 *, loss_every: int = DEFAULT_LOSS_EVERY, cuda_graph: bool = True,
                 stacked: bool | None = None) -> None:
        """``loss``, ``lr``, ``weight_decay``: one for all targets, or one per target. ``stacked``: one batched
        product per layer over all targets (None: on a GPU, not on the CPU; see :meth:`_steps`)."""
        if not models or not (len(models) == len(xs) == len(ys)):
            raise ReconbenchError(f"batched training needs one input and one target tensor per model; got "
                                  f"{len(models)} models, {len(xs)} inputs, {len(ys)} targets")
        losses = _per_target("loss", loss, len(models))
        lrs = [float(v) for v in _per_target("lr", lr, len(models))]
        wds = [float(v) for v in _per_target("weight_decay", weight_decay, len(models))]
        for name in losses:
            if name not in BATCH_LOSSES:
                raise ReconbenchError(f"batched training has closed-form gradients for {', '.join(BATCH_LOSSES)}, "
                                      f"not {name!r}; train this target alone (`reconbench train`)")
        if len({LOSS_LAYOUTS[name] for name in losses}) > 1:
            raise ReconbenchError(f"batched training: losses {', '.join(sorted(set(losses)))} read different outputs "
                                  "(ce: one output per class and class-index targets; bce, mse: one output); stack "
                                  "ce only with ce")
        for t, (one_lr, one_wd) in enumerate(zip(lrs, wds, strict=True)):
            if not (one_lr > 0 and math.isfinite(one_lr)) or not (one_wd >= 0 and math.isfinite(one_wd)):
                raise ReconbenchError(f"batched training: lr must be > 0 and weight_decay >= 0 (got lr={one_lr}, "
                                      f"weight_decay={one_wd} for target {t})")
        if loss_every < 1:
            raise ReconbenchError(f"batched training: loss_every must be at least 1 (got {loss_every})")
        chains = [_chain_of(i, m) for i, m in enumerate(models)]
        first = chains[0]
        self.dtype, self.device = first[0].weight.dtype, first[0].weight.device
        if self.dtype not in (torch.float64, torch.float32):
            raise ReconbenchError(f"batched training runs in float64 or float32, not {self.dtype}; convert the models "
                                  "with .double() or .float()")
        self.n = int(xs[0].shape[0])
        for i, (chain, x, y) in enumerate(zip(chains, xs, ys, strict=True)):
            _check_same_shape(i, chain, first, x, y, self.n, self.dtype, self.device)
        #: each target's loss, learning rate and weight decay
        self.losses, self.lrs, self.wds = losses, lrs, wds
        #: whether the targets share all three (the stacked step then takes them as scalars)
        self.uniform = len(set(losses)) == 1 and len(set(lrs)) == 1 and len(set(wds)) == 1
        self.loss_every, self.use_graph = int(loss_every), bool(cuda_graph)
        self.stacked = self.device.type != "cpu" if stacked is None else bool(stacked)
        self.notes: list[str] = []
        t = len(models)
        with torch.no_grad():
            self.xs = [x.detach().flatten(1).to(dtype=self.dtype, device=self.device) for x in xs]
            self.y = torch.stack([y.detach().to(self.device) for y in ys])   # (T, n): float (bce, mse) or class index
            if losses[0] == "ce":
                self.y = self.y.long()
                self._y_index = self.y[:, :, None]
                self._minus_one = torch.full((t, self.n, 1), -1.0, dtype=self.dtype, device=self.device)
            else:
                self.y = self.y.to(self.dtype)
            self.gram = torch.stack([x @ x.t() for x in self.xs])
            # W_1 = scale * base + coef X for each target (ChainGD's factorisation; each target's own scale)
            self.base = [c[0].weight.detach().clone() for c in chains]
            self.coef = self.gram.new_zeros(t, first[0].out_features, self.n)
            self.scales = [1.0] * t
            # the mixed stacked step's per-target factors (T, 1, 1): lr, decay 1 - lr wd; and its output gradient
            self._lr_t = torch.tensor(lrs, dtype=self.dtype, device=self.device)[:, None, None]
            self._decays = [1.0 - a * b for a, b in zip(lrs, wds, strict=True)]
            self._decay_t = torch.tensor(self._decays, dtype=self.dtype, device=self.device)[:, None, None]
            self._grad_out = self.gram.new_empty(t, self.n, first[-1].out_features) if not self.uniform else None
            # P = X W_1ᵀ = scale X W_1(0)ᵀ + K Cᵀ: made from the factorised weights every step (:meth:`_remake_pre`),
            # never stepped alongside them; the scale on the device too (float64, one multiplication per step as
            # ``scales``), so a captured window reads it
            self.pre0 = torch.stack([torch.mm(x, w.t()) for x, w in zip(self.xs, self.base, strict=True)])
            self.pre = self.pre0.clone()
            self._scale_t = torch.ones(t, 1, 1, dtype=torch.float64, device=self.device)
            self._decay64 = torch.tensor(self._decays, dtype=torch.float64, device=self.device)[:, None, None]
            self.weights = [torch.stack([c[i].weight.detach() for c in chains]).clone() for i in range(1, len(first))]
            self.biases = [None if first[i].bias is None else
                           torch.stack([c[i].bias.detach() for c in chains]).clone()   # type: ignore[union-attr]
                           for i in range(len(first))]
            self.acts = [self.gram.new_empty(t, self.n, layer.out_features) for layer in first]
            self.grad_in = [self.gram.new_empty(t, self.n, layer.in_features) for layer in first[1:]]
            self.loss_now = self.gram.new_zeros(t)
            self.loss_mark = self.gram.new_zeros(t)
            self.ok = torch.ones(t, dtype=torch.bool, device=self.device)
        self.step_count = 0
        self.history: list[dict[str, Any]] = []   # {"step": s, "loss": [T values]} before every k-th step
        self.diverged: list[str | None] = [None] * t
        self._graph: torch.cuda.CUDAGraph | None = None
        self._data_digest = _digest(self.xs, self.y)
        self.extra: dict[str, Any] = {}   # what the last loaded checkpoint's caller noted (save's ``extra``)
        self.target_extra: dict[int, dict[str, Any]] = {}   # the same, of one target's checkpoint, by target
        #: targets loaded from a checkpoint of the trainer that stepped a second copy of the pre-activations (see
        #: FIRST_LAYER): their checkpoints are saved without ``first_layer`` again, and in float32 not continued
        self.stepped_copy: set[int] = set()

    # -- the step --------------------------------------------------------------------------------------------
    @property
    def targets(self) -> int:
        return len(self.xs)

    @property
    def scale(self) -> float:
        """The factor weight decay has left of the initial first-layer weights, common to a stack whose targets share
        lr and weight decay (:attr:`scales`: each target's)."""
        if len(set(self.scales)) > 1:
            raise ReconbenchError("batched training: the targets have their own weight decay or lr, so each has its "
                                  "own scale; read scales[t]")
        return self.scales[0]

    def _forward(self, sl: slice) -> torch.Tensor:
        last = len(self.acts) - 1
        h = self.acts[0][sl].copy_(self.pre[sl])
        if self.biases[0] is not None:
            h.add_(self.biases[0][sl, None, :])
        for i in range(len(self.acts)):
            out = self.acts[i][sl]
            if i > 0:
                w, b = self.weights[i - 1][sl], self.biases[i]
                if b is None:
                    torch.bmm(h, w.transpose(1, 2), out=out)
                else:
                    torch.baddbmm(b[sl, None, :], h, w.transpose(1, 2), out=out)
            if i < last:
                out.relu_()
            h = out
        return h

    def _output_grad(self, z: torch.Tensor, sl: slice, loss: str) -> torch.Tensor:
        if loss == "bce":
            return _bce_grad(z, self.y[sl])
        if loss == "mse":
            return _mse_grad(z, self.y[sl])
        grad = torch.softmax(z, dim=2)
        return grad.scatter_add_(2, self._y_index[sl], self._minus_one[sl]).div_(self.n)

    def _step(self, mark: bool) -> None:
        """One GD step of every target (see :meth:`_steps`)."""
        self._steps(1, mark)

    def _steps(self, count: int, mark_first: bool) -> None:
        """``count`` GD steps of every target, all in place on the device: the loss before each (into ``loss_now``,
        and ``loss_mark`` for the first when ``mark_first``), its finiteness folded into ``ok``, then ChainGD's
        backward-and-update over the stack.

        On the CPU the targets go one after another, each for all ``count`` steps (slices of the same stacked state,
        the same operations; the targets are independent, so the order changes no number): there a product of n rows
        is one pass over a layer's weights, bound by memory, and one target's weights stay in the cache from pass
        to pass and step to step, where products over the whole stack would evict them (1.3x slower with four
        cpu-mini targets). On a GPU each step is one batched product per layer over all targets. Each part steps
        with its own scalar settings (a target alone, or a stack that shares them); a stack of mixed settings steps
        by :meth:`_step_mixed`."""
        parts: list[tuple[slice, tuple[str, float, float] | None]]   # None: the mixed stacked step
        if self.stacked:
            parts = [(slice(None), self._settings_of(0) if self.uniform else None)]
        else:
            parts = [(slice(t, t + 1), self._settings_of(t)) for t in range(self.targets)]
        for sl, settings in parts:
            for j in range(count):
                if settings is None:
                    self._step_mixed()
                else:
                    self._step_part(sl, *settings)
                self.ok[sl].logical_and_(torch.isfinite(self.loss_now[sl]))
                if j == 0 and mark_first:
                    self.loss_mark[sl].copy_(self.loss_now[sl])

    def _settings_of(self, t: int) -> tuple[str, float, float]:
        return self.losses[t], self.lrs[t], self.wds[t]

    def _step_part(self, sl: slice, loss: str, lr: float, wd: float) -> None:
        """One step of the targets ``sl``, which share ``loss``, ``lr`` and ``wd`` (scalars in every product)."""
        z = self._forward(sl)
        self.loss_now[sl].copy_(BATCH_LOSSES[loss](z, self.y[sl]))
        decay = 1.0 - lr * wd
        g = self._output_grad(z, sl, loss)
        for i in range(len(self.acts) - 1, 0, -1):
            w, h, b = self.weights[i - 1][sl], self.acts[i - 1][sl], self.biases[i]
            g_in = torch.bmm(g, w, out=self.grad_in[i - 1][sl]).masked_fill_(h <= 0, 0.0)
            w.baddbmm_(g.transpose(1, 2), h, beta=decay, alpha=-lr)
            if b is not None:
                b[sl].mul_(decay).add_(g.sum(dim=1), alpha=-lr)
            g = g_in
        coef = self.coef[sl]
        if decay != 1.0:
            coef.mul_(decay)
            self._scale_t[sl].mul_(decay)
        coef.sub_(g.transpose(1, 2), alpha=lr)
        self._remake_pre(sl, decay != 1.0)
        if self.biases[0] is not None:
            self.biases[0][sl].mul_(decay).add_(g.sum(dim=1), alpha=-lr)

    def _step_mixed(self) -> None:
        """One step of the whole stack whose targets differ in lr, weight decay or loss: each target's loss and
        output gradient on its own slice, its lr folded into that gradient (every product after it is linear in it),
        then ChainGD's backward-and-update with each target's decay as a (T, 1, 1) factor. Equal to each target's
        own step to rounding: lr multiplies the gradient before the products instead of after them."""
        every = slice(None)
        z = self._forward(every)
        grad = self._grad_out
        assert grad is not None
        if len(set(self.losses)) == 1:
            self.loss_now.copy_(BATCH_LOSSES[self.losses[0]](z, self.y))
            grad.copy_(self._output_grad(z, every, self.losses[0]))
        else:   # bce and mse: one output each, a few targets; one small call per target
            for t, loss in enumerate(self.losses):
                one = slice(t, t + 1)
                self.loss_now[one].copy_(BATCH_LOSSES[loss](z[one], self.y[one]))
                grad[one].copy_(self._output_grad(z[one], one, loss))
        g = grad.mul_(self._lr_t)
        decays = any(d != 1.0 for d in self._decays)
        decay, decay_row = self._decay_t, self._decay_t[:, :, 0]
        for i in range(len(self.acts) - 1, 0, -1):
            w, h, b = self.weights[i - 1], self.acts[i - 1], self.biases[i]
            g_in = torch.bmm(g, w, out=self.grad_in[i - 1]).masked_fill_(h <= 0, 0.0)
            if decays:
                w.mul_(decay)
            w.baddbmm_(g.transpose(1, 2), h, alpha=-1.0)
            if b is not None:
                if decays:
                    b.mul_(decay_row)
                b.sub_(g.sum(dim=1))
            g = g_in
        if decays:
            self.coef.mul_(decay)
            self._scale_t.mul_(self._decay64)
        self.coef.sub_(g.transpose(1, 2))
        self._remake_pre(every, decays)
        if self.biases[0] is not None:
            if decays:
                self.biases[0].mul_(decay_row)
            self.biases[0].sub_(g.sum(dim=1))

    def _remake_pre(self, sl: slice, scaled: bool) -> None:
        """P = scale X W_1(0)ᵀ + K Cᵀ of the targets ``sl`` from the updated C: the pre-activations of the weights
        :meth:`state_dicts` releases, to one product's rounding. It replaces stepping P alongside C (P <- decay P -
        lr K g), which costs the same 2 n² width FLOPs (plus n width for the scale), and whose float32 rounding
        accumulated apart from C's over many steps. ``scaled``: some target's scale is not 1."""
        pre, cT = self.pre[sl], self.coef[sl].transpose(1, 2)
        if scaled:
            torch.mul(self.pre0[sl], self._scale_t[sl], out=pre)
            pre.baddbmm_(self.gram[sl], cT)
        else:
            torch.baddbmm(self.pre0[sl], self.gram[sl], cT, out=pre)

    def _advance_scale(self, steps: int) -> None:
        for t, decay in enumerate(self._decays):
            if decay != 1.0:
                for _ in range(steps):   # one multiplication per step, as ChainGD does
                    self.scales[t] *= decay

    def _window(self) -> Callable[[], None]:
        """k aligned steps (the first marks its loss) as one call: a CUDA graph on CUDA when allowed."""
        def eager() -> None:
            self._steps(self.loss_every, True)

        if self.device.type != "cuda" or not self.use_graph:
            return eager
        if self._graph is None:
            self._graph = self._capture(eager)
            if self._graph is None:   # capture failed (noted): eager windows from now on
                self.use_graph = False
        graph = self._graph
        return eager if graph is None else graph.replay

    def _state_tensors(self) -> list[torch.Tensor]:
        return [self.coef, self.pre, self._scale_t, self.loss_now, self.loss_mark, self.ok, *self.weights,
                *(b for b in self.biases if b is not None), *([] if self._grad_out is None else [self._grad_out])]

    def _capture(self, steps: Callable[[], None]) -> torch.cuda.CUDAGraph | None:
        """The window as a CUDA graph, captured after a warm-up on a side stream; the state is restored after both.
        None (eager windows, the reason noted) when capture fails."""
        saved = [s.clone() for s in self._state_tensors()]
        try:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                self._step(True)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                steps()
        except Exception as exc:  # capture is an optimisation: eager windows, reason recorded
            graph = None
            self.notes.append(f"CUDA graph capture failed ({type(exc).__name__}: {exc}); eager steps")
        with torch.no_grad():
            for s, v in zip(self._state_tensors(), saved, strict=True):
                s.copy_(v)
        return graph

    @torch.no_grad()
    def run(self, steps: int) -> None:
        """Advance by ``steps`` steps (fewer when every target has diverged). Windows of k steps start at multiples
        of k of the global step count, so a run split anywhere records the same history as one that is not."""
        if steps < 0:
            raise ReconbenchError(f"batched training: steps must be >= 0 (got {steps})")
        if steps and self.stepped_copy and self.dtype == torch.float32:
            raise ReconbenchError(f"batched training: target {min(self.stepped_copy)}'s checkpoint (step "
                                  f"{self.step_count}) was saved by the float32 trainer that stepped a drifting "
                                  "second copy of the first layer's pre-activations; its weights stay readable, but "
                                  "restart its training from step 0 (remove the state) to continue it")
        end = self.step_count + steps
        while self.step_count < end and any(d is None for d in self.diverged):
            start, k = self.step_count, self.loss_every
            if start % k == 0 and start + k <= end:
                self._window()()
                done = k
            else:   # a partial window: up to the next multiple of k or the end
                done = min(end, (start // k + 1) * k) - start
                self._steps(done, start % k == 0)
            self._advance_scale(done)
            self.step_count = start + done
            self._check(start, start % k == 0)

    def _check(self, start: int, marked: bool) -> None:
        """The host's read after a window: the marked loss into the history, newly diverged targets noted."""
        ok = self.ok.cpu().tolist()
        if marked:
            self.history.append({"step": start, "loss": self.loss_mark.cpu().tolist()})
        for t, fine in enumerate(ok):
            if not fine and self.diverged[t] is None:
                self.diverged[t] = (f"loss became non-finite between steps {start} and {self.step_count - 1}; "
                                    f"lower lr (now {self.lrs[t]})")

    # -- weights out --------------------------------------------------------------------------------------------
    @torch.no_grad()
    def state_dicts(self) -> list[dict[str, torch.Tensor]]:
        """Each target's weights now (on the CPU, in the chain's parameter names), without disturbing the
        factorised state: W_1 = scale * base + coef X is formed in a copy."""
        out = []
        for t in range(self.targets):
            scale = self.scales[t]
            w1 = self.base[t] * scale if scale != 1.0 else self.base[t].clone()
            w1.addmm_(self.coef[t], self.xs[t])
            layers = [w1, *(w[t] for w in self.weights)]
            state: dict[str, torch.Tensor] = {}
            for i, w in enumerate(layers):
                state[f"{i}.weight"] = w.cpu().clone()
                b = self.biases[i]
                if b is not None:
                    state[f"{i}.bias"] = b[t].cpu().clone()
            out.append(state)
        return out

    @torch.no_grad()
    def write_into(self, models: list[TargetNet]) -> None:
        """Copy each target's current weights into its model (same order as at construction)."""
        if len(models) != self.targets:
            raise ReconbenchError(f"write_into: {len(models)} models for {self.targets} targets")
        for i, (model, state) in enumerate(zip(models, self.state_dicts(), strict=True)):
            chain = _chain_of(i, model)
            for j, layer in enumerate(chain):
                layer.weight.copy_(state[f"{j}.weight"])
                if layer.bias is not None:
                    layer.bias.copy_(state[f"{j}.bias"])

    # -- checkpoints ------------------------------------------------------------------------------------------
    def _meta(self, target: int | None = None) -> TrainerSettings:
        """The settings a checkpoint must match: of the whole stack, or (``target``) of one target as a trainer of
        that target alone has them."""
        xs = self.xs if target is None else [self.xs[target]]
        digest = self._data_digest if target is None else _digest(xs, self.y[target:target + 1])
        ts = range(self.targets) if target is None else [target]
        losses, lrs, wds = [self.losses[t] for t in ts], [self.lrs[t] for t in ts], [self.wds[t] for t in ts]
        shared = len(set(losses)) == 1 and len(set(lrs)) == 1 and len(set(wds)) == 1
        # settings the targets share are written as one value (version 1, as before); others one per target
        return TrainerSettings(format=CHECKPOINT_FORMAT if shared else PER_TARGET_FORMAT, targets=len(xs), n=self.n,
                               loss=losses[0] if shared else losses, lr=lrs[0] if shared else lrs,
                               weight_decay=wds[0] if shared else wds, loss_every=self.loss_every,
                               dtype=str(self.dtype), widths=[int(a.shape[2]) for a in self.acts],
                               input_dims=[int(x.shape[1]) for x in xs], data_sha256=digest)

    @torch.no_grad()
    def save(self, path: str | Path, *, with_base: bool = True, extra: dict[str, Any] | None = None,
             target: int | None = None) -> Path:
        """The whole state as one safetensors file (tensors on the CPU; step, history and settings in its
        metadata). Written through a temporary file, so an interrupted save leaves the last checkpoint whole.
        ``with_base`` False leaves out the initial first-layer weights W_1(0), the largest part for wide inputs, which
        a trainer built from the same recipes has already (their sha256 is kept, and :meth:`load` checks it). ``extra``:
        the caller's own notes (JSON), read back into :attr:`extra` by :meth:`load`. ``target``: only that target's
        state, as a trainer of that target alone writes it (it resumes alone or in any stack of its shape)."""
        path = Path(path)
        sl = slice(None) if target is None else slice(target, target + 1)
        bases = self.base if target is None else [self.base[target]]
        scales = self.scales[sl]
        # one scale when the targets share it (the form of every checkpoint before per-target settings)
        tensors: dict[str, torch.Tensor] = {"coef": self.coef[sl], "pre": self.pre[sl], "scale": torch.tensor(
            scales[:1] if len(set(scales)) == 1 else scales, dtype=torch.float64)}
        if with_base:
            for t, base in enumerate(bases):
                tensors[f"base.{t}"] = base
        for i, w in enumerate(self.weights):
            tensors[f"weight.{i + 1}"] = w[sl]
        for i, b in enumerate(self.biases):
            if b is not None:
                tensors[f"bias.{i}"] = b[sl]
        history = self.history if target is None else [{"step": h["step"], "loss": [h["loss"][target]]}
                                                       for h in self.history]
        # a target continued from (or only read from) the trainer before the remake is saved as that trainer's
        old = self.stepped_copy & set(range(self.targets)[sl])
        meta = {**self._meta(target).to_dict(), "step": self.step_count, "history": history,
                "diverged": self.diverged[sl], "base_sha256": _digest(bases, bases[0].new_zeros(0)),
                **({} if old else {"first_layer": FIRST_LAYER}), "extra": extra or {}}
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        save_file({k: v.detach().cpu().contiguous() for k, v in tensors.items()}, str(tmp),
                  metadata={"reconbench": json.dumps(meta)})
        tmp.replace(path)
        return path

    @torch.no_grad()
    def load(self, path: str | Path, *, target: int | None = None) -> None:
        """Continue from a checkpoint written by :meth:`save` for the same targets, data and settings; ``target``:
        a checkpoint of that one target (``save(..., target=t)``, or a one-target trainer's), into its place in the
        stack. The targets of a stack step together: load states of one step into it (the step is the last loaded)."""
        path = Path(path)
        try:
            tensors = load_file(str(path))
        except (OSError, SafetensorError, ValueError) as exc:
            raise ReconbenchError(f"{path}: not a readable training checkpoint ({exc}); restart training or "
                                  "restore the file") from None
        meta = read_checkpoint(path)
        stored = meta.to_dict()   # every setting is a required field: each key is there
        mine = self._meta(target).to_dict()
        for key in sorted(mine, key=lambda k: k == "format"):   # a differing setting is named before the version
            if stored[key] != mine[key]:
                raise ReconbenchError(f"{path}: checkpoint {key} = {stored[key]!r}, this trainer's is {mine[key]!r}; "
                                      "resume with the targets, data and settings it was saved with")
        sl = slice(None) if target is None else slice(target, target + 1)
        bases = self.base if target is None else [self.base[target]]
        scales = [float(v) for v in tensors["scale"]]
        count = sl.indices(self.targets)[1] - sl.indices(self.targets)[0]
        if len(scales) not in (1, count):
            raise ReconbenchError(f"{path}: the checkpoint holds {len(scales)} scales for {count} targets; restart "
                                  "training or restore the file")
        if meta.first_layer not in (None, FIRST_LAYER):
            raise ReconbenchError(f"{path}: checkpoint first_layer = {meta.first_layer!r}, this trainer's is "
                                  f"{FIRST_LAYER!r}; resume it with the trainer that saved it")
        self.scales[sl] = scales * count if len(scales) == 1 else scales
        self._scale_t[sl].copy_(torch.tensor(self.scales[sl], dtype=torch.float64)[:, None, None])
        self.coef[sl].copy_(tensors["coef"])
        self.pre[sl].copy_(tensors["pre"])
        if "base.0" not in tensors and meta.base_sha256 != _digest(bases, bases[0].new_zeros(0)):
            raise ReconbenchError(f"{path}: the checkpoint leaves out the initial first-layer weights, and this "
                                  "trainer's differ from those it was saved with; resume from the same recipes")
        first = sl.indices(self.targets)[0]
        for t, b in enumerate(bases):
            if f"base.{t}" in tensors:
                b.copy_(tensors[f"base.{t}"])
                torch.mm(self.xs[first + t], b.t(), out=self.pre0[first + t])
        for t in range(first, first + count):
            if meta.first_layer is None:
                self.stepped_copy.add(t)
            else:
                self.stepped_copy.discard(t)
        for i, w in enumerate(self.weights):
            w[sl].copy_(tensors[f"weight.{i + 1}"])
        for i, bias in enumerate(self.biases):
            if bias is not None:
                bias[sl].copy_(tensors[f"bias.{i}"])
        self.step_count = meta.step
        if target is None:
            self.history = [{"step": h.step, "loss": list(h.loss)} for h in meta.history]
            self.diverged = list(meta.diverged)
            self.extra = dict(meta.notes)
        else:
            if [h["step"] for h in self.history] != [h.step for h in meta.history]:   # the first one loaded
                self.history = [{"step": h.step, "loss": [math.nan] * self.targets} for h in meta.history]
            for mine_h, theirs in zip(self.history, meta.history, strict=True):
                mine_h["loss"][target] = theirs.loss[0]
            self.diverged[target] = meta.diverged[0]
            self.target_extra[target] = dict(meta.notes)
        self.ok.copy_(torch.tensor([d is None for d in self.diverged], device=self.device))


def read_checkpoint(path: Path) -> TrainingCheckpoint:
    """The metadata of a checkpoint :meth:`BatchedChainGD.save` wrote, read strictly from its safetensors header; a
    one-line error naming the file when it is not one."""
    try:
        with safe_open(str(path), framework="pt") as fh:
            header = fh.metadata() or {}
        if "reconbench" not in header:
            raise ReconbenchError(f"{path} is not a batched-training checkpoint ({CHECKPOINT_FORMAT}); pass the file "
                                  "that BatchedChainGD.save wrote")
        meta = json.loads(header["reconbench"])
    except (OSError, SafetensorError, ValueError) as exc:
        raise ReconbenchError(f"{path}: not a readable training checkpoint ({exc}); restart training or "
                              "restore the file") from None
    return TRAINING_CHECKPOINT.decode(meta, path)


def from_recipes(recipes: list[TargetRecipe], problems: list[Problem], device: str = "cpu", *,
                 loss_every: int = DEFAULT_LOSS_EVERY, cuda_graph: bool = True,
                 stacked: bool | None = None) -> tuple[BatchedChainGD, list[TargetNet]]:
    """The trainer of several recipes (with their built problems), and their models at their initial weights, as
    :func:`reconbench.targets.training.train` would start them. Each recipe keeps its own :data:`OWN_SETTINGS`
    (the loss within one output layout: :data:`LOSS_LAYOUTS`); they must share every other training setting (dtype,
    steps, schedule, ...), and none may stop early or have a defense."""
    from reconbench.targets.losses import get_loss
    from reconbench.targets.recipe import DTYPES
    from reconbench.targets.training import build_model

    if len(recipes) != len(problems) or not recipes:
        raise ReconbenchError(f"batched training: one problem per recipe (got {len(recipes)} recipes, "
                              f"{len(problems)} problems)")
    first = recipes[0].train
    names = []
    for i, (recipe, problem) in enumerate(zip(recipes, problems, strict=True)):
        recipe.validate()
        spec = recipe.train
        reasons = [why for bad, why in (
            (spec.schedule != "constant", f"schedule {spec.schedule!r} (the batched step has one constant lr)"),
            (spec.stop_loss > 0 or spec.certify_every > 0, "an early stop (stop_loss or certify_every)"),
            (recipe.defense is not None, f"defense {recipe.defense!r}")) if bad]
        if reasons:
            raise ReconbenchError(f"batched training: recipe {i} has {reasons[0]}; train it alone (`reconbench train`)")
        mine, theirs = recipe.to_dict()["train"], recipes[0].to_dict()["train"]
        for key in [k for k in {**theirs, **mine} if k not in OWN_SETTINGS]:
            if mine.get(key) != theirs.get(key):
                raise ReconbenchError(f"batched training: recipe {i} has {key} = {mine.get(key)!r}, recipe 0 "
                                      f"{theirs.get(key)!r}; batch only recipes that share it (each may have its own "
                                      f"{', '.join(OWN_SETTINGS)})")
        names.append(get_loss(spec.loss, problem.task)[0])
        if names[-1] in LOSS_LAYOUTS and LOSS_LAYOUTS[names[-1]] != LOSS_LAYOUTS.get(names[0]):
            raise ReconbenchError(f"batched training: recipe {i} has loss {names[-1]!r}, recipe 0 {names[0]!r}: "
                                  f"{LOSS_LAYOUTS[names[-1]]} against {LOSS_LAYOUTS.get(names[0], 'another form')}; "
                                  "stack ce only with ce, bce and mse with each other")
    dtype = DTYPES[first.dtype]
    models = [build_model(r, p).to(dtype).to(device) for r, p in zip(recipes, problems, strict=True)]
    xs = [p.x_train(dtype).to(device) for p in problems]
    ys = [p.targets(p.train_labels, dtype).to(device) for p in problems]
    trainer = BatchedChainGD(models, xs, ys, names, [r.train.lr for r in recipes],
                             [r.train.weight_decay for r in recipes], loss_every=loss_every, cuda_graph=cuda_graph,
                             stacked=stacked)
    return trainer, models


def _per_target(name: str, value: str | float | Sequence[str] | Sequence[float], count: int) -> list[Any]:
    """A setting given once for all targets, or once per target, as one value per target."""
    if isinstance(value, (str, int, float)):
        return [value] * count
    values = list(value)
    if len(values) != count:
        raise ReconbenchError(f"batched training: {len(values)} values of {name} for {count} targets; give one value, "
                              "or one per target")
    return values


def _chain_of(i: int, model: TargetNet) -> list[nn.Linear]:
    chain = chain_layers(model)
    if chain is None:
        raise ReconbenchError(f"batched training: target {i} ({type(model).__name__}) is not a chain of linear layers "
                              "with ReLU between them; train it alone (`reconbench train`)")
    return chain


def _check_same_shape(i: int, chain: list[nn.Linear], first: list[nn.Linear], x: torch.Tensor, y: torch.Tensor,
                      n: int, dtype: torch.dtype, device: torch.device) -> None:
    """Target i must match target 0 in everything but the input dimension."""
    def shape(c: list[nn.Linear]) -> list[tuple[int, bool]]:
        return [(layer.out_features, layer.bias is not None) for layer in c]

    problems = []
    if shape(chain) != shape(first) or [a.in_features for a in chain[1:]] != [b.in_features for b in first[1:]]:
        problems.append(f"its layers (width, bias) {shape(chain)} differ from target 0's {shape(first)}")
    if x.shape[0] != n or y.shape[0] != n:
        problems.append(f"it has {x.shape[0]} inputs and {y.shape[0]} targets, target 0 has n = {n}")
    if x[0].numel() != chain[0].in_features:
        problems.append(f"its inputs have {x[0].numel()} values, its first layer takes {chain[0].in_features}")
    if chain[0].weight.dtype != dtype or chain[0].weight.device != device:
        problems.append(f"it is {chain[0].weight.dtype} on {chain[0].weight.device}, target 0 {dtype} on {device}")
    if problems:
        raise ReconbenchError(f"batched training: target {i} cannot step with target 0: {problems[0]}; batch only "
                              "targets of equal n and widths")


def _digest(xs: list[torch.Tensor], y: torch.Tensor) -> str:
    """sha256 of the training inputs and targets, so a checkpoint resumes only on the data it was trained on."""
    h = hashlib.sha256()
    for t in (*xs, y):
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()
