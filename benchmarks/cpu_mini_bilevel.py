"""The analysis of the bilevel-cpu-mini study that a suite cannot express (docs/method/bilevel.md).

The study itself (targets, attacks, init regimes, cells) is defined once, in reconbench/bench/suites/bilevel-cpu-mini.toml,
and run by the suite runner; every cell is scored there by the standard evaluation (membership against decoys,
init copies, collapse, SSIM). This script reads a finished results folder and adds, per cell:

* pixel-space L2 distances from each candidate of the blind-selected run to its nearest training image, partition
  image (the decoys the partition init uses), held-out decoy (the rest of the pool, never an init) and random image
  (the uniform images the uniform/mixture inits draw), before and after the attack, and counts of exact recoveries
  (a training image within L2 1.0, RMS 0.018 per pixel); Runkel et al. report these averages, not SSIM;
* the 5 x 5 mixture grid as heatmaps of those averages (the paper's Figs. 10-12);
* per weight-decay target, how far the released model is from a stationary point of its training objective.

    RECONBENCH_DATA=../shared/data OMP_NUM_THREADS=1 reconbench bench bilevel-cpu-mini --out runs/bench/bilevel-cpu-mini
    RECONBENCH_DATA=../shared/data python benchmarks/cpu_mini_bilevel.py runs/bench/bilevel-cpu-mini [--out DIR]

Output (default ``RESULTS/analysis``): ``summary.json`` (setup, targets, one entry per cell, grid) and
``mixture_heatmap_<target>_<attack>.png``.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from reconbench.attack.bilevel import LowerProblem
from reconbench.bench.runner import STATUS_OK, load_cells
from reconbench.bench.suite import Suite, load_suite
from reconbench.data import Problem
from reconbench.provenance import portable_path, provenance, write_json
from reconbench.targets.cache import get_or_train
from reconbench.targets.cards import ModelCard
from reconbench.targets.losses import get_loss

EXACT_L2 = 1.0   # "exact" recovery: a candidate within L2 1.0 of a training image (RMS 0.018 per pixel on CIFAR-10)


# -- targets --------------------------------------------------------------------------------------------------
def stationarity(card: ModelCard, problem: Problem, weight_decay: float) -> dict[str, float]:
    """max |grad_theta E(x_train; theta*)| of the released ReLU model: how far training is from a stationary point."""
    model = card.load_model(torch.float64)
    lower = LowerProblem(model, get_loss("bce", "binary")[1],
                         torch.as_tensor(problem.train_labels, dtype=torch.float64), weight_decay=weight_decay)
    theta = lower.layout.flatten(model)
    g = lower.grad_theta(theta, problem.x_train(torch.float64))
    return {"grad_inf_at_train": float(g.abs().max()), "grad_norm_at_train": float(g.norm()),
            "theta_norm": float(theta.norm()), "param_count": int(theta.numel())}


def load_targets(suite: Suite, data_root: str | None) -> dict[str, tuple[ModelCard, Problem, dict[str, Any]]]:
    """Every target of the suite (reused from the target cache the runner filled), with its summary."""
    out = {}
    for name, entry in suite.targets.items():
        card = get_or_train(entry.recipe, data_root=data_root, quiet=True)
        problem = card.problem(data_root)
        wd = entry.recipe.train.weight_decay
        info = {"recipe": entry.recipe.to_dict(), "recipe_key": entry.recipe.key(), "card": portable_path(card.path),
                "metrics": {k: v for k, v in card.data["metrics"].items() if k != "margins"},
                "stationarity": stationarity(card, problem, wd) if wd > 0 and problem.task == "binary" else None}
        out[name] = (card, problem, info)
    return out


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
    gen = torch.Generator().manual_seed(seed * 100_003)  # the pipeline's generator for search run 0
    rnd = uniform_pixels(problem, len(labels), 0.0, 1.0, gen) + mean
    return {"train": torch.as_tensor(problem.train_images), "partition": part, "heldout_decoys": held,
            "random": rnd}


def distances(problem: Problem, cand: torch.Tensor, x0: torch.Tensor, refs: dict[str, torch.Tensor]
              ) -> dict[str, Any]:
    """L2 distances in pixel space ([0, 1] images): averages over candidates, and counts."""
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


# -- one cell ------------------------------------------------------------------------------------------------
def analyse_cell(rec: dict[str, Any], results: Path, problem: Problem) -> dict[str, Any]:
    """The distances of the blind-selected run's candidates, plus the cell's trace and standard evaluation."""
    from safetensors.torch import load_file

    work = results / rec["result_dir"]
    blind = rec["selections"]["blind"]["run"]
    blind = 0 if blind is None else blind
    tensors = load_file(str(work / "runs" / f"run-{blind:03d}.safetensors"))
    run_path = work / "runs" / f"run-{blind:03d}.json"  # the run's record with its trace
    run = json.loads(run_path.read_text()) if run_path.exists() else next(r for r in rec["runs"] if r["run"] == blind)
    trace = run.get("trace", [])
    cell: dict[str, Any] = {
        "cell_id": rec["cell_id"], "target": rec["target"]["name"], "attack": rec["attack"]["name"],
        "attack_label": rec["attack"]["label"], "init": rec["init"]["regime"], "init_config": rec["init"]["config"],
        "init_is_oracle": rec["init"]["is_oracle"], "attack_config": run["config"], "blind_run": blind,
        "search_runs": rec["attack"]["search_runs"], "final_loss": run["final_loss"], "stopped": run.get("stopped"),
        "message": run.get("message"), "steps": run.get("steps"), "seconds": run.get("seconds"),
        "first_loss": trace[0]["loss"] if trace else None,
        "distances": distances(problem, tensors["candidates"], tensors["x0"],
                               reference_sets(problem, tensors["labels"], rec["seed"])),
        "evaluation": {k: v for k, v in rec["evaluation"].get("summary", {}).items()
                       if not isinstance(v, (list, dict))},
    }
    if rec["attack"]["name"] == "runkel_bilevel" and trace:
        cell["upper_loss_trace"] = [r["upper_loss"] for r in trace]
        secs = [r["seconds"] for r in trace if "seconds" in r]
        cell["seconds_per_outer_iteration"] = ({"mean": float(np.mean(secs)), "median": float(np.median(secs)),
                                                "first": secs[0]} if secs else None)
    return cell


# -- report --------------------------------------------------------------------------------------------------
def heatmap(cells: list[dict[str, Any]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    values = sorted({c["init_config"]["l1"] for c in cells} | {c["init_config"]["l2"] for c in cells})
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


def _num(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.3e}"


def analyse(results: Path, out: Path, data_root: str | None) -> dict[str, Any]:
    suite = load_suite(results / "suite.toml" if (results / "suite.toml").exists() else "bilevel-cpu-mini")
    targets = load_targets(suite, data_root)
    records = [r for r in load_cells(results).values() if r["status"] == STATUS_OK]
    if not records:
        raise SystemExit(f"{results} holds no finished cell; run `reconbench bench {suite.name} --out {results}` first")
    cells = [analyse_cell(r, results, targets[r["target"]["name"]][1]) for r in records]
    report: dict[str, Any] = {
        "setup": {"suite": suite.name, "suite_sha256": suite.text_sha256, "results": portable_path(results),
                  "exact_l2": EXACT_L2},
        "provenance": provenance({"script": "cpu_mini_bilevel", "suite": suite.name}, "cpu", "float64", 0),
        "targets": {name: info for name, (_, _, info) in targets.items()},
        "cells": [c for c in cells if c["init"] != "mixture"],
        "grid": {},
    }
    groups: dict[str, list[dict[str, Any]]] = {}
    for c in cells:
        if c["init"] == "mixture":
            groups.setdefault(f"{c['target']}/{c['attack_label']}", []).append(c)
    for key, group in groups.items():
        png = out / f"mixture_heatmap_{key.replace('/', '_')}.png"
        heatmap(group, png, f"{key}: mean L2 (pixel space) from each candidate to its nearest image")
        report["grid"][key] = {"heatmap": png.name,
                               "cells": [{"l1": c["init_config"]["l1"], "l2": c["init_config"]["l2"],
                                          "oracle": c["init_is_oracle"], "final_loss": c["final_loss"],
                                          **c["distances"]} for c in group]}
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "summary.json", report)
    for c in cells:
        d = c["distances"]
        print(f"{c['cell_id']:55s} loss {_num(c['first_loss'])} -> {c['final_loss']:.3e} "
              f"d_train {d['mean_d_train']:.2f} d_start {d['mean_d_own_start']:.2f} "
              f"member {d['closer_to_train_than_heldout_decoys']}/{d['n_candidates']} "
              f"stay {d['closer_to_own_start_than_any_train']} exact {d['train_images_within_exact_l2']}")
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("results", type=Path, help="a results folder of `reconbench bench bilevel-cpu-mini --out ...`")
    parser.add_argument("--out", type=Path, default=None, help="where to write summary.json and the heatmaps "
                                                               "(default: RESULTS/analysis)")
    args = parser.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    analyse(args.results, args.out or args.results / "analysis", os.environ.get("RECONBENCH_DATA"))


if __name__ == "__main__":
    main()
