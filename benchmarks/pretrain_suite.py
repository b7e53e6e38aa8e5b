"""Train a suite's targets into the target cache without running any attack, exactly as `reconbench bench` would
train them (the same cells, the same recipes, the same cache keys), so that the board run finds them cached.

    RECONBENCH_DATA=../shared/data OMP_NUM_THREADS=1 nice python benchmarks/pretrain_suite.py training-length
    # several processes share the work: process i of k takes every k-th missing target
    for i in 0 1; do nice python benchmarks/pretrain_suite.py training-length --part $i --parts 2 & done; wait
    python benchmarks/pretrain_suite.py training-length --missing          # list what is not cached yet

--only takes the cell wildcards of `reconbench bench --only`. Two processes that pick the same target both train
it and the cache keeps one card (reconbench/targets/cache.py), so parts only save time, never break the cache.
"""

from __future__ import annotations

import argparse
import time

from reconbench.bench.cells import expand, select
from reconbench.bench.suite import load_suite
from reconbench.targets.cache import cache_dir, get_or_train
from reconbench.targets.cards import CARD_FILE
from reconbench.targets.recipe import TargetRecipe


def missing_targets(suite_name: str, only: list[str], cache: str | None) -> list[tuple[str, TargetRecipe]]:
    """(first cell id, recipe) of every target of the suite's cells that the cache does not hold, in cell order."""
    out: dict[str, tuple[str, TargetRecipe]] = {}
    for cell in select(expand(load_suite(suite_name)), only):
        key = cell.recipe.key()
        if key not in out and not (cache_dir(cache) / "targets" / key / CARD_FILE).exists():
            out[key] = (cell.cell_id, cell.recipe)
    return list(out.values())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("suite", help="a shipped suite's name or a .toml path")
    ap.add_argument("--only", action="append", default=[], metavar="PATTERN", help="cell wildcard (repeatable)")
    ap.add_argument("--part", type=int, default=0, help="this process's share: every --parts-th target from --part")
    ap.add_argument("--parts", type=int, default=1)
    ap.add_argument("--cache", default=None, help="target cache (default: $RECONBENCH_CACHE, else ~/.cache/reconbench)")
    ap.add_argument("--missing", action="store_true", help="only list the targets that are not cached")
    args = ap.parse_args()
    if not 0 <= args.part < args.parts:
        ap.error(f"--part {args.part} is not one of 0..{args.parts - 1}; give --part below --parts")
    todo = missing_targets(args.suite, args.only, args.cache)
    if args.missing:
        for cell_id, recipe in todo:
            print(f"{recipe.key()}  {cell_id}  ({recipe.train.steps:,} steps)")
        print(f"{len(todo)} target(s) not cached")
        return
    import torch

    torch.set_num_threads(1)
    for cell_id, recipe in todo[args.part::args.parts]:
        t0 = time.perf_counter()
        card = get_or_train(recipe, args.cache, None, quiet=True, log=False)
        print(f"{recipe.key()}  {cell_id}  {recipe.train.steps:,} steps  {time.perf_counter() - t0:.0f} s  "
              f"loss {card.data['metrics']['final_loss']:.3g}", flush=True)


if __name__ == "__main__":
    main()
