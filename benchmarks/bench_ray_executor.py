"""Wall time of a suite run serially vs on a local two-worker Ray instance (``--executor ray``).

Run with::

    OMP_NUM_THREADS=1 RECONBENCH_DATA=../shared/data python benchmarks/bench_ray_executor.py ci
    OMP_NUM_THREADS=1 RECONBENCH_DATA=../shared/data python benchmarks/bench_ray_executor.py cpu-mini \
        --only 'mnist-binary--haim_binary_kkt--*--s0' --repeats 1

Each run is a fresh ``reconbench bench`` process with a fresh target cache (so targets are trained in every run, as
on a first run), timed from start to exit: Ray's start-up and its workers' imports are part of the Ray time. Serial
and Ray runs alternate, so a change of load on the machine falls on both. The script also checks that both give the
same cell records (timing and host fields left out, see tests/_helpers/cellkit.py) and writes
``benchmarks/results/ray/<suite>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from _helpers.cellkit import comparable  # noqa: E402

from reconbench.bench import machine  # noqa: E402
from reconbench.bench.runner import load_cells  # noqa: E402
from reconbench.provenance import git_commit  # noqa: E402


def run_once(suite: str, only: list[str], executor: str, workdir: Path) -> dict[str, Any]:
    out, cache = workdir / f"out-{executor}", workdir / f"cache-{executor}"
    cmd = ["reconbench", "bench", suite, "--out", str(out), "--quiet", "--executor", executor]
    for pattern in only:
        cmd += ["--only", pattern]
    env = {**os.environ, "RECONBENCH_CACHE": str(cache), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    load_before = os.getloadavg()
    t0 = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{done.stderr[-3000:]}")
    cells = load_cells(out)
    inv = json.loads((out / "invocations" / "000.json").read_text())
    return {
        "executor": executor,
        "command": " ".join(cmd).replace(str(workdir), "$TMP"),
        "process_wall_seconds": wall,
        "suite_elapsed_seconds": inv["elapsed_seconds"],
        "sum_cell_wall_seconds": sum(r["wall_seconds"] for r in cells.values()),
        "cells": len(cells),
        "cells_ok": sum(r["status"] == "ok" for r in cells.values()),
        "load_average_1min_before": load_before[0],
        "load_average_1min_after": os.getloadavg()[0],
        "_records": {k: comparable(v) for k, v in cells.items()},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("suite")
    ap.add_argument("--only", action="append", default=[])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", type=Path, default=None, help="JSON to write (default benchmarks/results/ray/SUITE.json)")
    args = ap.parse_args()
    import ray

    runs = []
    for r in range(args.repeats):
        for executor in ("serial", "ray"):
            with tempfile.TemporaryDirectory(prefix="bench-ray-") as tmp:
                res = run_once(args.suite, args.only, executor, Path(tmp))
            res["repeat"] = r
            runs.append(res)
            print(f"{executor:>6} repeat {r}: {res['process_wall_seconds']:.1f} s wall "
                  f"({res['cells']} cells, load {res['load_average_1min_before']:.1f})", file=sys.stderr)
    reference = runs[0]["_records"]
    identical = all(run["_records"] == reference for run in runs)
    for run in runs:
        del run["_records"]

    def median(executor: str) -> float:
        times = sorted(r["process_wall_seconds"] for r in runs if r["executor"] == executor)
        return times[len(times) // 2]

    result = {
        "benchmark": "suite wall time, serial vs a local Ray instance with two workers (num_cpus=2)",
        "suite": args.suite,
        "only": args.only,
        "cells_identical_across_runs": identical,
        "median_process_wall_seconds": {"serial": median("serial"), "ray": median("ray")},
        "runs": runs,
        "conditions": (
            "a 2-core virtual machine SHARED with about five other agents' builds and tests (see the load averages "
            "per run); every run a fresh process and a fresh target cache; OMP_NUM_THREADS=1, so a serial run uses "
            "one core and the Ray run two 1-CPU workers; Ray start-up (a few seconds) and worker imports included"
        ),
        "machine": machine.describe("cpu"),
        "ray_version": ray.__version__,
        "python": platform.python_version(),
        "git_commit": git_commit(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    out = args.out or REPO / "benchmarks" / "results" / "ray" / f"{args.suite}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
