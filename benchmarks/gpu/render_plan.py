"""Render the slice plans that benchmarks/gpu/README.md and docs/slices.md show, from the first GPU probe of an H100
(``benchmarks/results/gpu/probe_h100.json``, read as ``--costs`` reads it) and the state the first occasion left
(the CIFAR-10 binary target trained to its 10^6 steps, as ``runs/bench/paper/finished.json`` lists it): the paper
board's four KKT targets with 16 runs each in slices of 480 s, and the next occasion's slice. Each is
``reconbench bench paper --device cuda --plan`` as it prints; the suite's targets are sized from their recipes (no
data read). It also checks that the arithmetic H100 table (``arithmetic_h100.json``, written by
``python -m reconbench.bench.slice_arithmetic``) is the arithmetic's.

    python benchmarks/gpu/render_plan.py            # rewrite the blocks in place
    python benchmarks/gpu/render_plan.py --check    # exit 1 when a block differs from a fresh render

tests/unit/benchmarks/test_gpu_plan_doc.py runs the check.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
from pathlib import Path
from typing import Any

from tabulate import tabulate

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from reconbench.bench.cells import Cell, expand, select  # noqa: E402
from reconbench.bench.slice_arithmetic import arithmetic_costs  # noqa: E402
from reconbench.bench.slice_costs import (  # noqa: E402
    CostModel,
    GroupRules,
    cell_work,
    pairs_seconds,
    plan_slices,
    read_costs,
)
from reconbench.bench.slice_pack import MAX_FILES  # noqa: E402
from reconbench.bench.suite import Suite, load_suite  # noqa: E402
from reconbench.cli.bench_cmd import costs_dtypes  # noqa: E402
from reconbench.cli.bench_plan import default_cross_target, print_plan  # noqa: E402
from reconbench.cli.bench_slices import PACK_RESERVE_SECONDS  # noqa: E402
from reconbench.docs_block import replace_block  # noqa: E402
from reconbench.preflight import TargetSize, model_parameters  # noqa: E402
from reconbench.records.cost_table import COST_TABLE_FILE, CostTable  # noqa: E402

ARITHMETIC = Path("benchmarks/gpu/arithmetic_h100.json")
TABLE = Path("benchmarks/results/gpu/probe_h100.json")
LEDGER = Path("runs/bench/paper/finished.json")
#: the fraction of its steps each target's training state had done after the first occasion (by target name)
TRAINED = {"cifar-binary": 1.0}
#: the four KKT targets' first cells (one 16-run cell each), as the README plans them
KKT_PATTERNS = ["cifar-binary--haim_binary_kkt--gaussian--*", "mnist-binary--haim_binary_kkt--gaussian--*",
                "cifar-multiclass--multiclass_kkt--gaussian--*", "cifar-regression-wd--general_loss_wd--gaussian--*"]
#: the next occasion's selection: MNIST binary's cells, its A/B pair included
NEXT_PATTERNS = ["mnist-binary--haim_binary_kkt*--gaussian--*"]
#: the CIFAR-10 binary target's KKT cells (its 16-run cell and its A/B pair), as the next occasion's call takes them
CIFAR_BINARY_PATTERNS = ["cifar-binary--haim_binary_kkt*--gaussian--*"]
#: each plan: its deadline, its cells, and the options it adds (a pack of fewer files, every start carried)
PLANS: dict[str, tuple[float, list[str], list[str]]] = {
    "kkt": (480.0, KKT_PATTERNS, []), "next": (480.0, NEXT_PATTERNS, []),
    "groups": (420.0, CIFAR_BINARY_PATTERNS, ["--pack-files", "6"]),
    "groups-carried-x2": (420.0, CIFAR_BINARY_PATTERNS,
                          ["--pack-files", "6", "--carry-starts", "--no-cross-target", "--speed", "2"]),
    "groups-x2": (420.0, CIFAR_BINARY_PATTERNS, ["--pack-files", "6", "--no-cross-target", "--speed", "2"]),
    "groups-x2-cross": (420.0, CIFAR_BINARY_PATTERNS, ["--pack-files", "6", "--speed", "2"]),
}
#: the input shapes of the paper suite's data sets
SHAPES = {"npz:cifar10/cifar10_train_subset.npz": (3, 32, 32), "mnist_test": (1, 28, 28)}
DOCS = [Path("benchmarks/gpu/README.md"), Path("docs/slices.md")]


def probe_table(suite: Suite) -> CostTable:
    """The probe's JSON as ``--costs`` reads it for ``suite``."""
    return read_costs(ROOT / TABLE, **costs_dtypes(suite, None))


def progress_of(cells: list[Cell]) -> dict[str, float]:
    """:data:`TRAINED` by recipe key, as ``--finished`` reads the ledger."""
    return {c.recipe.key(): TRAINED[c.target] for c in cells if c.target in TRAINED}


def sizes_of(cells: list[Cell]) -> dict[str, TargetSize]:
    sizes: dict[str, TargetSize] = {}
    for cell in cells:
        p = cell.recipe.problem
        classes = int(p.num_classes or 10) if p.task == "multiclass" else 2
        shape = SHAPES[p.dataset]
        sizes[cell.recipe.key()] = TargetSize(shape, classes * int(p.n_per_class or 0), model_parameters(
            cell.recipe.family, shape, classes if p.task == "multiclass" else 1, cell.recipe.model))
    return sizes


def command(deadline: float, patterns: list[str], options: list[str]) -> str:
    only = " ".join(f"--only '{p}'" for p in patterns)
    return (f"reconbench bench paper --device cuda --plan --deadline {deadline:g} --costs {TABLE} --finished {LEDGER} "
            f"{only}" + "".join(f" {o}" for o in options))


def rules_of(options: list[str]) -> tuple[GroupRules, bool, float]:
    """The group rules (``--pack-files``, ``--cross-target``), ``--carry-starts`` and ``--speed`` of a plan's
    options, as ``reconbench bench --plan`` reads them."""
    files = int(options[options.index("--pack-files") + 1]) if "--pack-files" in options else MAX_FILES
    speed = float(options[options.index("--speed") + 1]) if "--speed" in options else 1.0
    # a plan on cuda pools runs unless --no-cross-target says otherwise (default_cross_target)
    cross = default_cross_target(True if "--cross-target" in options else False if "--no-cross-target" in options
                                 else None, 1.0, "cuda")
    return GroupRules(run_files=files - 2, cross_target=cross), "--carry-starts" in options, speed


def render(name: str) -> str:
    """The block of plan ``name``: its command and what it prints, between the markers."""
    deadline, patterns, options = PLANS[name]
    suite = load_suite("paper")
    cells = select(expand(suite), patterns)
    rules, carry, speed = rules_of(options)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        print_plan(suite, cells, sizes_of(cells), deadline, PACK_RESERVE_SECONDS, "cuda", probe_table(suite),
                   progress_of(cells), rules=rules, carry_starts=carry, speed=speed)
    begin, end = markers(name)
    return f"{begin}\n```\n$ {command(deadline, patterns, options)}\n{out.getvalue()}```\n{end}"


def account(name: str) -> str:
    """Every second of plan ``name``'s slices, by what it is spent on: a markdown table between the markers."""
    deadline, patterns, options = PLANS[name]
    suite = load_suite("paper")
    cells = select(expand(suite), patterns)
    sizes = sizes_of(cells)
    rules, carry, speed = rules_of(options)
    table = probe_table(suite).scaled(speed, evaluation=False) if speed != 1.0 else probe_table(suite)
    works = [cell_work(c, sizes[c.recipe.key()], pieces=True, dtype=suite.dtype, device="cuda", carry_starts=carry)
             for c in cells]
    model = CostModel(prior=table)
    plan = plan_slices(works, model, deadline - PACK_RESERVE_SECONDS, progress_of(cells), rules)
    by_id = {w.cell_id: w for w in works}
    head = ["slice", "training", "its set-ups", "cards", "attacks", "evaluations", "figure pairs", "cells' fixed s",
            "cells' margin", "kept for the pack", "idle", "total"]
    rows: list[list[Any]] = []

    def price(c: str) -> Any:
        return table.phase("attack", by_id[c].precision, by_id[c].runs)

    for i, ids in enumerate(plan.slices):
        setups = table.train.fixed * len(plan.training[i])
        made = sum(plan.training_cards[i].values())
        trained = sum(plan.training[i].values()) - setups - made
        attack = sum(price(c).rate * by_id[c].attack for c in ids)
        evaluate = sum(table.evaluate.rate * by_id[c].evaluate for c in ids)
        pairs = sum(pairs_seconds(by_id[c]) for c in ids)
        fixed = sum(price(c).fixed + table.evaluate.fixed for c in ids)
        margin = sum(model.estimate(by_id[c], False) for c in ids) - attack - evaluate - pairs - fixed
        idle = deadline - PACK_RESERVE_SECONDS - plan.seconds[i]
        cards = plan.card_seconds[i] + plan.restored_seconds[i] + made
        rows.append([i + 1, trained, setups, cards, attack, evaluate, pairs, fixed, margin, PACK_RESERVE_SECONDS,
                     idle, deadline])
    rows.append(["all", *(sum(float(r[k]) for r in rows) for k in range(1, len(head)))])
    text = tabulate(rows, headers=head, tablefmt="github", floatfmt=".0f")
    begin, end = markers(name + "-account")
    return f"{begin}\n{text}\n{end}"


def markers(name: str) -> tuple[str, str]:
    return (f"<!-- plan {name}: generated by benchmarks/gpu/render_plan.py -->", f"<!-- end of plan {name} -->")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="compare, write nothing")
    args = parser.parse_args(argv)
    stale = []
    table = arithmetic_costs().to_dict()
    if COST_TABLE_FILE.read(ROOT / ARITHMETIC).to_dict() != table:
        stale.append(str(ARITHMETIC))
    for doc in DOCS:
        text = (ROOT / doc).read_text()
        for name in [*PLANS, *(f"{n}-account" for n in PLANS)]:
            begin, _ = markers(name)
            if begin not in text:
                continue
            block = account(name.removesuffix("-account")) if name.endswith("-account") else render(name)
            if args.check:
                if block not in text:
                    stale.append(f"{doc} (plan {name})")
            else:
                replace_block(ROOT / doc, *markers(name), block)
                text = (ROOT / doc).read_text()
    if args.check and stale:
        print(f"stale: {', '.join(stale)}; run python benchmarks/gpu/render_plan.py "
              "(and python -m reconbench.bench.slice_arithmetic benchmarks/gpu/arithmetic_h100.json)")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
