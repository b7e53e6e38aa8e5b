"""A board's MANIFEST.json: what it lists, and `leaderboard --verify` failing, with one line naming the file, on each
tampering that re-scoring and re-rendering cannot see (figures, candidates, protocols, model cards, a cell field
under a recomputed seal), on a copy of the committed ci board."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from _helpers.cli import run_cli

from reconbench.bench.entries import entry_text
from reconbench.bench.seal import seal_problem, sealed
from reconbench.errors import ReconbenchError
from reconbench.leaderboard.index_table import read_notes
from reconbench.leaderboard.manifest import MANIFEST_NAME, board_files, check_manifest, read_manifest, write_manifest
from reconbench.leaderboard.verify import check_stored
from reconbench.provenance import LOCK_FILE

REPO = Path(__file__).resolve().parents[3]
BOARDS = sorted(p.parent.name for p in (REPO / "leaderboards").glob(f"*/{MANIFEST_NAME}"))


@pytest.fixture(autouse=True)
def sandbox(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RECONBENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("RECONBENCH_DOWNLOAD", "0")


@pytest.fixture
def board(tmp_path) -> Path:
    """A copy of the committed ci board, every file of it."""
    lb = tmp_path / "lb"
    shutil.copytree(REPO / "leaderboards" / "ci", lb)
    return lb


def refused(lb: Path, capsys: Any, names: str) -> str:
    """`leaderboard ci --verify` on ``lb`` exits non-zero with one error line on stderr that names ``names``."""
    code, out, err = run_cli(["leaderboard", "ci", "--out", str(lb), "--verify"], capsys)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code != 0, out[-500:]
    assert len(lines) == 1 and lines[0].startswith("error:"), err[-1000:]
    assert "Traceback" not in out + err and "internal error" not in lines[0]
    assert names in lines[0], lines[0]
    return lines[0]


# -- what the manifest lists -------------------------------------------------------------------------------------
def test_the_manifest_lists_every_file_with_its_sha256_and_size(tmp_path):
    folder = tmp_path / "b"
    (folder / "figures").mkdir(parents=True)
    (folder / "README.md").write_bytes(b"abc")
    (folder / "figures" / "f.png").write_bytes(b"")
    (folder / LOCK_FILE).write_bytes(b"")  # the writers' lock is not part of the board
    assert write_manifest(folder) == 2
    listed = read_manifest(folder)
    assert sorted(listed) == ["README.md", "figures/f.png"]
    # the FIPS 180-2 test vectors of "abc" and of the empty message
    assert listed["README.md"].sha256 == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    assert listed["README.md"].bytes == 3
    assert listed["figures/f.png"].sha256 == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    assert check_manifest(folder) == []


@pytest.mark.parametrize("name", BOARDS)
def test_every_published_board_holds_exactly_the_files_its_manifest_lists(name):
    board = REPO / "leaderboards" / name
    assert check_manifest(board) == []
    listed = read_manifest(board)
    for rel in ("README.md", "results.json"):
        assert rel in listed
    for rel, f in listed.items():  # re-hashed here, independently of the module
        data = (board / rel).read_bytes()
        assert (hashlib.sha256(data).hexdigest(), len(data)) == (f.sha256, f.bytes), rel


def test_every_published_board_has_a_manifest():
    """The boards are those leaderboards/index-notes.toml lists (a board that disappears fails here until its entry is
    removed on purpose; benchmarks/gpu/after_occasion.py adds a new one), each folder with a results.json holds a
    manifest, and the list is never empty (a glob that found nothing would pass vacuously)."""
    listed = list(read_notes(REPO / "leaderboards"))
    with_results = sorted(p.parent.name for p in (REPO / "leaderboards").glob("*/results.json"))
    assert BOARDS == with_results == sorted(listed)
    assert len(listed) >= 10 and "ci" in listed


def test_a_link_in_a_board_is_refused(tmp_path):
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "x").symlink_to(tmp_path)
    with pytest.raises(ReconbenchError, match="not a plain file"):
        board_files(tmp_path / "b")


# -- --verify fails on each tampering, naming the file -------------------------------------------------------------
def _replace_figure(lb: Path) -> str:
    (lb / "figures" / "reconstructions.png").write_bytes((lb / "figures" / "ssim_vs_margin.png").read_bytes())
    return "figures/reconstructions.png"


def _delete_figure(lb: Path) -> str:
    (lb / "figures" / "ssim_vs_margin.png").unlink()
    return "figures/ssim_vs_margin.png"


def _foreign_figure(lb: Path) -> str:
    (lb / "figures" / "extra.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    return "figures/extra.png"


def _delete_protocol(lb: Path) -> str:
    path = sorted((lb / "protocols").glob("*.json"))[0]
    path.unlink()
    return f"protocols/{path.name}"


def _edit_threshold(lb: Path) -> str:
    path = sorted((lb / "protocols").glob("*.json"))[0]
    text = path.read_text()
    assert '"good_threshold":' in text
    data = json.loads(text)

    def walk(d: Any) -> None:
        if isinstance(d, dict):
            for k, v in d.items():
                if k == "good_threshold" and isinstance(v, (int, float)):
                    d[k] = v / 2
                else:
                    walk(v)
    walk(data)
    path.write_text(json.dumps(data, sort_keys=True, separators=(",", ":")) + "\n")
    return f"protocols/{path.name}"


def _edit_test_error(lb: Path) -> str:
    path = sorted((lb / "targets").glob("*.json"))[0]
    data = json.loads(path.read_text())
    data["metrics"]["test_error"] = 0.0
    path.write_text(json.dumps(data))
    return f"targets/{path.name}"


def _resealed_cell_edit(edit: Callable[[dict[str, Any]], None]) -> Callable[[Path], str]:
    def tamper(lb: Path) -> str:
        path = sorted((lb / "cells").glob("*.json"))[0]
        entry = json.loads(path.read_text())
        edit(entry)
        entry = sealed(entry)
        assert seal_problem(entry) is None  # the seal alone no longer catches it
        path.write_text(entry_text(entry))
        return f"cells/{path.name}"
    return tamper


def _pool(entry: dict[str, Any]) -> dict[str, Any]:
    return dict(entry["selections"]["pool"])


TAMPERING: dict[str, Callable[[Path], str]] = {
    "figure-replaced": _replace_figure,
    "figure-deleted": _delete_figure,
    "figure-foreign": _foreign_figure,
    "protocol-deleted": _delete_protocol,
    "protocol-threshold": _edit_threshold,
    "card-test-error": _edit_test_error,
    "cell-seed": _resealed_cell_edit(lambda e: e.update(seed=int(e["seed"]) + 7)),
    "cell-attack-loss": _resealed_cell_edit(lambda e: e["selections"]["pool"].update(attack_loss=0.5)),
    "cell-attack-seconds": _resealed_cell_edit(lambda e: e.update(attack_seconds=0.001)),
}


@pytest.mark.parametrize("what", list(TAMPERING))
def test_verify_fails_naming_the_tampered_file(what, board, capsys):
    rel = TAMPERING[what](board)
    line = refused(board, capsys, str(board / rel))
    assert MANIFEST_NAME in line


def test_deleting_every_stored_candidates_file_fails_verify(board, capsys):
    shutil.rmtree(board / "candidates")
    refused(board, capsys, "candidates")


def test_deleted_candidates_fail_verify_even_with_the_manifest_rewritten(board, capsys):
    """Re-scoring nothing is a failure, not a pass: results.json names the cells the board stores candidates of."""
    recorded = json.loads((board / "results.json").read_text())["stored_candidates"]
    assert recorded
    shutil.rmtree(board / "candidates")
    write_manifest(board)  # the manifest made to agree: the stored-candidates check must still fail
    problems = check_stored(board)
    assert len(problems) == len(recorded) and all(any(c in p for p in problems) for c in recorded)
    refused(board, capsys, recorded[0])


def test_a_missing_manifest_fails_verify_with_the_fix(board, capsys):
    (board / MANIFEST_NAME).unlink()
    line = refused(board, capsys, MANIFEST_NAME)
    assert "missing" in line and "--slim" in line


def test_a_damaged_manifest_fails_verify(board, capsys):
    (board / MANIFEST_NAME).write_text("{not json")
    refused(board, capsys, MANIFEST_NAME)


def test_the_lock_files_of_a_writer_are_not_foreign(board):
    (board / (LOCK_FILE + ".json")).write_text("{}")
    assert check_manifest(board) == []


def test_slim_writes_the_manifest_and_the_board_verifies(board, capsys):
    (board / MANIFEST_NAME).unlink()
    code, out, err = run_cli(["leaderboard", "ci", "--out", str(board), "--slim"], capsys)
    assert code == 0, err
    assert check_manifest(board) == []
    assert read_manifest(board).keys() == board_files(board).keys()
    code, out, err = run_cli(["leaderboard", "ci", "--out", str(board), "--verify"], capsys)
    assert code == 0, err
    assert "5 stored cell(s) re-scored" in out


def test_a_submission_is_not_added_to_a_board_that_differs_from_its_manifest(board, tmp_path, capsys):
    """Adding rewrites the manifest: on a tampered board it would list the tampering as published."""
    _foreign_figure(board)
    (tmp_path / "sub.json").write_text("{}")
    code, out, err = run_cli(["leaderboard", "add", str(tmp_path / "sub.json"), "--board", str(board)], capsys)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code != 0 and len(lines) == 1 and "figures/extra.png" in lines[0] and MANIFEST_NAME in lines[0], err
    assert not (board / "figures" / "extra.png").exists() or check_manifest(board) != []
