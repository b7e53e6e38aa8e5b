"""A paper-size target's card rebuilt from its final training state against restored from the card that travelled
beside it (docs/slices.md, "The card travels with the final state"), on this CPU.

    RECONBENCH_DATA=../shared/data OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 python benchmarks/bench_card_restore.py \\
        --json benchmarks/results/training/card_restore_cpu.json

The target is ``paper.toml``'s CIFAR-10 binary recipe (n = 500, 3072-1000-1000-1, float32) with its steps cut to
``--steps`` (the resumable trainer's finish is the same whatever the steps; the certificate's LSMR iterations depend
on the weights, so a barely trained network's rebuild is far cheaper than the trained one's 63 s of certificate:
a lower bound). One piece trains it to its last step and writes its card and, beside the state, the card's JSON;
then, ``--repeats`` times alternately on fresh card folders, the rebuild (``train_piece`` on the final state: the
release metrics and the stationarity certificate, as a slice without a travelled card does) and the restore
(``restore_card``: the state loaded, the weights written and hashed, the card copied). Wall and process CPU seconds,
medians; the restored weights and mean image are checked equal to the finishing slice's byte for byte, its card
JSON to the one beside the state (the last rebuild's: a rebuild writes the card that travels on).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from reconbench.bench.cells import expand
from reconbench.bench.suite import load_suite
from reconbench.targets.cards import CARD_FILE, MEAN_FILE, WEIGHTS_FILE
from reconbench.targets.resumable import card_beside, restore_card, train_piece


def timed(fn: Any) -> tuple[Any, float, float]:
    w0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w0, time.process_time() - c0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    suite = load_suite("paper")
    cell = next(c for c in expand(suite) if c.target == "cifar-binary")
    recipe = dataclasses.replace(cell.recipe, train=dataclasses.replace(cell.recipe.train, steps=args.steps))
    rows: dict[str, list[tuple[float, float]]] = {"rebuild": [], "restore": []}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        states = root / "states"
        piece, wall, cpu = timed(lambda: train_piece(recipe, root / "finished", states, seconds=1e9))
        assert piece.finished
        finished = {name: (root / "finished" / name).read_bytes() for name in (CARD_FILE, WEIGHTS_FILE, MEAN_FILE)}
        for k in range(args.repeats):
            again, w, c = timed(lambda: train_piece(recipe, root / f"rebuilt{k}", states, seconds=0.0))  # noqa: B023
            assert again.finished
            rows["rebuild"].append((w, c))
            beside = card_beside(states / f"{recipe.key()}.safetensors").read_bytes()   # the rebuild's, now
            card, w, c = timed(lambda: restore_card(recipe, root / f"restored{k}", states))  # noqa: B023
            assert not isinstance(card, str), card
            rows["restore"].append((w, c))
            assert (root / f"restored{k}" / CARD_FILE).read_bytes() == beside
            for name in (WEIGHTS_FILE, MEAN_FILE):
                assert (root / f"restored{k}" / name).read_bytes() == finished[name], name
    out = {
        "what": "card of paper.toml's CIFAR-10 binary target (steps cut), rebuilt from its final state vs restored "
                "from the card beside it, on this CPU",
        "recipe_key": recipe.key(), "steps": args.steps, "repeats": args.repeats,
        "threads": torch.get_num_threads(), "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "cpus": os.cpu_count(), "load_1min_before": os.getloadavg()[0],
        "finishing_piece_seconds": {"wall": wall, "cpu": cpu},
        **{name: {"wall_median": statistics.median(w for w, _ in r), "cpu_median": statistics.median(c for _, c in r),
                  "wall": [w for w, _ in r], "cpu": [c for _, c in r]} for name, r in rows.items()},
        "restored_equals_finished": True,
    }
    text = json.dumps(out, indent=1)
    print(text)
    if args.json is not None:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
