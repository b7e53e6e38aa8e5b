"""What evaluating one paper-size cell costs on the machine that merges the slices (the CPU machine).

A cell whose runs came back from GPU slices is evaluated where its last group is merged (`reconbench bench SUITE
--unpack`, docs/slices.md): the pooled evaluation of every run's candidates against the n training images with its
held-out null and calibration draws, the blind and oracle selections, and the calibration bars, as
``reconbench.runs.result.finish`` computes them. This times those steps, with the functions ``finish`` calls, for a
paper cell's sizes (default: ``paper.toml``'s CIFAR-10 binary target, n = 500, 16 runs of m = 1000 candidates) and
writes the seconds of each to a JSON file.

The candidates are synthetic (no GPU run has come back yet): each run's m candidates are training images of the
cell's target plus Gaussian noise for a fraction of them (``--close``), and Gaussian images at the data's per-pixel
scale for the rest, so that matching, SSIM and the null see both near and far candidates. The evaluation's cost
depends on the sizes and on how many candidates match, not on where the candidates came from. The pool and the
timing are ``evaluation_timing.py``'s, which ``probe.py``'s ``evaluation`` case shares (on generated images there:
the device machine has no data files). The pooled evaluation writes its figures into a temporary folder, as
``finish`` writes them into the run's (``figures`` in each case; the committed ``merge_cost_cpu.json`` predates it
and wrote none).

    RECONBENCH_DATA=../shared/data OMP_NUM_THREADS=1 python benchmarks/gpu/merge_cost.py OUT.json
    ... --runs 4 --cell 'mnist-binary--haim_binary_kkt--gaussian--s0'
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))   # the sibling evaluation_timing.py

from evaluation_timing import time_case  # noqa: E402

from reconbench.bench.cells import expand  # noqa: E402
from reconbench.bench.suite import load_suite  # noqa: E402
from reconbench.evaluation import resolve_protocol  # noqa: E402
from reconbench.targets.problems import build_problem  # noqa: E402

DEFAULT_CELL = "cifar-binary--haim_binary_kkt--gaussian--s0"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="the JSON file to write")
    parser.add_argument("--suite", default="paper")
    parser.add_argument("--cell", default=DEFAULT_CELL, help=f"the cell whose sizes are timed (default {DEFAULT_CELL})")
    parser.add_argument("--runs", type=int, nargs="+", default=None,
                        help="search runs pooled, one case per value (default: the cell's)")
    parser.add_argument("--m", type=int, default=None, help="candidates per run (default: the cell's, 2n)")
    parser.add_argument("--close", type=float, default=0.1, help="share of candidates near a training image")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    suite = load_suite(args.suite)
    cells = {c.cell_id: c for c in expand(suite)}
    if args.cell not in cells:
        parser.error(f"--cell {args.cell!r} is not a cell of suite {args.suite!r}")
    cell = cells[args.cell]
    t0 = time.perf_counter()
    problem = build_problem(cell.recipe.problem)
    problem_s = time.perf_counter() - t0
    m = args.m or int(cell.attack.candidates if cell.attack.candidates is not None else 2 * problem.n)
    family = cell.recipe.family
    resolved = resolve_protocol(cell.protocol(suite), family)
    load = list(os.getloadavg())
    cases = [time_case(problem, family, resolved, runs, m, args.close, args.seed)
             for runs in (args.runs or [int(cell.attack.search_runs)])]
    out = {
        "benchmark": "the merge's evaluation of one cell (reconbench.runs.result.finish's steps) on synthetic "
                     "candidates of the cell's sizes",
        "command": "python benchmarks/gpu/merge_cost.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "conditions": {"torch": torch.__version__, "python": platform.python_version(),
                       "torch_threads": torch.get_num_threads(), "cpu_count": os.cpu_count(),
                       "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
                       "loadavg_before": load},
        "suite": args.suite, "cell": args.cell, "n": problem.n, "m": m, "close_share": args.close,
        "problem_seconds": problem_s,
        "protocol": {"null_draws": resolved.base.null_draws, "calibration_draws": resolved.base.calibration_draws},
        "cases": cases,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps([{k: c[k] for k in ("runs", "seconds")} for c in cases]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
