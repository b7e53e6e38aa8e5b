"""The closed-form engine's step (forward + value_and_grad) against its products alone and against 599614b's engine,
in one process, alternated, by the process's CPU time.

    OMP_NUM_THREADS=1 python benchmarks/bench_gram_engine.py --json benchmarks/results/kkt/bench_gram_engine.json
    OMP_NUM_THREADS=1 RECONBENCH_FAST_BLAS=1 python -m reconbench doctor   # then, for MKL's fast path:
    OMP_NUM_THREADS=1 LD_PRELOAD=~/.cache/reconbench/blas/mkl-intel-cpu-shim-<hash>.so \\
        python benchmarks/bench_gram_engine.py --json benchmarks/results/kkt/bench_gram_engine_fast.json

``bench_step_ab.py`` times the whole attack call in fresh processes (start-up, the prologue and the final
evaluation included, which at a few steps weigh a lot); this script isolates the step: 784-1000-1000-1 without
biases, R = 2 runs, alpha = 100, the engine of this checkout (``reconbench.attack.kkt.batched_gram``), the
engine of 599614b (kept as the tests' reference, ``tests/_helpers/gram_reference.py``) and the six weight products
plus the Gram products alone (as ``bench_step_ab.product_floor``), each timed in blocks of ``--steps``, the three
alternated over ``--repeats`` rounds; medians of CPU milliseconds per step.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from _helpers.gram_reference import ReferenceGram  # noqa: E402

from reconbench import blas  # noqa: E402
from reconbench.attack.kkt.batched_gram import BatchedGram  # noqa: E402


def workloads(m: int, dtype: torch.dtype, runs: int = 2) -> dict[str, Callable[[], object]]:
    g = torch.Generator().manual_seed(0)
    layers = [nn.Linear(784, 1000, bias=False), nn.Linear(1000, 1000, bias=False), nn.Linear(1000, 1, bias=False)]
    x = torch.randn(runs, m, 784, generator=g, dtype=dtype) * 0.1
    c = torch.randn(runs, m, 1, generator=g, dtype=dtype)
    alpha = torch.full((runs, 1, 1), 100.0, dtype=dtype)
    head = BatchedGram(layers, "relu", dtype, torch.device("cpu"))
    base = ReferenceGram(layers, "relu", dtype, torch.device("cpu"))
    w0, w1 = head.weights[0], head.weights[1]
    w0t, w1t = head.weights_t[0], head.weights_t[1]
    a = torch.randn(runs, m, 1000, generator=g, dtype=dtype)

    def products() -> None:
        flat = a.flatten(0, 1)
        torch.mm(x.flatten(0, 1), w0t)
        for w in (w1t, w1, w1, w1t):
            torch.mm(flat, w)
        torch.mm(flat, w0)
        for k in (x, a, a):
            torch.bmm(torch.bmm(k, k.transpose(1, 2)), k)
        for _ in range(2):
            torch.bmm(torch.bmm(a, a.transpose(1, 2)), a)

    return {"head": lambda: head.value_and_grad(head.forward(x, alpha), c, alpha),
            "base_599614b": lambda: base.value_and_grad(base.forward(x, alpha), c, alpha),
            "products": products}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", nargs="+", default=["40:float64", "40:float32", "200:float64", "200:float32"])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    torch.set_num_threads(1)
    rows = []
    for shape in args.shapes:
        m, dtype_name = int(shape.split(":")[0]), shape.split(":")[1]
        work = workloads(m, getattr(torch, dtype_name))
        times: dict[str, list[float]] = {k: [] for k in work}
        for f in work.values():
            for _ in range(3):
                f()
        for rep in range(args.repeats):
            for name in (list(work) if rep % 2 == 0 else list(reversed(work))):
                t0 = time.process_time()
                for _ in range(args.steps):
                    work[name]()
                times[name].append(1e3 * (time.process_time() - t0) / args.steps)
        med = {k: statistics.median(v) for k, v in times.items()}
        row = {"m": m, "dtype": dtype_name, "runs": 2, "cpu_ms_per_step": med, "samples": times,
               "head_over_products": med["head"] / med["products"],
               "speedup_over_599614b": med["base_599614b"] / med["head"]}
        rows.append(row)
        print(f"m={m:4d} {dtype_name}: head {med['head']:.1f} ms, 599614b {med['base_599614b']:.1f} ms, products "
              f"{med['products']:.1f} ms per step (CPU); head {row['head_over_products']:.2f}x the products, "
              f"{row['speedup_over_599614b']:.2f}x faster than 599614b", flush=True)
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            rec = blas.summary()
            args.json.write_text(json.dumps({"command": "OMP_NUM_THREADS=1 python benchmarks/bench_gram_engine.py "
                                             + " ".join(sys.argv[1:]), "blas": {**rec,
                                             "line": blas.provenance_line(rec)}, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
