"""An export names the board by its folder and its suite apart: a board in a folder named otherwise
(``leaderboards/paper-gpu`` holds suite ``paper``) is ``"board": "paper-gpu"``, ``"suite": "paper"`` in the JSON, and
``paper-gpu (suite paper)`` in the LaTeX and Markdown titles; a board in its suite's folder (every published board)
exports as before, its suite's name in both fields. Tried on copies of the published ``ci`` board."""

from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path

import pytest

from reconbench.leaderboard.export import EXPORT_FORMAT, export_board

REPO = Path(__file__).resolve().parents[3]
CI = REPO / "leaderboards" / "ci"


@pytest.fixture
def renamed(tmp_path: Path) -> Path:
    """The ci board in a folder named ``ci-gpu``, without its releases (so that nothing names it ``ci``)."""
    board = tmp_path / "ci-gpu"
    shutil.copytree(CI, board, ignore=shutil.ignore_patterns("candidates", "figures", "releases"))
    (board / "RELEASES.json").unlink()
    return board


def _without_release(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "release"} for r in rows]


def test_the_json_names_the_board_by_its_folder_and_the_suite_apart(renamed: Path) -> None:
    doc, own = json.loads(export_board(renamed, "json")), json.loads(export_board(CI, "json"))
    assert (doc["board"], doc["suite"]) == ("ci-gpu", "ci")
    assert (own["board"], own["suite"]) == ("ci", "ci")   # the published board: as before, and its suite apart
    assert doc["format"] == own["format"] == EXPORT_FORMAT == "reconbench-export/3"
    assert _without_release(doc["rows"]) == _without_release(own["rows"])   # the same records


def test_the_wide_titles_name_the_board_and_its_suite_where_they_differ(renamed: Path) -> None:
    latex, markdown = export_board(renamed, "latex"), export_board(renamed, "markdown")
    assert latex.splitlines()[1] == "% ci-gpu (suite ci), release unreleased"
    assert markdown.splitlines()[0] == "_ci-gpu \\(suite ci\\), release unreleased_"
    assert "% ci-gpu (suite ci): pool selection;" in latex and "**ci-gpu \\(suite ci\\): pool selection;" in markdown
    own = export_board(CI, "latex")
    assert own.splitlines()[1].startswith("% ci, release ci-r") and "% ci: pool selection;" in own
    assert "(suite " not in own and "(suite " not in export_board(CI, "markdown")


def test_the_csv_is_the_published_boards_but_for_the_release(renamed: Path) -> None:
    rows = list(csv.DictReader(io.StringIO(export_board(renamed, "csv"))))
    own = list(csv.DictReader(io.StringIO(export_board(CI, "csv"))))
    assert rows and _without_release(rows) == _without_release(own)
    assert {r["release"] for r in rows} == {"unreleased"}
