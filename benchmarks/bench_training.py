"""Trainer throughput on cpu-mini's MNIST binary target, side by side with another checkout, against a matmul peak.

    RECONBENCH_DATA=../shared/data OMP_NUM_THREADS=1 python benchmarks/bench_training.py \\
        --baseline ../reconbench-6567deb --out benchmarks/results/training/bench_training.json

The target (``--target``) is cpu-mini's ``mnist-binary`` recipe (MNIST odd/even, 5 per class, 784-1000-1000-1, BCE,
lr 0.05 with the inverse-loss schedule; the default) or the README run's default target (``readme``: the digits, one
per class, 64-1000-10, cross-entropy, the same schedule; 5,000 steps in the README run) at ``--steps`` full-batch
steps in each dtype. Each timed run is a fresh process with one torch
thread; runs of this checkout (``new``) and of the ``--baseline`` checkout (``old``, a git worktree of an earlier
commit, put first on PYTHONPATH) alternate, and medians are reported. Each run also hashes its trained weights, so the
JSON says whether both checkouts train bitwise the same weights.

FLOPs per step are counted from the layer shapes (forward 2 n sum(in * out); backward 2 n sum(in * out) for the weight
gradients and 2 n sum(in * out) over every layer but the first for the input gradients; 2 per parameter for the
update), so GFLOP/s is the useful arithmetic rate. The peak is torch.mm of two square matrices in the same process
setting (one thread); the rate of the step's own matrix shape (n rows times the 1000 x 1000 layer) is measured too:
with n = 10 rows every product is a pass over the layer's weights, bound by memory rather than arithmetic.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

RECIPE: dict[str, Any] = {
    "problem": {"dataset": "mnist_test", "task": "binary", "binary_rule": "parity", "n_per_class": 5},
    "family": "mlp", "model": {"widths": [1000, 1000]},
    "train": {"loss": "bce", "lr": 0.05, "schedule": "inverse_loss", "weight_decay": 0.0},
}

#: the README run's default target (``reconbench run --attack multiclass_kkt``), as its model card records it
README_RECIPE: dict[str, Any] = {
    "problem": {"dataset": "digits", "task": "multiclass", "n_per_class": 1, "seed": 1, "n_test_per_class": 100,
                "order": "shuffled", "order_seed": 0},
    "family": "mlp", "model": {"widths": [1000]},
    "train": {"loss": None, "lr": 0.05, "weight_decay": 0.0, "schedule": "inverse_loss", "schedule_threshold": 0.1,
              "schedule_cap": 10000.0, "eval_every": 1000, "seed": 0},
}

#: --target -> (recipe, training images n, input size, hidden widths, outputs)
TARGETS: dict[str, tuple[dict[str, Any], int, int, tuple[int, ...], int]] = {
    "cpu-mini": (RECIPE, 10, 784, (1000, 1000), 1),
    "readme": (README_RECIPE, 10, 64, (1000,), 10),
}

#: one timed training run; prints a JSON line (it imports whichever reconbench is first on the path)
CHILD = r"""
import hashlib, json, sys, time
import torch
torch.set_num_threads(1)
import reconbench
from reconbench.targets.problems import build_problem
from reconbench.targets.recipe import TargetRecipe
from reconbench.targets.training import train
spec = json.loads(sys.argv[1])
try:  # a checkout that knows walk orders: the file order, the only one the earlier checkout has (same images)
    from reconbench.targets.problems import RECORDED_WITHOUT_ORDER
    if "order" not in spec["problem"]:
        spec["problem"] = {**spec["problem"], **RECORDED_WITHOUT_ORDER}
except ImportError:
    pass
recipe = TargetRecipe.from_dict(spec)
problem = build_problem(recipe.problem)
res = train(recipe, problem, quiet=True, with_certificate=False)
h = hashlib.sha256()
for p in res.model.parameters():
    h.update(p.detach().contiguous().numpy().tobytes())
print(json.dumps({"seconds": res.metrics["train_seconds"], "steps": res.metrics["steps_run"],
                  "final_loss": res.metrics["final_loss"], "weights_sha256": h.hexdigest(),
                  "module": reconbench.__file__}))
"""


def layer_shapes(n_in: int = 784, widths: tuple[int, ...] = (1000, 1000), out: int = 1) -> list[tuple[int, int]]:
    dims = [n_in, *widths, out]
    return list(zip(dims[:-1], dims[1:], strict=True))


def flops_per_step(n: int, shapes: list[tuple[int, int]], first_bias: bool = True) -> int:
    macs = [a * b for a, b in shapes]
    params = sum(macs) + (shapes[0][1] if first_bias else 0)
    return 2 * n * sum(macs) + 2 * n * sum(macs) + 2 * n * sum(macs[1:]) + 2 * params


def matmul_rate(shape: tuple[int, int, int], dtype: torch.dtype, seconds: float = 1.0) -> float:
    """GFLOP/s of torch.mm (m x k) @ (k x n), best of repeated timings over about ``seconds``."""
    m, k, n = shape
    a, b = torch.randn(m, k, dtype=dtype), torch.randn(k, n, dtype=dtype)
    out = torch.empty(m, n, dtype=dtype)
    torch.mm(a, b, out=out)
    reps = max(1, int(1e8 / (2 * m * k * n)))
    best, t_end = float("inf"), time.perf_counter() + seconds
    while time.perf_counter() < t_end:
        t0 = time.perf_counter()
        for _ in range(reps):
            torch.mm(a, b, out=out)
        best = min(best, (time.perf_counter() - t0) / reps)
    return 2 * m * k * n / best / 1e9


def run_child(checkout: Path | None, recipe: dict[str, Any]) -> dict[str, Any]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    if checkout is not None:
        env["PYTHONPATH"] = str(checkout)
    cwd = checkout or Path(__file__).resolve().parents[1]  # `python -c` puts the working folder first on the path
    out = subprocess.run([sys.executable, "-c", CHILD, json.dumps(recipe)], env=env, check=True, cwd=cwd,
                         capture_output=True, text=True).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def remeasure_peak(out: Path, repeats: int) -> None:
    """Best-of-``repeats`` matmul rates into an existing report (the peak is what an idle moment allows)."""
    report = json.loads(out.read_text())
    for dt_name, summary in report["dtypes"].items():
        dtype = getattr(torch, dt_name)
        summary["peak_gflops_mm_1024"] = max(summary["peak_gflops_mm_1024"], *(
            matmul_rate((1024, 1024, 1024), dtype, 3.0) for _ in range(repeats)))
        summary["gflops_mm_10x1000x1000"] = max(summary["gflops_mm_10x1000x1000"], *(
            matmul_rate((10, 1000, 1000), dtype, 3.0) for _ in range(repeats)))
        for label in ("old", "new"):
            summary[label]["fraction_of_peak"] = summary[label]["gflops"] / summary["peak_gflops_mm_1024"]
        print(dt_name, {k: summary[k] for k in ("peak_gflops_mm_1024", "gflops_mm_10x1000x1000")})
    report["peak_command"] = "python benchmarks/bench_training.py --peak-only --out " + str(out)
    report["peak_load_average"] = list(os.getloadavg())
    out.write_text(json.dumps(report, indent=1) + "\n")


def ratios(old: list[float], new: list[float]) -> dict[str, float]:
    """Speed-ups three ways: of the medians, median of the alternating pairs, and of the fastest runs (load only
    ever slows a run down, so the fastest is the least disturbed)."""
    return {"of_medians": statistics.median(old) / statistics.median(new),
            "median_of_pairs": statistics.median(a / b for a, b in zip(old, new, strict=True)),
            "of_fastest": min(old) / min(new)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", type=Path, required=True, help="checkout of the commit to compare against")
    ap.add_argument("--target", choices=sorted(TARGETS), default="cpu-mini")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=5, help="timed runs per checkout and dtype (alternating)")
    ap.add_argument("--dtypes", nargs="+", default=["float64", "float32"], choices=["float64", "float32"])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--peak-only", action="store_true",
                    help="re-measure only the matmul rates (best of --repeats windows) into an existing --out")
    args = ap.parse_args()
    args.baseline = args.baseline.resolve()
    torch.set_num_threads(1)
    if args.peak_only:
        remeasure_peak(args.out, args.repeats)
        return
    base_recipe, n, n_in, widths, n_out = TARGETS[args.target]
    shapes = layer_shapes(n_in, widths, n_out)
    flops = flops_per_step(n, shapes)
    report: dict[str, Any] = {
        "command": "python benchmarks/bench_training.py " + " ".join(sys.argv[1:]).replace(str(args.baseline),
                                                                                        "<worktree of the baseline>"),
        "baseline_commit": subprocess.run(["git", "-C", str(args.baseline), "rev-parse", "HEAD"], capture_output=True,
                                          text=True).stdout.strip(),
        "machine": {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
                    "cpu_count": os.cpu_count(), "load_average_start": list(os.getloadavg()),
                    "torch": torch.__version__, "threads": 1,
                    "note": "shared machine: other processes ran meanwhile; compare the alternating runs"},
        "target": {**base_recipe, "name": args.target, "n": n, "layer_shapes": shapes, "flops_per_step": flops},
        "dtypes": {}}
    for dt_name in args.dtypes:
        dtype = getattr(torch, dt_name)
        recipe = {**base_recipe, "train": {**base_recipe["train"], "dtype": dt_name, "steps": args.steps}}
        runs: dict[str, list[dict[str, Any]]] = {"old": [], "new": []}
        for _ in range(args.repeats):
            for label, checkout in (("old", args.baseline), ("new", None)):
                r = run_child(checkout, recipe)
                if (checkout is not None) != str(r["module"]).startswith(str(checkout or "\0")):
                    raise SystemExit(f"the {label} run imported reconbench from {r['module']}")
                runs[label].append(r)
                print(dt_name, label, f"{r['seconds'] / r['steps'] * 1e3:.2f} ms/step", flush=True)
        peak = matmul_rate((1024, 1024, 1024), dtype)
        step_shape = matmul_rate((n, 1000, 1000), dtype)
        summary: dict[str, Any] = {"peak_gflops_mm_1024": peak, "gflops_mm_10x1000x1000": step_shape}
        for label, rs in runs.items():
            ms = statistics.median(r["seconds"] / r["steps"] for r in rs) * 1e3
            summary[label] = {"median_ms_per_step": ms, "steps_per_second": 1e3 / ms,
                              "gflops": flops / ms / 1e6, "fraction_of_peak": flops / ms / 1e6 / peak,
                              "ms_per_step_runs": [r["seconds"] / r["steps"] * 1e3 for r in rs],
                              "weights_sha256": sorted({r["weights_sha256"] for r in rs}),
                              "final_loss": rs[0]["final_loss"], "module": rs[0]["module"]}
        summary["speedup_new_over_old"] = summary["old"]["median_ms_per_step"] / summary["new"]["median_ms_per_step"]
        summary["speedups"] = ratios(summary["old"]["ms_per_step_runs"], summary["new"]["ms_per_step_runs"])
        summary["identical_weights"] = summary["old"]["weights_sha256"] == summary["new"]["weights_sha256"]
        for label in ("old", "new"):  # the paths are this machine's; keep only which checkout ran
            summary[label]["module"] = "baseline checkout" if label == "old" else "this checkout"
        report["dtypes"][dt_name] = summary
        print(dt_name, json.dumps({k: v for k, v in summary.items() if k not in ("old", "new")}), flush=True)
    report["machine"]["load_average_end"] = list(os.getloadavg())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
