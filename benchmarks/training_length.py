"""The training-length axis: do cpu-mini's targets approach a KKT point as training runs from 10^3 to 10^6 steps, and
does the attack's calibrated count follow?

    RECONBENCH_DATA=../shared/data OMP_NUM_THREADS=1 python benchmarks/training_length.py \\
        --out benchmarks/results/regime/training_length.json --work runs/training_length \\
        --steps 1000 10000 100000 1000000 --seeds 0 1 2 3 4

Each point trains one target of a cpu-mini size (MNIST odd/even, 5 per class, 784-1000-1000-1, BCE; or MNIST
10 classes, 2 per class, CE) in float64 with the closed-form trainer (reconbench/targets/chain_gd.py), the loss in
the form that does not underflow (``loss_form = "stable"``) and a constant step size (the papers' plain GD; the
inverse-loss schedule would stop growing the step once the loss reads 0), for a number of steps, weight seed =
the point's seed. It records the regime residuals of the released weights (reconbench/targets/regime.py: theta's
NNLS residual with its margin set, the learned part's), the margins, and the attack's calibrated count with its
null (haim_binary_kkt / multiclass_kkt, gaussian start, 2 random-search runs, float32), as cpu-mini runs them.
Points are written to ``--out`` as they finish; rerunning skips the points already there. ``--no-attack`` records
the residuals only.
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
from reconbench.targets.recipe import TargetRecipe

WIDE = {"widths": [1000, 1000]}
TASKS: dict[str, dict[str, Any]] = {
    "mnist-binary": {"problem": {"dataset": "mnist_test", "task": "binary", "binary_rule": "parity",
                                 "n_per_class": 5},
                     "train": {"loss": "bce", "lr": 0.05}, "attack": "haim_binary_kkt", "attack_steps": 500},
    "mnist-multiclass": {"problem": {"dataset": "mnist_test", "task": "multiclass", "num_classes": 10,
                                     "n_per_class": 2},
                         "train": {"loss": "ce", "lr": 0.5}, "attack": "multiclass_kkt", "attack_steps": 300},
}


def recipe_of(task: str, steps: int, seed: int) -> TargetRecipe:
    t = TASKS[task]
    return TargetRecipe.from_dict({
        "problem": t["problem"], "family": "mlp", "model": WIDE,
        "train": {**t["train"], "steps": steps, "dtype": "float64", "schedule": "constant", "seed": seed,
                  "loss_form": "stable", "eval_every": max(steps // 10, 1)}})


def run_point(task: str, steps: int, seed: int, work: Path, attack: bool) -> dict[str, Any]:
    recipe = recipe_of(task, steps, seed)
    t0 = time.perf_counter()
    card = get_or_train(recipe, quiet=True, log=False)
    m = card.data["metrics"]
    t1 = time.perf_counter()
    regime = m["certificate"]["regime"]
    rec: dict[str, Any] = {
        "task": task, "steps": steps, "seed": seed, "recipe_key": recipe.key(), "recipe": recipe.to_dict(),
        "train": {k: m.get(k) for k in ("steps_run", "final_loss", "train_error", "test_error", "stalled_samples",
                                        "param_norm_sq")},
        "theta_residual": regime["theta"]["residual"], "margin_set": regime["theta"]["margin_set"],
        "learned_residual": (regime.get("learned") or {}).get("residual"),
        "margins": m.get("margins"),  # every training sample's, in the training precision
        "seconds": {"train_or_cache": t1 - t0},
    }
    if attack:
        spec = RunSpec(attack=TASKS[task]["attack"], attack_config={"steps": TASKS[task]["attack_steps"]},
                       search_runs=2, dtype="float32", seed=seed)
        result = run_attack(card, spec, work / f"{task}-{steps}-s{seed}", quiet=True)
        summary = result["evaluation"]["summary"]
        null = (result["evaluation"].get("null") or {}).get("summary") or {}
        rec["calibrated"] = summary.get("reconstructed_calibrated")
        rec["calibrated_null"] = null.get("reconstructed_calibrated")
        rec["membership_auc"] = summary.get("membership_auc")
        rec["seconds"]["attack"] = time.perf_counter() - t1
    return rec


def table(points: list[dict[str, Any]]) -> str:
    rows = ["| task | steps | seed | train loss | θ residual | margin set | min / max margin | learned residual | "
            "calibrated (null) |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for p in sorted(points, key=lambda p: (p["task"], p["steps"], p["seed"])):
        margins = p.get("margins") or [float("nan")]
        cal = "n/a" if p.get("calibrated") is None else f"{p['calibrated']} ({p.get('calibrated_null')})"
        learned = p.get("learned_residual")
        rows.append(f"| {p['task']} | {p['steps']:,} | {p['seed']} | {p['train']['final_loss']:.2g} | "
                    f"{p['theta_residual']:.3f} | {len(p['margin_set'])} | {min(margins):.3g} / {max(margins):.3g} | "
                    f"{'n/a' if learned is None else format(learned, '.3f')} | {cal} |")
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--work", type=Path, required=True, help="folder for the attacks' result folders")
    ap.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    ap.add_argument("--steps", nargs="+", type=int, default=[1000, 10_000, 100_000, 1_000_000])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    ap.add_argument("--no-attack", action="store_true", help="record the residuals and margins only")
    ap.add_argument("--table", action="store_true", help="print the markdown table of --out")
    args = ap.parse_args()
    if args.table:
        print(table(json.loads(args.out.read_text())["points"]))
        return
    torch.set_num_threads(1)
    done: list[dict[str, Any]] = json.loads(args.out.read_text())["points"] if args.out.exists() else []
    have = {(p["task"], p["steps"], p["seed"]) for p in done}
    for task in args.tasks:
        for steps in sorted(args.steps):
            for seed in args.seeds:
                if (task, steps, seed) in have:
                    continue
                rec = run_point(task, steps, seed, args.work, not args.no_attack)
                done.append(rec)
                args.out.parent.mkdir(parents=True, exist_ok=True)
                args.out.write_text(json.dumps({"command": "python benchmarks/training_length.py --out "
                                                f"{args.out} --steps {' '.join(map(str, args.steps))}",
                                                "points": done}, indent=1, default=str) + "\n")
                print(f"{task} {steps:,} s{seed}: loss {rec['train']['final_loss']:.3g} theta residual "
                      f"{rec['theta_residual']:.4f} learned {rec['learned_residual']} margin set "
                      f"{len(rec['margin_set'])} calibrated {rec.get('calibrated')} "
                      f"({sum(rec['seconds'].values()):.0f} s)", flush=True)


if __name__ == "__main__":
    main()
