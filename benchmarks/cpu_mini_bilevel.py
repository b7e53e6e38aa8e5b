"""cpu-mini suite for issue 5: initialisation regimes and Runkel et al.'s bilevel attack.

Reproduces, at a 2-core scale, the claims of Runkel et al. ("Training Data Reconstruction: Privacy due to
Uncertainty?"; notes in ../shared/docs/bilevel-attack-spec.md):

* targets: an affine classifier and a one-hidden-layer ReLU network with biases (width scaled down from 6144 to
  WIDTH) on CIFAR-10 vehicles vs animals, N_PER_CLASS images per class, full-batch GD with weight decay WD;
* ``runkel_bilevel`` on both under the ``uniform``, ``ground_truth`` (oracle) and ``partition`` initialisations;
* ``haim_binary_kkt`` under the same three regimes on the papers' homogeneous MLP (when that attack is installed);
* the 5 x 5 mixture grid (l1, l2) for ``runkel_bilevel`` on the affine target, rendered as three heatmaps of the
  average distance from each reconstruction to its nearest training, partition and random image (paper Figs. 10-12).

Every attack run goes through :func:`reconbench.attack.pipeline.run_attack` (one result folder per cell, resumable);
the distances below are computed here from the saved candidates. Results: ``benchmarks/results/bilevel/``.

    RECONBENCH_DATA=../shared/data OMP_NUM_THREADS=1 nice -n 10 \
        .venv/bin/python benchmarks/cpu_mini_bilevel.py [--stage targets|bilevel|released|haim|grid|report|all]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch

from reconbench import plugins
from reconbench.attack.bilevel import LowerProblem
from reconbench.attack.pipeline import RunSpec, run_attack
from reconbench.provenance import portable_path, provenance, write_json
from reconbench.targets.cache import get_or_train
from reconbench.targets.cards import ModelCard
from reconbench.targets.losses import get_loss
from reconbench.targets.problems import Problem, ProblemSpec
from reconbench.targets.training import TargetRecipe, TrainSpec

ROOT = Path(__file__).resolve().parent
OUT = Path(os.environ.get("BILEVEL_OUT", ROOT / "results" / "bilevel"))
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
# Haim et al.'s own model for the side-by-side comparison (issue 5): the papers' homogeneous two-hidden-layer MLP
# 3072-1000-1000-1 on the same problem, trained as in the KKT cpu-mini runs (no weight decay; 30k full-batch GD
# steps at lr 0.01 with the inverse-loss step size; float32); added in session 2, before any haim run on it
PAPERS_MLP = TargetRecipe(problem=PROBLEM, family="mlp", model={"widths": [1000, 1000]},
                          train=TrainSpec(loss="bce", lr=0.01, steps=30_000, schedule="inverse_loss",
                                          dtype="float32", eval_every=2000))
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


def stage_targets(only: str | None = None) -> dict[str, ModelCard]:
    cards = {}
    summary = json.loads((OUT / "targets.json").read_text()) if (OUT / "targets.json").exists() else {}
    for name, recipe in {**RECIPES, "papers_mlp": PAPERS_MLP}.items():
        if only and name != only:
            continue
        t0 = time.perf_counter()
        card = get_or_train(recipe, data_root=DATA)
        problem = card.problem(DATA)
        metrics = {k: v for k, v in card.data["metrics"].items() if k not in ("margins",)}
        summary[name] = {"recipe": recipe.to_dict(), "card": portable_path(card.path), "metrics": metrics,
                         "stationarity": stationarity(card, problem) if name in RECIPES else None,
                         "seconds": time.perf_counter() - t0}
        cards[name] = card
        print(name, json.dumps(summary[name]["stationarity"]), "train_error", metrics.get("train_error"),
              "test_error", metrics.get("test_error"))
    write(OUT / "targets.json", summary)
    return cards


# -- attack settings (fixed before the runs; only the attack's own loss is ever used to choose) ---------------
BILEVEL = {
    # the paper's cold start: every inner solve from the same theta0 ~ U(0, 1); the affine lower problem is
    # strongly convex (weight decay), so theta(x) does not depend on theta0 anyway
    "affine": {"outer_steps": 200, "theta0": "uniform", "warm_start": False},
    # one cold solve from U(0, 1) takes minutes at this width on this machine, so later solves start warm from
    # the previous outer iterate (the spec's recorded cheaper variant)
    # session 2: 9 outer steps and a 10-minute budget per cell. The uniform cell of session 1 ran 30 steps in
    # 594 s; the ground-truth cell then reached step 9 in 4.5 min three times (the same trajectory) and spent over
    # 9 minutes (twice) on the line search of its tenth step without finishing, which this session cannot afford
    "mlp1": {"outer_steps": 9, "theta0": "uniform", "warm_start": True, "inner_max_iter": 5000,
             "cg_max_iter": 100, "softplus_beta": 20.0, "max_seconds": 600.0},
}
# a variant decided after the uniform-start run above: the inner solves start at the released weights theta*
# (public, so within the threat model), which keeps retraining in theta*'s basin
RELEASED = {"mlp1": {**BILEVEL["mlp1"], "theta0": "released"}}
HAIM = {"steps": 3000}          # haim_binary_kkt defaults otherwise; blind selection over SEARCH_RUNS runs
HAIM_SEARCH_RUNS = 4   # session 2: 4 runs (was 6) to fit the session; every run is 3000 steps
GRID_TARGET, GRID_STEPS = "affine", 100
EXACT_L2 = 1.0                  # "exact" recovery: a candidate within L2 1.0 of a training image (RMS 0.018 / pixel)


# -- distances -----------------------------------------------------------------------------------------------
def _flat(x: torch.Tensor) -> torch.Tensor:
    return x.detach().to(torch.float64).flatten(1)


def _nearest(a: torch.Tensor, b: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    d = torch.cdist(_flat(a), _flat(b))
    v, i = d.min(dim=1)
    return v.numpy(), i.numpy()


def reference_sets(problem: Problem, labels: torch.Tensor, seed: int) -> dict[str, torch.Tensor]:
    """Pixel-space reference images: training, partition (the decoys the partition init uses), held-out decoys
    (the rest of the pool, never an init), and random (the uniform images the uniform/mixture inits draw)."""
    from reconbench_plugins.inits import partition_images, uniform_pixels

    mean = problem.mean_tensor()[None]
    part = partition_images(problem, labels) + mean
    pool = torch.as_tensor(problem.decoy_images)
    used = {int(i) for i in _nearest(part, pool)[1]}
    held = pool[[i for i in range(len(pool)) if i not in used]]
    gen = torch.Generator().manual_seed(seed * 100_003)  # the pipeline's generator for run 0
    rnd = uniform_pixels(problem, len(labels), 0.0, 1.0, gen) + mean
    return {"train": torch.as_tensor(problem.train_images), "partition": part, "heldout_decoys": held,
            "random": rnd}


def distances(problem: Problem, cand: torch.Tensor, x0: torch.Tensor, refs: dict[str, torch.Tensor]
              ) -> dict[str, Any]:
    """L2 distances in pixel space ([0, 1] images, 3072 values): averages over candidates, and counts."""
    mean = problem.mean_tensor()[None]
    px, p0 = cand.to(torch.float64) + mean, x0.to(torch.float64) + mean
    d = {name: _nearest(px, ref)[0] for name, ref in refs.items()}
    d_init = (_flat(px) - _flat(p0)).norm(dim=1).numpy()
    train_to_cand, _ = _nearest(refs["train"], px)           # per training image: its nearest candidate
    _, nearest_train = _nearest(px, refs["train"])
    start = {name: _nearest(p0, ref)[0] for name, ref in refs.items()}
    return {
        "mean_d_train": float(d["train"].mean()), "mean_d_partition": float(d["partition"].mean()),
        "mean_d_random": float(d["random"].mean()), "mean_d_heldout_decoys": float(d["heldout_decoys"].mean()),
        "mean_d_own_start": float(d_init.mean()),
        "start_mean_d_train": float(start["train"].mean()), "start_mean_d_partition": float(start["partition"].mean()),
        "start_mean_d_random": float(start["random"].mean()),
        "closer_to_train_than_heldout_decoys": int((d["train"] < d["heldout_decoys"]).sum()),
        "closer_to_own_start_than_any_train": int((d_init < d["train"]).sum()),
        "train_images_within_exact_l2": int((train_to_cand < EXACT_L2).sum()),
        "mean_train_to_nearest_candidate": float(train_to_cand.mean()),
        "distinct_nearest_train": int(len(set(nearest_train.tolist()))),
        "n_candidates": int(len(px)), "n_train": int(problem.n), "exact_l2_threshold": EXACT_L2,
    }


def _num(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.3e}"


# -- one cell ------------------------------------------------------------------------------------------------

def run_cell(card: ModelCard, problem: Problem, attack: str, init: str, init_config: dict[str, Any],
             attack_config: dict[str, Any], out: Path, search_runs: int = 1) -> dict[str, Any]:
    from safetensors.torch import load_file

    spec = RunSpec(attack=attack, attack_config=attack_config, init=init, init_config=init_config, seed=SEED,
                   candidates=problem.n, search_runs=search_runs)
    t0 = time.perf_counter()
    result = run_attack(card, spec, out, data_root=DATA, problem=problem, quiet=False)  # progress bars on stderr
    blind = result["selection"]["blind"]["run"]
    blind = 0 if blind is None else blind
    tensors = load_file(str(out / "runs" / f"run-{blind:03d}.safetensors"))
    record = json.loads((out / "runs" / f"run-{blind:03d}.json").read_text())
    labels = tensors["labels"]
    refs = reference_sets(problem, labels, SEED)
    trace = record.get("trace", [])
    ev = result.get("evaluation", {}).get("summary", {})
    cell = {
        "attack": attack, "init": init, "init_config": init_config, "init_is_oracle": result["init_is_oracle"],
        "attack_config": record["config"], "blind_run": blind, "search_runs": search_runs,
        "final_loss": record["final_loss"], "stopped": record["stopped"], "message": record["message"],
        "steps": record["steps"], "seconds": record["seconds"], "wall_seconds_cell": time.perf_counter() - t0,
        "first_loss": trace[0]["loss"] if trace else None,
        "distances": distances(problem, tensors["candidates"], tensors["x0"], refs),
        "evaluation": {k: v for k, v in ev.items() if not isinstance(v, (list, dict))},
        "result": portable_path(out / "result.json"),
    }
    if attack == "runkel_bilevel" and trace:
        cell["upper_loss_trace"] = [r["upper_loss"] for r in trace]
        secs = [r["seconds"] for r in trace if "seconds" in r]
        cell["seconds_per_outer_iteration"] = {"mean": float(np.mean(secs)), "median": float(np.median(secs)),
                                               "first": secs[0] if secs else None} if secs else None
    write(out / "cell.json", cell)
    d = cell["distances"]
    print(f"{attack:16s} {init:13s} {json.dumps(init_config):28s} loss {_num(cell['first_loss'])} -> "
          f"{cell['final_loss']:.3e}  d_train {d['mean_d_train']:.2f} d_part {d['mean_d_partition']:.2f} "
          f"d_rand {d['mean_d_random']:.2f} d_start {d['mean_d_own_start']:.2f} member "
          f"{d['closer_to_train_than_heldout_decoys']}/{d['n_candidates']} exact "
          f"{d['train_images_within_exact_l2']}/{d['n_train']} ({cell['seconds']:.0f}s)", flush=True)
    return cell


def cards_and_problems(only: str | None = None, recipes: dict[str, TargetRecipe] | None = None
                       ) -> dict[str, tuple[ModelCard, Problem]]:
    out = {}
    for name, recipe in (RECIPES if recipes is None else recipes).items():
        if only and name != only:
            continue
        card = get_or_train(recipe, data_root=DATA, quiet=True)
        out[name] = (card, card.problem(DATA))
    return out


def stage_bilevel(only: str | None, regimes: tuple[str, ...] = REGIMES) -> None:
    for name, (card, problem) in cards_and_problems(only).items():
        for init in regimes:
            run_cell(card, problem, "runkel_bilevel", init, {}, BILEVEL[name],
                     OUT / "runs" / name / "runkel_bilevel" / init)


def stage_released(only: str | None, regimes: tuple[str, ...] = REGIMES) -> None:
    for name, (card, problem) in cards_and_problems(only or "mlp1").items():
        for init in regimes:
            run_cell(card, problem, "runkel_bilevel", init, {}, RELEASED[name],
                     OUT / "runs" / name / "runkel_bilevel_theta0_released" / init)


def stage_haim(only: str | None, regimes: tuple[str, ...] = REGIMES) -> None:
    if "haim_binary_kkt" not in plugins.names("attacks"):
        print("haim_binary_kkt is not installed (merge the kkt branch); skipping")
        return
    targets = {"papers_mlp": PAPERS_MLP} if only in (None, "papers_mlp") else RECIPES
    for name, (card, problem) in cards_and_problems(None if only == "papers_mlp" else only, targets).items():
        for init in regimes:
            run_cell(card, problem, "haim_binary_kkt", init, {}, HAIM,
                     OUT / "runs" / name / "haim_binary_kkt" / init, search_runs=HAIM_SEARCH_RUNS)


def stage_grid(attack: str = "runkel_bilevel") -> None:
    from reconbench_plugins.inits import mixture_grid

    card, problem = cards_and_problems(GRID_TARGET)[GRID_TARGET]
    config = {**BILEVEL[GRID_TARGET], "outer_steps": GRID_STEPS} if attack == "runkel_bilevel" else HAIM
    for cfg in mixture_grid():
        run_cell(card, problem, attack, "mixture", cfg, config,
                 OUT / "grid" / GRID_TARGET / attack / f"l1_{cfg['l1']:.2f}_l2_{cfg['l2']:.2f}")


# -- report --------------------------------------------------------------------------------------------------
def heatmap(cells: list[dict[str, Any]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    values = sorted({c["init_config"]["l1"] for c in cells})
    idx = {v: i for i, v in enumerate(values)}
    panels = [("mean_d_train", "training set"), ("mean_d_partition", "partition set"), ("mean_d_random", "random set")]
    fig, axes = plt.subplots(2, 3, figsize=(12, 7.5), constrained_layout=True)
    for row, prefix in enumerate(("", "start_")):
        for col, (key, label) in enumerate(panels):
            grid = np.full((len(values), len(values)), np.nan)
            for c in cells:
                grid[idx[c["init_config"]["l2"]], idx[c["init_config"]["l1"]]] = c["distances"][prefix + key]
            ax = axes[row, col]
            im = ax.imshow(grid, origin="lower", cmap="viridis")
            for i in range(len(values)):
                for j in range(len(values)):
                    ax.text(j, i, f"{grid[i, j]:.1f}", ha="center", va="center", color="w", fontsize=8)
            ax.set_xticks(range(len(values)), [f"{v:g}" for v in values])
            ax.set_yticks(range(len(values)), [f"{v:g}" for v in values])
            ax.set_xlabel("lambda1 (training vs partition)")
            ax.set_ylabel("lambda2 (image blend vs noise)")
            ax.set_title(f"{'reconstructions' if not prefix else 'starting points'}: to {label}", fontsize=10)
            fig.colorbar(im, ax=ax, shrink=0.8)
    fig.suptitle(title)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def stage_report() -> dict[str, Any]:
    report: dict[str, Any] = {"setup": {"problem": asdict(PROBLEM), "width": WIDTH, "weight_decay": WD,
                                        "bilevel": BILEVEL, "bilevel_released": RELEASED,
                                        "haim": HAIM, "haim_search_runs": HAIM_SEARCH_RUNS,
                                        "grid": {"target": GRID_TARGET, "outer_steps": GRID_STEPS},
                                        "exact_l2": EXACT_L2, "seed": SEED},
                              "provenance": provenance({"script": "cpu_mini_bilevel"}, "cpu", "float64", SEED)}
    if (OUT / "targets.json").exists():
        report["targets"] = json.loads((OUT / "targets.json").read_text())
    report["cells"] = [json.loads(p.read_text()) for p in sorted((OUT / "runs").glob("*/*/*/cell.json"))]
    grid_cells: dict[str, list[dict[str, Any]]] = {}
    for p in sorted((OUT / "grid").glob("*/*/*/cell.json")):
        c = json.loads(p.read_text())
        grid_cells.setdefault(f"{p.parts[-4]}/{c['attack']}", []).append(c)
    report["grid"] = {}
    for key, cells in grid_cells.items():
        png = OUT / f"mixture_heatmap_{key.replace('/', '_')}.png"
        heatmap(cells, png, f"{key}: mean L2 (pixel space) from each candidate to its nearest image")
        report["grid"][key] = {"heatmap": png.name,
                               "cells": [{"l1": c["init_config"]["l1"], "l2": c["init_config"]["l2"],
                                          "oracle": c["init_is_oracle"], "final_loss": c["final_loss"],
                                          **c["distances"]} for c in cells]}
    write(OUT / "summary.json", report)
    for c in report["cells"]:
        d = c["distances"]
        print(f"{c['result'].split('/runs/')[-1].replace('/result.json', ''):40s} loss {_num(c['first_loss'])} -> "
              f"{c['final_loss']:.3e} d_train {d['mean_d_train']:.2f} d_start {d['mean_d_own_start']:.2f} "
              f"member {d['closer_to_train_than_heldout_decoys']}/{d['n_candidates']} "
              f"stay {d['closer_to_own_start_than_any_train']} exact {d['train_images_within_exact_l2']}")
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--stage", default="all", choices=["targets", "bilevel", "released", "haim", "grid", "report", "all"])
    parser.add_argument("--only", default=None, choices=[None, *RECIPES, "papers_mlp"],
                        help="one target only (haim stage: papers_mlp by default, or affine / mlp1)")
    parser.add_argument("--grid-attack", default="runkel_bilevel")
    parser.add_argument("--regimes", default=",".join(REGIMES), help="comma-separated init regimes (default: all three)")
    args = parser.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    regimes = tuple(r for r in args.regimes.split(",") if r)
    unknown = set(regimes) - set(REGIMES)
    if unknown:
        parser.error(f"unknown regime(s) {sorted(unknown)}; choose from {', '.join(REGIMES)}")
    if args.stage in ("targets", "all"):
        stage_targets(args.only)
    if args.stage in ("bilevel", "all"):
        stage_bilevel(args.only, regimes)
    if args.stage in ("released", "all"):
        stage_released(args.only, regimes)
    if args.stage in ("grid", "all"):
        stage_grid(args.grid_attack)
    if args.stage in ("haim", "all"):
        stage_haim(args.only, regimes)
    if args.stage in ("report", "all"):
        stage_report()


if __name__ == "__main__":
    main()
