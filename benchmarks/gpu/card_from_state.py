"""The card of a target whose training came back from a slice, built here from its state, and a summary of it.

    python benchmarks/gpu/card_from_state.py SUITE CELL_ID OUT.json [--results runs/bench/SUITE] [--slice-note TEXT]

After `reconbench bench SUITE --unpack PACK --out runs/bench/SUITE` the target's training state (at its last step)
lies in `runs/bench/SUITE/training/`; this does what a slice does before the target's cells (the resumable trainer's
finish: the release metrics and the stationarity certificate) on a copy of that state, in a temporary folder, and
writes what the card says (its metrics without the per-sample margins, the margins' summary, the machine that
trained it, the seconds the rebuild took here and the processor it took them on) to OUT.json. The card names the
device and machine of the pieces that trained the target (``metrics.train_device``, ``metrics.trained_in``,
``training_machine``, read from the state), not this one. benchmarks/results/gpu/card_cifar-binary_h100.json was
written this way, before cards said so (its ``train_device: cpu`` is the rebuilding machine's).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from reconbench.bench.cells import expand
from reconbench.bench.suite import load_suite
from reconbench.targets.resumable import device_of, state_path, state_step, train_piece

#: the margin past which a float32 BCE gradient of a positive sample rounds to zero (reconbench.targets.training)
STALL_MARGIN = 16.6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("suite")
    parser.add_argument("cell", help="a cell of the suite on the target (e.g. cifar-binary--haim_binary_kkt--gaussian--s0)")
    parser.add_argument("out", type=Path)
    parser.add_argument("--results", type=Path, help="the results folder the pack was unpacked into "
                        "(default runs/bench/SUITE)")
    parser.add_argument("--slice-note", default="", help="what the slice that trained it was (kept in the JSON)")
    args = parser.parse_args(argv)
    suite = load_suite(args.suite)
    cell = next((c for c in expand(suite) if c.cell_id == args.cell), None)
    if cell is None:
        print(f"error: suite {suite.name} has no cell {args.cell!r}; `reconbench bench {args.suite} --list` lists them",
              file=sys.stderr)
        return 2
    recipe = cell.recipe
    state = state_path((args.results or Path("runs/bench") / suite.name) / "training", recipe)
    if not state.exists():
        print(f"error: no training state of target {recipe.key()} at {state}; unpack the slice's pack first "
              f"(reconbench bench {args.suite} --unpack PACK --out RESULTS)", file=sys.stderr)
        return 2
    step, _ = state_step(state)
    if step < recipe.train.steps:
        print(f"error: the state is at step {step} of {recipe.train.steps}: the target has not finished training",
              file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        states = Path(tmp) / "states"
        states.mkdir()
        shutil.copy(state, states)
        t0 = time.perf_counter()
        train_piece(recipe, Path(tmp) / "card", states, seconds=0.0, device="cpu")
        seconds = time.perf_counter() - t0
        card = json.loads((Path(tmp) / "card" / "card.json").read_text())
    metrics: dict[str, Any] = card["metrics"]
    margins = [float(m) for m in metrics.get("margins", [])]
    summary = {
        "what": f"the card of {suite.name}'s target {cell.target} (recipe key {card['recipe_key']}), built on this "
                "machine from the training state a slice brought back",
        "command": "python benchmarks/gpu/card_from_state.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "slice": args.slice_note,
        "card_rebuild_seconds_here": seconds,
        "card_rebuilt_on": device_of("cpu")[1],
        "training_machine": card.get("training_machine"),
        "metrics": {k: v for k, v in metrics.items() if k not in ("margins", "history")},
        "margins": {"n": len(margins), "min": min(margins, default=None), "median":
                    statistics.median(margins) if margins else None, "max": max(margins, default=None),
                    f"over_{STALL_MARGIN}".replace(".", "_"): sum(1 for m in margins if m > STALL_MARGIN)},
    }
    args.out.write_text(json.dumps(summary, indent=1) + "\n")
    print(f"card of {recipe.key()} built in {seconds:.1f}s: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
