"""Numbered board releases (`leaderboard B --release`): a release names its commit and the sha256 of the board's
MANIFEST.json; releasing an unchanged board names the same release; a changed, committed board becomes the next
release and the older one's manifest and README stay readable under releases/; uncommitted or tampered boards are
refused; exports and the site carry the release id and every row's cost. A copy of the committed ci board in a
fresh git repository."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from _helpers.cli import run_cli

from reconbench.errors import ReconbenchError
from reconbench.leaderboard.cost import board_records, row_cost
from reconbench.leaderboard.export import export_board
from reconbench.leaderboard.manifest import MANIFEST_NAME, RELEASES_NAME, check_manifest, write_manifest
from reconbench.leaderboard.releases import (
    UNRELEASED,
    check_releases,
    make_release,
    read_releases,
    release_label,
    release_line,
)
from reconbench.records import CellRecord

REPO = Path(__file__).resolve().parents[3]


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.org", *args], cwd=repo,
                          check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def repo_board(tmp_path) -> tuple[Path, Path]:
    """A git repository holding a copy of the committed ci board under leaderboards/ci, committed."""
    repo = tmp_path / "repo"
    board = repo / "leaderboards" / "ci"
    shutil.copytree(REPO / "leaderboards" / "ci", board, ignore=shutil.ignore_patterns(RELEASES_NAME, "releases"))
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "board")
    return repo, board


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_release_names_the_commit_and_the_manifest_hash_and_is_not_made_twice(repo_board):
    repo, board = repo_board
    assert release_label(board) == UNRELEASED
    first, new = make_release(board)
    assert new and first.id == "ci-r1" and first.number == 1
    assert first.commit == _git(repo, "rev-parse", "HEAD")
    assert first.manifest_sha256 == _sha(board / MANIFEST_NAME)
    assert first.files == len(json.loads((board / MANIFEST_NAME).read_text())["files"])
    assert check_manifest(board) == []     # the release list is not a file of the manifest
    assert release_label(board) == "ci-r1" and "release ci-r1 (commit" in release_line(board)
    again, new = make_release(board)
    assert not new and again == first and len(read_releases(board).releases) == 1


def test_a_changed_board_is_the_next_release_and_the_older_one_stays_readable(repo_board):
    repo, board = repo_board
    make_release(board)
    old_readme, old_manifest = (board / "README.md").read_text(), (board / MANIFEST_NAME).read_text()
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "r1")
    (board / "README.md").write_text(old_readme + "\nA note.\n")
    write_manifest(board)
    assert release_label(board) == UNRELEASED and "changed since its last release ci-r1" in release_line(board)
    with pytest.raises(ReconbenchError, match="not committed"):
        make_release(board)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "changed")
    second, new = make_release(board)
    assert new and second.id == "ci-r2" and second.commit == _git(repo, "rev-parse", "HEAD")
    kept = board / "releases" / "ci-r1"
    assert (kept / "README.md").read_text() == old_readme
    assert (kept / MANIFEST_NAME).read_text() == old_manifest
    assert _sha(kept / MANIFEST_NAME) == read_releases(board).releases[0].manifest_sha256
    assert check_releases(board) == [] and check_manifest(board) == []
    moved = board.parent / "elsewhere"   # a copy in a folder of another name keeps its releases' names
    shutil.copytree(board, moved)
    assert check_releases(moved) == [] and release_label(moved) == "ci-r2"
    (kept / MANIFEST_NAME).write_text(old_manifest + " ")
    assert any("is not the manifest of release ci-r1" in p for p in check_releases(board))


def test_a_board_in_a_folder_not_named_after_its_suite_is_released_under_its_folders_name(tmp_path):
    """leaderboards/paper-gpu holds suite ``paper``: its releases are ``paper-gpu-r1``, ..., so that a board of the
    same suite in leaderboards/paper cannot release under the same names; a board in its suite's folder keeps
    ``<suite>-r1`` (every CPU board)."""
    repo = tmp_path / "repo"
    for folder in ("ci", "ci-gpu"):
        shutil.copytree(REPO / "leaderboards" / "ci", repo / "leaderboards" / folder,
                        ignore=shutil.ignore_patterns(RELEASES_NAME, "releases"))
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "boards")
    twin, same = repo / "leaderboards" / "ci-gpu", repo / "leaderboards" / "ci"
    assert json.loads((twin / "results.json").read_text())["header"]["suite"] == "ci"
    (mine, new), (theirs, _) = make_release(twin), make_release(same)
    assert new and mine.id == "ci-gpu-r1" and theirs.id == "ci-r1"
    assert read_releases(twin).board == "ci-gpu" and check_releases(twin) == []
    assert release_label(twin) == "ci-gpu-r1" and release_label(same) == "ci-r1"


def test_a_board_that_differs_from_its_manifest_is_not_released(repo_board):
    _, board = repo_board
    (board / "figures" / "extra.png").write_bytes(b"x")
    with pytest.raises(ReconbenchError, match="differs from its MANIFEST.json"):
        make_release(board)
    assert not (board / RELEASES_NAME).exists()


def test_release_from_the_command_line_and_exports_carry_it(repo_board, capsys):
    _, board = repo_board
    code, out, err = run_cli(["leaderboard", "ci", "--out", str(board), "--release"], capsys)
    assert code == 0, err
    assert "released as ci-r1" in out
    rows = list(csv.DictReader(io.StringIO(export_board(board, "csv"))))
    assert rows and {r["release"] for r in rows} == {"ci-r1"}
    data = json.loads(export_board(board, "json"))
    assert data["release"] == "ci-r1" and data["format"] == "reconbench-export/3"
    assert "release ci-r1" in export_board(board, "latex").splitlines()[1]
    assert "release ci-r1" in export_board(board, "markdown").splitlines()[0]
    code, out, err = run_cli(["leaderboard", "ci", "--out", str(board), "--release", "--verify"], capsys)
    assert code != 0 and "run it alone" in err


def test_every_exported_row_carries_its_cells_cost(repo_board):
    _, board = repo_board
    raw = {p.stem: json.loads(p.read_text()) for p in (board / "cells").glob("*.json")}
    for rec in json.loads(export_board(board, "json"))["rows"]:
        cells = [raw[c] for c in rec["cells"] if c in raw]
        assert cells, rec["cells"]
        # summed here from the files, independently of cost.py
        assert rec["device_seconds"] == pytest.approx(sum(c["wall_seconds"] or 0.0 for c in cells), rel=1e-14,
                                                      abs=1e-15)
        assert rec["cost_cells"] == len(cells)
        assert rec["precision"] == " / ".join(sorted({c["spec"]["dtype"] for c in cells}))
        assert rec["device"].startswith("cpu")


def test_row_cost_joins_devices_and_precisions_and_sums_seconds():
    def cell(device: str, dtype: str, seconds: float, gpu: str | None = None, matmul: str | None = None
             ) -> CellRecord:
        policy = {"attack_matmul": matmul, "loss_accumulation_dtype": dtype}   # as reconbench.precision writes it
        prov = {"device": device, **({"precision": policy} if matmul else {})}
        return CellRecord.from_dict({"cell_id": "c", "spec": {"dtype": dtype}, "wall_seconds": seconds,
                                     "provenance": prov, "machine": {"cpu_model": "AMD EPYC", "gpu": gpu}})

    cost = row_cost([cell("cpu", "float64", 1.5), cell("cuda", "float32", 2.25, gpu="H100", matmul="tf32")])
    assert cost.device == "cpu (AMD EPYC) / cuda (H100)"
    # a GPU cell also names its scores' precision (and its target's training, where the record holds it)
    assert cost.precision == "float64 / tf32, scores float64"
    assert cost.device_seconds == 3.75 and cost.cells == 2
    assert cost.text() == "cpu (AMD EPYC) / cuda (H100), float64 / tf32, scores float64, 3.8 s"
    gpu = CellRecord.from_dict({"cell_id": "g", "spec": {"dtype": "float32"}, "wall_seconds": 1.0,
                                "provenance": {"device": "cuda", "precision": {
                                    "training_dtype": None, "attack_matmul": "tf32",
                                    "loss_accumulation_dtype": "float32", "evaluation_dtype": "float64"}},
                                "target": {"train_metrics": {"precision": {
                                    "training_dtype": "float64", "attack_matmul": None,
                                    "loss_accumulation_dtype": "float64"}}}})
    assert row_cost([gpu]).precision == "tf32, training float64, scores float64"
    assert row_cost([]).text() == "n/a"


def test_the_site_lists_the_releases_and_shows_the_cost_column(repo_board):
    from _helpers.sitekit import parse

    from reconbench.leaderboard.site.board import load_board
    from reconbench.leaderboard.site.build import environment, render

    _, board = repo_board
    make_release(board)
    loaded = load_board(board)
    assert loaded.release == "ci-r1" and [r.id for r in loaded.releases] == ["ci-r1"]
    records = board_records(board)
    for table in loaded.tables:
        for row in table.rows:
            assert row.cost is not None
            assert row.cost.device_seconds == pytest.approx(
                sum(records[c.cell_id].wall_seconds or 0.0 for c in row.cells), rel=1e-14, abs=1e-15)
    page = render(environment(), "board.html", board / "results.json", board=loaded, root="../",
                  stamp={"generated": "now", "version": "0", "commit": "c"}, has_claims=False)
    path = board.parent / "page.html"
    path.write_text(page)
    parse(path)   # well formed enough for the site's own parser
    assert 'id="releases"' in page and "<code>ci-r1</code>" in page
    assert page.count('class="num cost"') == sum(len(t.rows) for t in loaded.tables)
