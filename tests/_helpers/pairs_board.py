"""A board that keeps figure pairs and no candidates, as a paper-size board from GPU slices will: the tiny slice suite
on ``digits`` (benchmarks/gpu/tiny.toml) run as one slice whose sampled candidates are too large to travel (forced by
a pack that takes none), merged with ``bench --unpack`` and published. Its reconstructions figure is drawn from the
figure pairs that came back and the board keeps them (``figure_pairs/<cell>.safetensors``); ``results.json`` stores
no candidates. A few seconds on one CPU thread."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from _helpers.cli import run_cli_redirected as cli
from _helpers.partial_board import HERE, SLICE_A, TINY, at_commit
from reconbench.bench import slice_pack
from reconbench.bench.slice_pack import COMMIT_ENV

#: the board's folder, named unlike its suite (gpu-tiny) as leaderboards/paper-gpu holds suite paper
BOARD = "pairs-gpu"


def _no_candidates(out: Path, cells: object, limit: int = 0) -> tuple[None, list[str]]:
    return None, []   # as if every sampled cell's float16 candidates passed a pack file


def build_pairs_board(root: Path, suite: Path = TINY) -> Path:
    """``root/leaderboards/pairs-gpu``: every cell of ``suite`` from one slice on a "device" without git metadata,
    no candidates travelled; published at ``HERE``."""
    board = root / "leaderboards" / BOARD
    with pytest.MonkeyPatch.context() as mp:
        at_commit(mp, None)
        mp.setenv(COMMIT_ENV, SLICE_A)
        mp.setattr(slice_pack, "_candidates_file", _no_candidates)
        mp.setattr(slice_pack, "_LEFT_SAID", set())
        pack = root / "pack"
        code, out, err = cli(["bench", str(suite), "--device", "cpu", "--deadline", "600", "--pack", str(pack),
                              "--out", str(root / "device"), "--cache", str(root / "cache"), "-q"])
        assert code == 0, out + err
        mp.delenv(COMMIT_ENV)
        local = root / "local"
        code, out, err = cli(["bench", str(suite), "--unpack", str(pack), "--out", str(local)])
        assert code == 0, out + err
        at_commit(mp, HERE)
        code, out, err = cli(["leaderboard", str(suite), "--results", str(local), "--publish", "--out", str(board)])
        assert code == 0, out + err
    results = json.loads((board / "results.json").read_text())
    assert results["stored_candidates"] == [] and any((board / "figure_pairs").glob("*.safetensors"))
    return board
