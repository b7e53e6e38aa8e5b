"""Time to read the largest published board through the typed records: its results.json (read and upgraded to
the full form; decoded) and every cell entry (decoded), the least CPU time of N repeats, written as JSON.

    python benchmarks/records_load.py [--repeats 5] [--out benchmarks/results/records_load.json]

Run it at another commit (e.g. with that commit's tree on PYTHONPATH) to compare two versions of the readers.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from collections.abc import Callable
from pathlib import Path

from reconbench.leaderboard.results_file import read_results
from reconbench.records import BoardResults, CellRecord

ROOT = Path(__file__).resolve().parents[1]


def largest_board() -> Path:
    return max((p.parent for p in ROOT.glob("leaderboards/*/results.json")), key=lambda b: (b / "results.json").stat().st_size)


def best_of(repeats: int, fn: Callable[[], object]) -> float:
    """The least CPU time of this process over the repeats (CPU, not wall, time: the machine is shared)."""
    times = []
    for _ in range(repeats):
        t0 = time.process_time()
        fn()
        times.append(time.process_time() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    board = largest_board()
    cells = [json.loads(p.read_text()) for p in sorted((board / "cells").glob("*.json"))]
    full = read_results(board)
    results = {
        "board": board.name,
        "results_json_bytes": (board / "results.json").stat().st_size,
        "cells": len(cells),
        # reading the file and its upgrade (the compact form's statistics expanded), then the strict decode alone
        "read_and_upgrade_seconds": best_of(args.repeats, lambda: read_results(board)),
        "results_json_decode_seconds": best_of(args.repeats, lambda: BoardResults.from_dict(full)),
        "cells_seconds": best_of(args.repeats, lambda: [CellRecord.from_dict(c) for c in cells]),
        "repeats": args.repeats,
        "timer": "process CPU time, least of the repeats",
        "python": platform.python_version(),
        "machine": platform.machine(),
    }
    text = json.dumps(results, indent=2)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
