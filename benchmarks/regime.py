"""Does the target sit where the attack's premise holds? Certificates along training and attack success beside them.

    RECONBENCH_DATA=../shared/data OMP_NUM_THREADS=1 python benchmarks/regime.py \\
        --out benchmarks/results/regime/regime.json --work runs/regime

For cpu-mini's binary targets (MNIST odd/even and CIFAR-10 vehicles/animals, 5 per class, 784/3072-1000-1000-1,
BCE, float32 full-batch GD, lr 0.05 with the inverse-loss schedule) and recipe variants (weight decay; every
layer initialised small), each point trains a target for a number of steps (cached under RECONBENCH_CACHE), records
its certificate (the residual of theta and, per layer and for the learned part theta - theta0; see
reconbench/targets/certificate.py) and runs a small attack as cpu-mini does (haim_binary_kkt, gaussian init, 2
random-search runs of 500 steps in float32), recording the calibrated headline, the membership AUC and their null.
Points run in order and are written to ``--out`` as they finish; rerunning skips the points already there.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import torch

from reconbench.runs import RunSpec, run_attack
from reconbench.targets.cache import get_or_train
from reconbench.targets.certificate import gate_value
from reconbench.targets.recipe import TargetRecipe

DATASETS: dict[str, dict[str, Any]] = {
    "mnist": {"dataset": "mnist_test", "task": "binary", "binary_rule": "parity", "n_per_class": 5},
    "cifar": {"dataset": "npz:cifar10/cifar10_train_subset.npz", "task": "binary", "binary_rule": "vehicles_animals",
              "n_per_class": 5},
}
CPU_MINI_TRAIN = {"loss": "bce", "lr": 0.05, "schedule": "inverse_loss", "weight_decay": 0.0, "dtype": "float32"}
WIDE = {"widths": [1000, 1000]}
#: recipe variants: (model options, train options) over cpu-mini's
VARIANTS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "cpu-mini": (WIDE, {}),
    "wd-1e-3": (WIDE, {"weight_decay": 1e-3}),                     # Buzaglo et al.'s value for their CNNs
    "all-layers-1e-3": ({**WIDE, "init_scale": 1e-3, "first_only": False}, {}),   # every layer N(0, 1e-6)
}
#: (dataset, variant, steps) in the order they run
POINTS = [(d, v, s) for s in (3000, 10_000) for d in ("mnist", "cifar") for v in VARIANTS] + \
         [(d, "cpu-mini", 300) for d in ("mnist", "cifar")] + [(d, "cpu-mini", 30_000) for d in ("mnist", "cifar")]
#: the other cpu-mini tasks (their recipes at n = 10-20, MNIST), certificate only, no attack: name -> recipe
CERTIFICATE_ONLY: dict[str, dict[str, Any]] = {
    "mnist-multiclass": {"problem": {"dataset": "mnist_test", "task": "multiclass", "num_classes": 10, "n_per_class": 2},
                         "family": "mlp", "model": WIDE,
                         "train": {**CPU_MINI_TRAIN, "loss": "ce", "lr": 0.5, "steps": 3000}},
    "mnist-regression-wd": {"problem": {**DATASETS["mnist"], "task": "regression"}, "family": "mlp", "model": WIDE,
                            "train": {"loss": "mse", "lr": 0.05, "weight_decay": 7.5e-4, "steps": 3000,
                                      "dtype": "float32"}},
    "mnist-binary-bias": {"problem": DATASETS["mnist"], "family": "mlp_bias", "model": {"widths": [1000]},
                          "train": {**CPU_MINI_TRAIN, "steps": 3000}},
}
ATTACK = RunSpec(attack="haim_binary_kkt", attack_config={"steps": 500}, search_runs=2, dtype="float32", seed=0)
SUMMARY_KEYS = ("reconstructed_calibrated", "calibrated_threshold", "membership_auc", "membership_tpr_at_fpr",
                "reconstructed", "top_k_mean_ssim")


def recipe_of(dataset: str, variant: str, steps: int) -> TargetRecipe:
    model, train = VARIANTS[variant]
    return TargetRecipe.from_dict({"problem": DATASETS[dataset], "family": "mlp", "model": model,
                                   "train": {**CPU_MINI_TRAIN, **train, "steps": steps}})


def run_point(dataset: str, variant: str, steps: int, work: Path) -> dict[str, Any]:
    recipe = recipe_of(dataset, variant, steps)
    t0 = time.perf_counter()
    card = get_or_train(recipe, quiet=True, log=False)
    m = card.data["metrics"]
    t1 = time.perf_counter()
    result = run_attack(card, ATTACK, work / f"{dataset}-{variant}-{steps}", quiet=True)
    summary = result["evaluation"]["summary"]
    null = (result["evaluation"].get("null") or {}).get("summary") or {}
    cert = m["certificate"]
    return {
        "dataset": dataset, "variant": variant, "steps": steps, "recipe": recipe.to_dict(), "recipe_key": recipe.key(),
        "train": {k: m.get(k) for k in ("train_seconds", "final_loss", "train_error", "test_error", "stalled_samples",
                                        "param_norm_sq")},
        "certificate": cert, "gate_value": gate_value(cert),
        "attack": {k: summary.get(k) for k in SUMMARY_KEYS},
        "null": {k: null.get(k) for k in SUMMARY_KEYS if k in null},
        "seconds": {"train_or_cache": t1 - t0, "attack": time.perf_counter() - t1},
    }


def table(points: list[dict[str, Any]]) -> str:
    rows = ["| target | recipe | steps | train loss | ratio (theta) | first layer | middle layer | learned part: "
            "ratio | its share of theta | calibrated (null) | membership AUC (null) |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for p in sorted(points, key=lambda p: (p["dataset"], list(VARIANTS).index(p["variant"]), p["steps"])):
        c, a, n = p["certificate"], p["attack"], p["null"]
        layers = c["residual_by_layer"]
        rows.append(f"| {p['dataset']} | {p['variant']} | {p['steps']:,} | {p['train']['final_loss']:.2g} | "
                    f"{c['ratio']:.3g} | {layers['layers.0.weight']:.3g} | {layers['layers.1.weight']:.3g} | "
                    f"{c['learned']['ratio']:.3g} | {c['learned']['share_of_theta']:.3g} | "
                    f"{a['reconstructed_calibrated']} ({n.get('reconstructed_calibrated', 'n/a')}) | "
                    f"{a['membership_auc']:.3f} ({_fmt(n.get('membership_auc'))}) |")
    return "\n".join(rows)


def _fmt(v: Any) -> str:
    return f"{v:.3f}" if isinstance(v, (int, float)) else "n/a"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--work", type=Path, required=True, help="folder for the attacks' result folders")
    ap.add_argument("--only", nargs="*", default=None, help="run only these points (dataset:variant:steps)")
    ap.add_argument("--table", action="store_true", help="print the markdown table of --out (docs/regime.md)")
    ap.add_argument("--certificates", action="store_true",
                    help="train the CERTIFICATE_ONLY targets and add their certificates to --out (no attack)")
    args = ap.parse_args()
    if args.certificates:
        report = json.loads(args.out.read_text())
        for name, d in CERTIFICATE_ONLY.items():
            card = get_or_train(TargetRecipe.from_dict(d), quiet=True, log=False)
            m = card.data["metrics"]
            report.setdefault("certificate_only", {})[name] = {
                "recipe": d, "certificate": m["certificate"], "gate_value": gate_value(m["certificate"]),
                "train": {k: m.get(k) for k in ("train_seconds", "final_loss", "train_error")}}
            args.out.write_text(json.dumps(report, indent=1, default=str) + "\n")
            print(name, m["certificate"]["ratio"], gate_value(m["certificate"]), flush=True)
        return
    if args.table:
        print(table(json.loads(args.out.read_text())["points"]))
        return
    torch.set_num_threads(1)
    done: list[dict[str, Any]] = json.loads(args.out.read_text())["points"] if args.out.exists() else []
    have = {(p["dataset"], p["variant"], p["steps"]) for p in done}
    for point in POINTS:
        if point in have or (args.only is not None and ":".join(map(str, point)) not in args.only):
            continue
        rec = run_point(*point, args.work)
        done.append(rec)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"command": "python benchmarks/regime.py --out " + str(args.out),
                                        "attack": ATTACK.to_dict(), "points": done}, indent=1, default=str) + "\n")
        c = rec["certificate"]
        print(f"{':'.join(map(str, point))}: ratio {c['ratio']:.3g} learned {rec['gate_value']:.3g} "
              f"calibrated {rec['attack']['reconstructed_calibrated']} auc {rec['attack']['membership_auc']} "
              f"({rec['seconds']['train_or_cache']:.0f} s + {rec['seconds']['attack']:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
