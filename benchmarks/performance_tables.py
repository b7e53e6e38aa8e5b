"""The tables of docs/performance.md that are rendered from committed benchmark JSON.

    python benchmarks/performance_tables.py --write    # rewrite every block in docs/performance.md
    python benchmarks/performance_tables.py --check    # exit 1 when a block differs from its JSON

A block is the text between ``<!-- table: NAME -->`` and ``<!-- /table -->``; NAME is a key of :data:`TABLES`.
tests/published/test_performance_tables.py checks that every block is what its JSON renders to.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "performance.md"
RESULTS = ROOT / "benchmarks" / "results"


def _load(rel: str) -> Any:
    return json.loads((RESULTS / rel).read_text())


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def default_run_vs_base() -> str:
    data = _load("default_runs/default_run_and_ci_vs_599614b.json")
    names = {"readme_run_target_not_cached": "README run, target not cached",
             "readme_run_target_cached": "README run, target cached",
             "ci_suite": "`bench ci`, fresh results folder",
             "ci_suite_base_cells": "`bench ci`, only the cells 599614b's suite has"}
    lines = [_row(["case", "runs (each side)", "599614b CPU s", "now CPU s", "now / 599614b, CPU", "599614b wall s",
                   "now wall s", "now / 599614b, wall", "count now / 599614b", "load (1 min) before, after"]),
             _row(["---"] * 10)]
    for key, label in names.items():
        case = data["cases"].get(key)
        if case is None:
            continue
        if key.startswith("ci_suite"):
            head = sorted({c["reconstructed_calibrated_sum_pooled"] for c in case["counts"]["head"]})
            base = sorted({c["reconstructed_calibrated_sum_pooled"] for c in case["counts"]["base"]})
            cells = case["counts"]["head"][0].get("common_cells", 65)
            count = (f"{'/'.join(map(str, head))} / {'/'.join(map(str, base))} (calibrated, summed over the {cells} "
                     "cells both ran)")
        else:
            head = sorted({c["reconstructed_calibrated"] for c in case["counts"]["head"]})
            base = sorted({c["reconstructed_calibrated"] for c in case["counts"]["base"]})
            count = f"{'/'.join(map(str, head))} / {'/'.join(map(str, base))} of 10 (calibrated; null max 0)"
        loads = [re.search(r"load average: ([\d.]+)", s) for s in case["load_before_after"]]
        load = ", ".join(m.group(1) for m in loads if m)
        ratio = case["head_over_base"]
        lines.append(_row([
            label, str(min(case["runs"].values())),
            f"{case['base']['cpu']['median']:.1f}", f"{case['head']['cpu']['median']:.1f}",
            f"**{ratio['cpu']['median']:.2f}** ({ratio['cpu']['min']:.2f}-{ratio['cpu']['max']:.2f})",
            f"{case['base']['wall']['median']:.1f}", f"{case['head']['wall']['median']:.1f}",
            f"**{ratio['wall']['median']:.2f}** ({ratio['wall']['min']:.2f}-{ratio['wall']['max']:.2f})",
            count, load]))
    return "\n".join(lines)


def step_ab_fast() -> str:
    return _step_ab("kkt/bench_step_ab_fast_r8.json")


def step_ab_stock() -> str:
    return _step_ab("kkt/bench_step_ab_stock_r8.json")


def _step_ab(rel: str) -> str:
    data = _load(rel)
    lines = [_row(["m", "dtype", "599614b CPU ms/step", "now", "products alone ms (GFLOP/s)", "now / products",
                   "599614b / now", "599614b / products (the bound)", "largest relative difference of the final "
                   "candidates"]), _row(["---"] * 9)]
    for r in data["rows"]:
        lines.append(_row([
            str(r["m"]), r["dtype"], f"{1e3 * r['base_cpu_seconds_per_step']:.1f}",
            f"{1e3 * r['head_cpu_seconds_per_step']:.1f}",
            f"{1e3 * r['floor_seconds_per_step']:.1f} ({r['floor_gflops']:.0f})", f"{r['head_over_floor']:.2f}x",
            f"{r['median_cpu_ratio']:.2f}x", f"{r['floor_bound_on_cpu_ratio']:.2f}x",
            f"{r['candidates_max_rel_diff']:.0g}"]))
    return "\n".join(lines)


def step_parts_fast() -> str:
    data = _load("kkt/bench_step_parts_fast_r7.json")
    lines = [_row(["m", "dtype", "whole call ms/step", "prologue ms (once)", "loop bookkeeping ms/step",
                   "box prior and multiplier terms ms", "engine ms", "products alone ms (GFLOP/s)",
                   "step / products", "engine / products"]), _row(["---"] * 10)]
    for r in data["rows"]:
        med = r["median"]
        lines.append(_row([
            str(r["m"]), r["dtype"], f"{med['call_ms_per_step']:.2f}", f"{med['prologue_ms']:.1f}",
            f"{med['loop_only_ms_per_step']:.2f}", f"{med['terms_ms']:.2f}", f"{med['engine_ms']:.2f}",
            f"{med['products_ms']:.2f} ({r['products_gflops']:.0f})", f"{med['step_over_products']:.2f}x",
            f"{med['engine_over_products']:.2f}x"]))
    return "\n".join(lines)


def _count(c: dict[str, Any]) -> str:
    return f"{c['value']} ({c['null_mean']:g}, {c['null_max']:g})"


def early_stop_digits() -> str:
    data = _load("default_runs/early_stop_digits.json")
    lines = [_row(["attack (its default digits target)", "seed", "early_stop", "steps of the 6 runs", "user CPU s",
                   "calibrated (null mean, max)", "SSIM > 0.4 (null mean, max)", "corr > 0.9 (null mean, max)"]),
             _row(["---"] * 8)]
    for r in data["rows"]:
        c = r["counts"]
        lines.append(_row([
            f"`{r['attack']}`", str(r["seed"]), "off" if r["early_stop"] == 0 else f"{r['early_stop']:g}",
            ", ".join(str(s) for s in r["steps_per_run"]), f"{r['user_cpu_seconds']:.1f}",
            _count(c["reconstructed_calibrated"]), _count(c["reconstructed"]), _count(c["reconstructed_corr"])]))
    return "\n".join(lines)


def float32_readme_run() -> str:
    data = _load("default_runs/float32_readme_run.json")
    cpu = data["user_cpu_seconds"]
    lines = [_row(["seed", "dtype", "calibrated (null mean, max)", "SSIM > 0.4 (null mean, max)",
                   "corr > 0.9 (null mean, max)", "user CPU s"]), _row(["---"] * 6)]
    for r in sorted(data["rows"], key=lambda r: (r["seed"], r["dtype"] != "float64")):
        c = r["counts"]
        lines.append(_row([str(r["seed"]), r["dtype"], _count(c["reconstructed_calibrated"]),
                           _count(c["reconstructed"]), _count(c["reconstructed_corr"]),
                           f"{cpu[r['dtype']][r['seed']]:.2f}"]))
    med = {k: statistics.median(v) for k, v in cpu.items()}
    lines.append("")
    lines.append(f"Median user CPU: float64 {med['float64']:.2f} s, float32 {med['float32']:.2f} s "
                 f"({med['float32'] / med['float64']:.2f}x).")
    return "\n".join(lines)


TABLES: dict[str, Callable[[], str]] = {
    "default_run_vs_599614b": default_run_vs_base,
    "step_ab_fast": step_ab_fast,
    "step_ab_stock": step_ab_stock,
    "step_parts_fast": step_parts_fast,
    "early_stop_digits": early_stop_digits,
    "float32_readme_run": float32_readme_run,
}
#: a block's body cannot run past its own closing marker (an empty block has no body and no newline before it)
BLOCK = re.compile(r"(<!-- table: (?P<name>[\w-]+) -->\n)(?P<body>(?:(?!<!-- /table -->).)*?)\n?(<!-- /table -->)",
                   re.S)


def blocks(text: str) -> dict[str, str]:
    """NAME -> the block's text, for every block of ``text``."""
    return {m["name"]: m["body"] for m in BLOCK.finditer(text)}


def rendered(text: str) -> str:
    """``text`` with every block replaced by what its JSON renders to."""
    def one(m: re.Match[str]) -> str:
        name = m["name"]
        if name not in TABLES:
            raise SystemExit(f"docs/performance.md names table {name!r}, which benchmarks/performance_tables.py "
                             f"does not define (known: {', '.join(TABLES)})")
        return m.group(1) + TABLES[name]() + "\n" + m.group(4)
    return BLOCK.sub(one, text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    group = ap.add_mutually_exclusive_group(required=True)
    group.add_argument("--write", action="store_true", help="rewrite the blocks of docs/performance.md")
    group.add_argument("--check", action="store_true", help="exit 1 when a block differs from its JSON")
    args = ap.parse_args()
    text = DOC.read_text()
    new = rendered(text)
    if args.write:
        DOC.write_text(new)
    elif new != text:
        stale = [n for n, body in blocks(text).items() if blocks(new).get(n) != body]
        print(f"docs/performance.md: stale table(s) {', '.join(stale)}; run python benchmarks/performance_tables.py "
              f"--write", file=sys.stderr)
        raise SystemExit(1)


if __name__ == "__main__":
    main()
