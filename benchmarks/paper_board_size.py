"""What a full GPU board would weigh, measured by the board's own writers on generated numbers (no run): slim entries,
board cards, figure pairs and the palette figure (tests/_helpers/paper_board.py), written as JSON beside the budget it
must fit. ``paper`` (the default): 79 cells of n = 500 per-image rows, each priced at 16 runs of m = 1000;
``claims-gpu``: 224 cells, each at its own size (n = 100, 4 runs of m = 200, MNIST or CIFAR-10 images).

    python benchmarks/paper_board_size.py [--suite paper|claims-gpu] [--out FILE]

The default --out is benchmarks/results/paper_board_size.json for paper, benchmarks/results/<suite>_board_size.json
(dashes as underscores) for another suite.

tests/unit/leaderboard/test_leaderboard_slim.py builds the same board and checks it against the size budget.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from _helpers.paper_board import build_paper_board, disk_use  # noqa: E402

#: the GPU boards: each suite's board folder under leaderboards/
BOARDS = {"paper": "paper-gpu", "claims-gpu": "claims-gpu"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default="paper", choices=sorted(BOARDS),
                        help="the suite whose full board is built (default: paper)")
    parser.add_argument("--out", default=None, help="the JSON to write (default: see above)")
    args = parser.parse_args(argv)
    board = BOARDS[args.suite]
    out = Path(args.out) if args.out else ROOT / "benchmarks" / "results" / (
        "paper_board_size.json" if args.suite == "paper" else f"{args.suite.replace('-', '_')}_board_size.json")
    with tempfile.TemporaryDirectory() as tmp:
        sizes = build_paper_board(Path(tmp) / board, suite_name=args.suite, own_sizes=args.suite != "paper")
    published = disk_use(ROOT / "leaderboards")
    report = {"what": f"a full {board} board of generated numbers through the board's writers (disk use in 4 KiB "
                      "blocks); results.json and README.md priced per cell at the complete published boards' largest",
              **sizes, "disk_use_mib": round(sizes["disk_use"] / 2**20, 2),
              "published_boards_disk_use_mib": round(published / 2**20, 2),
              f"with_{board.replace('-', '_')}_mib": round((published + sizes["disk_use"]) / 2**20, 2)}
    out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"{board}: {report['disk_use_mib']} MiB ({sizes['parts']['cells'] / 2**20:.2f} MiB of it the entries); "
          f"leaderboards/ with it: {report[f'with_{board.replace(chr(45), chr(95))}_mib']} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
