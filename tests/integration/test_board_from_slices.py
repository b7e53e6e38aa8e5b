"""A board that grows over slices: cells merged from packs run at several clean commits are published, the board says
"k of N cells" and which commits its cells ran at, and ``--verify`` passes; a pack run at a dirty commit, and cells
run directly in the results folder at another commit, are refused at publish as one line.

Each slice runs on a "device" with no git metadata (the commit read from git is None there) and names its commit
through ``RECONBENCH_SLICE_COMMIT``, as ``benchmarks/gpu/slice.sh`` does on a lent machine."""

from __future__ import annotations

import json
from collections import OrderedDict
from pathlib import Path

import pytest
from _helpers.cli import run_cli

from reconbench import provenance
from reconbench.bench.slice_pack import COMMIT_ENV
from reconbench.targets import defended

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TINY = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu" / "tiny.toml"
#: fake clean commits: two slices, and the checkout that publishes
SLICE_A, SLICE_B, HERE = "a" * 40, "b" * 40, "c" * 40
CELLS = [f"digits-binary--haim_binary_kkt--{init}--s0" for init in ("gaussian", "uniform", "partition")]


def at_commit(monkeypatch: pytest.MonkeyPatch, commit: str | None) -> None:
    """What git says of the checkout from now on (None: a tree without git metadata)."""
    monkeypatch.setattr(provenance, "_git_commit_once", lambda where: commit)


def run_slice(tmp_path: Path, capsys, monkeypatch, name: str, commit: str, cell: str) -> Path:
    """One slice of the tiny suite on a bare machine (own cache and results folder) that runs ``cell``, continuing
    from the ledger of ``tmp_path/local`` when there is one (the target's state and card travel with it); its pack."""
    at_commit(monkeypatch, None)
    monkeypatch.setenv(COMMIT_ENV, commit)
    monkeypatch.setattr(defended, "_TRAINED", OrderedDict())   # a bare machine remembers no weights
    pack = tmp_path / f"pack-{name}"
    ledger = tmp_path / "local" / "finished.json"
    code, out, err = run_cli(["bench", str(TINY), "--device", "cpu", "--deadline", "600", "--pack", str(pack),
                              "--out", str(tmp_path / f"device-{name}"), "--cache", str(tmp_path / f"cache-{name}"),
                              "--only", cell, "-q", *(["--finished", str(ledger)] if ledger.exists() else [])],
                             capsys)
    assert code == 0, out + err
    monkeypatch.delenv(COMMIT_ENV)
    assert json.loads((pack / "manifest.json").read_text())["commit"] == commit
    return pack


def unpack(pack: Path, local: Path, capsys) -> None:
    code, out, err = run_cli(["bench", str(TINY), "--unpack", str(pack), "--out", str(local)], capsys)
    assert code == 0, out + err


def publish(local: Path, board: Path, capsys) -> tuple[int, str]:
    code, out, err = run_cli(["leaderboard", str(TINY), "--results", str(local), "--publish", "--out", str(board),
                              "--no-figures"], capsys)
    return code, out + err


def test_slices_at_two_commits_publish_one_board_that_verifies(tmp_path, capsys, monkeypatch):
    local = tmp_path / "local"
    unpack(run_slice(tmp_path, capsys, monkeypatch, "a", SLICE_A, CELLS[0]), local, capsys)
    unpack(run_slice(tmp_path, capsys, monkeypatch, "b", SLICE_B, CELLS[1]), local, capsys)
    cells = {p.stem: json.loads(p.read_text()) for p in (local / "cells").glob("*.json")}
    assert sorted(cells) == sorted(CELLS[:2])
    # the device had no git metadata: each cell names the commit its slice was given (RECONBENCH_SLICE_COMMIT)
    assert {c["cell_id"]: c["provenance"]["git_commit"] for c in cells.values()} == {CELLS[0]: SLICE_A,
                                                                                    CELLS[1]: SLICE_B}

    at_commit(monkeypatch, HERE)
    board = tmp_path / "board"
    code, text = publish(local, board, capsys)
    assert code == 0, text
    header = json.loads((board / "results.json").read_text())["header"]
    assert header["progress"] == "2 of 3 cells"
    assert header["cells"] == {"planned": 3, "ok": 2, "failed": 0, "not_run": 1, "stale": 0}
    by_commit = {c["commit"]: c for c in header["cell_commits"]}
    assert sorted(by_commit) == [SLICE_A, SLICE_B]
    assert header["git_commits"] == [SLICE_A, SLICE_B]   # the packs' commits, not the records' missing one
    assert [by_commit[c]["cells"] for c in (SLICE_A, SLICE_B)] == [1, 1]
    manifests = {json.loads(p.read_text())["slice_pack"]["commit"]: json.loads(p.read_text())["slice_pack"]
                 for p in (local / "invocations").glob("*.json")}
    for commit in (SLICE_A, SLICE_B):   # each commit names the pack that brought its cell
        assert by_commit[commit]["packs"] == [manifests[commit]["manifest_sha256"]]
    readme = (board / "README.md").read_text()
    top = readme.split("\n- **Produced by:**")[0]
    assert "**Partial board: 2 of 3 cells.**" in top and "grows as slices return" in top
    assert f"`{SLICE_A}` (1 cell(s), 1 slice pack(s))" in readme
    assert f"`{SLICE_B}` (1 cell(s), 1 slice pack(s))" in readme
    assert f"Not run (1): `{CELLS[2]}`" in readme
    code, out, err = run_cli(["leaderboard", str(TINY), "--out", str(board), "--verify"], capsys)
    assert code == 0, out + err

    # a cell then run directly into the folder at another commit than this checkout's: refused as before slices
    at_commit(monkeypatch, "e" * 40)
    code, out, err = run_cli(["bench", str(TINY), "--device", "cpu", "--out", str(local), "--cache",
                              str(tmp_path / "cache-here"), "--only", CELLS[2], "--resume", "-q"], capsys)
    assert code == 0, out + err
    at_commit(monkeypatch, HERE)
    code, text = publish(local, tmp_path / "board2", capsys)
    assert code != 0
    line = next(x for x in text.splitlines() if "refusing to publish" in x)
    assert f"cells ran at {'e' * 12}, this checkout is {HERE[:12]}" in line
    assert not (tmp_path / "board2" / "README.md").exists()


def test_a_pack_run_at_a_dirty_commit_is_refused_at_publish(tmp_path, capsys, monkeypatch):
    local = tmp_path / "local"
    unpack(run_slice(tmp_path, capsys, monkeypatch, "a", SLICE_A, CELLS[0]), local, capsys)
    dirty = "d" * 40 + "-dirty"
    unpack(run_slice(tmp_path, capsys, monkeypatch, "d", dirty, CELLS[1]), local, capsys)
    at_commit(monkeypatch, HERE)
    code, text = publish(local, tmp_path / "board", capsys)
    assert code != 0
    refusals = [x for x in text.splitlines() if "refusing to publish" in x]
    assert len(refusals) == 1 and "slice packs ran at a dirty or unknown commit" in refusals[0]
    assert dirty in refusals[0] and "RECONBENCH_SLICE_COMMIT" in refusals[0]
    assert SLICE_A not in refusals[0]   # the clean pack is not the problem
    assert "re-run `reconbench bench SUITE`" not in refusals[0]   # its own fix, not the one of a folder's cells
    # the checkout that renders must be clean too
    at_commit(monkeypatch, HERE + "-dirty")
    (local / "cells" / f"{CELLS[1]}.json").unlink()
    code, text = publish(local, tmp_path / "board", capsys)
    assert code != 0 and "this checkout is dirty" in text
