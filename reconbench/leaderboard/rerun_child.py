"""The child process of a re-run on another BLAS path than its parent's (``python -m
reconbench.leaderboard.rerun_child train|attack ...``; ``rerun_paths.run_child`` starts it with or without MKL's
fast-path shim preloaded, so the path is chosen before torch loads).

* ``train``: train a card's recipe into a cache folder; writes the weights' sha256 and the path it ran on.
* ``attack``: re-run cells of a board against the targets of a cache folder (``slim.rerun_cells``) and compare
  them with the board; writes the problems and the path it ran on.

Both write their result as JSON to ``--result`` and exit 0; a failure prints one line on standard error and exits 1.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from reconbench import fast_blas
from reconbench.leaderboard.rerun_paths import train_here


def attack_here(suite_path: str, suite_sha256: str, board: Path, cells: list[str], cache: Path, work: Path,
                data_root: str | None) -> dict[str, Any]:
    """Re-run ``cells`` of ``board`` against the targets in ``cache``; the problems and the path."""
    from reconbench.bench.suite import load_suite
    from reconbench.errors import ReconbenchError
    from reconbench.leaderboard.rerun import suite_for_verify
    from reconbench.leaderboard.slim import rerun_cells

    suite = suite_for_verify(load_suite(suite_path), board)
    if suite.text_sha256 != suite_sha256:
        raise ReconbenchError(f"the suite {suite_path} read here is not the one the re-run's parent checks "
                              f"(sha256 {suite.text_sha256[:16]}, expected {suite_sha256[:16]})")
    problems = rerun_cells(suite, board, cells, data_root=data_root, cache=str(cache), work=work)
    return {"path": fast_blas.current_path(), "problems": problems}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"python -m {__name__}", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="job", required=True)
    train = sub.add_parser("train", help="train a card's recipe into a cache folder")
    train.add_argument("--recipe", required=True, help="a JSON file holding the recipe as a card records it")
    train.add_argument("--cache", required=True)
    train.add_argument("--device", default="cpu")
    attack = sub.add_parser("attack", help="re-run cells of a board against the targets of a cache folder")
    attack.add_argument("--suite", required=True)
    attack.add_argument("--suite-sha256", required=True)
    attack.add_argument("--board", required=True)
    attack.add_argument("--cells", required=True, help="comma-separated cell ids")
    attack.add_argument("--cache", required=True)
    attack.add_argument("--work", required=True)
    for job in (train, attack):
        job.add_argument("--data-root", default=None)
        job.add_argument("--threads", type=int, default=None)
        job.add_argument("--result", required=True, help="where the JSON result is written")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        import torch

        if args.threads:
            torch.set_num_threads(args.threads)
        if args.job == "train":
            out = train_here(json.loads(Path(args.recipe).read_text()), Path(args.cache), args.data_root,
                             args.device)
        else:
            out = attack_here(args.suite, args.suite_sha256, Path(args.board),
                              [c for c in args.cells.split(",") if c], Path(args.cache), Path(args.work),
                              args.data_root)
    except Exception as exc:  # one line for the parent, which reports it for its target or cells
        print(f"error: {type(exc).__name__}: {' '.join(str(exc).split())}", file=sys.stderr)
        return 1
    Path(args.result).write_text(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
