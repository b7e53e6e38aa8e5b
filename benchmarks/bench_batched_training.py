"""Four targets trained as one batched computation against the same four trained one at a time, on this CPU.

    RECONBENCH_DATA=../shared/data OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 python benchmarks/bench_batched_training.py \\
        --json benchmarks/results/training/batched_vs_sequential_cpu.json

The targets are cpu-mini's MNIST binary shape (odd/even, 5 per class, n = 10, 784-1000-1000-1, BCE, float64) at a
constant lr of 0.05 (the batched trainer steps at one constant lr), four walk orders of the data set and four
initialisation seeds. Three ways, alternated ``--repeats`` times in this process (medians reported):

* ``train``: :func:`reconbench.targets.training.train` on each recipe in turn (what ``reconbench train`` runs: its
  closed-form loop, the loss read on the host every 100 steps, then the final metrics; no certificate, one
  evaluation at the start and the end);
* ``loop``: the one-target closed-form loop alone (:class:`~reconbench.targets.chain_gd.ChainGD` steps), each target
  in turn;
* ``batched``: :class:`~reconbench.targets.batched_training.BatchedChainGD` stepping all four together (on the
  CPU by default each target's window of k steps in turn, on slices of the stacked state);
* ``batched_stacked``: the same trainer with ``stacked=True``, one batched product per layer over all four targets
  each step (a GPU's default).

Wall seconds and the process's CPU seconds are both recorded; on a shared machine the CPU seconds are the steadier.
The batched weights (both orders) are checked against the one-at-a-time loop's (largest relative difference
recorded).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from reconbench.data import ProblemSpec
from reconbench.targets import defended
from reconbench.targets.batched_training import from_recipes
from reconbench.targets.chain_gd import ChainGD, chain_layers
from reconbench.targets.losses import get_loss
from reconbench.targets.problems import build_problem
from reconbench.targets.recipe import TargetRecipe, TrainSpec
from reconbench.targets.training import build_model, train


def recipes(targets: int, steps: int) -> list[TargetRecipe]:
    return [TargetRecipe(problem=ProblemSpec(dataset="mnist_test", task="binary", binary_rule="parity", n_per_class=5,
                                             order_seed=t),
                         model={"widths": [1000, 1000]},
                         train=TrainSpec(loss="bce", lr=0.05, steps=steps, eval_every=steps, seed=t))
            for t in range(targets)]


def timed(fn: Callable[[], Any]) -> tuple[dict[str, float], Any]:
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return {"seconds": time.perf_counter() - t0, "cpu_seconds": time.process_time() - c0}, out


def run_train(rs: list[TargetRecipe], problems: list[Any]) -> list[dict[str, torch.Tensor]]:
    out = []
    for r, p in zip(rs, problems, strict=True):
        defended._TRAINED.clear()   # train() would recall the weights of a recipe it trained before in this process
        out.append({k: v.detach() for k, v in train(r, p, quiet=True, with_certificate=False).model.state_dict().items()})
    return out


def run_loop(rs: list[TargetRecipe], problems: list[Any], steps: int) -> list[list[torch.Tensor]]:
    out = []
    for r, p in zip(rs, problems, strict=True):
        model = build_model(r, p).double()
        layers = chain_layers(model)
        assert layers is not None
        chain = ChainGD(layers, p.x_train(torch.float64), p.targets(p.train_labels, torch.float64),
                        get_loss("bce", "binary")[1], 0.0)
        for _ in range(steps):
            _, dz = chain.loss_and_grad()
            chain.step(dz, r.train.lr)
        chain.sync()
        out.append([layer.weight.detach().clone() for layer in layers])
    return out


def run_batched(rs: list[TargetRecipe], problems: list[Any], steps: int,
                stacked: bool | None = None) -> list[dict[str, torch.Tensor]]:
    trainer, _ = from_recipes(rs, problems, loss_every=100, stacked=stacked)
    trainer.run(steps)
    return trainer.state_dicts()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--targets", type=int, default=4)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    rs = recipes(args.targets, args.steps)
    problems = [build_problem(r.problem) for r in rs]
    rows: dict[str, list[dict[str, float]]] = {"train": [], "loop": [], "batched": [], "batched_stacked": []}
    load_before = os.getloadavg()
    max_rel = 0.0
    for _ in range(args.repeats):
        t, _ = timed(lambda: run_train(rs, problems))
        rows["train"].append(t)
        t, loop_w = timed(lambda: run_loop(rs, problems, args.steps))
        rows["loop"].append(t)
        t, batch_w = timed(lambda: run_batched(rs, problems, args.steps))
        rows["batched"].append(t)
        t, stacked_w = timed(lambda: run_batched(rs, problems, args.steps, stacked=True))
        rows["batched_stacked"].append(t)
        for ws, state, state_s in zip(loop_w, batch_w, stacked_w, strict=True):
            for i, w in enumerate(ws):
                for st in (state, state_s):
                    max_rel = max(max_rel, float((st[f"{i}.weight"] - w).abs().max() / w.abs().max()))
        print({k: round(v[-1]["cpu_seconds"], 2) for k, v in rows.items()}, flush=True)
    med = {k: {m: statistics.median(r[m] for r in v) for m in ("seconds", "cpu_seconds")} for k, v in rows.items()}
    target_steps = args.targets * args.steps
    result = {
        "benchmark": "batched trainer vs training targets one at a time (CPU)",
        "command": "RECONBENCH_DATA=../shared/data OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 python "
                   f"benchmarks/bench_batched_training.py --targets {args.targets} --steps {args.steps} "
                   f"--repeats {args.repeats}",
        "targets": args.targets, "steps": args.steps, "n": problems[0].n, "layers": [784, 1000, 1000, 1],
        "dtype": "float64", "lr": 0.05,
        "conditions": {"torch": torch.__version__, "torch_threads": torch.get_num_threads(), "cpu_count": os.cpu_count(),
                       "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"), "loadavg_before": load_before,
                       "loadavg_after": os.getloadavg()},
        "repeats": rows, "median": med,
        "ms_per_target_step": {k: {m: 1e3 * v[m] / target_steps for m in v} for k, v in med.items()},
        "speedup_batched_over_loop": {m: med["loop"][m] / med["batched"][m] for m in ("seconds", "cpu_seconds")},
        "speedup_batched_over_train": {m: med["train"][m] / med["batched"][m] for m in ("seconds", "cpu_seconds")},
        "speedup_batched_stacked_over_loop": {m: med["loop"][m] / med["batched_stacked"][m]
                                              for m in ("seconds", "cpu_seconds")},
        "max_relative_weight_difference_batched_vs_loop": max_rel,
    }
    text = json.dumps(result, indent=1)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(text + "\n")
    print(json.dumps({k: result[k] for k in ("median", "speedup_batched_over_loop", "speedup_batched_over_train",
                                             "speedup_batched_stacked_over_loop",
                                             "max_relative_weight_difference_batched_vs_loop")}, indent=1))


if __name__ == "__main__":
    main()
