"""The batched KKT attack step A/B on a GPU: the step as it was, today's step and each opt-in variant, timed side by
side at the papers' size, each checked against the step as it was (docs/performance.md, "The attack step on a GPU").

    python benchmarks/gpu/step_ab.py OUT.json                   # on the device machine (CUDA), about a minute
    python benchmarks/gpu/step_ab.py OUT.json --tiny            # tiny sizes on the CPU, seconds (a test runs it)

Run it in the same device command right after benchmarks/gpu/slice.sh (benchmarks/gpu/README.md): when it cannot
import reconbench (slice.sh's PYTHONPATH does not outlive it), it adds the folders slice.sh leaves under
${TMPDIR:-/tmp}/reconbench-slice-site (the ``wheels`` folder, the hand-registered metadata) and this tree to
sys.path, and stops with one line when that does not help either.

Variants (the step of ``haim_binary_kkt`` against a random 3072-1000-1000-1 network, m = 1000, lr 1e-3 so that no run
diverges, the runs' other options sampled as bench_batched.py samples them):

* ``before``: the step before the avoidable work was removed (tests/_helpers/step_before_lean.py: the box prior by
  clamp and subtraction, the CUDA-graph step through temporaries and copies);
* ``default``: today's step (bit for bit the same numbers as ``before`` on the CPU; on a GPU its per-run dot
  products are a product and a sum, where ``before`` ran them as batched 1 x N by N x 1 products);
* ``dots=bmm``, ``layer_form=auto`` and both (:class:`reconbench.attack.kkt.batched.StepOptions`, off by default:
  they sum in other orders): the per-run dot products as batched 1 x N by N x 1 products (a GPU's default before its
  first probe), and the output layer's terms through H^T D.

For R = 16, 8 and 4 runs, TF32 and float32: the step captured as a CUDA graph as the engine captures it (the masked
update; eagerly on the CPU), ``--check-steps`` steps whose candidates, losses and gradients are compared with
``before``'s at the same precision and with a float64 ``before`` (largest difference relative to the largest
magnitude), 2 steps of warm-up, then ``--steps`` replays timed with CUDA events. ``default`` and ``dots=bmm``
are also timed eagerly with TF32 (the in-place update the loop runs without a graph), and at the largest batch size
``--profile-steps`` more of their eager steps run under torch.profiler: the kernels that take the time, per step (the
test of the account's suspicion, docs/performance.md). Cases run in that order until ``--budget`` seconds have
passed; the rest are listed as skipped, and the JSON is rewritten after every case.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def _import_reconbench() -> None:
    """Import torch and reconbench (with its plugins); on failure, add slice.sh's site folders and this tree to
    sys.path and try again; exit with one line naming what is missing when that fails too."""
    if str(ROOT / "benchmarks") not in sys.path:
        sys.path.insert(0, str(ROOT / "benchmarks"))   # the sibling benchmark scripts

    def attempt() -> str | None:
        try:   # every module the script imports (reconbench's own dependencies, cattrs among them, come with them)
            for name in ("torch", "reconbench", "reconbench.attack.kkt.batched", "reconbench.attack.candidates",
                         "bench_batched", "cell_time_account"):
                importlib.import_module(name)
            from reconbench import plugins
            plugins.get("attacks", "haim_binary_kkt")
        except Exception as exc:   # ImportError, or a plugin not registered: both say the same, not importable
            return f"{type(exc).__name__}: {exc}"
        return None

    why = attempt()
    if why is None:
        return
    site = Path(os.environ.get("TMPDIR") or "/tmp") / "reconbench-slice-site"
    for path in (ROOT, site, site / "wheels"):
        if path.is_dir() and str(path) not in sys.path:
            sys.path.insert(0, str(path))
    for name in [n for n in sys.modules if n in ("reconbench", "bench_batched", "cell_time_account")
                 or n.startswith(("reconbench.", "reconbench_plugins"))]:
        del sys.modules[name]   # a half-imported package from the first try
    importlib.invalidate_caches()
    again = attempt()
    if again is not None:
        sys.exit(f"error: cannot import reconbench here ({again}), also with {site} and {site / 'wheels'} on the "
                 "path; run benchmarks/gpu/slice.sh first in the same command, or pip install --no-deps -e .")


_import_reconbench()

import torch  # noqa: E402

sys.path.insert(0, str(ROOT / "tests"))        # the step as it was (tests/_helpers/step_before_lean.py)

from bench_batched import conditions, make_runs, make_target, starts  # noqa: E402
from cell_time_account import step_flops  # noqa: E402

from reconbench.attack.candidates import candidate_labels  # noqa: E402
from reconbench.attack.kkt import batched  # noqa: E402
from reconbench.attack.kkt.batched import BatchInfo, State, StepOptions, Steps, gram_evaluator, matmul_precision  # noqa: E402
from reconbench.attack.kkt.batched_gram import BatchedGram  # noqa: E402

try:
    from _helpers.step_before_lean import StepsBeforeLean, box_before_softshrink
except ImportError:   # the tests folder did not travel: the A/B runs without the step as it was
    StepsBeforeLean = None   # type: ignore[assignment,misc]
    box_before_softshrink = None   # type: ignore[assignment]

SIZES: dict[str, dict[str, Any]] = {
    "paper": {"m": 1000, "widths": [1000, 1000], "runs": [16, 8, 4]},
    "tiny": {"m": 6, "widths": [16, 16], "runs": [4, 2]},
}
#: (name, options, the step as it was)
VARIANTS: list[tuple[str, StepOptions, bool]] = [
    ("before", StepOptions(), True),
    ("default", StepOptions(), False),
    ("dots=bmm", StepOptions(dots="bmm"), False),
    ("layer_form=auto", StepOptions(layer_form="auto"), False),
    ("dots=bmm, layer_form=auto", StepOptions(dots="bmm", layer_form="auto"), False),
]
PRECISIONS = {"tf32": torch.float32, "float32": torch.float32, "float64": torch.float64}


@contextlib.contextmanager
def _step_as_it_was(on: bool) -> Iterator[None]:
    """The box prior of the step as it was, for the evaluations made inside the block (and captured in it)."""
    if not on:
        yield
        return
    saved = batched._box_value_and_add_grad
    batched._box_value_and_add_grad = box_before_softshrink   # type: ignore[assignment]
    try:
        yield
    finally:
        batched._box_value_and_add_grad = saved   # type: ignore[assignment]


class Problem:
    """One batch size's network, runs and starts (on the CPU: each case moves them to its device and dtype)."""

    def __init__(self, size: dict[str, Any], runs: int) -> None:
        self.m, self.widths, self.runs = size["m"], size["widths"], runs
        self.target = make_target(self.widths, torch.float64, "cpu", self.m)
        self.attack, self.configs = make_runs(runs, self.m, 10, self.target, {"tf32": True})
        self.labels = candidate_labels("binary", 2, self.m)
        x0s, gens = starts(self.configs, self.m, self.target)
        self.x0 = torch.stack(x0s)
        self.lam0 = torch.stack([self.attack.initial_multipliers(self.m, c, 1, g, x)
                                 for c, g, x in zip(self.configs, gens, x0s, strict=True)])


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timer(device: torch.device) -> tuple[Callable[[], None], Callable[[], float]]:
    """(start, stop -> seconds since start): CUDA events on a GPU, the wall clock elsewhere."""
    if device.type == "cuda":
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

        def stop() -> float:
            end.record()
            end.synchronize()
            return begin.elapsed_time(end) / 1e3

        return begin.record, stop
    t0 = [0.0]

    def start() -> None:
        t0[0] = time.perf_counter()

    return start, lambda: time.perf_counter() - t0[0]


def kernel_profile(step: Callable[[], None], steps: int, device: torch.device, top: int = 30) -> dict[str, Any]:
    """``steps`` steps under torch.profiler: the kernels (on a GPU; the aten operations on a CPU) that took the most
    time, per step, largest first."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        for _ in range(steps):
            step()
        _sync(device)
    rows = []
    for evt in prof.key_averages():
        if device.type == "cuda":
            us = float(getattr(evt, "self_device_time_total", 0.0) or getattr(evt, "self_cuda_time_total", 0.0))
        else:
            us = float(evt.self_cpu_time_total) if evt.key.startswith("aten::") else 0.0
        if us > 0:
            rows.append({"name": evt.key[:160], "calls_per_step": evt.count / steps, "us_per_step": us / steps})
    rows.sort(key=lambda r: -r["us_per_step"])
    return {"steps": steps, "clock": "device" if device.type == "cuda" else "cpu",
            "total_us_per_step": sum(r["us_per_step"] for r in rows), "top": rows[:top]}


def run_case(problem: Problem, precision: str, variant: tuple[str, StepOptions, bool], graph: bool,
             device: torch.device, check_steps: int, timed_steps: int,
             profile_steps: int = 0) -> tuple[dict[str, Any], list[torch.Tensor]]:
    """One variant at one batch size and precision: its row (with a kernel profile of ``profile_steps`` steps when
    asked), and its candidates, losses and gradients after the check steps."""
    name, options, before = variant
    if before and device.type != "cpu":
        # the step as it was on a GPU: its per-run dots were batched 1 x N by N x 1 products
        options = dataclasses.replace(options, dots="bmm")
    dtype = PRECISIONS[precision]
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    model = problem.target.model.to(dtype=dtype, device=device)
    like = problem.x0.to(dtype=dtype, device=device)
    configs = problem.configs
    with matmul_precision(precision == "tf32", device) as tf32, _step_as_it_was(before):
        chain = model.linear_chain()
        assert chain is not None, "the A/B's network is a chain of linear layers"
        gram = BatchedGram(chain, configs[0].forward, dtype, device, options.layer_form, options.dots)
        alpha = batched.per_run_column(configs, "alpha", like, 2)
        box = batched.per_run_column(configs, "box", like, 2)
        scale = torch.tensor([1.0 / problem.m if c.inverse_m else 1.0 for c in configs], dtype=dtype,
                             device=device).reshape(-1, 1, 1)
        terms = problem.attack.batch_terms(problem.labels.to(device), configs, 1, like)
        evaluate = gram_evaluator(gram, terms, alpha, box, scale)
        state = State(like.flatten(2).clone(), problem.lam0.to(like).clone())
        cls = StepsBeforeLean if before else Steps
        stepper = cls(state, evaluate, configs, graph)
        stepper.write_eval()
        info = BatchInfo(runs=list(range(problem.runs)), engine="gram", sync_every=0, cuda_graph=False, tf32=tf32)
        if graph and device.type == "cuda":
            step = batched._capture(stepper.masked, state, info)
        else:
            step = stepper.masked if graph else stepper.all_alive
        for _ in range(check_steps):
            step()
        _sync(device)
        checked = [state.x.clone(), state.loss.clone(), state.grad_x.clone()]
        for _ in range(2):   # warm-up
            step()
        start, stop = _timer(device)
        start()
        for _ in range(timed_steps):
            step()
        seconds = stop() / max(timed_steps, 1)
        profiled = kernel_profile(step, profile_steps, device) if profile_steps > 0 else None
        finite = bool(torch.isfinite(state.loss).all())
    flops = step_flops([like[0, 0].numel(), *problem.widths, 1], problem.m, problem.runs)["total"]
    row = {"variant": name, "options": options.label(), "runs": problem.runs, "m": problem.m, "precision": precision,
           "tf32": tf32, "graph_asked": graph, "cuda_graph": info.cuda_graph, "notes": info.notes,
           "check_steps": check_steps, "timed_steps": timed_steps, "seconds_per_step": seconds,
           "tflops_per_second": flops / seconds / 1e12 if seconds > 0 else None, "flops_per_step": flops,
           "all_finite": finite,
           "peak_memory_gib": torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None}
    if profiled is not None:
        row["kernel_profile"] = profiled
    return row, checked


def relative_difference(got: torch.Tensor, want: torch.Tensor) -> float:
    """max |got - want| / max |want| (in float64)."""
    g, w = got.double(), want.double().to(got.device)
    scale = float(w.abs().max())
    return float((g - w).abs().max()) / scale if scale > 0 else float((g - w).abs().max())


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", help="where to write the JSON")
    parser.add_argument("--budget", type=float, default=150.0, help="seconds after which the remaining cases are "
                                                                    "skipped (default 150)")
    parser.add_argument("--tiny", action="store_true", help="tiny sizes on the CPU (seconds; what the test runs)")
    parser.add_argument("--device", default=None, help="default: cuda, or cpu with --tiny")
    parser.add_argument("--steps", type=int, default=20, help="timed steps per case (default 20)")
    parser.add_argument("--check-steps", type=int, default=5, help="steps before the comparison (default 5)")
    parser.add_argument("--profile-steps", type=int, default=3,
                        help="eager steps profiled (kernel times) at the largest batch size (0: none; default 3)")
    args = parser.parse_args(argv)
    device = torch.device(args.device or ("cpu" if args.tiny else "cuda"))
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error("no CUDA device here: pass --tiny (the CPU) to try the script")
    size = SIZES["tiny" if args.tiny else "paper"]
    variants = [v for v in VARIANTS if not v[2] or StepsBeforeLean is not None]
    reference = "before" if StepsBeforeLean is not None else "default"
    t0 = time.perf_counter()
    result: dict[str, Any] = {"benchmark": "batched KKT attack step: the step as it was, today's and the opt-in "
                                           "variants", "tiny": args.tiny, "conditions": conditions(str(device)),
                              "sizes": size, "reference": reference, "rows": [], "skipped": []}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        result["conditions"].update({"capability": list(torch.cuda.get_device_capability(device)),
                                     "total_memory_gib": props.total_memory / 2**30})
    if StepsBeforeLean is None:
        result["notes"] = ["tests/_helpers did not travel: no 'before' variant; compared with 'default'"]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)

    def write() -> None:
        out.write_text(json.dumps({**result, "wall_seconds": time.perf_counter() - t0}, indent=1) + "\n")

    graph = device.type == "cuda" or args.tiny   # the masked step a graph replays (eagerly on the CPU)
    for runs in size["runs"]:
        cases = [(p, v, graph) for p in ("tf32", "float32") for v in variants]
        # today's step and the batched-product dots without the graph (the loop's in-place update): what the graph saves
        cases += [("tf32", VARIANTS[1], False), ("tf32", VARIANTS[2], False)]
        if time.perf_counter() - t0 > args.budget:
            result["skipped"] += [{"runs": runs, "precision": p, "variant": v[0], "graph": g} for p, v, g in cases]
            continue
        try:
            problem = Problem(size, runs)
            _, exact = run_case(problem, "float64", variants[0], graph, device, args.check_steps, 0)
        except Exception as exc:   # the float64 reference did not fit: the next (smaller) batch size may
            why = f"float64 reference: {type(exc).__name__}: {(str(exc).splitlines() or [''])[0]}"
            result["skipped"] += [{"runs": runs, "precision": p, "variant": v[0], "graph": g, "why": why}
                                  for p, v, g in cases]
            write()
            continue
        refs: dict[str, list[torch.Tensor]] = {}
        for precision, variant, g in cases:
            if time.perf_counter() - t0 > args.budget:
                result["skipped"].append({"runs": runs, "precision": precision, "variant": variant[0], "graph": g,
                                          "why": f"past --budget {args.budget}s"})
                continue
            try:
                # the eager steps of the first batch size under the profiler: which kernels take the time
                profile = args.profile_steps if (not g and graph and runs == size["runs"][0]) else 0
                row, checked = run_case(problem, precision, variant, g, device, args.check_steps, args.steps, profile)
            except Exception as exc:   # out of memory, or a variant that fails: keep what was measured, go on
                result["rows"].append({"variant": variant[0], "runs": runs, "precision": precision, "graph_asked": g,
                                       "error": f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0]}"})
                print(f"R={runs} {precision} {variant[0]}: {result['rows'][-1]['error']}", flush=True)
                write()
                continue
            if variant[0] == reference and g == graph:
                refs[precision] = checked
            row["max_relative_difference"] = {
                f"{what}_vs_{against}": relative_difference(got, want)
                for against, wanted in ((reference, refs.get(precision, checked)), ("float64", exact))
                for what, got, want in zip(("candidates", "loss", "gradient"), checked, wanted, strict=True)}
            result["rows"].append(row)
            print(f"R={runs} {precision} {variant[0]}{'' if g else ' (eager)'}: "
                  f"{1e3 * row['seconds_per_step']:.3f} ms/step, {row['tflops_per_second'] or 0:.1f} TFLOP/s, "
                  f"vs {reference}: candidates {row['max_relative_difference'][f'candidates_vs_{reference}']:.1e}, "
                  f"loss {row['max_relative_difference'][f'loss_vs_{reference}']:.1e}, "
                  f"gradient {row['max_relative_difference'][f'gradient_vs_{reference}']:.1e}",
                  flush=True)
            write()
        del problem, exact, refs
    result["wall_seconds"] = time.perf_counter() - t0
    out.write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()
