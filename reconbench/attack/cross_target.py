"""The search runs of several cells, on different targets of one shape, advanced as one batched KKT computation.

Each cell of a slice asks its attack for R_c search runs on its own target. When the targets have the same layer
shapes (the input dimension included) and the cells the same attack, candidate labels and options outside the
per-run ones (:data:`reconbench.attack.kkt.batched.PER_RUN_FIELDS`), every run of every such cell advances in one
step of the batched engine (:mod:`reconbench.attack.kkt.batched`): the same loss, update and divergence checks, with
the per-run hyperparameters as in a cell's own batch. The only change is in the products by the weights: run r reads
its own target's weights, so :class:`CrossGram` replaces the engine's one product per layer over all rows by a
batched product over the targets (``bmm``; the runs of one target are contiguous rows of one matrix). On a GPU the
step is captured as a CUDA graph like a cell's own batch; elsewhere it runs eagerly.

Run r's result equals the per-cell path's to rounding: the same terms are summed, and only the products by the weights
may group their sums differently (tests/unit/attack/test_cross_target.py states the tolerance). Cells that cannot join a group
(another engine, a rescaled target, a model without a linear chain) run through their attack's own ``run_batched``.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from reconbench.attack.kkt.batched import (
    PER_RUN_FIELDS,
    BatchInfo,
    State,
    StepOptions,
    advance,
    bytes_per_run,
    current_step_options,
    gram_evaluator,
    matmul_precision,
    per_run_column,
    plan_chunks,
    resolve_sync_every,
)
from reconbench.attack.kkt.batched_gram import BatchedGram, DotForm, LayerForm
from reconbench.attack.kkt.loop import StationarityConfig
from reconbench.attack.kkt.stationarity import full_chain
from reconbench.attack.kkt.surrogate import Forward
from reconbench.attack.watch import labelled
from reconbench.config import config_to_dict
from reconbench.errors import ReconbenchError
from reconbench.interfaces import AttackOutput, AttackTarget, ProgressFn


@dataclass
class CrossRequest:
    """One cell's batch of search runs, as the cell asked its attack's ``run_batch`` for it."""

    attack: Any
    target: AttackTarget
    x0s: list[torch.Tensor]
    labels: torch.Tensor
    configs: list[Any]
    generators: list[torch.Generator]
    name: str = ""   # what the request is called in batch records (the cell id)


@dataclass
class CrossResult:
    """A request's outputs in run order, and each run's batch record (``BatchInfo.to_dict`` plus ``cross_target``)."""

    outputs: list[AttackOutput] = field(default_factory=list)
    batches: list[dict[str, Any]] = field(default_factory=list)


def _chain_shape(chain: Sequence[nn.Linear]) -> list[tuple[int, int, bool]]:
    return [(layer.in_features, layer.out_features, layer.bias is not None) for layer in chain]


def batchable(attack: object, configs: Sequence[object]) -> bool:
    """Whether search runs of ``attack`` with ``configs`` can advance beside other cells' runs: a KKT attack (the
    batched engine reads its options: engine, rescale, max_batch) on the closed-form engine and the released weights
    (not the autograd engine, not rescaled). The planner's ``slice_costs.pool_key`` asks the same."""
    if not configs or not hasattr(attack, "batch_terms"):
        return False
    return all(isinstance(c, StationarityConfig) and c.engine != "autograd" and c.rescale == "none" for c in configs)


def cross_key(req: CrossRequest) -> str | None:
    """What the runs of a request must share with another request's to advance with them; None when the request
    cannot join any (it runs alone): no linear chain, the autograd engine, or rescaled weights."""
    chain = full_chain(req.target.model)
    if chain is None or not batchable(req.attack, req.configs):
        return None
    cfgs = [config_to_dict(c) for c in req.configs]
    fixed = {repr(sorted((k, v) for k, v in c.items() if k not in PER_RUN_FIELDS)) for c in cfgs}
    if len(fixed) != 1:
        return None   # the request's own runs already fall into several batches: the per-cell path groups them
    labels = req.labels.detach().cpu().contiguous()
    h = hashlib.sha256()
    for part in (req.attack.name, fixed.pop(), repr(_chain_shape(chain)), str(req.target.dtype),
                 str(req.target.device), repr(tuple(req.x0s[0].shape)), req.target.knowledge.out_dim,
                 str(labels.dtype), repr(tuple(labels.shape))):
        h.update(repr(part).encode())
    h.update(labels.numpy().tobytes())
    return h.hexdigest()


class CrossGram(BatchedGram):
    """:class:`BatchedGram` whose run r reads the layers of target ``run_target[r]``.

    When the runs come in equal contiguous blocks per target (every cell with the same number of runs), each product
    by a weight is one ``bmm`` over the T targets, the rows of a target's runs forming one matrix. Otherwise the runs
    fall into segments of consecutive runs on one target, and each product is one ``bmm`` per segment over its runs,
    with the target's weights as a stride-0 view repeated for each run (no copy of the weights per run: the same
    products, bit for bit, as with a copy per run, in the memory of one copy per target)."""

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
        self.group = block if blocked else 1   # runs per row block of the batched products
        #: (first run, end run, target) of each stretch of consecutive runs on one target (unequal blocks only)
        self.segments: list[tuple[int, int, int]] = []
        if not blocked:
            first = 0
            for r in range(1, len(order) + 1):
                if r == len(order) or order[r] != order[first]:
                    self.segments.append((first, r, order[first]))
                    first = r

        def stack(tensors: list[torch.Tensor]) -> torch.Tensor:
            return torch.stack(tensors).contiguous()   # (T, ...): one copy per target

        self.weights = [stack([g.weights[k] for g in per_target]) for k in range(len(shape))]       # (T, out, in)
        self.weights_t = [stack([g.weights_t[k] for g in per_target]) for k in range(len(shape))]   # (T, in, out)
        self.biases = [None if per_target[0].biases[k] is None else
                       stack([g.biases[k] for g in per_target])[:, None, :]   # type: ignore[misc]
                       for k in range(len(shape))]
        self.theta_sqs = [per_target[t].theta_sq for t in order]
        self.theta_sq = torch.tensor(self.theta_sqs, dtype=dtype, device=device)   # type: ignore[assignment]

    def _rows(self, a: torch.Tensor) -> torch.Tensor:
        """(R, m, d) as (B, group m, d): the rows each batched product multiplies by one weight matrix."""
        return a.view(-1, self.group * a.shape[1], a.shape[2])

    @staticmethod
    def _each(w: torch.Tensor, t: int, n: int) -> torch.Tensor:
        """Target t's matrix of ``w`` (T, ...) once for each of n runs, as a view."""
        return w[t].expand(n, *w.shape[1:])

    def times_wt(self, k: int, a: torch.Tensor, out: torch.Tensor) -> None:
        b = self.biases[k]
        if self.segments:
            for first, end, t in self.segments:
                w = self._each(self.weights_t[k], t, end - first)
                if b is None:
                    torch.bmm(a[first:end], w, out=out[first:end])
                else:
                    torch.baddbmm(self._each(b, t, end - first), a[first:end], w, out=out[first:end])
        elif b is None:
            torch.bmm(self._rows(a), self.weights_t[k], out=self._rows(out))
        else:
            torch.baddbmm(b, self._rows(a), self.weights_t[k], out=self._rows(out))

    def times_w(self, k: int, a: torch.Tensor, out: torch.Tensor) -> None:
        if self.segments:
            for first, end, t in self.segments:
                torch.bmm(a[first:end], self._each(self.weights[k], t, end - first), out=out[first:end])
        else:
            torch.bmm(self._rows(a), self.weights[k], out=self._rows(out))

    def add_times_wt(self, k: int, a: torch.Tensor, out: torch.Tensor) -> None:
        if self.segments:
            for first, end, t in self.segments:
                out[first:end].baddbmm_(a[first:end], self._each(self.weights_t[k], t, end - first))
        else:
            self._rows(out).baddbmm_(self._rows(a), self.weights_t[k])


def run_cross_batch(chains: Sequence[Sequence[nn.Linear]], run_target: Sequence[int], x0: torch.Tensor,
                    labels: torch.Tensor, lam0: torch.Tensor, configs: list[Any], terms: Any, dtype: torch.dtype,
                    device: torch.device, *, progress: ProgressFn | None = None) -> tuple[list[AttackOutput], BatchInfo]:
    """R runs on their targets' weights (``run_target[r]`` indexes ``chains``) in one batched computation: the step
    of :func:`reconbench.attack.kkt.batched.run_stationarity_batch` with the closed-form engine."""
    cfg0 = configs[0]
    sync_every = resolve_sync_every(cfg0, device)
    like = x0.to(dtype=dtype, device=device)
    info = BatchInfo(runs=list(range(len(configs))), engine="gram", sync_every=sync_every, cuda_graph=False,
                     tf32=False)
    with matmul_precision(cfg0.tf32, device) as tf32:
        info.tf32 = tf32
        alpha = per_run_column(configs, "alpha", like, 2)
        box = per_run_column(configs, "box", like, 2)
        m = x0.shape[1]
        scale = torch.tensor([1.0 / m if c.inverse_m else 1.0 for c in configs], dtype=dtype,
                             device=device).reshape(-1, 1, 1)
        options = current_step_options()
        # every run on one target (the cells of one target, or groups of their runs): that target's own products,
        # as its cell's batch computes them, so that each run's arithmetic is the per-cell path's
        gram = BatchedGram(list(chains[0]), cfg0.forward, dtype, device, options.layer_form, options.dots) \
            if len(chains) == 1 else CrossGram(chains, run_target, cfg0.forward, dtype, device, options.layer_form,
                                               options.dots)
        evaluate = gram_evaluator(gram, terms, alpha, box, scale)
        if options != StepOptions():
            info.notes.append(f"step options: {options.label()}")
        state = State(like.flatten(2).clone(), lam0.detach().to(like).clone())
        graph = device.type == "cuda" and bool(cfg0.cuda_graph)   # eager steps elsewhere (and when capture fails)
        theta: float | list[float] = gram.theta_sqs if isinstance(gram, CrossGram) else gram.theta_sq
        outputs = advance(state, evaluate, configs, sync_every, info, graph, theta, progress)
    for out in outputs:
        out.candidates = out.candidates.reshape(tuple(x0.shape[1:]))
        out.labels = labels
    return outputs, info


def run_cross_target(requests: Sequence[CrossRequest], *,
                     progress: ProgressFn | None = None) -> list[CrossResult]:
    """Every request's runs, those of requests with equal :func:`cross_key` advanced together (in chunks that fit
    memory), the others through their attack's own ``run_batched``; one result per request, in order.

    Each run's multipliers are drawn from its generator as the attack's own batch draws them, so run r of a request
    starts where the per-cell path starts it."""
    results = [CrossResult() for _ in requests]
    groups: dict[str, list[int]] = {}
    for i, req in enumerate(requests):
        key = cross_key(req)
        groups.setdefault(key if key is not None else f"alone-{i}", []).append(i)
    for members in groups.values():
        if len(members) == 1:
            _alone(requests[members[0]], results[members[0]], progress)
        else:
            _together(requests, members, results, progress)
    return results


def _weights_digest(chain: Sequence[nn.Linear]) -> str:
    h = hashlib.sha256()
    for layer in chain:
        for p in layer.parameters():
            h.update(repr((p.dtype, tuple(p.shape))).encode())
            h.update(p.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _alone(req: CrossRequest, result: CrossResult, progress: ProgressFn | None) -> None:
    batches: list[dict[str, Any] | None] = [None] * len(req.configs)

    def on_done(i: int, out: object, batch: dict[str, Any] | None) -> None:
        batches[i] = batch

    with labelled([req.name]):   # a slice's watcher: the computations below are this cell's
        result.outputs = req.attack.run_batched(req.target, req.x0s, req.labels, req.configs,
                                                generators=req.generators, progress=progress, on_done=on_done)
    result.batches = [b if b is not None else {} for b in batches]


def _together(requests: Sequence[CrossRequest], members: list[int], results: list[CrossResult],
              progress: ProgressFn | None) -> None:
    first = requests[members[0]]
    attack, target, labels = first.attack, first.target, first.labels
    k = target.knowledge.out_dim
    m = len(first.x0s[0])
    # every run of every member, in member order: (member position, run index in its request)
    runs = [(j, i) for j, r in enumerate(members) for i in range(len(requests[r].configs))]
    lam0s = {(j, i): attack.initial_multipliers(m, requests[r].configs[i], k, requests[r].generators[i],
                                                requests[r].x0s[i])
             for j, r in enumerate(members) for i in range(len(requests[r].configs))}
    chains: list[list[nn.Linear]] = []   # one per distinct target (cells of one target share its weights)
    target_of: list[int] = []            # member position -> index into chains
    seen: dict[str, int] = {}
    for r in members:
        chain = full_chain(requests[r].target.model)
        assert chain is not None   # cross_key admits linear chains only
        digest = _weights_digest(chain)
        if digest not in seen:
            seen[digest] = len(chains)
            chains.append(chain)
        target_of.append(seen[digest])
    dims = [first.x0s[0][0].numel(), *(layer.out_features for layer in chains[0])]
    weights_bytes = sum(p.numel() for layer in chains[0] for p in layer.parameters()) * \
        torch.empty((), dtype=target.dtype).element_size()
    per_run, max_batch = bytes_per_run(target, m, dims) + weights_bytes, int(first.configs[0].max_batch)
    if max_batch > 0:   # each request's runs in its own chunks of max_batch, as its cell's batch chunks them: a run
        # then advances beside the runs it has in its cell's own computation (docs/slices.md, the chunk rule)
        chunks: list[list[int]] = []
        reasons: list[str] = []
        for j in range(len(members)):
            mine, why = plan_chunks([q for q, (jj, _) in enumerate(runs) if jj == j], per_run, target.device,
                                    max_batch)
            chunks.extend(mine)
            reasons.extend([why] if why else [])
        reason = "; ".join(dict.fromkeys(reasons))
    else:
        chunks, reason = plan_chunks(list(range(len(runs))), per_run, target.device, max_batch)
    outputs: dict[tuple[int, int], AttackOutput] = {}
    batches: dict[tuple[int, int], dict[str, Any]] = {}
    for c, chunk in enumerate(chunks):
        picked = [runs[q] for q in chunk]
        used = sorted({target_of[j] for j, _ in picked})
        cells = sorted({j for j, _ in picked})
        cfgs = [requests[members[j]].configs[i] for j, i in picked]
        like = first.x0s[0].to(dtype=target.dtype, device=target.device)
        x0 = torch.stack([requests[members[j]].x0s[i] for j, i in picked]).to(like)
        lam0 = torch.stack([lam0s[(j, i)] for j, i in picked]).to(like)
        terms = attack.batch_terms(labels.to(target.device), cfgs, k, like)
        with labelled([requests[members[j]].name or str(members[j]) for j in cells]):   # a slice's watcher
            outs, info = run_cross_batch([chains[t] for t in used], [used.index(target_of[j]) for j, _ in picked],
                                         x0, labels.to(target.device), lam0, cfgs, terms, target.dtype, target.device,
                                         progress=progress)
        info.chunk, info.chunks, info.chunk_reason = c, len(chunks), reason
        record = info.to_dict()
        cross = {"runs": len(picked), "targets": len(used),
                 "cells": [requests[members[j]].name or str(members[j]) for j in cells]}
        for (j, i), out in zip(picked, outs, strict=True):
            outputs[(j, i)] = requests[members[j]].attack.finish_output(requests[members[j]].target, out)
            own = [ii for jj, ii in picked if jj == j]   # this request's runs in the chunk, in its own numbering
            batches[(j, i)] = {**record, "runs": own, "cross_target": cross}
    for j, r in enumerate(members):
        n = len(requests[r].configs)
        results[r].outputs = [outputs[(j, i)] for i in range(n)]
        results[r].batches = [batches[(j, i)] for i in range(n)]


# -- the seam with the cells' own code path: a broker that collects each cell's batch, then hands back its runs ------
class Collected(BaseException):
    """Raised by a collecting broker once a cell has asked for its batch: the cell's code stops there (a
    BaseException, so that no ``except Exception`` of the cell path records it as a failure)."""


class CrossBroker:
    """Between the bench and the runs of its cells (``reconbench.runs.execute`` asks :func:`serve_batch` before it
    runs a batch itself). Collecting: the batch a cell asks for is kept as a :class:`CrossRequest` and the cell stops
    (:class:`Collected`). Replaying: the batch a cell asks for, when it is the one collected (same starts and
    configs), is answered from the cross-target results; any other batch (a later round of a multi-round search, a
    cell whose starts changed) runs as usual."""

    def __init__(self) -> None:
        self.collecting = True
        self.current = ""
        self.requests: dict[str, CrossRequest] = {}
        self.results: dict[str, CrossResult] = {}
        self.seconds = 0.0

    def run(self, progress: ProgressFn | None = None) -> None:
        """Advance every collected batch (:func:`run_cross_target`), then replay."""
        import time

        names = list(self.requests)
        t0 = time.perf_counter()
        results = run_cross_target([self.requests[n] for n in names], progress=progress)
        self.seconds = time.perf_counter() - t0
        self.results = dict(zip(names, results, strict=True))
        self.collecting = False

    def serve(self, req: CrossRequest, on_done: Any) -> bool:
        if self.collecting:
            if not self.current:
                return False
            if self.current not in self.requests and cross_key(req) is not None:
                req.name = self.current
                self.requests[self.current] = req
            raise Collected(self.current)   # a batch that cannot join any runs in its cell, as usual, when replayed
        asked, result = self.requests.get(self.current), self.results.pop(self.current, None)
        if asked is None or result is None or not _same_batch(asked, req):
            return False
        for i, (out, batch) in enumerate(zip(result.outputs, result.batches, strict=True)):
            if on_done is not None:
                # the seconds of the batched computation it advanced in (each run of a batch records its batch's)
                on_done(i, out, {**batch, "cross_target_seconds": batch.get("seconds", 0.0)} if batch else None)
        return True


def _same_batch(a: CrossRequest, b: CrossRequest) -> bool:
    return (len(a.x0s) == len(b.x0s) and all(torch.equal(x, y) for x, y in zip(a.x0s, b.x0s, strict=True))
            and [config_to_dict(c) for c in a.configs] == [config_to_dict(c) for c in b.configs]
            and torch.equal(a.labels.cpu(), b.labels.cpu()))


_BROKER: ContextVar[CrossBroker | None] = ContextVar("reconbench_cross_broker", default=None)


@contextlib.contextmanager
def brokering(broker: CrossBroker) -> Iterator[CrossBroker]:
    """Make ``broker`` the one :func:`serve_batch` asks, for the duration of the block."""
    token = _BROKER.set(broker)
    try:
        yield broker
    finally:
        _BROKER.reset(token)


def serve_batch(attack: Any, target: AttackTarget, x0s: list[torch.Tensor], labels: torch.Tensor, configs: list[Any],
                generators: list[torch.Generator], on_done: Any) -> bool:
    """Whether a cross-target broker took this batch (collected it, or answered it); False: run it as usual."""
    broker = _BROKER.get()
    if broker is None:
        return False
    return broker.serve(CrossRequest(attack, target, list(x0s), labels, list(configs), list(generators)), on_done)
