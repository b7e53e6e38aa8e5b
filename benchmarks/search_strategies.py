"""Optuna TPE vs random search at equal budget on the cpu-mini MNIST targets (docs/search.md).

Runs the suite ``benchmarks/search_strategies.toml`` (every number of a cell is scored by the harness's one
evaluator, ``reconbench.evaluation.evaluate``, with its held-out null and calibrated headline), then summarises per
target and strategy, for the pooled runs and the blind selection: the calibrated headline (training images
reconstructed beyond what any null draw reached) and the membership test's AUC, as the mean over seeds with its 95%
Student-t interval, and the paired difference optuna - random per seed with its interval. It also reports the
lowest final attack loss of each cell: the objective TPE is told, so whether TPE at least optimises what it sees.

    RECONBENCH_DATA=../shared/data OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 nice -n 5 \\
        python benchmarks/search_strategies.py --out runs/search-strategies \\
        --json benchmarks/results/search/search_strategies.json

Resumable (finished cells are skipped); ``--only`` selects cells by wildcard as ``reconbench bench --only`` does.
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import time
from pathlib import Path
from typing import Any

import torch

from reconbench.bench.cells import expand
from reconbench.bench.runner import load_cells, run_suite
from reconbench.bench.suite import Suite, load_suite
from reconbench.leaderboard.tables import Stat

SUITE = Path(__file__).resolve().parent / "search_strategies.toml"
#: (summary key, value range for clipping the interval): the calibrated headline counts images in [0, n]
NUMBERS = {"reconstructed_calibrated": (0.0, None), "membership_auc": (0.0, 1.0)}
SELECTIONS = ("pool", "blind")


def _value(rec: dict[str, Any], selection: str, key: str) -> float | None:
    value = (rec["selections"].get(selection) or {}).get("summary", {}).get(key)
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def _spearman(runs: list[dict[str, Any]]) -> float | None:
    """Rank correlation of the final attack loss and the oracle extraction score over a cell's runs."""
    from scipy.stats import spearmanr

    pairs = [(r["final_loss"], r["oracle_score"]) for r in runs
             if math.isfinite(r["final_loss"]) and math.isfinite(r["oracle_score"])]
    if len(pairs) < 3:
        return None
    rho = float(spearmanr(*zip(*pairs, strict=True)).statistic)
    return rho if math.isfinite(rho) else None


def summarise(suite: Suite, cells: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Per target: each strategy's numbers over the seeds both ran, and the paired difference optuna - random (cells
    of the folder that the suite does not plan, or planned with another key, are left out)."""
    keys = {c.cell_id: c.key(suite) for c in expand(suite)}
    by: dict[tuple[str, str], dict[int, dict[str, Any]]] = {}
    for rec in cells.values():
        if rec.get("status") != "ok" or keys.get(rec["cell_id"]) != rec.get("cell_key"):
            continue
        strategy = (rec.get("search") or {}).get("strategy", "random")
        by.setdefault((rec["target"]["name"], strategy), {})[rec["seed"]] = rec
    out: dict[str, Any] = {}
    for target in sorted({t for t, _ in by}):
        random, optuna = by.get((target, "random"), {}), by.get((target, "optuna"), {})
        paired = set(random) & set(optuna)
        random, optuna = ({s: r for s, r in recs.items() if s in paired} for recs in (random, optuna))
        n_train = next(iter((random or optuna).values()))["target"].get("n_train")
        entry: dict[str, Any] = {"n_train": n_train, "seeds": sorted(set(random) & set(optuna))}
        for selection in SELECTIONS:
            for key, (lo, hi) in NUMBERS.items():
                rng = (lo, float(n_train) if hi is None and n_train else hi)
                per = {name: {s: _value(r, selection, key) for s, r in recs.items()}
                       for name, recs in (("random", random), ("optuna", optuna))}
                stats = {name: Stat([v for v in vals.values() if v is not None], rng) for name, vals in per.items()}
                diffs = [per["optuna"][s] - per["random"][s] for s in entry["seeds"]  # type: ignore[operator]
                         if per["optuna"].get(s) is not None and per["random"].get(s) is not None]
                entry[f"{selection}.{key}"] = {**{k: v.to_dict() for k, v in stats.items()},
                                               "optuna_minus_random": Stat(diffs).to_dict()}
        losses = {name: Stat([min((r["final_loss"] for r in rec["runs"] if math.isfinite(r["final_loss"])),
                                  default=math.inf) for rec in recs.values()])
                  for name, recs in (("random", random), ("optuna", optuna))}
        entry["best_final_attack_loss"] = {k: v.to_dict() for k, v in losses.items()}
        # how well the blind objective ranks runs as the oracle score does, within a cell (1: the same order)
        entry["loss_vs_oracle_spearman"] = Stat([rho for recs in (random, optuna) for rec in recs.values()
                                                 if (rho := _spearman(rec["runs"])) is not None], (-1.0, 1.0)).to_dict()
        out[target] = entry
    return out


def verdict(summary: dict[str, Any]) -> str:
    """Whether optuna beats random beyond noise: the paired interval of some headline lies above zero everywhere."""
    wins, losses = [], []
    for target, entry in summary.items():
        for selection in SELECTIONS:
            for key in NUMBERS:
                ci = entry[f"{selection}.{key}"]["optuna_minus_random"]["ci95"]
                if ci is not None and ci[0] > 0:
                    wins.append(f"{target} {selection} {key}")
                if ci is not None and ci[1] < 0:
                    losses.append(f"{target} {selection} {key}")
    return (f"optuna better beyond noise on: {', '.join(wins) or 'nothing'}; worse beyond noise on: "
            f"{', '.join(losses) or 'nothing'}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="runs/search-strategies", help="results folder of the suite (resumable)")
    ap.add_argument("--json", default=None, help="write the summary here")
    ap.add_argument("--only", action="append", default=None, help="cell wildcard (repeatable)")
    ap.add_argument("--cache", default=None, help="target cache (default: RECONBENCH_CACHE)")
    ap.add_argument("--earlier-cpu-seconds", type=float, default=0.0,
                    help="CPU seconds that earlier, interrupted invocations of this measurement spent (added to the total)")
    args = ap.parse_args()
    suite = load_suite(SUITE, strict=True)
    t0 = time.perf_counter()
    run_suite(suite, args.out, only=args.only, resume=True, quiet=True, cache=args.cache,
              command="python benchmarks/search_strategies.py")
    usage = resource.getrusage(resource.RUSAGE_SELF)
    summary = summarise(suite, load_cells(Path(args.out)))
    result = {
        "command": "OMP_NUM_THREADS=1 nice -n 5 python benchmarks/search_strategies.py",
        "suite": str(SUITE.name),
        "suite_sha256": suite.text_sha256,
        "budget": {label: {"attack": a.attack, "search": a.search, "search_config": a.search_config,
                           "runs": a.search_runs, "steps": a.config.get("steps")} for label, a in suite.attacks.items()},
        "torch_threads": torch.get_num_threads(),
        "wall_seconds_this_invocation": time.perf_counter() - t0,
        "cpu_seconds_this_invocation": usage.ru_utime + usage.ru_stime,
        "cpu_seconds_total": usage.ru_utime + usage.ru_stime + args.earlier_cpu_seconds,
        "targets": summary,
        "verdict": verdict(summary),
    }
    text = json.dumps(result, indent=2, allow_nan=True)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(text + "\n")
    for target, entry in summary.items():
        print(f"{target} (n = {entry['n_train']}, seeds {entry['seeds']}):")
        for selection in SELECTIONS:
            for key in NUMBERS:
                e = entry[f"{selection}.{key}"]
                line = "  ".join(f"{k} {_fmt(e[k])}" for k in ("random", "optuna", "optuna_minus_random"))
                print(f"  {selection:5s} {key:25s} {line}")
        print(f"  best final attack loss: random {_fmt(entry['best_final_attack_loss']['random'])}  "
              f"optuna {_fmt(entry['best_final_attack_loss']['optuna'])}; rank correlation of loss and oracle score "
              f"over a cell's runs {_fmt(entry['loss_vs_oracle_spearman'])}")
    print(result["verdict"])
    print(f"cpu {result['cpu_seconds_this_invocation']:.0f} s (all invocations: {result['cpu_seconds_total']:.0f} s), "
          f"wall {result['wall_seconds_this_invocation']:.0f} s")


def _fmt(stat: dict[str, Any]) -> str:
    if stat["mean"] is None:
        return "n/a"
    ci = stat["ci95"]
    return f"{stat['mean']:.3g}" + (f" [{ci[0]:.3g}, {ci[1]:.3g}]" if ci else "")


if __name__ == "__main__":
    main()
