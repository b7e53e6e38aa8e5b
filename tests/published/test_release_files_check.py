"""`--verify`'s check of a board's releases (``releases.check_releases``) against the manifests the board holds: each
release's count of files, and the README.md kept for an older release against its archived manifest."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from reconbench.leaderboard.releases import check_releases

ROOT = Path(__file__).resolve().parents[2]
BOARDS = sorted(p.parent for p in ROOT.glob("leaderboards/*/RELEASES.json"))


@pytest.mark.parametrize("board", BOARDS, ids=[b.name for b in BOARDS])
def test_every_published_board_passes(board):
    assert check_releases(board) == []


@pytest.fixture
def board(tmp_path: Path) -> Path:
    out = tmp_path / "cpu-mini"
    shutil.copytree(ROOT / "leaderboards" / "cpu-mini", out)
    return out


def test_an_older_release_readme_edited_is_refused(board):
    readme = sorted(board.glob("releases/*/README.md"))[0]
    readme.write_text(readme.read_text().replace("|", "!", 1))
    problems = check_releases(board)
    assert len(problems) == 1 and problems[0].startswith(f"{readme} is not the README.md of release "), problems


def test_a_release_count_of_files_edited_is_refused(board):
    path = board / "RELEASES.json"
    data = json.loads(path.read_text())
    data["releases"][-1]["files"] += 1   # the current release: its manifest is the board's own
    data["releases"][0]["files"] += 1    # an archived one
    path.write_text(json.dumps(data))
    problems = check_releases(board)
    assert len(problems) == 2 and all("file(s), its manifest lists" in p for p in problems), problems
