"""Where a cell's time goes: training, attack steps, evaluation, null draws, membership test, figures and I/O.

    RECONBENCH_DATA=../shared/data OMP_NUM_THREADS=1 python benchmarks/cell_time_account.py --steps 20 \\
        --json benchmarks/results/cell_time_account.json

Two workloads, each run once in this process (one thread) under cProfile with the process's CPU time as its clock
(whose per-function cumulative times give the phases; on a shared machine, time spent waiting for a core does not
count):

* ``cpu-mini``: the cell ``mnist-binary--haim_binary_kkt--gaussian--s0`` of the cpu-mini suite (MNIST odd/even,
  n = 10, 784-1000-1000-1, float32 attack, 2 search runs of m = 20), with ``--steps`` attack steps; the attack's
  time is scaled per step to the suite's 500 steps;
* ``default run``: what ``reconbench run --attack multiclass_kkt`` does (digits, 10 images, 6 runs of m = 20,
  3,000 steps, float64), in full, and, in fresh processes (the median of three), the CPU seconds a ``run`` spends
  starting: the interpreter, the command's imports (torch among them) and the plugins' discovery.

Each target is trained in a fresh scratch cache (so training is measured). Besides the phases, the script counts
the floating-point operations of one attack step of each workload (forward pass, the closed-form Gram terms,
backward pass: batched_gram.py) and divides by the measured seconds per step, and measures this machine's matmul
peak (1000 x 1000 by 1000 x 1000, float64 and float32, 1 and 2 threads) for comparison. On a shared machine the
numbers move from run to run; the shares are what to read.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import platform
import pstats
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from reconbench import plugins

#: phases: (name, functions whose cumulative time it is, as file-suffix:function)
PHASES = (
    ("training", ["targets/cache.py:get_or_train"]),
    ("  the stationarity certificate of the trained target", ["targets/certificate.py:certificate"]),
    ("attack steps", ["kkt/batched.py:_advance"]),
    ("attack set-up and per-run records", ["runs/execute.py:_run_pending", "-kkt/batched.py:_advance"]),
    ("evaluation (all)", ["runs/result.py:finish"]),
    ("  calibration draws (19 per bar)", ["evaluation/null.py:calibrate"]),
    ("  selected-run bar (oracle pick on null runs)", ["evaluation/null.py:calibrate_selected"]),
    ("  calibration bars, all (incl. the two above when computed there)", ["evaluation/bars.py:calibration_bars"]),
    ("  reported null draws and the null record", ["evaluation/evaluate.py:add_null"]),
    ("  membership test (every evaluation and null draw)", ["metric:membership_test"]),
    ("  figures", ["evaluation/evaluate.py:_figures", "runs/traces.py:plot_traces"]),
    ("  result I/O (json, safetensors)", ["reconbench/provenance.py:write_json", "safetensors/torch.py:save_file",
                                         "safetensors/torch.py:load_file"]),
)


def peak_gflops(dtype: torch.dtype, threads: int, n: int = 1000, reps: int = 10) -> float:
    """Best of ``reps`` n x n by n x n matmuls, in GFLOP per second of wall time (2 threads) or of this process's
    CPU time (1 thread: time spent waiting for a shared core does not count)."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    torch.mm(a, b)
    clock = time.process_time if threads == 1 else time.perf_counter
    best = float("inf")
    for _ in range(reps):
        t0 = clock()
        torch.mm(a, b)
        best = min(best, clock() - t0)
    torch.set_num_threads(before)
    return 2 * n ** 3 / best / 1e9


def step_flops(dims: list[int], m: int, runs: int) -> dict[str, float]:
    """Floating-point operations of one batched attack step (batched_gram.py), by part.

    dims: D, widths..., out. Forward: Z_k = H_k W_k^T. Gram terms: G_k = H_k H_k^T, P_k = D_k D_k^T, G_k D_k,
    P_k H_k. Backward: D_k W_k (k >= 1), (Dbar_{k-1} S_{k-1}) W_k^T (k >= 1), Zbar_k W_k (all k).
    """
    pairs = list(zip(dims[:-1], dims[1:], strict=True))
    forward = sum(2 * m * i * o for i, o in pairs)
    gram = sum(2 * m * m * (2 * i + 2 * o) for i, o in pairs)
    backward = sum(2 * m * i * o * (3 if k >= 1 else 1) for k, (i, o) in enumerate(pairs))
    return {"forward": runs * forward, "gram": runs * gram, "backward": runs * backward,
            "total": runs * (forward + gram + backward)}


def phases(stats: pstats.Stats) -> dict[str, float]:
    table: dict[str, float] = {}
    raw = stats.stats  # type: ignore[attr-defined]
    for name, funcs in PHASES:
        total = 0.0
        for spec in funcs:
            sign = -1.0 if spec.startswith("-") else 1.0   # "-f": without the time of f (nested in the others)
            suffix, func = spec.lstrip("-").split(":")
            if suffix == "metric":   # a metric plugin's compute, found by its code object
                code = type(plugins.get("metrics", func)).compute.__code__
                total += sign * sum(v[3] for (file, line, fn), v in raw.items()
                                    if file == code.co_filename and line == code.co_firstlineno and fn == "compute")
                continue
            total += sign * sum(v[3] for (file, _, fn), v in raw.items() if fn == func and file.endswith(suffix))
        table[name] = total
    return table


def profiled(fn: Any) -> tuple[Any, dict[str, float], float]:
    prof = cProfile.Profile(time.process_time)   # CPU seconds: a shared machine's waiting does not count
    t0 = time.perf_counter()
    out = prof.runcall(fn)
    wall = time.perf_counter() - t0
    return out, phases(pstats.Stats(prof)), wall


#: what `reconbench run` does before its work, in a fresh process; prints the process's CPU seconds so far
START_UP = ("import time; from reconbench.cli import load_commands; load_commands('run'); "
            "from reconbench import plugins; [plugins.names(k) for k in ('attacks', 'datasets', 'models', 'metrics')]; "
            "import reconbench.runs, reconbench.evaluation; print(time.process_time())")


def start_up_seconds(repeats: int = 3) -> float:
    """CPU seconds of a `run`'s start-up (interpreter, imports, plugin discovery): median of fresh processes."""
    import statistics
    import subprocess

    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    times = [float(subprocess.run([sys.executable, "-c", START_UP], capture_output=True, text=True, check=True,
                                  env=env).stdout.split()[-1]) for _ in range(repeats)]
    return statistics.median(times)


def cpu_mini_cell(steps: int, data_root: str | None, cache: str) -> dict[str, Any]:
    from reconbench.bench.cells import expand
    from reconbench.bench.suite import load_suite
    from reconbench.runs import run_attack
    from reconbench.targets.cache import get_or_train

    suite = load_suite("cpu-mini")
    cell = next(c for c in expand(suite) if c.cell_id == "mnist-binary--haim_binary_kkt--gaussian--s0")
    spec = cell.run_spec(suite)
    suite_steps = int(spec.attack_config.get("steps", 500))
    spec.attack_config = {**spec.attack_config, "steps": steps}
    out = Path(tempfile.mkdtemp(prefix="account-cell-"))

    def work() -> dict[str, Any]:
        card = get_or_train(cell.recipe, cache, data_root, quiet=True, log=False)
        return run_attack(card, spec, out, data_root=data_root, quiet=True)

    result, table, wall = profiled(work)
    dims = [784, *cell.recipe.model["widths"], 1]
    return _report("cpu-mini cell mnist-binary--haim_binary_kkt--gaussian--s0", result, table, wall, steps,
                   suite_steps, dims, torch.float32)


def default_run(data_root: str | None, cache: str) -> dict[str, Any]:
    from reconbench import plugins
    from reconbench.cli.recipe_options import recipe_from_options
    from reconbench.runs import RunSpec, run_attack
    from reconbench.targets.cache import get_or_train

    attack = plugins.get("attacks", "multiclass_kkt")
    spec = RunSpec(attack="multiclass_kkt", search_runs=attack.default_search_runs)
    out = Path(tempfile.mkdtemp(prefix="account-default-"))

    recipe = recipe_from_options({}, base=attack.default_recipe)   # as `reconbench run` builds it

    def work() -> dict[str, Any]:
        card = get_or_train(recipe, cache, data_root, quiet=True, log=False)
        return run_attack(card, spec, out, data_root=data_root, quiet=True)

    result, table, wall = profiled(work)
    table = {"imports and plugin discovery (fresh process)": start_up_seconds(), **table}
    steps = int(result["runs"][0]["steps"])
    dims = [64, *recipe.model["widths"], 10]   # 8 x 8 digits, 10 classes
    return _report("default run (reconbench run --attack multiclass_kkt)", result, table, wall, steps, steps,
                   dims, torch.float64)


def _report(name: str, result: dict[str, Any], table: dict[str, float], wall: float, steps: int, suite_steps: int,
            dims: list[int], dtype: torch.dtype) -> dict[str, Any]:
    runs = len(result["runs"])
    m = int(result["evaluation"]["candidates"]["total"]) // runs
    per_step = table["attack steps"] / max(steps, 1)
    flops = step_flops(dims, m, runs)
    scaled = dict(table)
    scaled["attack steps"] = per_step * suite_steps
    top = ["imports and plugin discovery (fresh process)", "training", "attack steps",
           "attack set-up and per-run records", "evaluation (all)"]
    scaled_wall = sum(scaled.get(k, 0.0) for k in top)
    return {"workload": name, "dims": dims, "dtype": str(dtype).replace("torch.", ""), "runs": runs,
            "m_per_run": m, "steps_measured": steps, "steps_scaled_to": suite_steps, "wall_measured": wall,
            "cpu_seconds_measured": table, "seconds_scaled": scaled, "total_cpu_seconds_scaled": scaled_wall,
            "shares_scaled": {k: v / scaled_wall for k, v in scaled.items()},
            "seconds_per_step": per_step, "step_flops": flops, "step_gflops_per_second": flops["total"] / per_step / 1e9}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=20, help="attack steps of the cpu-mini cell (scaled to 500)")
    ap.add_argument("--only", nargs="+", choices=["cell", "default"], default=["cell", "default"],
                    help="the workloads to measure (default: both)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    torch.set_num_threads(1)
    data_root = os.environ.get("RECONBENCH_DATA")
    # the peak is measured before and after the workloads and the better of the two kept (the machine may be shared)
    peak = {f"{dt}_{t}_thread": peak_gflops(getattr(torch, dt), t) for dt in ("float64", "float32") for t in (1, 2)}
    workloads = [("cell", lambda cache: cpu_mini_cell(args.steps, data_root, cache)),
                 ("default", lambda cache: default_run(data_root, cache))]
    reports = []
    with tempfile.TemporaryDirectory(prefix="account-cache-") as cache:
        for name, work in workloads:
            if name in args.only:
                reports.append(work(cache))
    for k, v in peak.items():
        dt, threads = k.split("_")[0], int(k.split("_")[1])
        peak[k] = max(v, peak_gflops(getattr(torch, dt), threads))
    for rep in reports:
        show(rep, peak)
    if args.json:
        report = {"command": "RECONBENCH_DATA=../shared/data OMP_NUM_THREADS=1 python benchmarks/cell_time_account.py "
                             + " ".join(sys.argv[1:]).replace(str(args.json), args.json.name),
                  "machine": {"processor": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
                              "shared_with_other_processes": True, "torch": torch.__version__},
                  "matmul_peak_gflops": peak, "workloads": reports}
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")


def show(rep: dict[str, Any], peak: dict[str, float]) -> None:
    """Print one workload's table (and record its share of the matmul peak)."""
    key = f"{rep['dtype']}_1_thread"
    rep["step_share_of_peak"] = rep["step_gflops_per_second"] / peak[key]
    print(f"\n{rep['workload']}: {rep['runs']} runs x m = {rep['m_per_run']}, {rep['dtype']}; "
          f"{rep['steps_measured']} steps measured, scaled to {rep['steps_scaled_to']}")
    for k, v in rep["seconds_scaled"].items():
        print(f"  {k:70s} {v:8.2f} s  {100 * rep['shares_scaled'][k]:5.1f}%")
    print(f"  one step: {rep['step_flops']['total'] / 1e9:.3f} GFLOP in {1e3 * rep['seconds_per_step']:.1f} ms = "
          f"{rep['step_gflops_per_second']:.1f} GFLOP/s ({100 * rep['step_share_of_peak']:.0f}% of the "
          f"{peak[key]:.1f} GFLOP/s matmul peak, 1 thread)")
    print("  matmul peak (GFLOP/s): " + ", ".join(f"{k} {v:.1f}" for k, v in peak.items()), flush=True)


if __name__ == "__main__":
    main()
