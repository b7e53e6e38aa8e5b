"""A partial board grown over slices, as the first publication of a GPU board will be: the tiny slice suite on
``digits`` (benchmarks/gpu/tiny.toml), two of its three cells run by two slices at two fake clean commits on a
"device" without git metadata, merged with ``bench --unpack`` and published from a third (clean) checkout."""

from __future__ import annotations

import json
from collections import OrderedDict
from pathlib import Path

import pytest

from _helpers.cli import run_cli_redirected as cli
from reconbench import provenance
from reconbench.bench.slice_pack import COMMIT_ENV
from reconbench.targets import defended

TINY = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu" / "tiny.toml"
#: fake clean commits: two slices, and the checkout that publishes
SLICE_A, SLICE_B, HERE = "a" * 40, "b" * 40, "c" * 40
#: the folder differs from the suite's name (gpu-tiny), as leaderboards/paper-gpu holds suite "paper"
BOARD = "tiny-gpu"
CELLS = [f"digits-binary--haim_binary_kkt--{init}--s0" for init in ("gaussian", "uniform", "partition")]


def at_commit(mp: pytest.MonkeyPatch, commit: str | None) -> None:
    """What git says of the checkout from now on (None: a tree without git metadata)."""
    mp.setattr(provenance, "_git_commit_once", lambda where: commit)


def _slice(root: Path, mp: pytest.MonkeyPatch, name: str, commit: str, cell: str, suite: Path) -> Path:
    at_commit(mp, None)
    mp.setenv(COMMIT_ENV, commit)
    mp.setattr(defended, "_TRAINED", OrderedDict())   # a bare machine remembers no weights
    pack, ledger = root / f"pack-{name}", root / "local" / "finished.json"
    code, out, err = cli(["bench", str(suite), "--device", "cpu", "--deadline", "600", "--pack", str(pack),
                      "--out", str(root / f"device-{name}"), "--cache", str(root / f"cache-{name}"),
                      "--only", cell, "-q", *(["--finished", str(ledger)] if ledger.exists() else [])])
    assert code == 0, out + err
    mp.delenv(COMMIT_ENV)
    return pack


def build_partial_board(root: Path, *, figures: bool = True, suite: Path = TINY) -> Path:
    """``root/leaderboards/tiny-gpu``: 2 of 3 cells, one from each of two slices at commits ``SLICE_A`` and
    ``SLICE_B``, published at ``HERE``; git stays patched to ``HERE`` only while building."""
    local = root / "local"
    board = root / "leaderboards" / BOARD
    with pytest.MonkeyPatch.context() as mp:
        for name, commit, cell in (("a", SLICE_A, CELLS[0]), ("b", SLICE_B, CELLS[1])):
            pack = _slice(root, mp, name, commit, cell, suite)
            code, out, err = cli(["bench", str(suite), "--unpack", str(pack), "--out", str(local)])
            assert code == 0, out + err
        at_commit(mp, HERE)
        code, out, err = cli(["leaderboard", str(suite), "--results", str(local), "--publish", "--out", str(board),
                          *([] if figures else ["--no-figures"])])
        assert code == 0, out + err
    assert json.loads((board / "results.json").read_text())["header"]["progress"] == "2 of 3 cells"
    return board
