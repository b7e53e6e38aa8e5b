"""What a GPU slice can hold, measured rather than estimated: steps per second, achieved TFLOP/s and peak memory of
the batched trainer and of the batched KKT attack at the papers' sizes, and the seconds of what a slice computes on
the machine's CPU (a cell's evaluation, a target's stationarity certificate).

    python benchmarks/gpu/probe.py probe.json                      # on the device machine (CUDA)
    python benchmarks/gpu/probe.py probe.json --tiny --device cpu  # tiny, on the CPU (tests/unit/benchmarks/test_gpu_probe.py)

benchmarks/gpu/README.md says how to run it on the device machine.

* Trainer (``reconbench/targets/batched_training.py``): 1 and 4 targets of n = 500, D-1000-1000-1 with D = 784
  (MNIST) and 3072 (CIFAR-10), BCE at a constant lr on random inputs, float32 (with the CUDA graph first, the rows
  a plan reads on a GPU; without it after the attack) and, last, float64, with and without the graph. A warm-up window (which
  captures the graph) comes first; then ``--train-windows`` windows of k steps are timed. FLOPs per step and
  target: 6 n sum_{l>=2} in_l out_l (forward, input gradient and weight update of every layer past the first)
  + 2 n^2 w_1 (the first layer's pre-activations through the n x n Gram matrix); the input dimension does not
  enter. Then one stack of the most targets with **mixed settings** (``settings: "mixed"``: BCE and MSE targets in
  turn at two learning rates and weight decays 0 and 7.5e-4, as ``paper.toml``'s binary and regression targets
  stack), float32 on CIFAR-10's shape with the graph: what per-target settings cost against a stack that shares
  them (rows of shared settings say ``"shared"``).
* Attack (``attack.run_batched`` of ``haim_binary_kkt``, as bench_batched.py calls it): 4, 8 and 16 runs of
  m = 1000 candidates against a random 3072-1000-1000-1 network, float64, float32 and TF32 (float32 with
  ``tf32 = true``), with the CUDA graph (the first occasion measured the eager loop within 5% of it at every size,
  so it is no longer timed). Each case runs twice, with S1 and S2 steps; (loop time at S2 - at S1) / (S2 - S1) is
  the steady step, free of set-up and graph capture. FLOPs per step: cell_time_account.step_flops (the batched
  engine's products, docs/performance.md). The slice planner prices a cell at the rate of the largest run count
  measured at most its own (reconbench.bench.slice_costs).
* Kernel profile (``profile``): one torch.profiler pass over 20 steps of the largest TF32 attack case, eager
  (kernels inside a replayed graph are not attributed), its set-up included (the starts' copy to the device, the
  first products): the top kernels by self time on the device (name, calls, total ms, share) and the shares of
  matrix products (GEMM), elementwise, reduction and copy kernels (by kernel name: ``kernel_kind``). On a CPU it
  runs only with ``--tiny`` and records CPU operators instead (the field's shape, for the tests).
* Certificate (``certificate``; ``--no-certificate`` skips it): the wall time of the stationarity certificate
  (``reconbench.targets.certificate``, with the learned part against an initial network, as a card rebuild
  computes it) of a random 3072-w-w-1 network at n on this machine's CPU, float64, with torch's threads as they
  are (8.4 s at n = 500 on one thread of the CPU machine: benchmarks/results/gpu/probe_cpu_reference.json, the
  reference ``reconbench.bench.slice_costs.CERTIFICATE_REFERENCE`` against which a plan scales a card's price).
* Evaluation (``evaluation``): the wall time of one cell's evaluation as a slice runs it (the functions
  ``reconbench.runs.result.finish`` calls: the pooled and the blind and oracle selections' evaluations with their
  null and calibration draws, the pooled one's figures, the calibration bars; ``evaluation_timing.py``, shared with
  merge_cost.py) on this machine's CPU with torch's threads as they are, float64: 4 search runs of m = 1000
  candidates against n = 500 training images of paper.toml's CIFAR-10 binary cell, its problem built from
  generated images of CIFAR-10's shape (no data file travels with the probe; the cost does not depend on the
  pixels' values), with its suite's protocol. The row holds the seconds (and per step), the planner's units
  (runs x m x n x pixels), the threads and the pooled summary; a plan prices the evaluate phase from it
  (reconbench.bench.slice_costs.costs_from_probe). 38.5 s on one thread of the CPU machine (the reference file).

Before any timing, ``trainer_check`` trains three small float64 targets on the device, with and without the graph,
and records their largest relative weight difference from the CPU's run (about 1e-15 expected); and the same for a
stack of mixed settings (``mixed_``: BCE and MSE, two learning rates, two weight decays) against the CPU's
one-target-at-a-time order, whose step differs from the stacked one by rounding only.

Peak memory is torch.cuda.max_memory_allocated per case (None on the CPU); ``case_seconds`` is each case's whole
wall time, set-up and warm-up included. Cases run in the order a slice's plan reads them
(``costs_from_probe``): float32 training with the graph (4 cases) and the stack of mixed settings; the TF32 and
float64 attack at 4, 8 and 16 runs (6; a precision left unmeasured would be priced at another's rate); the
certificate and the evaluation (without them the built-in prices stand, pessimistic); then what a plan reads only
as a fallback or not at all: the float32 attack (3), float32 training without the graph (4), the kernel profile,
float64 training (8). Once ``--budget`` seconds have passed, the cases not yet started are recorded as skipped (a
case started runs to its end), so the JSON always comes back; ``--only KIND`` runs the cases of some kinds alone.
The first probe on an H100 ran its 28 cases (the trainer's 16, the attack's 12 at 8 and 16 runs, graph and
eager) in 61 s, about 2 s a case with the start; at that pace a budget of 60 s (``PROBE_BUDGET=60``, the next
occasion's) measures the 11 GPU cases a plan reads in about 25-30 s, then the certificate (8.4 s on one thread
here; a few seconds on 16 cores) and the evaluation (38.5 s on one thread here, mostly torch's convolutions and
products, which use every thread), and likely the float32 attack after them; it skips float64 training and
probably the profile and the trainer without the graph. The rows' ``case_seconds`` will say.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))   # the sibling benchmark scripts
sys.path.insert(0, str(Path(__file__).resolve().parent))          # and this folder's (evaluation_timing.py)

from bench_batched import conditions, make_runs, make_target, starts  # noqa: E402
from cell_time_account import step_flops  # noqa: E402

from reconbench import plugins  # noqa: E402
from reconbench.attack.candidates import candidate_labels  # noqa: E402
from reconbench.command_text import portable_command  # noqa: E402
from reconbench.records.cost_table import PROBE_SCHEMA  # noqa: E402
from reconbench.targets.batched_training import BatchedChainGD  # noqa: E402

SIZES: dict[str, dict[str, Any]] = {
    "paper": {"n": 500, "widths": [1000, 1000], "inputs": {"mnist": (1, 28, 28), "cifar10": (3, 32, 32)},
              "targets": [1, 4], "window": 50, "m": 1000, "runs": [4, 8, 16], "attack_steps": [10, 30],
              "profile_steps": 20,
              # the evaluation: paper.toml's CIFAR-10 binary cell (n = 500, 3072 pixels, m = 1000) at 4 search runs,
              # on generated images as many as its data file holds (5,085: 509 per class here)
              "evaluation": {"runs": 4, "shape": (3, 32, 32), "images_per_class": 509, "n_test_per_class": 100, "close": 0.1}},
    "tiny": {"n": 12, "widths": [16, 16], "inputs": {"mnist": (1, 4, 4), "cifar10": (3, 4, 4)},
             "targets": [1, 4], "window": 3, "m": 6, "runs": [1, 2, 4], "attack_steps": [2, 4],
             "profile_steps": 2,
             # SSIM's window needs images of at least 7 x 7 pixels
             "evaluation": {"runs": 2, "shape": (3, 8, 8), "images_per_class": 10, "n_test_per_class": 2,
                            "close": 0.5}},
}
DTYPES = {"float64": torch.float64, "float32": torch.float32}


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def peak_gib(device: torch.device) -> float | None:
    return torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None


def train_step_flops(n: int, widths: list[int]) -> int:
    """One closed-form GD step of one target (out_dim 1): see the module's docstring."""
    dims = [*widths, 1]
    return 6 * n * sum(i * o for i, o in zip(dims[:-1], dims[1:], strict=True)) + 2 * n * n * widths[0]


def mixed_settings(targets: int) -> tuple[list[str], list[float], list[float]]:
    """Losses, learning rates and weight decays of a stack of mixed settings: BCE and MSE in turn, two of each."""
    pick = [t % 2 for t in range(targets)]
    return ([("bce", "mse")[i] for i in pick], [(0.01, 0.005)[(t // 2) % 2] for t in range(targets)],
            [(0.0, 7.5e-4)[i] for i in pick])


def trainer_case(size: dict[str, Any], targets: int, dataset: str, dtype: str, graph: bool, windows: int,
                 device: torch.device, mixed: bool = False) -> dict[str, Any]:
    shape, n, k = size["inputs"][dataset], size["n"], size["window"]
    reset_peak(device)
    gen = torch.Generator().manual_seed(0)
    family = plugins.get("models", "mlp")
    models = [family.build(shape, 1, {"widths": size["widths"]}, generator=gen).to(DTYPES[dtype]).to(device)
              for _ in range(targets)]
    d = shape[0] * shape[1] * shape[2]
    xs = [(torch.randn(n, *shape, generator=gen, dtype=torch.float64) / d ** 0.5).to(DTYPES[dtype]).to(device)
          for _ in range(targets)]
    ys = [(torch.arange(n) % 2).to(DTYPES[dtype]).to(device) for _ in range(targets)]
    if mixed:   # MSE's targets -1/+1, as a regression target's
        losses, lrs, wds = mixed_settings(targets)
        ys = [2 * y - 1 if loss == "mse" else y for y, loss in zip(ys, losses, strict=True)]
        trainer = BatchedChainGD(models, xs, ys, losses, lrs, wds, loss_every=k, cuda_graph=graph)
    else:
        trainer = BatchedChainGD(models, xs, ys, "bce", lr=0.01, loss_every=k, cuda_graph=graph)
    trainer.run(k)   # warm-up window: cuBLAS handles, and the graph's capture on CUDA
    sync(device)
    t0 = time.perf_counter()
    trainer.run(k * windows)
    sync(device)
    seconds = time.perf_counter() - t0
    steps = k * windows
    flops = targets * train_step_flops(n, size["widths"])
    return {"targets": targets, "dataset": dataset, "input_dim": d, "n": n, "widths": size["widths"], "dtype": dtype,
            "settings": "mixed" if mixed else "shared", "cuda_graph_asked": graph,
            "cuda_graph": trainer._graph is not None, "notes": trainer.notes,
            "steps_timed": steps, "seconds": seconds, "steps_per_second": steps / seconds,
            "target_steps_per_second": targets * steps / seconds, "flops_per_step": flops,
            "tflops_per_second": flops * steps / seconds / 1e12, "peak_memory_gib": peak_gib(device),
            "diverged": [d is not None for d in trainer.diverged]}


def trainer_check(device: torch.device) -> dict[str, Any]:
    """Before timing: three small float64 targets (different input dimensions) trained 23 steps on ``device`` with
    and without the CUDA graph, against the CPU's one-target-at-a-time order; the largest relative weight
    differences (float64 rounding is about 1e-16 per operation; a wrong step on the device shows as far more)."""
    gen = torch.Generator().manual_seed(1)
    family = plugins.get("models", "mlp_bias")
    shapes = [(1, 6, 6), (3, 4, 4), (1, 6, 6)]
    nets = [family.build(s, 3, {"widths": [24, 16]}, generator=gen).double() for s in shapes]
    xs = [torch.randn(12, *s, generator=gen, dtype=torch.float64) for s in shapes]
    ys = [torch.arange(12) % 3 for _ in shapes]

    def weights(dev: torch.device, graph: bool) -> list[dict[str, torch.Tensor]]:
        models = [copy.deepcopy(m).to(dev) for m in nets]
        trainer = BatchedChainGD(models, [x.to(dev) for x in xs], [y.to(dev) for y in ys], "ce", lr=0.2,
                                 weight_decay=1e-2, loss_every=5, cuda_graph=graph)
        trainer.run(23)
        return trainer.state_dicts()

    binary = [plugins.get("models", "mlp").build(s, 1, {"widths": [24, 16]}, generator=gen).double() for s in shapes]
    losses, lrs, wds = mixed_settings(len(shapes))
    ys_mixed = [(torch.arange(12) % 2).double() * (2 if loss == "mse" else 1) - (1 if loss == "mse" else 0)
                for loss in losses]

    def mixed_weights(dev: torch.device, graph: bool) -> list[dict[str, torch.Tensor]]:
        models = [copy.deepcopy(m).to(dev) for m in binary]
        trainer = BatchedChainGD(models, [x.to(dev) for x in xs], [y.to(dev) for y in ys_mixed], losses,
                                 [10 * lr for lr in lrs], [10 * wd for wd in wds], loss_every=5, cuda_graph=graph,
                                 stacked=dev.type != "cpu")
        trainer.run(23)
        return trainer.state_dicts()

    out: dict[str, Any] = {"targets": len(shapes), "steps": 23}
    for name, train in (("", weights), ("mixed_", mixed_weights)):
        reference = train(torch.device("cpu"), False)
        for graph in (True, False):
            got = train(device, graph)
            out[f"{name}max_relative_difference_graph_{graph}"] = max(
                float((g[k] - r[k]).abs().max() / r[k].abs().max())
                for g, r in zip(got, reference, strict=True) for k in r)
    return out


def attack_loop_seconds(size: dict[str, Any], runs: int, dtype: str, extra: dict[str, Any], steps: int,
                        device: str) -> tuple[float, dict[str, Any]]:
    m = size["m"]
    target = make_target(size["widths"], DTYPES[dtype], device, m)
    attack, configs = make_runs(runs, m, steps, target, extra)
    labels = candidate_labels("binary", 2, m).to(target.device)
    x0s, gens = starts(configs, m, target)
    infos: list[dict[str, Any]] = []
    attack.run_batched(target, x0s, labels, configs, generators=gens, on_done=lambda i, o, info: infos.append(info))
    sync(target.device)
    batches = {json.dumps(i["runs"]): i for i in infos}
    return sum(i["seconds"] for i in batches.values()), next(iter(batches.values()))


def attack_case(size: dict[str, Any], runs: int, precision: str, graph: bool, device: torch.device) -> dict[str, Any]:
    dtype = "float64" if precision == "float64" else "float32"
    extra: dict[str, Any] = {"cuda_graph": graph, "tf32": precision == "tf32"}
    reset_peak(device)
    if device.type == "cuda":   # warm-up: cuBLAS handles, the allocator's pool
        attack_loop_seconds(size, runs, dtype, extra, 2, str(device))
    s1, s2 = size["attack_steps"]
    t1, _ = attack_loop_seconds(size, runs, dtype, extra, s1, str(device))
    t2, info = attack_loop_seconds(size, runs, dtype, extra, s2, str(device))
    per_step = (t2 - t1) / (s2 - s1)
    flops = step_flops([3 * 32 * 32, *size["widths"], 1], size["m"], runs)["total"]   # make_target: CIFAR-10 shape
    return {"runs": runs, "m": size["m"], "layers": [3072, *size["widths"], 1], "precision": precision,
            "cuda_graph_asked": graph, "batch": {k: info[k] for k in ("engine", "cuda_graph", "tf32", "sync_every",
                                                                      "chunks", "notes")},
            "loop_seconds": {str(s1): t1, str(s2): t2}, "seconds_per_step": per_step,
            "run_steps_per_second": runs / per_step if per_step > 0 else None, "flops_per_step": flops,
            "tflops_per_second": flops / per_step / 1e12 if per_step > 0 else None,
            "peak_memory_gib": peak_gib(device)}


#: CUDA kernel name fragments by kind, tried in this order (lower case); anything else is "other"
KERNEL_KINDS: list[tuple[str, tuple[str, ...]]] = [
    ("gemm", ("gemm", "cutlass", "cublas", "xmma", "matmul")),
    ("copy", ("copy", "memcpy", "memset", "cat", "fill", "index", "gather", "scatter")),
    ("reduction", ("reduce", "softmax", "norm", "cumsum", "scan")),
    ("elementwise", ("elementwise", "vectorized", "unrolled", "pointwise", "triton")),
]
#: CPU operators (``aten::NAME``, a trailing ``_`` dropped) by kind; any other operator is elementwise
ATEN_KINDS: dict[str, frozenset[str]] = {
    "gemm": frozenset({"mm", "bmm", "addmm", "baddbmm", "addbmm", "dot", "mv", "linear", "matmul", "einsum"}),
    "copy": frozenset({"copy", "_to_copy", "to", "clone", "contiguous", "cat", "stack", "fill", "zero", "index",
                       "index_select", "gather", "scatter", "index_put"}),
    "reduction": frozenset({"sum", "mean", "norm", "linalg_vector_norm", "amax", "amin", "max", "min", "softmax",
                            "_softmax", "log_softmax", "logsumexp", "cumsum", "prod", "all", "any"}),
    # views and allocations: no arithmetic
    "other": frozenset({"empty", "empty_strided", "empty_like", "view", "select", "slice", "as_strided", "reshape",
                        "expand", "t", "transpose", "unsqueeze", "squeeze", "permute", "detach", "alias", "resize",
                        "unbind", "split", "narrow", "_reshape_alias", "lift_fresh", "result_type"}),
}
KINDS = ("gemm", "elementwise", "reduction", "copy", "other")
#: kernels kept in the profile's top list
TOP_KERNELS = 20


def kernel_kind(name: str) -> str:
    """gemm, elementwise, reduction, copy or other, by the name of a CUDA kernel or of a CPU operator."""
    if name.startswith("aten::"):
        op = name.removeprefix("aten::")
        op = op[:-1] if op.endswith("_") and not op.startswith("_") else op
        return next((kind for kind, ops in ATEN_KINDS.items() if op in ops), "elementwise")
    low = name.lower()
    return next((kind for kind, parts in KERNEL_KINDS if any(p in low for p in parts)), "other")


def kernel_profile(size: dict[str, Any], device: torch.device) -> dict[str, Any]:
    """One torch.profiler pass over ``profile_steps`` steps of the largest TF32 attack case, eager: the top kernels
    by self time on the device (CPU operators on a CPU) and the share of each kind of kernel."""
    from torch.profiler import ProfilerActivity, profile

    runs, steps = max(size["runs"]), size["profile_steps"]
    extra: dict[str, Any] = {"cuda_graph": False, "tf32": True}
    cuda = device.type == "cuda"
    if cuda:   # warm-up: cuBLAS handles, the allocator's pool, outside the profile
        attack_loop_seconds(size, runs, "float32", extra, 2, str(device))
    activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if cuda else [])]
    t0 = time.perf_counter()
    with profile(activities=activities) as prof:
        attack_loop_seconds(size, runs, "float32", extra, steps, str(device))
    wall = time.perf_counter() - t0
    averages = list(prof.key_averages())
    events = [e for e in averages if (e.device_type == torch.autograd.DeviceType.CUDA) == cuda]
    what = "CUDA kernels" if cuda else "CPU operators"

    def self_us(e: Any) -> float:
        return float(getattr(e, "self_device_time_total", 0.0) if cuda else e.self_cpu_time_total)

    if cuda and not any(self_us(e) > 0 for e in events):   # no kernel rows: the device time of each operator
        events, what = [e for e in averages if self_us(e) > 0], "CUDA time by operator"

    if not cuda:   # CPU operators: the leaves of the call tree carry the time (self), profiler scaffolding aside
        events = [e for e in events if not e.key.startswith(("ProfilerStep", "[memory]")) and self_us(e) > 0]
    total = sum(self_us(e) for e in events)
    shares = dict.fromkeys(KINDS, 0.0)
    for e in events:
        shares[kernel_kind(e.key)] += self_us(e) / total if total else 0.0
    top = sorted(events, key=self_us, reverse=True)[:TOP_KERNELS]
    return {"what": what, "runs": runs, "precision": "tf32", "m": size["m"],
            "cuda_graph": False, "steps": steps, "wall_seconds": wall, "total_ms": total / 1e3,
            "kinds": shares,
            "top": [{"name": e.key, "kind": kernel_kind(e.key), "calls": int(e.count), "total_ms": self_us(e) / 1e3,
                     "share": self_us(e) / total if total else 0.0} for e in top]}


def certificate_seconds(size: dict[str, Any]) -> dict[str, Any]:
    """Wall time of the stationarity certificate of a random ``D``-w-w-1 network at n on this machine's CPU (float64,
    with the learned part against another random network as its initial weights, as a card's certificate is
    computed)."""
    from reconbench.targets.certificate import certificate

    n, shape = size["n"], size["inputs"]["cifar10"]
    gen = torch.Generator().manual_seed(2)
    family = plugins.get("models", "mlp")
    net = family.build(shape, 1, {"widths": size["widths"]}, generator=gen).double()
    init = family.build(shape, 1, {"widths": size["widths"]}, generator=gen).double()
    x = torch.randn(n, *shape, generator=gen, dtype=torch.float64) / math.prod(shape) ** 0.5
    labels = (torch.arange(n) % 2).double()
    t0 = time.perf_counter()
    cert = certificate(net, x, labels, "binary", init=init)
    return {"n": n, "layers": [math.prod(shape), *size["widths"], 1], "seconds": time.perf_counter() - t0,
            "fit_seconds": cert.get("seconds"), "torch_threads": torch.get_num_threads()}


#: the kinds of the probe's cases (``--only``)
CASE_KINDS = ("trainer", "attack", "evaluation", "certificate", "profile")
#: the cell whose evaluation the probe times: its problem's spec and its suite's protocol
EVALUATION_SUITE, EVALUATION_CELL = "paper", "cifar-binary--haim_binary_kkt--gaussian--s0"


def evaluation_case(size: dict[str, Any]) -> dict[str, Any]:
    """Wall time of one cell's evaluation as a slice runs it (``reconbench.runs.result.finish``'s steps, through
    ``evaluation_timing.time_case``) on this machine's CPU with torch's threads as they are: the pooled candidates of
    ``size["evaluation"]["runs"]`` search runs of m against the n training images of :data:`EVALUATION_CELL`'s
    problem built from generated images of CIFAR-10's shape (no data file), with its suite's protocol (null and
    calibration draws), the blind and oracle selections and the calibration bars, float64 as the evaluation computes."""
    from evaluation_timing import synthetic_problem, time_case

    from reconbench.bench.cells import expand
    from reconbench.bench.suite import load_suite
    from reconbench.evaluation import resolve_protocol

    ev = size["evaluation"]
    suite = load_suite(EVALUATION_SUITE)
    cell = next(c for c in expand(suite) if c.cell_id == EVALUATION_CELL)
    spec = dataclasses.replace(cell.recipe.problem, n_per_class=size["n"] // 2, n_test_per_class=ev["n_test_per_class"])
    t0 = time.perf_counter()
    problem = synthetic_problem(spec, ev["shape"], ev["images_per_class"])
    problem_s = time.perf_counter() - t0
    family = cell.recipe.family
    case = time_case(problem, family, resolve_protocol(cell.protocol(suite), family), ev["runs"], size["m"],
                     ev["close"], seed=0)
    return {"cell": EVALUATION_CELL, "runs": case["runs"], "m": size["m"], "n": problem.n,
            "pixels": math.prod(ev["shape"]), "candidates": case["candidates"],
            "evaluations": case["evaluations"], "bars": case["bars"], "figures": case["figures"],
            "seconds": case["seconds"]["total"], "seconds_by_step": {k: v for k, v in case["seconds"].items()
                                                                     if k != "total"},
            "units": case["units"], "seconds_per_unit": case["seconds_per_unit"],
            "torch_threads": torch.get_num_threads(), "problem_seconds": problem_s,
            "pooled_summary": case["pooled_summary"]}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", help="where to write the JSON")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--tiny", action="store_true", help="tiny sizes (to try the probe on a CPU)")
    parser.add_argument("--train-windows", type=int, default=4, help="timed windows of k steps per trainer case")
    parser.add_argument("--budget", type=float, default=80.0, help="seconds after which remaining cases are skipped")
    parser.add_argument("--no-certificate", dest="certificate", action="store_false",
                        help="skip timing the stationarity certificate at the trainer's n on this machine's CPU (it "
                        "runs after the attack, within the budget)")
    parser.add_argument("--only", nargs="+", choices=CASE_KINDS, default=None, metavar="KIND",
                        help=f"run only the cases of these kinds ({', '.join(CASE_KINDS)}), in the usual order; the "
                        "trainer check runs first as always (a reference run here: --only certificate)")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no GPU here; pass --device cpu (with --tiny)")
    size = SIZES["tiny" if args.tiny else "paper"]
    t0 = time.perf_counter()
    result: dict[str, Any] = {"format": PROBE_SCHEMA,
                              "benchmark": "GPU probe: batched trainer and batched KKT attack", "tiny": args.tiny,
                              "command": portable_command(["python", "benchmarks/gpu/probe.py",
                                                           *(argv if argv is not None else sys.argv[1:])]),
                              "conditions": conditions(str(device)), "sizes": size, "trainer": [], "attack": [],
                              "skipped": []}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        result["conditions"].update({"capability": list(torch.cuda.get_device_capability(device)),
                                     "total_memory_gib": props.total_memory / 2**30,
                                     "multiprocessors": props.multi_processor_count})
    result["trainer_check"] = trainer_check(device)
    print(f"trainer check: {result['trainer_check']}", flush=True)
    # in order of what a slice's plan reads, should the budget run out (reconbench.bench.slice_costs.costs_from_probe):
    # the paper suite's float32 training with the graph (its only trainer rows where a graph was captured) and the
    # stack of mixed settings; the TF32 and float64 attack (a precision left unmeasured is priced at another's rate,
    # and float64 at TF32's would be too cheap); the certificate and the evaluation (left out, the built-in prices
    # stand: pessimistic); then what the plan reads only as a fallback or not at all: the float32 attack, the trainer
    # without the graph, the kernel profile, float64 training
    def trainer_cases(dtype: str, graphs: tuple[bool, ...]) -> list[tuple[str, Any]]:
        return [("trainer", (targets, dataset, dtype, graph)) for graph in graphs for targets in size["targets"]
                for dataset in size["inputs"]]

    def attack_cases(precision: str) -> list[tuple[str, Any]]:
        return [("attack", (runs, precision, True)) for runs in size["runs"]]

    cases = trainer_cases("float32", (True,))
    cases.append(("trainer", (max(size["targets"]), "cifar10", "float32", True, True)))   # mixed settings
    cases += attack_cases("tf32") + attack_cases("float64")
    if args.certificate:   # a few seconds: before the evaluation (a case started before the budget runs to its end)
        cases.append(("certificate", ()))
    cases.append(("evaluation", ()))
    cases += attack_cases("float32") + trainer_cases("float32", (False,))
    if device.type == "cuda" or args.tiny:
        cases.append(("profile", ()))
    elif not args.only or "profile" in args.only:
        result["profile"] = {"skipped": "on a CPU the kernel profile runs only with --tiny"}
    cases += trainer_cases("float64", (True, False))
    if args.only:
        cases = [c for c in cases if c[0] in args.only]
    for kind, params in cases:
        if time.perf_counter() - t0 > args.budget:
            result["skipped"].append({"kind": kind, "params": list(params), "why": f"past --budget {args.budget}s"})
            continue
        started = time.perf_counter()
        try:
            if kind == "trainer":
                targets, dataset, dtype, graph, *mixed = params
                row = trainer_case(size, targets, dataset, dtype, graph, args.train_windows, device, *mixed)
            elif kind == "attack":
                runs, precision, graph = params
                row = attack_case(size, runs, precision, graph, device)
            elif kind == "profile":
                row = kernel_profile(size, device)
            elif kind == "evaluation":
                row = evaluation_case(size)
            else:
                row = certificate_seconds(size)
        except torch.cuda.OutOfMemoryError as exc:   # keep what was measured; say which case did not fit
            row = {"params": list(params), "error": f"out of memory: {str(exc).splitlines()[0]}"}
        except Exception as exc:   # the cases other than trainer and attack are extras: their failure loses nothing
            if kind in ("trainer", "attack"):
                raise
            row = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"}
        row["case_seconds"] = time.perf_counter() - started   # the case's whole wall time, set-up and warm-up included
        if kind in ("trainer", "attack"):
            result[kind].append(row)
            rate = row.get("tflops_per_second")
            print(f"{kind} {params}: " + (f"{rate:.3f} TFLOP/s" if rate is not None else str(row.get("error", "n/a"))),
                  flush=True)
        else:
            result[kind] = row
            summary = (", ".join(f"{k} {v:.0%}" for k, v in row["kinds"].items()) if kind == "profile" and "kinds" in row
                       else f"{row.get('seconds', 0.0):.1f}s" if "seconds" in row else str(row.get("error")))
            print(f"{kind}: {summary}", flush=True)
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({**result, "wall_seconds": time.perf_counter() - t0}, indent=1) + "\n")
    result["wall_seconds"] = time.perf_counter() - t0
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()
