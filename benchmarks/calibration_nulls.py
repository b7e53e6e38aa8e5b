"""The held-out null under the calibrated headline, per data set (docs/calibration.md).

For each set-up: the ground-truth candidates (every training image, cycled to m) are evaluated with the default
protocol; the evaluation's own null draws say what random held-out images score, under the calibrated headline,
the papers' count and the membership test. The problems are the file-ordered ones these numbers were first
measured on (``order="file"``), and the membership columns use the computation they were recorded with
(``membership_test.method=train_centred``); docs/calibration.md's membership numbers come from
benchmarks/membership_nulls.py. Writes benchmarks/results/calibration_nulls.json. Needs RECONBENCH_DATA for MNIST and
CIFAR-10 (digits is embedded).

      python benchmarks/calibration_nulls.py
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from reconbench.data import ProblemSpec
from reconbench.evaluation import evaluate
from reconbench.targets.problems import build_problem

C = "npz:cifar10/cifar10_train_subset.npz"


def _file(**kw: object) -> ProblemSpec:
    return ProblemSpec(order="file", **kw)  # type: ignore[arg-type]


SETUPS = {
    "MNIST odd/even n=20, m=480": (_file(dataset="mnist_test", task="binary", n_per_class=10), 480, "mlp"),
    "MNIST 10-class n=50, m=600": (_file(dataset="mnist_test", task="multiclass", n_per_class=5), 600, "mlp"),
    "digits 10-class n=20, m=240": (_file(dataset="digits", task="multiclass", n_per_class=2), 240, "mlp"),
    "digits 10-class n=10, m=120 (README default)": (_file(dataset="digits", task="multiclass", n_per_class=1), 120, "mlp"),
    "CIFAR vehicles/animals n=20, m=480": (_file(dataset=C, task="binary", n_per_class=10), 480, "mlp"),
    "CIFAR vehicles/animals n=10, m=40": (_file(dataset=C, task="binary", n_per_class=5), 40, "mlp"),
    "MNIST odd/even n=10, m=40": (_file(dataset="mnist_test", task="binary", n_per_class=5), 40, "mlp"),
    "MNIST 10-class n=20, m=80": (_file(dataset="mnist_test", task="multiclass", n_per_class=2), 80, "mlp"),
    "CIFAR 10-class n=20, m=80": (_file(dataset=C, task="multiclass", n_per_class=2), 80, "mlp"),
}


def main() -> None:
    rows: list[dict] = []
    for name, (spec, m, fam) in SETUPS.items():
        p = build_problem(spec)
        t = time.time()
        gt = p.x_train()[torch.as_tensor(np.arange(m) % p.n)]
        gl = torch.as_tensor(p.train_labels[np.arange(m) % p.n])
        ev = evaluate(p, gt, family=fam, labels=gl,
                      protocol={"figures": False, "membership_test.method": "train_centred"})
        sec = time.time() - t
        s, nl = ev["summary"], ev["null"]
        row = {"setup": name, "n": p.n, "m": m, "threshold_corr": round(s["calibrated_threshold"], 4),
               "gt_calibrated": s["reconstructed_calibrated"],
               "null_calibrated_per_draw": [int(d["reconstructed_calibrated"]) for d in nl["per_draw"]],
               "null_papers_per_draw": [int(d["reconstructed"]) for d in nl["per_draw"]],
               "null_corr09_per_draw": [int(d["reconstructed_corr"]) for d in nl["per_draw"]],
               "null_membership_precision": [None if d.get("membership_precision") is None
                                             else round(d["membership_precision"], 2) for d in nl["per_draw"]],
               "gt_membership_auc": s["membership_auc"], "gt_membership_tpr_at_fpr": s["membership_tpr_at_fpr"],
               "null_membership_auc": [round(d["membership_auc"], 3) for d in nl["per_draw"]],
               "null_membership_tpr_at_fpr": [round(d["membership_tpr_at_fpr"], 3) for d in nl["per_draw"]],
               "pool": ev["protocol"]["calibration"]["pool_size"], "seconds": round(sec, 1)}
        print(json.dumps(row), flush=True)
        rows.append(row)
    out = Path(__file__).parent / "results" / "calibration_nulls.json"
    out.write_text(json.dumps({"protocol": "default (calibration_draws 19, null_draws 5, score corr)",
                               "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    # no options: the parser answers --help (with what the script measures and writes) instead of running it
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    torch.set_num_threads(1)
    main()
