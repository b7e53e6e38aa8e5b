"""cpu-mini experiments for the KKT attacks: train or reuse a target, random-search, score.

    RECONBENCH_DATA=../shared/data OMP_NUM_THREADS=1 nice -n 10 \\
        python benchmarks/cpu_mini_kkt.py mnist_binary --out runs/cpu-mini/mnist_binary

Each experiment writes the harness's result folder (result.json with every number scored by
reconbench.evaluation, its null and its selections; runs/, candidates) and ``summary.json``, a short digest of
it. Targets are cached (RECONBENCH_CACHE) and runs resume. The ``protocol.json`` files committed beside older
results were scored by a separate script before the harness had one evaluator; docs/calibration.md says how they
compare.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import torch

from reconbench.provenance import portable_path
from reconbench.runs import RunSpec, run_attack
from reconbench.targets.cache import get_or_train
from reconbench.targets.recipe import TargetRecipe

MNIST = "mnist_test"
CIFAR = "npz:cifar10/cifar10_train_subset.npz"
WIDE = {"widths": [1000, 1000]}
#: 30k full-batch GD steps at lr 0.01, lr x 0.1/loss once the loss is below 0.1 (capped at 1e4)
FAST_GD = {"steps": 30_000, "lr": 0.01, "schedule": "inverse_loss", "dtype": "float32"}
# weight decay: lr * wd * steps = 7.5, so the default-initialised layers decay by e^-7.5 towards the
# stationary point of MSE + wd/2 |theta|^2 (Buzaglo et al.: wd 7.5e-4, lr 0.01, 1e6 steps); the no-WD twin
# differs only in wd

EXPERIMENTS: dict[str, dict[str, Any]] = {
    "mnist_binary": {
        "recipe": {"problem": {"dataset": MNIST, "task": "binary", "binary_rule": "parity",
                               "n_per_class": 10},
                   "family": "mlp", "model": WIDE, "train": FAST_GD},
        "attack": "haim_binary_kkt", "search_runs": 12, "attack_config": {"steps": 3000}, "dtype": "float32"},
    # the same problem, target trained in float64 (the reference's dtype). In float32 the BCE gradient of a sample
    # vanishes once its margin passes about 17 (1 - sigmoid(17) is below float32's resolution near 1), so the
    # float32 target's loss stalls at 1.7e-8 from step ~10k on (100k steps: 1.68e-8)
    "mnist_binary_f64": {
        "recipe": {"problem": {"dataset": MNIST, "task": "binary", "binary_rule": "parity",
                               "n_per_class": 10},
                   "family": "mlp", "model": WIDE, "train": {**FAST_GD, "dtype": "float64"}},
        "attack": "haim_binary_kkt", "search_runs": 12, "attack_config": {"steps": 3000}, "dtype": "float32"},
    # float64 and a higher cap on the inverse-loss multiplier, so the margin keeps growing at a constant rate
    "mnist_binary_f64_cap1e6": {
        "recipe": {"problem": {"dataset": MNIST, "task": "binary", "binary_rule": "parity",
                               "n_per_class": 10},
                   "family": "mlp", "model": WIDE,
                   "train": {**FAST_GD, "dtype": "float64", "schedule_cap": 1e6}},
        "attack": "haim_binary_kkt", "search_runs": 12, "attack_config": {"steps": 3000}, "dtype": "float32"},
    "cifar_binary": {
        "recipe": {"problem": {"dataset": CIFAR, "task": "binary", "binary_rule": "vehicles_animals",
                               "n_per_class": 10},
                   "family": "mlp", "model": WIDE, "train": FAST_GD},
        "attack": "haim_binary_kkt", "search_runs": 12, "attack_config": {"steps": 3000}, "dtype": "float32"},
    "mnist_multiclass": {
        "recipe": {"problem": {"dataset": MNIST, "task": "multiclass", "n_per_class": 5},
                   "family": "mlp", "model": WIDE,
                   "train": {**FAST_GD, "lr": 0.05}},
        "attack": "multiclass_kkt", "search_runs": 12, "attack_config": {"steps": 3000}, "dtype": "float32"},
    "mnist_multiclass_pairs": {  # the same target, one multiplier per (candidate, wrong class)
        "recipe": {"problem": {"dataset": MNIST, "task": "multiclass", "n_per_class": 5},
                   "family": "mlp", "model": WIDE,
                   "train": {**FAST_GD, "lr": 0.05}},
        "attack": "multiclass_kkt", "search_runs": 12,
        "attack_config": {"steps": 3000, "multipliers": "per_pair"}, "dtype": "float32"},
    "mnist_mse_wd": {
        "recipe": {"problem": {"dataset": MNIST, "task": "regression", "binary_rule": "parity",
                               "n_per_class": 10},
                   "family": "mlp", "model": WIDE,
                   "train": {"steps": 30_000, "lr": 0.05, "weight_decay": 5e-3, "dtype": "float32"}},
        "attack": "general_loss_wd", "search_runs": 12, "attack_config": {"steps": 3000}, "dtype": "float32"},
    "mnist_mse_nowd": {
        "recipe": {"problem": {"dataset": MNIST, "task": "regression", "binary_rule": "parity",
                               "n_per_class": 10},
                   "family": "mlp", "model": WIDE,
                   "train": {"steps": 30_000, "lr": 0.05, "weight_decay": 0.0, "dtype": "float32"}},
        "attack": "general_loss_wd", "search_runs": 12, "attack_config": {"steps": 3000}, "dtype": "float32"},
    # the blind-selected configuration of mnist_mse_wd (run 3, lowest final attack loss; its loss was still falling
    # at step 3000), continued for 15000 steps as a single run: is the 3000-step budget what limits it?
    "mnist_mse_wd_long": {
        "recipe": {"problem": {"dataset": MNIST, "task": "regression", "binary_rule": "parity",
                               "n_per_class": 10},
                   "family": "mlp", "model": WIDE,
                   "train": {"steps": 30_000, "lr": 0.05, "weight_decay": 5e-3, "dtype": "float32"}},
        "attack": "general_loss_wd", "search_runs": 1,
        "attack_config": {"steps": 15000, "lr": 0.12002391000117159, "init_scale": 0.04735459415790217,
                          "alpha": 11.341865083372566},
        "dtype": "float32"},
}


def run(name: str, out: Path, data_root: str | None, overrides: dict[str, Any]) -> dict[str, Any]:
    exp = {**EXPERIMENTS[name], **overrides}
    t0 = time.perf_counter()
    card = get_or_train(TargetRecipe.from_dict(exp["recipe"]), data_root=data_root, quiet=True)
    train_s = time.perf_counter() - t0
    spec = RunSpec(attack=exp["attack"], attack_config=exp["attack_config"], search_runs=exp["search_runs"],
                   dtype=exp["dtype"], seed=exp.get("seed", 0))
    t1 = time.perf_counter()
    result = run_attack(card, spec, out, data_root=data_root, quiet=True)
    attack_s = time.perf_counter() - t1
    report = {
        "experiment": name, "setup": exp, "card": portable_path(card.path),
        "train_metrics": {k: v for k, v in card.data["metrics"].items() if k != "margins"},
        "seconds": {"train_or_reuse": train_s, "attack": attack_s},
        "runs": [{k: r[k] for k in ("run", "config", "final_loss", "stopped", "oracle_score", "seconds")}
                 for r in result["runs"]],
        "selection": result["selection"],
        "evaluation": result["evaluation"].get("summary", {}),
        **({"null": result["null"]} if "null" in result else {}),
    }
    (out / "summary.json").write_text(json.dumps(report, indent=1, default=str))
    return report


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("experiment", choices=sorted(EXPERIMENTS))
    ap.add_argument("--out", required=True)
    ap.add_argument("--data-root", default=None)
    ap.add_argument("--search-runs", type=int, default=None)
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=None, help="seed of the search and the inits (default 0)")
    ap.add_argument("--train-steps", type=int, default=None,
                    help="train the target for this many GD steps instead of the experiment's (a separate cached target)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    overrides: dict[str, Any] = {}
    if args.search_runs:
        overrides["search_runs"] = args.search_runs
    if args.seed is not None:
        overrides["seed"] = args.seed
    if args.train_steps:
        recipe = EXPERIMENTS[args.experiment]["recipe"]
        overrides["recipe"] = {**recipe, "train": {**recipe["train"], "steps": args.train_steps}}
    if args.steps:
        overrides["attack_config"] = {**EXPERIMENTS[args.experiment]["attack_config"], "steps": args.steps}
    report = run(args.experiment, Path(args.out), args.data_root, overrides)
    for sel, s in report["protocol"].items():
        print(sel, {k: v for k, v in s.items() if "sorted" not in k})
    print("x0 baseline", {k: v for k, v in report["chance_baseline_x0"].items() if "sorted" not in k})
    print("seconds", report["seconds"])


if __name__ == "__main__":
    main()
