"""The boards' calibrated headline checked from outside against candidates without member information.

For each board protocol (the suites ci, cpu-mini, training-length, threat-models: their ``[protocol]`` table, so
with ``prior_draws`` where the suite sets it) and each distinct set-up its cells evaluate (problem, candidate count m
and labels, the family's B), this script builds problems the boards never built (the suite's recipe with a fresh
``order_seed``, so new member, decoy and held-out images) and scores, with the board's protocol, candidate sets
built here from held-out images alone, with their own seed stream (each board its own member sets and draws):

* ``held_out``: random held-out images of each candidate's label (what the calibration's held-out draws are);
* ``prototype``: class prototypes, the mean of k random held-out images of the label, k in PROTOTYPE_SIZES (up to
  128, beyond the 32 the calibration's prior draws average), no blur;
* ``blurred``: blurred averages, the mean of k held-out images (k in BLUR_SIZES) blurred in image space before
  centring with a Gaussian of sigma in BLUR_SIGMAS (none of them the calibration's 0.5, 1 or 2 pixels).

A draw passes when the calibrated headline counts at least one training image (``reconstructed_calibrated`` > 0).
The criterion is a rate of at most 5% for prototypes and for random held-out draws (``done`` in the JSON); each rate
comes with a Clopper-Pearson interval (reconbench.evaluation.rates). Draws of one member set share its threshold, so the interval,
which treats draws as independent, is a little narrow; the JSON also counts member sets with any pass.

Only the ``ssim`` and ``corr`` metrics are computed and no reported null draws: the threshold reads the ``corr``
column alone, which no other metric changes (checked on the first member set of every set-up: ``threshold_check``).

      RECONBENCH_DATA=../shared/data python benchmarks/prior_outside.py [--member-sets R] [--draws D]

Writes benchmarks/results/prior_outside.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from scipy.ndimage import gaussian_filter

from reconbench import plugins
from reconbench.attack.candidates import candidate_labels
from reconbench.bench.cells import expand
from reconbench.bench.suite import Suite, load_suite
from reconbench.data import Problem, ProblemSpec
from reconbench.evaluation import evaluate
from reconbench.evaluation.null import calibrated_flags, scores_of
from reconbench.evaluation.protocol import resolve_protocol
from reconbench.evaluation.rates import pass_rate
from reconbench.targets.problems import build_problem

SUITES = ("ci", "cpu-mini", "training-length", "threat-models")
KINDS = ("held_out", "prototype", "blurred")
#: the problems here use order_seed FRESH_ORDER_SEED + BOARD_STRIDE * b + r for board b (its place in SUITES) and
#: member set r, so no two boards share a member set; the boards use the suite's order_seed (0) plus seeds 0-4
FRESH_ORDER_SEED = 7_000_000
BOARD_STRIDE = 10_000
#: the seed of the candidates' draws (the calibration uses its own streams of the protocol's null_seed)
FRESH_SEED = 20_261_127
PROTOTYPE_SIZES = (8, 32, 64, 128)
BLUR_SIZES = (1, 4, 16)
BLUR_SIGMAS = (0.75, 1.5, 3.0)
LIGHT = {"metrics": ["ssim", "corr"], "null_draws": 0, "figures": False}
OUT = Path(__file__).parent / "results" / "prior_outside.json"


@dataclasses.dataclass(frozen=True)
class Setup:
    """One evaluation set-up of a board: its problem (order_seed left to the member set), m, labels and family."""

    spec: ProblemSpec
    m: int
    family: str
    task: str
    num_classes: int
    cells: int

    @property
    def name(self) -> str:
        s = self.spec
        classes = f"{self.num_classes}-class" if self.task == "multiclass" else (s.binary_rule or "binary")
        return f"{s.dataset.removeprefix('npz:').split('/')[0]} {self.task} {classes} n={self.n} m={self.m} ({self.family})"

    @property
    def n(self) -> int:
        return self.spec.n_per_class * self.num_classes


def setups(suite: Suite) -> list[Setup]:
    """The distinct set-ups of a suite's cells (one per problem recipe, m and B; seeds, attacks and the regression twin
    of a binary problem merged)."""
    found: dict[tuple[Any, ...], Setup] = {}
    counts: dict[tuple[Any, ...], int] = {}
    for cell in expand(suite):
        prob = cell.recipe.problem
        k = (prob.num_classes or 10) if prob.task == "multiclass" else 2
        factor = plugins.attack(cell.attack.attack).candidate_factor
        m = cell.attack.candidates or suite.candidates or factor * k * prob.n_per_class
        b = resolve_protocol(dict(suite.protocol), cell.recipe.family).avg_threshold
        # a regression problem draws the same images and 0/1 labels as the binary one of its rule: one set-up
        spec = dataclasses.replace(prob, order_seed=0, task="binary" if prob.task == "regression" else prob.task)
        key = (json.dumps(spec.to_dict(), sort_keys=True), m, b)
        counts[key] = counts.get(key, 0) + 1
        found.setdefault(key, Setup(spec, m, cell.recipe.family, spec.task, k, 0))
    return [dataclasses.replace(s, cells=counts[k]) for k, s in found.items()]


def _held_out_positions(problem: Problem, label: int) -> np.ndarray:
    return np.flatnonzero(problem.held_out_labels == label)


def candidates(problem: Problem, labels: np.ndarray, kind: str, rng: np.random.Generator) -> torch.Tensor:
    """One candidate set of ``kind`` (module docstring), candidate j of label labels[j], from held-out images only."""
    out = []
    for c in labels.tolist():
        pool = _held_out_positions(problem, int(c))
        if kind == "held_out":
            k, sigma = 1, 0.0
        elif kind == "prototype":
            k, sigma = int(rng.choice(PROTOTYPE_SIZES)), 0.0
        else:
            k, sigma = int(rng.choice(BLUR_SIZES)), float(rng.choice(BLUR_SIGMAS))
        picks = rng.choice(pool, min(k, len(pool)), replace=False)
        img = problem.held_out_images(picks).mean(axis=0)          # (C, H, W) in [0, 1]
        if sigma > 0:   # blurred in image space, before centring (the calibration's prior blurs centred images)
            img = gaussian_filter(img, sigma=(0.0, sigma, sigma), mode="nearest")
        out.append(img)
    return problem.centred(np.stack(out))


def member_set(setup: Setup, protocol: dict[str, Any], board: int, r: int, draws: int, check: bool) -> dict[str, Any]:
    """Threshold of fresh member set r of board b and the passes of ``draws`` candidate sets of each kind."""
    spec = dataclasses.replace(setup.spec, order_seed=FRESH_ORDER_SEED + BOARD_STRIDE * board + r)
    problem = build_problem(spec)
    labels = candidate_labels(setup.task, setup.num_classes, setup.m).numpy()
    proto = {**protocol, **LIGHT, "null_seed": int(protocol.get("null_seed", 0)) + r}
    rng = np.random.default_rng([FRESH_SEED, board, r, setup.m])
    passes: dict[str, list[int]] = {}
    held_only: dict[str, list[int]] = {}   # the same draws against the held-out draws' part of the threshold alone
    threshold = threshold_held = None
    for kind in KINDS:
        passes[kind], held_only[kind] = [], []
        for _ in range(draws):
            ev = evaluate(problem, candidates(problem, labels, kind, rng), family=setup.family,
                          labels=torch.as_tensor(labels), protocol=proto)
            threshold = float(ev["summary"]["calibrated_threshold"])
            passes[kind].append(int(ev["summary"]["reconstructed_calibrated"]))
            threshold_held = max(float(x) for x in ev["protocol"]["calibration"]["draw_maxima"])
            held_only[kind].append(int(calibrated_flags(scores_of(ev, "corr"), threshold_held).sum()))
    out: dict[str, Any] = {"order_seed": spec.order_seed, "threshold": threshold,
                           "threshold_held_out_draws_only": threshold_held,
                           "held_out_pool": int(len(problem.held_out_indices)), "passes": passes,
                           "passes_held_out_draws_only": held_only}
    if check:   # the full metric set gives the same threshold
        full = {**protocol, "figures": False, "null_draws": 0, "null_seed": proto["null_seed"]}
        ev = evaluate(problem, candidates(problem, labels, "held_out", np.random.default_rng(0)), family=setup.family,
                      labels=torch.as_tensor(labels), protocol=full)
        out["threshold_check"] = float(ev["summary"]["calibrated_threshold"]) == threshold
    return out


def summarise(rows: list[dict[str, Any]], field: str = "passes") -> dict[str, Any]:
    """Per kind: draws that passed, the rate with its interval, and member sets with any pass."""
    out = {}
    for kind in KINDS:
        counts = [p for row in rows for p in row[field][kind]]
        passed = sum(1 for p in counts if p > 0)
        out[kind] = {**pass_rate(passed, len(counts)),
                     "member_sets_with_a_pass": sum(1 for row in rows if any(p > 0 for p in row[field][kind])),
                     "member_sets": len(rows), "most_images_passed_in_a_draw": max(counts, default=0)}
    return out


def _rate(r: dict[str, Any]) -> str:
    lo, hi = r["interval"]
    return f"{100 * r['rate']:.1f}% [{100 * lo:.1f}, {100 * hi:.1f}] ({r['passed']} of {r['draws']})"


def docs_table(result: dict[str, Any]) -> str:
    """The table docs/calibration.md shows (tests/unit/benchmarks/test_prior_outside.py checks the page against the JSON)."""
    lines = ["| board protocol | calibration (K held-out + J prior draws) | set-ups, member sets | random held-out "
             "| class prototypes | blurred averages | prototypes, held-out draws alone | done (at most 5%) |",
             "|---|---|---|---|---|---|---|---|"]
    for name, b in result["boards"].items():
        cal, rates, alone = b["calibration"], b["rates"], b["rates_held_out_draws_only"]
        done = "yes" if b["done"]["held_out"] and b["done"]["prototype"] else "no"
        sets = sum(len(s["member_sets"]) for s in b["setups"])
        lines.append(f"| `{name}` | {cal['calibration_draws']} + {cal['prior_draws']} | {len(b['setups'])}, {sets} "
                     f"| {_rate(rates['held_out'])} | {_rate(rates['prototype'])} "
                     f"| {_rate(rates['blurred'])} | {_rate(alone['prototype'])} | {done} |")
    above = [f"`{name}` {st['setup']}: {kind.replace('_', ' ')} {_rate(st['rates'][kind])}"
             for name, b in result["boards"].items() for st in b["setups"] for kind in KINDS
             if st["rates"][kind]["rate"] > 0.05]
    lines += ["", "Set-ups where a kind of candidate passed more than 5% of its draws: "
              + ("; ".join(above) if above else "none") + "."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--member-sets", type=int, default=20, help="fresh member sets per set-up (default 20)")
    ap.add_argument("--member-sets-digits", type=int, default=40,
                    help="fresh member sets per set-up on the embedded 8x8 digits, whose scoring is cheap (default 40)")
    ap.add_argument("--draws", type=int, default=5, help="candidate sets of each kind per member set (default 5)")
    ap.add_argument("--suites", nargs="*", default=list(SUITES), help="the boards' suites (default: all four)")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--table", action="store_true", help="print the docs' table from --out and run nothing")
    args = ap.parse_args(argv)
    if args.table:
        print(docs_table(json.loads(args.out.read_text())))
        return 0
    t_all = time.perf_counter()
    boards = {}
    for name in args.suites:
        board = SUITES.index(name) if name in SUITES else len(SUITES) + list(args.suites).index(name)
        suite = load_suite(name)
        protocol = dict(suite.protocol)
        rows_all, per_setup = [], []
        t0 = time.perf_counter()
        for setup in setups(suite):
            t = time.perf_counter()
            sets = args.member_sets_digits if setup.spec.dataset == "digits" else args.member_sets
            rows = [member_set(setup, protocol, board, r, args.draws, check=(r == 0)) for r in range(sets)]
            rows_all += rows
            rates_here, seconds = summarise(rows), round(time.perf_counter() - t, 1)
            per_setup.append({"setup": setup.name, "cells": setup.cells, "seconds": seconds,
                              "threshold_check": rows[0].get("threshold_check"),
                              "thresholds": [round(r["threshold"], 4) for r in rows],
                              "rates": rates_here, "member_sets": rows})
            print(f"{name}: {setup.name}: " + ", ".join(f"{k} {v['passed']}/{v['draws']}" for k, v in rates_here.items())
                  + f" ({seconds} s)", flush=True)
        rates = summarise(rows_all)
        boards[name] = {
            "protocol": protocol,
            "calibration": {"calibration_draws": int(protocol.get("calibration_draws", 19)),
                            "prior_draws": int(protocol.get("prior_draws", 0))},
            "rates": rates,
            # the same draws against the threshold the held-out draws alone give (what prior_draws = 0 would give)
            "rates_held_out_draws_only": summarise(rows_all, "passes_held_out_draws_only"),
            "done": {k: rates[k]["rate"] <= 0.05 for k in ("held_out", "prototype", "blurred")},
            "seconds": round(time.perf_counter() - t0, 1),
            "setups": per_setup,
        }
    result = {
        "script": "benchmarks/prior_outside.py",
        "question": "how often each board protocol's calibrated headline passes candidates built from held-out "
                    "images alone (random, class prototypes, blurred averages) on member sets the boards never used",
        "member_sets_per_setup": args.member_sets, "member_sets_per_digits_setup": args.member_sets_digits,
        "draws_per_kind": args.draws,
        "fresh_order_seed": FRESH_ORDER_SEED, "board_stride": BOARD_STRIDE, "fresh_seed": FRESH_SEED,
        "constructions": {"prototype": {"sizes": list(PROTOTYPE_SIZES), "blur": None},
                          "blurred": {"sizes": list(BLUR_SIZES), "sigmas": list(BLUR_SIGMAS),
                                      "blurred_in": "image space, before centring (scipy gaussian_filter, "
                                                    "mode nearest)"}},
        "machine": f"{platform.machine()}, torch threads {torch.get_num_threads()}",
        "seconds": round(time.perf_counter() - t_all, 1),
        "boards": boards,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    # compact: the per-draw counts of every member set make an indented file of over 300 KB
    args.out.write_text(json.dumps(result, separators=(",", ":"), default=lambda x: None if isinstance(x, float) and
                                   not math.isfinite(x) else str(x)) + "\n")
    print(f"wrote {args.out} ({result['seconds']} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
