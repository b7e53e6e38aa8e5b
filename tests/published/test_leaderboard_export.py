"""`reconbench leaderboard SUITE --out BOARD --format csv|json|latex|markdown` on every published board (the checks:
tests/_helpers/export_checks.py): the CSV parses to results.json's own numbers, the JSON loads to the same records,
the LaTeX is structurally sound and the Markdown tables are rectangular. A board is named by its suite, which may
differ from its folder's name (leaderboards/paper-gpu holds suite ``paper``)."""

from __future__ import annotations

from typing import Any

import pytest
from _helpers.cli import run_cli
from _helpers.export_checks import REPO, check_csv, check_json, check_latex, check_markdown

BOARDS = sorted(p.parent.name for p in (REPO / "leaderboards").glob("*/results.json"))


@pytest.mark.parametrize("board", BOARDS)
def test_csv_holds_the_numbers_of_results_json(board: str) -> None:
    check_csv(REPO / "leaderboards" / board)


@pytest.mark.parametrize("board", BOARDS)
def test_json_loads_to_the_csv_records(board: str) -> None:
    check_json(REPO / "leaderboards" / board)


@pytest.mark.parametrize("board", BOARDS)
def test_latex_is_structurally_sound(board: str) -> None:
    check_latex(REPO / "leaderboards" / board)


@pytest.mark.parametrize("board", BOARDS)
def test_markdown_tables_are_rectangular(board: str) -> None:
    check_markdown(REPO / "leaderboards" / board)


def test_export_refuses_bad_options(capsys: Any) -> None:
    code, _, err = run_cli(["leaderboard", "ci", "--format", "xlsx"], capsys)
    assert code == 2 and "xlsx" in err
    code, _, err = run_cli(["leaderboard", "ci", "--format", "csv", "--verify"], capsys)
    assert code == 2 and "does not combine" in err
    code, _, err = run_cli(["leaderboard", "ci", "--format", "latex", "--columns", "no such column"], capsys)
    assert code == 2 and "no column 'no such column'" in err
