"""cpu-mini suite for issue 5: initialisation regimes and Runkel et al.'s bilevel attack.

Reproduces, at a 2-core scale, the claims of Runkel et al. ("Training Data Reconstruction: Privacy due to
Uncertainty?"; notes in ../shared/docs/bilevel-attack-spec.md):

* targets: an affine classifier and a one-hidden-layer ReLU network with biases (width scaled down from 6144 to
  WIDTH) on CIFAR-10 vehicles vs animals, N_PER_CLASS images per class, full-batch GD with weight decay WD;
* ``runkel_bilevel`` on both under the ``uniform``, ``ground_truth`` (oracle) and ``partition`` initialisations;
* ``haim_binary_kkt`` under the same three regimes on the papers' homogeneous MLP (when that attack is installed);
* the 5 x 5 mixture grid (l1, l2) for ``runkel_bilevel`` on the affine target, rendered as three heatmaps of the
  average distance from each reconstruction to its nearest training, partition and random image (paper Figs. 10-12).

Every attack run goes through :func:`reconbench.pipeline.run_attack` (one result folder per cell, resumable);
the distances below are computed here from the saved candidates. Results: ``benchmarks/results/bilevel/``.

    RECONBENCH_DATA=../shared/data OMP_NUM_THREADS=1 nice -n 10 \
        .venv/bin/python benchmarks/cpu_mini_bilevel.py [--stage targets|bilevel|haim|grid|report|all]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch

from reconbench import plugins
from reconbench.bilevel import LowerProblem
from reconbench.cards import ModelCard
from reconbench.losses import get_loss
from reconbench.pipeline import RunSpec, run_attack
from reconbench.problems import Problem, ProblemSpec
from reconbench.provenance import provenance, write_json
from reconbench.targets import get_or_train
from reconbench.training import TargetRecipe, TrainSpec

ROOT = Path(__file__).resolve().parent
OUT = ROOT / "results" / "bilevel"
DATA = os.environ.get("RECONBENCH_DATA") or str(ROOT.parent.parent / "shared" / "data")

# -- the experiment, fixed before any attack was run -----------------------------------------------------------
N_PER_CLASS = 10
WIDTH = 256            # the paper's hidden width is 6144; scaled down for a shared 2-core machine
WD = 1e-2              # weight decay: makes the lower problem well posed (BCE on separable data has no minimiser)
PROBLEM = ProblemSpec(dataset="npz:cifar10/cifar10_train_subset.npz", task="binary", n_per_class=N_PER_CLASS,
                      n_test_per_class=100, n_decoy_per_class=2 * N_PER_CLASS)
RECIPES = {
    "affine": TargetRecipe(problem=PROBLEM, family="affine",
                           train=TrainSpec(loss="bce", lr=0.1, steps=20_000, weight_decay=WD, eval_every=2000)),
    "mlp1": TargetRecipe(problem=PROBLEM, family="mlp_bias", model={"widths": [WIDTH]},
                         train=TrainSpec(loss="bce", lr=0.1, steps=20_000, weight_decay=WD, eval_every=2000)),
}
REGIMES = ("uniform", "ground_truth", "partition")
SEED = 0


def write(path: Path, obj: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, obj)


# -- targets --------------------------------------------------------------------------------------------------
def stationarity(card: ModelCard, problem: Problem) -> dict[str, float]:
    """max |grad_theta E(x_train; theta*)| of the released ReLU model: how far training is from a stationary point."""
    model = card.load_model(torch.float64)
    lower = LowerProblem(model, get_loss("bce", "binary")[1],
                         torch.as_tensor(problem.train_labels, dtype=torch.float64), weight_decay=WD)
    theta = lower.layout.flatten(model)
    g = lower.grad_theta(theta, problem.x_train(torch.float64))
    return {"grad_inf_at_train": float(g.abs().max()), "grad_norm_at_train": float(g.norm()),
            "theta_norm": float(theta.norm()), "param_count": int(theta.numel())}


def stage_targets() -> dict[str, ModelCard]:
    cards, summary = {}, {}
    for name, recipe in RECIPES.items():
        t0 = time.perf_counter()
        card = get_or_train(recipe, data_root=DATA)
        problem = card.problem(DATA)
        metrics = {k: v for k, v in card.data["metrics"].items() if k not in ("margins",)}
        summary[name] = {"recipe": recipe.to_dict(), "card": str(card.path), "metrics": metrics,
                         "stationarity": stationarity(card, problem), "seconds": time.perf_counter() - t0}
        cards[name] = card
        print(name, json.dumps(summary[name]["stationarity"]), "train_error", metrics.get("train_error"),
              "test_error", metrics.get("test_error"))
    write(OUT / "targets.json", summary)
    return cards


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--stage", default="all", choices=["targets", "bilevel", "haim", "grid", "report", "all"])
    args = parser.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    if args.stage in ("targets", "all"):
        stage_targets()


if __name__ == "__main__":
    main()
