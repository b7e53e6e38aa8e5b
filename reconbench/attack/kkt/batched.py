"""R search runs of a KKT attack advanced together as one computation (docs/kkt_attacks.md, "The batched engine").

Each run r keeps its own candidates x[r] (m, D), multipliers lam[r], hyperparameters (lr, lambda_lr, momentum,
alpha, box, 1/m factor, the attack's lambda_min and penalty weight: per-run tensors) and SGD-momentum buffers;
the runs share the released weights. The step of every run is the step of
:func:`reconbench.attack.kkt.loop.run_stationarity_attack` (same loss, same SGD-momentum update), so batched run
r equals the sequential run r with the same start to rounding.

Host synchronisation happens every ``sync_every`` = K steps only: the per-run finiteness of the loss is
accumulated on the device, and at each check a run whose loss went non-finite since the last check is put back
to its last snapshot (the candidates of the last check, whose loss was finite) and frozen, recorded as diverged;
the others take a new snapshot and go on. K = 1 (the CPU default) gives the sequential loop's result exactly: the
candidates of the step before the first non-finite loss. On CUDA the step (loss, gradient, update) of the
closed-form engine is captured once in a CUDA graph and replayed.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from reconbench.attack import watch
from reconbench.attack.kkt.batched_gram import BatchedGram, DotForm, LayerForm, run_sum_of_squares, sum_of_squares
from reconbench.attack.kkt.convergence import ConvergenceRule
from reconbench.attack.kkt.loop import Coefficients, Penalty, StationarityConfig, box_prior
from reconbench.attack.kkt.stationarity import full_chain, make_engine
from reconbench.errors import IncompatibleError
from reconbench.interfaces import AttackOutput, AttackTarget, ProgressFn

#: options that may differ between the runs of one batch (per-run tensors); runs that differ in any other option
#: are batched separately
PER_RUN_FIELDS = frozenset({"lr", "lambda_lr", "momentum", "alpha", "box", "inverse_m", "init_scale",
                            "lambda_min", "lambda_penalty_weight"})
#: K when ``sync_every`` is 0 (auto): every step on the CPU, where a check costs nothing, every 100 on an
#: accelerator, where a check waits for the device
CPU_SYNC, DEVICE_SYNC = 1, 100
TERM_NAMES = ("stationarity", "prior", "lambda_penalty")


class BatchTerms(Protocol):
    """An attack's equations for R runs at once: coefficient rows C (unscaled) and the multipliers' penalty,
    with the adjoints the closed-form engine needs (both linear / explicit, so written out)."""

    def coefficients(self, out: torch.Tensor, lam: torch.Tensor) -> torch.Tensor:
        """(R, m, out_dim) rows C_i from outputs (R, m, out_dim) and multipliers (R, m, ...)."""
        ...

    def lambda_vjp(self, out: torch.Tensor, cbar: torch.Tensor) -> torch.Tensor:
        """dL/dlam given dL/dC (C is linear in lam)."""
        ...

    def penalty(self, lam: torch.Tensor) -> torch.Tensor:
        """(R,) multiplier penalty per run."""
        ...

    def penalty_grad(self, lam: torch.Tensor) -> torch.Tensor:
        ...

    def penalty_and_grad(self, lam: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`penalty` and :meth:`penalty_grad` at once (what an evaluation asks for)."""
        ...


@dataclass
class BatchInfo:
    """How a batch ran; recorded with each of its runs."""

    runs: list[int]
    engine: str
    sync_every: int
    cuda_graph: bool
    tf32: bool
    chunk: int = 0
    chunks: int = 1
    chunk_reason: str = ""
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"runs": self.runs, "engine": self.engine, "sync_every": self.sync_every,
                "cuda_graph": self.cuda_graph, "tf32": self.tf32, "chunk": self.chunk, "chunks": self.chunks,
                "chunk_reason": self.chunk_reason, "notes": self.notes, "seconds": self.seconds,
                "divergence_loses_at_most_steps": self.sync_every}


@dataclass(frozen=True)
class StepOptions:
    """Choices of the closed-form engine that change the order of its sums on some device, so none is a default:
    the default (every field at its default) is the step that made the published numbers. Set for a block of code by
    :func:`step_options` (what benchmarks/gpu/step_ab.py times against the default on a GPU)."""

    #: "auto" and "reduce": per-run dot products as a product then a sum; "bmm": as batched products
    #: (:data:`reconbench.attack.kkt.batched_gram.DotForm`)
    dots: DotForm = "auto"
    #: "gram": the Gram matrices in every layer; "auto": a narrow layer through H^T D (:data:`LayerForm`)
    layer_form: LayerForm = "gram"

    def label(self) -> str:
        changed = [f"{k}={v}" for k, v in (("dots", self.dots), ("layer_form", self.layer_form))
                   if v != getattr(StepOptions, k)]
        return ", ".join(changed) or "default"


_STEP_OPTIONS: ContextVar[StepOptions | None] = ContextVar("reconbench_kkt_step_options", default=None)


@contextlib.contextmanager
def step_options(options: StepOptions) -> Iterator[StepOptions]:
    """The closed-form engine's :class:`StepOptions` for the batches that start inside the block (a batch records
    the options it ran with in its notes when they are not the default)."""
    token = _STEP_OPTIONS.set(options)
    try:
        yield options
    finally:
        _STEP_OPTIONS.reset(token)


def current_step_options() -> StepOptions:
    return _STEP_OPTIONS.get() or StepOptions()


# -- grouping and chunking ----------------------------------------------------------------------------------
def group_runs(configs: list[dict[str, Any]]) -> list[list[int]]:
    """Indices of runs that can share a batch: equal in every option outside :data:`PER_RUN_FIELDS`."""
    groups: dict[str, list[int]] = {}
    for i, cfg in enumerate(configs):
        key = repr(sorted((k, v) for k, v in cfg.items() if k not in PER_RUN_FIELDS))
        groups.setdefault(key, []).append(i)
    return list(groups.values())


def bytes_per_run(target: AttackTarget, m: int, dims: list[int]) -> int:
    """A generous estimate of one run's working memory in the batched step (dims: D, widths..., out)."""
    item = torch.empty((), dtype=target.dtype).element_size()
    layers = sum(m * (6 * d_in + 8 * d_out) + 6 * m * m for d_in, d_out in zip(dims[:-1], dims[1:], strict=True))
    return int(1.5 * item * (layers + 8 * m * dims[0]))


def memory_budget(device: torch.device) -> tuple[int, str]:
    """Bytes a batch may use, and where the figure comes from."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(0.7 * free), f"70% of the {free / 2**30:.1f} GiB free on {device}"
    avail = available_memory()
    if avail is None:
        avail = 8 * 2**30
        return int(0.4 * avail), "40% of 8 GiB (/proc/meminfo gives no MemAvailable line here)"
    return int(0.4 * avail), f"40% of the {avail / 2**30:.1f} GiB of available memory"


def available_memory() -> int | None:
    """Bytes of the MemAvailable line of /proc/meminfo, or None where there is no such file or line."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def plan_chunks(runs: list[int], per_run: int, device: torch.device, max_batch: int) -> tuple[list[list[int]], str]:
    """Split a group into chunks that fit the memory budget (and ``max_batch`` when > 0)."""
    budget, where = memory_budget(device)
    fit = max(1, budget // max(per_run, 1))
    size = min(fit, max_batch) if max_batch > 0 else fit
    chunks = [runs[i:i + size] for i in range(0, len(runs), size)]
    if len(chunks) == 1:
        return chunks, ""
    why = (f"max_batch={max_batch}" if max_batch > 0 and max_batch <= fit else
           f"{fit} run(s) of about {per_run / 2**20:.0f} MiB fit in {where}")
    return chunks, f"{len(runs)} runs in {len(chunks)} chunks of at most {size}: {why}"


def resolve_sync_every(cfg: StationarityConfig, device: torch.device) -> int:
    if cfg.sync_every > 0:
        return cfg.sync_every
    return CPU_SYNC if device.type == "cpu" else DEVICE_SYNC


@contextlib.contextmanager
def matmul_precision(tf32: bool, device: torch.device) -> Iterator[bool]:
    """TF32 matmuls on CUDA only when asked for (an opt-in recorded with the runs); yields whether it is on."""
    if not (tf32 and device.type == "cuda"):
        yield False
        return
    before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    try:
        yield True
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


# -- the batched loop ---------------------------------------------------------------------------------------
Evaluate = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]]


def _per_run(configs: list[StationarityConfig], name: str, like: torch.Tensor, dims: int) -> torch.Tensor:
    values = torch.tensor([float(getattr(c, name)) for c in configs], dtype=like.dtype, device=like.device)
    return values.reshape(-1, *([1] * dims))


def _box_value_and_add_grad(x: torch.Tensor, box: torch.Tensor, grad: torch.Tensor,
                            buf: torch.Tensor | None = None, neg_box: torch.Tensor | None = None,
                            common: float | None = None, dots: DotForm = "auto") -> torch.Tensor:
    """The box prior sum(relu(x - box)^2 + relu(-box - x)^2) per run; adds its gradient to ``grad`` in place.

    Both parts come from one excess e = x - clamp(x, -box, box): where x > box it is x - box (the same rounding as
    relu(x - box)), where x < -box it is x + box = -relu(-box - x) exactly, elsewhere 0; at most one part is non-zero
    in each entry, so grad + 2 e is what grad + 2 above - 2 below was, bit for bit, and sum(e^2) is the prior (its
    two sums in one). ``buf`` (x's shape) holds e, so that nothing of x's size is allocated; ``neg_box`` is -box
    (exact), passed by a caller that evaluates the prior at every step, and ``common`` the box of every run when the
    runs share one (:func:`clamp_to_box`); ``dots`` the form of the per-run sum (:class:`StepOptions`).

    With a shared box, e is ``softshrink(x, box)`` (x - box above, x + box below, 0 inside, nan for nan: the same
    numbers, bit for bit, in one pass instead of the clamp's and the difference's two).
    """
    buf = torch.empty_like(x) if buf is None else buf
    r = x.shape[0]
    sq = torch.empty(r, 1, 1, dtype=x.dtype, device=x.device)
    if common is not None and common >= 0:
        # aten's softshrink.out overload (torch.nn.functional.softshrink has no out=; the stub omits the overload)
        excess = torch._C._nn.softshrink(x, common, out=buf)   # type: ignore[call-arg]
    else:
        neg_box = -box if neg_box is None else neg_box
        excess = torch.sub(x, clamp_to_box(x, box, neg_box, buf, common), out=buf)
    grad.add_(excess, alpha=2.0)
    run_sum_of_squares(excess, sq, dots)   # squares buf in place (where it sums)
    return sq.reshape(r)


def clamp_to_box(x: torch.Tensor, box: torch.Tensor, neg_box: torch.Tensor, out: torch.Tensor,
                 common: float | None = None) -> torch.Tensor:
    """clamp(x, -box, box) into ``out``, run by run. torch.clamp with tensor bounds takes a path about five times
    slower on the CPU than with number bounds or than maximum then minimum, which compute the same numbers (each
    entry is max(x, -box) then min(., box) either way): ``common``, the box of every run when they share one, bounds
    by number; otherwise maximum and minimum with the per-run tensors."""
    if common is not None:
        return torch.clamp(x, min=-common, max=common, out=out)
    return torch.minimum(torch.maximum(x, neg_box, out=out), box, out=out)


def gram_evaluator(gram: BatchedGram, terms: BatchTerms, alpha: torch.Tensor, box: torch.Tensor,
                   scale: torch.Tensor) -> Evaluate:
    """(loss (R,), terms (R, 3), dL/dx, dL/dlam) at (x, lam) by the closed-form engine: plain tensor code."""
    neg_box = -box
    boxes = box.flatten().tolist()   # read once: the runs' boxes do not change
    common = boxes[0] if all(b == boxes[0] for b in boxes) else None

    def evaluate(x: torch.Tensor, lam: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        fw = gram.forward(x, alpha)
        out = fw.outputs
        stat, gx, cbar = gram.value_and_grad(fw, scale * terms.coefficients(out, lam), alpha)
        prior = _box_value_and_add_grad(x, box, gx, gram.workspace(x.shape[0], x.shape[1]).box, neg_box, common,
                                        gram.dots)
        pen, pen_grad = terms.penalty_and_grad(lam)
        glam = terms.lambda_vjp(out, scale * cbar) + pen_grad
        loss = stat + prior + pen
        return loss, torch.stack([stat, prior, pen], dim=1), gx, glam

    return evaluate


def autograd_evaluator(target: AttackTarget, configs: list[StationarityConfig], shape: tuple[int, ...],
                       per_run_terms: list[tuple[Coefficients, Penalty]]) -> Evaluate:
    """The fallback for models without a linear chain: each run's loss and gradient by the autograd engine, one
    run after another inside the batched step (torch.func's vmap cannot batch the surrogate ReLU's double
    backward without a vmap rule of its own)."""
    engines = [make_engine(target.model, c.alpha, c.forward, "autograd")[0] for c in configs]
    scales = [1.0 / shape[0] if c.inverse_m else 1.0 for c in configs]

    def evaluate(x: torch.Tensor, lam: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        losses, rows, gxs, gls = [], [], [], []
        for r, cfg in enumerate(configs):
            xr = x[r].detach().reshape(shape).requires_grad_(True)
            lr_ = lam[r].detach().clone().requires_grad_(True)
            coefficients, penalty = per_run_terms[r]
            out, stationarity = engines[r](xr)
            parts = (stationarity(scales[r] * coefficients(out.detach(), lr_)), box_prior(xr, cfg.box), penalty(lr_))
            loss = parts[0] + parts[1] + parts[2]
            gx, gl = torch.autograd.grad(loss, [xr, lr_])
            losses.append(loss.detach())
            rows.append(torch.stack([p.detach() for p in parts]))
            gxs.append(gx.reshape(x.shape[1:]))
            gls.append(gl)
        return torch.stack(losses), torch.stack(rows), torch.stack(gxs), torch.stack(gls)

    return evaluate


class _State:
    """The tensors a step reads and writes in place (so that a CUDA graph can replay it)."""

    def __init__(self, x: torch.Tensor, lam: torch.Tensor) -> None:
        self.x, self.lam = x, lam
        self.buf_x, self.buf_lam = torch.zeros_like(x), torch.zeros_like(lam)
        r = len(x)
        self.loss = torch.zeros(r, dtype=x.dtype, device=x.device)
        self.terms = torch.zeros(r, len(TERM_NAMES), dtype=x.dtype, device=x.device)
        self.grad_x, self.grad_lam = torch.zeros_like(x), torch.zeros_like(lam)
        self.ok = torch.ones(r, dtype=torch.bool, device=x.device)
        self.alive = torch.ones(r, dtype=torch.bool, device=x.device)

    def tensors(self) -> list[torch.Tensor]:
        return [self.x, self.lam, self.buf_x, self.buf_lam, self.loss, self.terms, self.grad_x, self.grad_lam,
                self.ok, self.alive]


def _expand(mask: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return mask.reshape(-1, *([1] * (like.dim() - 1)))


def run_stationarity_batch(target: AttackTarget, x0: torch.Tensor, labels: torch.Tensor, lam0: torch.Tensor,
                           configs: list[StationarityConfig], terms: BatchTerms | None,
                           per_run_terms: list[tuple[Coefficients, Penalty]], *,
                           progress: ProgressFn | None = None) -> tuple[list[AttackOutput], BatchInfo]:
    """Advance R runs together. x0: (R, m, C, H, W) starts; lam0: (R, m, ...) multipliers; ``configs`` differ only
    in :data:`PER_RUN_FIELDS`. ``terms`` (the batched equations) drive the closed-form engine; ``per_run_terms``
    (each run's sequential equations) drive the autograd fallback."""
    cfg0, device = configs[0], target.device
    r_runs, m = x0.shape[0], x0.shape[1]
    shape = tuple(x0.shape[1:])
    chain = full_chain(target.model)
    if cfg0.engine == "gram" and chain is None:
        raise IncompatibleError(f"engine 'gram' needs a model made of linear layers and activations only "
                                f"({type(target.model).__name__} is not); use engine=autograd or engine=auto")
    use_gram = chain is not None and cfg0.engine != "autograd" and terms is not None
    sync_every = resolve_sync_every(cfg0, device)
    like = x0.to(dtype=target.dtype, device=device)
    info = BatchInfo(runs=list(range(r_runs)), engine="gram" if use_gram else "autograd", sync_every=sync_every,
                     cuda_graph=False, tf32=False)
    with matmul_precision(cfg0.tf32, device) as tf32:
        info.tf32 = tf32
        alpha = _per_run(configs, "alpha", like, 2)
        box = _per_run(configs, "box", like, 2)
        scale = torch.tensor([1.0 / m if c.inverse_m else 1.0 for c in configs], dtype=like.dtype,
                             device=device).reshape(-1, 1, 1)
        if use_gram:
            assert chain is not None and terms is not None
            options = current_step_options()
            gram = BatchedGram(chain, cfg0.forward, target.dtype, device, options.layer_form, options.dots)
            evaluate = gram_evaluator(gram, terms, alpha, box, scale)
            if options != StepOptions():
                info.notes.append(f"step options: {options.label()}")
        else:
            evaluate = autograd_evaluator(target, configs, shape, per_run_terms)
        # ||theta||^2 of all parameters for the trace (the engine's, over the same layers, when it has one)
        theta_sq = gram.theta_sq if use_gram else sum(sum_of_squares(p) for p in target.model.parameters())
        state = _State(like.flatten(2).clone(), lam0.detach().to(like).clone())
        graph = use_gram and device.type == "cuda" and cfg0.cuda_graph
        outputs = _advance(state, evaluate, configs, sync_every, info, graph, theta_sq, progress)
    for out in outputs:
        out.candidates = out.candidates.reshape(shape)
        out.labels = labels
    return outputs, info


class Steps:
    """The step of the batched loop in its three forms (torch.optim.SGD's momentum update, dampening 0, then the loss
    at the new point); the loop picks one per step. ``graph``: the step is replayed as a CUDA graph, so the
    evaluation's results go to fixed arrays and the update is masked by the device's ``alive`` flags."""

    def __init__(self, state: _State, evaluate: Evaluate, configs: list[StationarityConfig], graph: bool) -> None:
        self.state, self.evaluate, self.graph = state, evaluate, graph
        self.lr_x = _per_run(configs, "lr", state.x, 2)
        self.lr_lam = _per_run(configs, "lambda_lr", state.lam, state.lam.dim() - 1)
        self.mom_x = _per_run(configs, "momentum", state.x, 2)
        self.mom_lam = _per_run(configs, "momentum", state.lam, state.lam.dim() - 1)
        self.neg_lr_x, self.neg_lr_lam = -self.lr_x, -self.lr_lam
        self.stale = False   # whether a check put a run back to its snapshot after the last evaluation
        self._adopted = False

    def write_eval(self) -> None:
        st = self.state
        self.stale = False
        loss, terms, gx, gl = self.evaluate(st.x, st.lam)
        if self.graph:   # a CUDA graph replays fixed arrays: the results are copied into the state's
            st.loss.copy_(loss)
            st.terms.copy_(terms)
            if not self._adopted:   # the first evaluation's gradient array becomes the state's: the closed-form
                st.grad_x, self._adopted = gx, True   # engine writes every later one into the same (no copy)
            elif gx.data_ptr() != st.grad_x.data_ptr():
                st.grad_x.copy_(gx)
            st.grad_lam.copy_(gl)
        else:   # the state holds the evaluation's own arrays (read by the next update, before they are rewritten)
            st.loss, st.terms, st.grad_x, st.grad_lam = loss, terms, gx, gl
        st.ok.logical_and_(torch.isfinite(loss))

    def _momentum(self) -> None:
        st = self.state
        torch.addcmul(st.grad_x, st.buf_x, self.mom_x, out=st.buf_x)       # buf mom + grad, one pass
        torch.addcmul(st.grad_lam, st.buf_lam, self.mom_lam, out=st.buf_lam)

    def masked(self) -> None:
        """The update where the device's ``alive`` flag is on (the step a CUDA graph replays): x - lr buf computed
        as lr buf then x minus it, in the gradient's array (read above, rewritten by the evaluation below), then
        selected into x in place: no array of x's size allocated, no copy back."""
        st = self.state
        self._momentum()
        for x, buf, lr, scratch in ((st.x, st.buf_x, self.lr_x, st.grad_x),
                                    (st.lam, st.buf_lam, self.lr_lam, st.grad_lam)):
            moved = torch.sub(x, torch.mul(lr, buf, out=scratch), out=scratch)
            torch.where(_expand(st.alive, x), moved, x, out=x)
        self.write_eval()

    def alive_runs(self, runs: list[int]) -> None:
        """The masked update in place, when the host knows which runs are alive (the CPU, after a run stopped): no
        array of x's size is allocated, and a stopped run's candidates are not touched."""
        st = self.state
        self._momentum()
        for r in runs:
            st.x[r].addcmul_(self.neg_lr_x[r], st.buf_x[r])
            st.lam[r].addcmul_(self.neg_lr_lam[r], st.buf_lam[r])
        self.write_eval()

    def all_alive(self) -> None:   # the same update in place, when the host knows that every run is alive
        st = self.state
        self._momentum()
        st.x.addcmul_(self.neg_lr_x, st.buf_x)          # x - lr buf, one pass (-lr is exact)
        st.lam.addcmul_(self.neg_lr_lam, st.buf_lam)
        self.write_eval()


def _advance(state: _State, evaluate: Evaluate, configs: list[StationarityConfig], sync_every: int,
             info: BatchInfo, try_graph: bool, theta_sq: float | list[float],
             progress: ProgressFn | None) -> list[AttackOutput]:
    """The loop: prologue evaluation, then K-step windows of (update, evaluate), a check after each window
    (``theta_sq``: ||theta||^2 of the released weights, or of each run's when the runs read different ones)."""
    cfg0, r_runs = configs[0], len(state.x)
    sq = theta_sq if isinstance(theta_sq, list) else [theta_sq] * r_runs
    steps, every = cfg0.steps, cfg0.eval_every
    stepper = Steps(state, evaluate, configs, try_graph)
    write_eval, step = stepper.write_eval, stepper.masked
    step_alive_runs, step_all_alive = stepper.alive_runs, stepper.all_alive
    t0 = time.perf_counter()

    write_eval()
    replay = _capture(step, state, info) if try_graph else step
    all_alive = True   # known on the host after every check; a captured graph always runs the masked step
    n_rows = len(range(0, steps, every))
    trace_buf = torch.zeros(n_rows, r_runs, 1 + len(TERM_NAMES), dtype=state.x.dtype, device=state.x.device)
    snap_x, snap_lam = state.x.clone(), state.lam.clone()
    snap_step = [0] * r_runs
    stopped = ["completed"] * r_runs
    notes = [""] * r_runs
    early: list[dict[str, Any] | None] = [None] * r_runs
    last_check = 0
    alive_runs = list(range(r_runs))   # the runs the host knows alive (after each check)
    rule = ConvergenceRule.of(cfg0)
    if rule is not None:   # loss and candidates summed over the current window, and their means over the last one
        window_sum, x_sum = torch.zeros_like(state.loss), torch.zeros_like(state.x)
        window_mean, x_mean = torch.full_like(state.loss, math.nan), torch.zeros_like(state.x)

    def record(t: int) -> None:
        trace_buf[t // every, :, 0].copy_(state.loss)
        trace_buf[t // every, :, 1:].copy_(state.terms)

    def test_convergence(t: int) -> None:
        """The early-stop rule after step t (a window's end): runs that converged are frozen at x_t (``alive`` off,
        so the masked step leaves them), recorded as converged at t."""
        assert rule is not None
        mean = window_sum / rule.window
        x_sum.div_(rule.window)
        if rule.tests_at(t, steps):
            loss_change, cand_change = rule.changes(mean, window_mean, x_sum, x_mean)
            done_now = (rule.converged(loss_change, cand_change) & state.alive).cpu()
            if bool(done_now.any()):
                state.alive.logical_and_(~done_now.to(state.alive.device))
                lc, cc = loss_change.cpu().tolist(), cand_change.cpu().tolist()
                for r in done_now.nonzero().flatten().tolist():
                    stopped[r] = "converged"
                    early[r] = rule.record(t, steps, lc[r], cc[r])
        window_mean.copy_(mean)
        x_mean.copy_(x_sum)
        window_sum.zero_()
        x_sum.zero_()

    def check(t: int) -> bool:
        """The check after step t; returns whether a run may have stopped (False: every run was alive and finite,
        the common case, decided by one reduction)."""
        nonlocal last_check
        if watcher is not None:   # a slice's progress line, or its stop at the deadline (AttackStopped)
            watcher.at(t)
        if all_alive and bool(state.ok.all()):
            snap_x.copy_(state.x)
            snap_lam.copy_(state.lam)
            snap_step[:] = [t] * r_runs
            last_check = t
            if progress is not None:
                progress(t, steps, {"loss": float(state.loss.min())})
            return False
        bad = (state.alive & ~state.ok).cpu()
        if bool(bad.any()):
            stepper.stale = True
            dev_bad = bad.to(state.x.device)
            state.x.copy_(torch.where(_expand(dev_bad, state.x), snap_x, state.x))
            state.lam.copy_(torch.where(_expand(dev_bad, state.lam), snap_lam, state.lam))
            state.alive.logical_and_(~dev_bad)
            for r in bad.nonzero().flatten().tolist():
                c = configs[r]
                stopped[r] = "diverged"
                where = f"at step {t}" if t - last_check == 1 else f"between steps {last_check + 1} and {t}"
                notes[r] = (f"attack loss became non-finite {where} (checked every {sync_every} steps); returning the "
                            f"candidates of step {snap_step[r]}. Lower lr (now {c.lr}), lambda_lr (now "
                            f"{c.lambda_lr}) or alpha (now {c.alpha})")
        alive = state.alive.cpu()
        if bool(alive.all()):
            snap_x.copy_(state.x)
            snap_lam.copy_(state.lam)
        else:
            dev_alive = alive.to(state.x.device)
            snap_x.copy_(torch.where(_expand(dev_alive, snap_x), state.x, snap_x))
            snap_lam.copy_(torch.where(_expand(dev_alive, snap_lam), state.lam, snap_lam))
        for r in alive.nonzero().flatten().tolist():
            snap_step[r] = t
        state.ok.fill_(True)
        last_check = t
        if progress is not None and alive.any():
            progress(t, steps, {"loss": float(state.loss[state.alive].min())})
        return True

    if steps > 0:
        record(0)
    watcher = watch.current()
    if watcher is not None:
        watcher.begin(r_runs, state.x.shape[1], steps, state.x.dtype, bool(info.tf32), state.x.device)
    if sync_every == 1 or steps == 0:
        check(0)   # the start itself: a non-finite loss at step 0 keeps x0 (as the sequential loop does)
        alive_now = state.alive.cpu()
        all_alive = bool(alive_now.all())
        alive_runs = alive_now.nonzero().flatten().tolist()
    for t in range(1, steps + 1):
        if info.cuda_graph:
            replay()
        elif all_alive:
            step_all_alive()
        else:
            step_alive_runs(alive_runs)
        if t % every == 0 and t < steps:
            record(t)
        window_end = rule is not None and t % rule.window == 0
        if rule is not None:
            window_sum.add_(state.loss)
            x_sum.add_(state.x)
        if t % sync_every == 0 or t == steps or window_end:
            if not check(t) and not window_end:
                continue   # every run alive and finite: nothing changed on the host
            if window_end:   # after the check: a run that diverged in this window is already frozen
                test_convergence(t)
            alive_now = state.alive.cpu()
            if not bool(alive_now.any()):
                break
            all_alive = bool(alive_now.all())
            alive_runs = alive_now.nonzero().flatten().tolist()
    info.seconds = time.perf_counter() - t0
    if watcher is not None:
        watcher.end(max(snap_step))
    # the final loss of every run at its returned point (the last step, or its snapshot)
    if stepper.stale:
        final_loss, final_terms, _, _ = evaluate(state.x, state.lam)
    else:   # the last evaluation was at the returned point of every run (a deterministic evaluation would repeat it)
        final_loss, final_terms = state.loss, state.terms
    rows = trace_buf.cpu().tolist()
    final_rows = torch.cat([final_loss[:, None], final_terms], dim=1).cpu().tolist()
    x_out, lam_out = state.x.detach(), state.lam.detach()
    outputs = []
    for r in range(r_runs):
        last_row = snap_step[r] - (stopped[r] == "converged")   # a converged run's own step: its final row below
        trace = [_row(i * every, rows[i][r], sq[r]) for i in range(n_rows) if i * every <= last_row]
        trace = [row for row in trace if math.isfinite(row["loss"])]
        trace.append(_row(snap_step[r], final_rows[r], sq[r]))
        final = final_rows[r][0]
        done = snap_step[r]
        if stopped[r] == "completed":
            message = (f"engine {info.engine}; {done} steps in {info.seconds:.1f}s (a batch of {r_runs} run(s)); "
                       f"final stationarity {trace[-1]['stationarity_relative']:.4g} of ||theta||^2")
        elif stopped[r] == "converged" and rule is not None:
            message = (f"engine {info.engine}; {rule.message(done, steps)}; the batch of {r_runs} run(s) took "
                       f"{info.seconds:.1f}s; final stationarity {trace[-1]['stationarity_relative']:.4g} of "
                       "||theta||^2")
        else:
            message = f"engine {info.engine}; {notes[r]}"
        outputs.append(AttackOutput(candidates=x_out[r].clone(), labels=torch.empty(0),
                                    final_loss=final if math.isfinite(final) else math.inf,
                                    multipliers=lam_out[r].clone(), trace=trace, steps=done, stopped=stopped[r],
                                    message=message, early_stop=early[r]))
    return outputs


def _row(step: int, values: list[float], theta_sq: float) -> dict[str, float]:
    row = {"step": float(step), "loss": values[0], **dict(zip(TERM_NAMES, values[1:], strict=True))}
    row["stationarity_relative"] = row["stationarity"] / theta_sq
    return row


def _capture(step: Callable[[], None], state: _State, info: BatchInfo) -> Callable[[], None]:
    """The step as a CUDA graph (after a warm-up on a side stream, state restored); the eager step if capture
    fails, with the reason recorded."""
    saved = [t.clone() for t in state.tensors()]
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            step()
    except Exception as exc:  # capture is an optimisation: fall back to the eager step and say why
        for t, s in zip(state.tensors(), saved, strict=True):
            t.copy_(s)
        info.notes.append(f"CUDA graph capture failed ({type(exc).__name__}: {exc}); eager steps")
        return step
    for t, s in zip(state.tensors(), saved, strict=True):
        t.copy_(s)
    info.cuda_graph = True
    return graph.replay


#: the loop's parts under public names, for a batch whose runs read different weights (reconbench/attack/cross_target.py)
State, advance, per_run_column = _State, _advance, _per_run
