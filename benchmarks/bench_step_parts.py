"""Where the batched KKT attack call spends its CPU time, part by part, against the step's products alone.

    OMP_NUM_THREADS=1 RECONBENCH_FAST_BLAS=1 python benchmarks/bench_step_parts.py \\
        --shapes 40:float32 40:float64 --steps 100 --repeats 3 --json benchmarks/results/kkt/bench_step_parts_fast.json

The workload is bench_step_ab.py's (``haim_binary_kkt``, 2 runs advanced together, 784-1000-1000-1, one thread).
One process runs the whole attack call ``--repeats`` times after a warm-up; the call's functions are wrapped so that
each repeat reads, on the process's CPU clock (time spent waiting for a core does not count):

* ``call``: the whole ``run_batched`` call;
* ``loop``: the batched loop ``_advance`` (the steps, their checks and trace, and the final evaluation);
* ``evaluate``: every evaluation of the loss and its gradient (the closed-form engine, the box prior and the
  multiplier terms), in the loop and at its end;
* ``engine``: the engine's ``forward`` and ``value_and_grad`` alone.

Per step (each divided by the steps; ``evaluate`` and ``engine`` by the number of calls): ``prologue`` =
call - loop (the chunk planning, the starts, the engine's set-up, the outputs), ``loop_only`` = (loop - evaluate) /
steps (the momentum update, the per-step finiteness check and snapshot, the trace), ``terms`` = evaluate - engine
(the box prior and the multipliers' terms), and the engine against ``products`` (bench_step_ab.product_floor: the
six products by a large weight matrix and the Gram products, nothing else). The wrappers add two clock reads per
wrapped call (well under a microsecond each). Results do not depend on the wrapping: it times, it does not change.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from reconbench.fast_blas import reexec_with_shim

if __name__ == "__main__":
    # RECONBENCH_FAST_BLAS=1 acts here as in the reconbench command and in bench_step_ab.py: this process restarts
    # with MKL's fast-path shim preloaded, which must happen before torch loads (the script ran the stock path
    # whatever the variable)
    reexec_with_shim()

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_step_ab  # noqa: E402  (the workload and the product floor are bench_step_ab's)


class Clock:
    """CPU seconds spent inside the wrapped callables, by name."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.calls: dict[str, int] = {}

    def wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[name] = self.seconds.get(name, 0.0) + time.process_time() - t0
                self.calls[name] = self.calls.get(name, 0) + 1
        return timed

    def reset(self) -> None:
        self.seconds.clear()
        self.calls.clear()


def measure(m: int, dtype_name: str, runs: int, steps: int, repeats: int) -> dict[str, Any]:
    from reconbench import plugins
    from reconbench.attack.candidates import candidate_labels
    from reconbench.attack.kkt import batched, batched_gram
    from reconbench.config import build_config
    from reconbench.interfaces import AttackTarget, Knowledge
    from reconbench.runs import RunSpec, sample_configs

    torch.set_num_threads(1)
    dtype = {"float64": torch.float64, "float32": torch.float32}[dtype_name]
    net = plugins.get("models", "mlp").build((1, 28, 28), 1, {"widths": [1000, 1000]},
                                             generator=torch.Generator().manual_seed(0))
    knowledge = Knowledge(task="binary", num_classes=2, out_dim=1, input_shape=(1, 28, 28),
                          class_counts=[m // 2, m - m // 2])
    target = AttackTarget(model=net.to(dtype), family="mlp", homogeneity_degree=3, knowledge=knowledge, dtype=dtype,
                          device=torch.device("cpu"))
    attack = plugins.get("attacks", "haim_binary_kkt")
    spec = RunSpec(attack="haim_binary_kkt", attack_config={"steps": steps, "lr": 1e-4, "eval_every": 100},
                   search_runs=max(runs, 2), seed=0)
    configs = [build_config(attack.config_cls, c, "bench") for c in sample_configs(attack, spec)][:runs]
    labels = candidate_labels("binary", 2, m)

    clock = Clock()
    batched._advance = clock.wrap("loop", batched._advance)   # type: ignore[method-assign]
    plain_evaluator = batched.gram_evaluator

    def timed_evaluator(*args: Any, **kwargs: Any) -> Any:
        return clock.wrap("evaluate", plain_evaluator(*args, **kwargs))

    batched.gram_evaluator = timed_evaluator   # type: ignore[assignment]
    gram = batched_gram.BatchedGram
    gram.forward = clock.wrap("engine", gram.forward)   # type: ignore[method-assign]
    gram.value_and_grad = clock.wrap("engine", gram.value_and_grad)   # type: ignore[method-assign]

    def go() -> None:
        x0s, gens = [], []
        for k, cfg in enumerate(configs):
            g = torch.Generator().manual_seed(1000 + k)
            x0s.append((torch.randn(m, 1, 28, 28, generator=g, dtype=torch.float64) * cfg.init_scale).to(dtype))
            gens.append(g)
        call = clock.wrap("call", attack.run_batched)
        call(target, x0s, labels, configs, generators=gens)

    go()   # warm-up
    rows = []
    for _ in range(repeats):
        clock.reset()
        go()
        s, n = dict(clock.seconds), dict(clock.calls)
        evals = n["evaluate"]
        rows.append({
            "call_ms_per_step": 1e3 * s["call"] / steps,
            "prologue_ms": 1e3 * (s["call"] - s["loop"]),
            "loop_only_ms_per_step": 1e3 * (s["loop"] - s["evaluate"]) / steps,
            "evaluate_ms": 1e3 * s["evaluate"] / evals,
            "terms_ms": 1e3 * (s["evaluate"] - s["engine"]) / evals,
            "engine_ms": 1e3 * s["engine"] / evals,
            "evaluations": evals,
        })
    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "floor.pt")
        bench_step_ab.product_floor(m, dtype_name, runs, 5, out)
        floor = float(torch.load(out)["floor_seconds_per_step"])
    med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    gflop = bench_step_ab.floor_gflop(m, runs)
    med["products_ms"] = 1e3 * floor
    med["engine_over_products"] = med["engine_ms"] / med["products_ms"]
    med["evaluate_over_products"] = med["evaluate_ms"] / med["products_ms"]
    med["step_over_products"] = (med["loop_only_ms_per_step"] + med["evaluate_ms"]) / med["products_ms"]
    med["call_over_products"] = med["call_ms_per_step"] / med["products_ms"]
    return {"m": m, "dtype": dtype_name, "runs": runs, "steps": steps, "repeats": rows, "median": med,
            "products_gflop": gflop, "products_gflops": gflop / floor}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", nargs="+", default=["40:float32"], help="m:dtype pairs, e.g. 40:float32 200:float64")
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    load_before = os.getloadavg()
    rows = []
    for shape in args.shapes:
        m, dtype = shape.split(":")
        rows.append(measure(int(m), dtype, args.runs, args.steps, args.repeats))
        med = rows[-1]["median"]
        print(f"m={m} {dtype}: call {med['call_ms_per_step']:.2f} ms/step (prologue {med['prologue_ms']:.1f} ms), "
              f"loop-only {med['loop_only_ms_per_step']:.2f}, evaluate {med['evaluate_ms']:.2f} (terms "
              f"{med['terms_ms']:.2f}, engine {med['engine_ms']:.2f}), products {med['products_ms']:.2f}; "
              f"step / products {med['step_over_products']:.2f}x, engine / products "
              f"{med['engine_over_products']:.2f}x", flush=True)
    report = {"benchmark": "bench_step_parts", "commit": bench_step_ab.commit_of(bench_step_ab.ROOT),
              "blas": bench_step_ab.blas_record(), "python": platform.python_version(), "torch": torch.__version__,
              "load": {"before": load_before, "after": os.getloadavg()},
              "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}, "rows": rows}
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
