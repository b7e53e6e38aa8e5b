"""Time to a result against an older commit: the README's run (target cached and not) and the ``ci`` suite, measured
as whole processes, the two trees alternating, and written as the JSON behind docs/performance.md's first table.

    python benchmarks/default_run_vs_base.py --base-venv ../wt-base/.venv --repeats 3 \
        --json benchmarks/results/default_runs/default_run_and_ci_vs_599614b.json

Each run is one process started fresh (``reconbench run --attack multiclass_kkt -q`` or ``reconbench bench ci``) with
a fresh ``--out`` folder; the not-cached case also gives each run a fresh ``RECONBENCH_CACHE`` (for this tree holding
the already built fast-BLAS shim and its measured matmul speed, as after a first use). The runs alternate (head,
base, head, base, ...) so that a
machine shared with other jobs disturbs both sides alike; user and system seconds are the operating system's
account of the finished child (``os.wait4``), which the load disturbs least; medians are reported, and the ratio is
taken pair by pair. The head runs with ``RECONBENCH_FAST_BLAS=1``; the base as it is. Counts come from each run's
records: the calibrated count (README run), and the calibrated count summed over the cells both trees ran (ci).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

CASES: dict[str, tuple[list[str], bool, str]] = {
    "readme_run_target_not_cached": (
        ["run", "--attack", "multiclass_kkt", "-q"], True,
        "reconbench run --attack multiclass_kkt -q --out <fresh folder>, RECONBENCH_CACHE=<fresh folder> (the target "
        "is trained; the head's fresh cache holds only the fast path's shim and BLAS measurement)"),
    "readme_run_target_cached": (
        ["run", "--attack", "multiclass_kkt", "-q"], False,
        "reconbench run --attack multiclass_kkt -q --out <fresh folder> (the target cached)"),
    "ci_suite": (["bench", "ci"], False, "reconbench bench ci --out <fresh folder> (the targets cached)"),
    "ci_suite_base_cells": (["bench", "ci"], False,
                            "reconbench bench ci --out <fresh folder> (the targets cached); the head runs only the "
                            "cells the base's ci suite has (--only one pattern per attack of the base), so both "
                            "sides do the same work"),
}
#: what the head adds to a case's command line (the base runs the command as it is)
HEAD_ONLY: dict[str, list[str]] = {
    "ci_suite_base_cells": [arg for attack in ("general_loss_wd", "haim_binary_kkt", "init_only", "multiclass_kkt",
                                               "runkel_bilevel", "weight_rows")
                            for arg in ("--only", f"*--{attack}--*")],
}


def _git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()


def _one(exe: str, args: list[str], env: dict[str, str], folder: Path) -> dict[str, float]:
    """One whole process: its user, system, CPU and wall seconds and its peak resident memory (MiB)."""
    t0 = time.perf_counter()
    with open(folder / "log", "wb") as log:
        proc = subprocess.Popen(["nice", "-n", "10", exe, *args, "--out", str(folder / "out")], env=env,
                                stdout=log, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{exe} {' '.join(args)} failed; its output: {folder / 'log'}")
    return {"user": usage.ru_utime, "sys": usage.ru_stime, "cpu": usage.ru_utime + usage.ru_stime, "wall": wall,
            "peak": usage.ru_maxrss / 1024}


def _spread(values: list[float], digits: int) -> dict[str, float]:
    return {"min": round(min(values), digits), "median": round(statistics.median(values), digits),
            "max": round(max(values), digits)}


def _readme_counts(folder: Path) -> dict[str, Any]:
    r = json.loads((folder / "out" / "result.json").read_text())
    ev = r["evaluation"]
    spread = ((ev.get("null") or {}).get("spread") or {}).get("reconstructed_calibrated") or {}
    return {"commit": r["provenance"].get("git_commit"),
            "reconstructed_calibrated": ev["summary"]["reconstructed_calibrated"],
            "null_mean": spread.get("mean"), "null_max": spread.get("max"),
            "null_draws": (ev.get("null") or {}).get("draws"),
            "reconstructed_ssim": ev["summary"]["reconstructed"], "attack_wall_seconds": round(r["wall_seconds"], 2)}


def _ci_cells(folder: Path) -> dict[str, int]:
    """Cell id -> the pooled selection's calibrated count, for every cell that finished."""
    out = {}
    for f in glob.glob(str(folder / "out" / "cells" / "*.json")):
        c = json.loads(Path(f).read_text())
        if c.get("status") != "ok":
            continue
        summary = ((c.get("selections") or {}).get("pool") or {}).get("summary") or {}
        out[Path(f).stem] = int(summary.get("reconstructed_calibrated") or 0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base-venv", type=Path, required=True, help="the older tree's virtual environment")
    ap.add_argument("--repeats", type=int, default=3, help="runs of each side per case (default 3)")
    ap.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES))
    ap.add_argument("--json", type=Path, required=True, help="write the report here (cases not run are kept)")
    ap.add_argument("--work", type=Path, default=None, help="folder for the runs' outputs (default: a temporary one)")
    args = ap.parse_args()
    head_exe = str(Path(sys.executable).with_name("reconbench"))
    base_exe = str(args.base_venv / "bin" / "reconbench")
    base_root = Path(os.path.realpath(args.base_venv)).parent
    work = args.work or Path(tempfile.mkdtemp(prefix="default-run-vs-base-"))
    common = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    head_env = {**common, "RECONBENCH_FAST_BLAS": "1"}
    base_env = {k: v for k, v in common.items() if k != "RECONBENCH_FAST_BLAS"}
    cache = Path(os.environ.get("RECONBENCH_CACHE", Path.home() / ".cache" / "reconbench"))
    # what a first use leaves in the cache's blas folder: the built shim and the measured matmul speeds
    shims = sorted((cache / "blas").glob("*.so")) + sorted((cache / "blas").glob("gflops-*.json"))
    base_commit = _git("rev-parse", "--short", "HEAD", cwd=base_root)
    report: dict[str, Any] = json.loads(args.json.read_text()) if args.json.exists() else {}
    report.update({
        "benchmark": f"default_run_and_ci_vs_{base_commit}",
        "script": "benchmarks/default_run_vs_base.py",
        "method": ("whole processes from start to exit, the two trees alternated (head, base, head, base, ...); user, "
                   "system, CPU (user + system) seconds of each finished process as the operating system accounts "
                   "them (os.wait4), wall seconds from start to exit; min / median / max over the runs, and the "
                   "head/base ratio taken pair by pair (min / median / max of the pairs)."),
        "base": f"{base_commit} (its own venv, stock MKL: it has no fast path)",
        "head_commit": _git("rev-parse", "HEAD", cwd=ROOT),
        "head_env": "RECONBENCH_FAST_BLAS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 (the shim already built and the BLAS "
                    "measured, as after a first use)",
        "machine": "2 cores of an AMD EPYC (AVX-512), shared with other users' jobs",
    })
    report.setdefault("cases", {})
    for name in args.cases:
        cli, fresh_cache, command = CASES[name]
        load = [os.popen("uptime").read().strip()]
        rows: dict[str, list[dict[str, float]]] = {"head": [], "base": []}
        folders: dict[str, list[Path]] = {"head": [], "base": []}
        for i in range(args.repeats):
            for side, exe, env in (("head", head_exe, head_env), ("base", base_exe, base_env)):
                folder = work / f"{name}-{side}-{i}"
                folder.mkdir(parents=True)
                run_env = dict(env)
                if fresh_cache:
                    run_env["RECONBENCH_CACHE"] = str(folder / "cache")
                    if side == "head":
                        (folder / "cache" / "blas").mkdir(parents=True)
                        for shim in shims:
                            shutil.copy(shim, folder / "cache" / "blas")
                args_of_side = cli + HEAD_ONLY.get(name, []) if side == "head" else cli
                rows[side].append(_one(exe, args_of_side, run_env, folder))
                folders[side].append(folder)
                print(f"{name} {side} {i}: {rows[side][-1]['cpu']:.1f} s CPU, {rows[side][-1]['wall']:.1f} s wall",
                      flush=True)
        load.append(os.popen("uptime").read().strip())
        entry: dict[str, Any] = {"command": command, "load_before_after": load,
                                 "runs": {"head": args.repeats, "base": args.repeats}}
        for side in ("head", "base"):
            entry[side] = {k: _spread([r[k] for r in rows[side]], 1 if k == "peak" else 3)
                           for k in ("user", "sys", "cpu", "wall", "peak")}
        entry["head_over_base"] = {k: _spread([h[k] / b[k] for h, b in zip(rows["head"], rows["base"], strict=True)], 4)
                                   for k in ("user", "cpu", "wall")}
        if name.startswith("ci_suite"):
            cells = {side: [_ci_cells(f) for f in folders[side]] for side in ("head", "base")}
            both = sorted(set.intersection(*(set(c) for side in cells.values() for c in side)))
            entry["counts"] = {side: [{"cells": len(c), "common_cells": len(both),
                                       "reconstructed_calibrated_sum_pooled": sum(c[k] for k in both)}
                                      for c in cells[side]] for side in ("head", "base")}
        else:
            entry["counts"] = {side: [_readme_counts(f) for f in folders[side]] for side in ("head", "base")}
        report["cases"][name] = entry
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    print(f"written: {args.json} (runs under {work})")


if __name__ == "__main__":
    main()
