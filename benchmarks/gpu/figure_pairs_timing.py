"""The seconds of taking one cell's figure pairs (``reconbench.leaderboard.figure_pairs.pairs_from_results``) at the
paper's size, on this machine's CPU: what a slice spends on every cell it packs, after the cell's record, and what
``reconbench.bench.slice_costs.FIGURE_PAIRS`` prices.

The cell is ``paper.toml``'s CIFAR-10 binary cell (n = 500, 3072 pixels) with ``runs`` x m = 1000 candidates
(``evaluation_timing.synthetic_pool``: Gaussian images, a tenth near a training image) against a problem built from
generated images of CIFAR-10's shape (no data file). Timed as ``pairs_from_results`` runs it: the pooled candidates
read from their safetensors file (written first, so read from the page cache as a slice reads what it just wrote),
then ``take_pairs``'s work: the evaluation's context under the cell's protocol (``build_context``: validity,
features, matching, the mean vote's averages) and the shown images' candidates taken from it. The shown images are
the first ``k`` training images (a record's order does not change the work). One torch thread unless told.

    python benchmarks/gpu/figure_pairs_timing.py benchmarks/results/gpu/figure_pairs_cpu.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))   # evaluation_timing.py

from evaluation_timing import evaluation_units, synthetic_pool, synthetic_problem  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

SUITE, CELL = "paper", "cifar-binary--haim_binary_kkt--gaussian--s0"


def time_pairs(runs: int, m: int, k: int, repeats: int) -> dict[str, Any]:
    from reconbench.bench.cells import expand
    from reconbench.bench.suite import load_suite
    from reconbench.evaluation import resolve_protocol
    from reconbench.evaluation.context import build_context
    from reconbench.leaderboard.figure_pairs import PAIRS_DTYPE

    suite = load_suite(SUITE)
    cell = next(c for c in expand(suite) if c.cell_id == CELL)
    spec = dataclasses.replace(cell.recipe.problem, n_per_class=250, n_test_per_class=100)
    problem = synthetic_problem(spec, (3, 32, 32), 509)
    protocol = resolve_protocol(cell.protocol(suite), cell.recipe.family)
    pooled = synthetic_pool(problem, runs, m, 0.1, seed=0)
    rows = []
    with tempfile.TemporaryDirectory(prefix="reconbench-pairs-") as tmp:
        path = Path(tmp) / "candidates.safetensors"
        save_file({"candidates": pooled["candidates"].contiguous()}, str(path))
        for _ in range(repeats):
            t0 = time.perf_counter()
            candidates = load_file(str(path))["candidates"]
            t1 = time.perf_counter()
            ev = build_context(problem, candidates, protocol)
            t2 = time.perf_counter()
            shown = list(range(min(k, problem.n)))
            best = [ev.candidates[int(ev.matching.best[i])] for i in shown if ev.matching.matched[i]]
            averaged = [ev.recon_centred[i] for i in shown if len(ev.matching.members[i]) > 1]
            taken = [torch.stack(t).to(PAIRS_DTYPE) for t in (best, averaged) if t]
            t3 = time.perf_counter()
            rows.append({"read": t1 - t0, "context": t2 - t1, "subset": t3 - t2, "total": t3 - t0,
                         "matched_shown": len(best), "tensors": len(taken)})
    units = evaluation_units(problem, runs, m)
    worst = max(r["total"] for r in rows)
    return {"cell": CELL, "runs": runs, "m": m, "n": problem.n, "pixels": math.prod((3, 32, 32)), "k": k,
            "units": units, "repeats": rows, "seconds": worst, "seconds_per_unit": worst / units,
            "torch_threads": torch.get_num_threads(), "load_1min": os.getloadavg()[0]}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", nargs="?", help="JSON file to write (default: print only)")
    parser.add_argument("--runs", type=int, default=16)
    parser.add_argument("--m", type=int, default=1000)
    parser.add_argument("--k", type=int, default=10, help="images the figure shows (paper.toml's sample_images)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    result = {"what": "seconds of taking one cell's figure pairs (pairs_from_results) on this machine's CPU; "
                      "the slowest of the repeats",
              **time_pairs(args.runs, args.m, args.k, args.repeats)}
    text = json.dumps(result, indent=1) + "\n"
    if args.out:
        Path(args.out).write_text(text)
    print(text, end="")
    return result


if __name__ == "__main__":
    main()
