"""The membership test's chance level over many random member sets (docs/calibration.md#the-membership-test).

For each set-up, ``--sets`` problems are built with the data set walked in a random order (``order_seed`` = 0, 1,
...), so that every problem's training images are a fresh random draw of each class. Each problem's membership test
is computed, under both ``membership_test.method`` values, for three kinds of candidates (m = 12n):

* ``held_out``: the evaluation's own null: random held-out images with balanced labels (``null.draw``);
* ``noise``: i.i.d. standard Gaussian images in the model's input space (a data-free start left unchanged);
* ``informative``: a noisy copy of every training image (Gaussian noise of the image's own RMS, so correlation about
  0.7), the rest of the m candidates pure noise.

Writes benchmarks/results/membership_nulls.json: per set-up, method and candidate kind, the mean AUC over the sets,
its standard error and range, and the mean TPR at 1% FPR. Needs RECONBENCH_DATA for MNIST and CIFAR-10.

      python benchmarks/membership_nulls.py [--sets 100] [--only digits]
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from reconbench import plugins
from reconbench.attack.candidates import candidate_labels
from reconbench.config import build_config
from reconbench.data import Problem, ProblemSpec
from reconbench.evaluation import null
from reconbench.evaluation.context import build_context
from reconbench.evaluation.protocol import resolve_protocol
from reconbench.targets.problems import build_problem

C = "npz:cifar10/cifar10_train_subset.npz"
SETUPS: dict[str, Callable[[int], ProblemSpec]] = {
    "digits 10-class n=10": lambda s: ProblemSpec(dataset="digits", task="multiclass", n_per_class=1, order_seed=s),
    "digits odd/even n=20": lambda s: ProblemSpec(dataset="digits", task="binary", n_per_class=10, order_seed=s),
    "MNIST odd/even n=10": lambda s: ProblemSpec(dataset="mnist_test", task="binary", n_per_class=5, order_seed=s),
    "MNIST 10-class n=20": lambda s: ProblemSpec(dataset="mnist_test", task="multiclass", n_per_class=2,
                                                 order_seed=s),
    "CIFAR vehicles/animals n=10": lambda s: ProblemSpec(dataset=C, task="binary", n_per_class=5, order_seed=s),
    "CIFAR 10-class n=20": lambda s: ProblemSpec(dataset=C, task="multiclass", n_per_class=2, order_seed=s),
}
METHODS = ("offset_removed", "train_centred")
KINDS = ("held_out", "noise", "informative")


def candidates(problem: Problem, kind: str, m: int, seed: int) -> tuple[torch.Tensor, np.ndarray]:
    labels = candidate_labels(problem.task, problem.num_classes, m).numpy()
    if kind == "held_out":
        return null.draw(problem, labels, m, seed, null.REPORT_STREAM, 0), labels
    gen = torch.Generator().manual_seed(seed)
    noise = torch.randn((m, *problem.image_shape), generator=gen, dtype=torch.float64)
    if kind == "informative":
        x = problem.x_train()
        rms = x.flatten(1).pow(2).mean(1).sqrt().reshape(-1, 1, 1, 1)
        noise[:problem.n] = x + rms * noise[:problem.n]
    return noise, labels


def membership(problem: Problem, cand: torch.Tensor, labels: np.ndarray, method: str) -> dict[str, float]:
    """The membership_test metric on these candidates (the plugin's own computation, no other metric)."""
    resolved = resolve_protocol({"metrics": ["corr"], "primary_metric": "corr", "calibration_draws": 0,
                                 "null_draws": 0, "figures": False}, "mlp")
    ev = build_context(problem, cand, resolved, labels=torch.as_tensor(labels))
    metric = plugins.get("metrics", "membership_test")
    out = metric.compute(ev, build_config(metric.config_cls, {"method": method}))
    return {k: float(out["summary"][k]) for k in ("membership_auc", "membership_tpr_at_fpr")}


def summarise(values: list[float]) -> dict[str, float]:
    v = np.asarray(values)
    return {"mean": round(float(v.mean()), 4), "se": round(float(v.std(ddof=1) / np.sqrt(len(v))), 4),
            "min": round(float(v.min()), 3), "max": round(float(v.max()), 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sets", type=int, default=100, help="random member sets per set-up")
    ap.add_argument("--only", default="", help="run only set-ups whose name contains this")
    args = ap.parse_args()
    out = Path(__file__).parent / "results" / "membership_nulls.json"
    rows = json.loads(out.read_text())["rows"] if out.exists() and args.only else []
    for name, make in SETUPS.items():
        if args.only not in name:
            continue
        t = time.time()
        auc: dict[str, list[float]] = {f"{m}/{k}": [] for m in METHODS for k in KINDS}
        tpr: dict[str, list[float]] = {f"{m}/{k}": [] for m in METHODS for k in KINDS}
        for s in range(args.sets):
            problem = build_problem(make(s))
            m = 12 * problem.n
            for kind in KINDS:
                cand, labels = candidates(problem, kind, m, s)
                for method in METHODS:
                    r = membership(problem, cand, labels, method)
                    auc[f"{method}/{kind}"].append(r["membership_auc"])
                    tpr[f"{method}/{kind}"].append(r["membership_tpr_at_fpr"])
        row = {"setup": name, "n": problem.n, "m": 12 * problem.n, "sets": args.sets,
               "auc": {k: summarise(v) for k, v in auc.items()},
               "tpr_at_1pct_fpr_mean": {k: round(float(np.mean(v)), 4) for k, v in tpr.items()},
               "seconds": round(time.time() - t, 1)}
        print(json.dumps(row), flush=True)
        rows = [r for r in rows if r["setup"] != name] + [row]
    order = list(SETUPS)
    rows.sort(key=lambda r: order.index(r["setup"]))
    out.write_text(json.dumps({"candidates_per_member": 12, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
