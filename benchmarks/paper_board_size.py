"""What a full ``paper-gpu`` board would weigh, measured by the board's own writers on generated numbers (79 cells of
n = 500 per-image rows, 16 runs of m = 1000; no run): slim entries, board cards, figure pairs and the palette figure
(tests/_helpers/paper_board.py), written as JSON beside the budget it must fit.

    python benchmarks/paper_board_size.py [--out benchmarks/results/paper_board_size.json]

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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "paper_board_size.json"))
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        sizes = build_paper_board(Path(tmp) / "paper-gpu")
    published = disk_use(ROOT / "leaderboards")
    report = {"what": "a full paper-gpu board of generated numbers through the board's writers (disk use in 4 KiB "
                      "blocks); results.json and README.md priced per cell at the published boards' largest",
              **sizes, "disk_use_mib": round(sizes["disk_use"] / 2**20, 2),
              "published_boards_disk_use_mib": round(published / 2**20, 2),
              "with_paper_gpu_mib": round((published + sizes["disk_use"]) / 2**20, 2)}
    Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    print(f"paper-gpu: {report['disk_use_mib']} MiB ({sizes['parts']['cells'] / 2**20:.2f} MiB of it the entries); "
          f"leaderboards/ with it: {report['with_paper_gpu_mib']} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
