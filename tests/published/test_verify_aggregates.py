"""`--verify`'s row check (``verify.check_aggregates``) on a published board: every table row names exactly the cells
the suite's plan and the board's cells give, and its held-out nulls are those cells'. Each edit below keeps
results.json consistent with itself, so the re-aggregation of the cells a row names (``check_tables``) passes it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from reconbench.bench.suite import load_suite
from reconbench.leaderboard.verify import check_aggregates, check_tables

ROOT = Path(__file__).resolve().parents[2]
BOARD = "precision-cpu"


@pytest.fixture
def board(tmp_path: Path) -> Path:
    out = tmp_path / BOARD
    shutil.copytree(ROOT / "leaderboards" / BOARD, out)
    return out


def _edit(board: Path, change: Any) -> None:
    path = board / "results.json"
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def _rows_with_every_value(data: dict[str, Any]) -> dict[str, Any]:
    """The first pool row with two or more cells whose every column has a value per cell."""
    return next(r for r in data["tables"]["pool"]
                if len(r["cells"]) > 1 and all(len(m["values"]) == len(r["cells"]) for m in r["metrics"].values()))


def test_the_published_board_passes():
    assert check_aggregates(load_suite(BOARD), ROOT / "leaderboards" / BOARD) == []


def test_a_row_that_leaves_out_a_finished_seed_is_refused(board):
    def drop_last(data: dict[str, Any]) -> None:
        row = _rows_with_every_value(data)
        row["cells"], row["seeds"] = row["cells"][:-1], row["seeds"][:-1]
        for m in row["metrics"].values():   # the values, and so the mean, of the cells it still names
            m["values"] = m["values"][:-1]

    _edit(board, drop_last)
    assert check_tables(board) == []   # consistent with itself
    problems = check_aggregates(load_suite(BOARD), board)
    assert problems and "averages cells" in problems[0] and "the cells give" in problems[0], problems


def test_a_held_out_null_edited_beside_its_number_is_refused(board):
    def raise_null(data: dict[str, Any]) -> None:
        row = data["tables"]["blind"][0]
        m = next(m for m in row["metrics"].values() if m.get("null"))
        m["null"]["max"] = m["null"]["max"] + 1

    _edit(board, raise_null)
    assert check_tables(board) == []
    problems = check_aggregates(load_suite(BOARD), board)
    assert len(problems) == 1 and "blind row" in problems[0] and "held-out null" in problems[0], problems


def test_a_row_removed_is_refused(board):
    _edit(board, lambda data: data["tables"]["oracle"].pop())
    problems = check_aggregates(load_suite(BOARD), board)
    assert len(problems) == 1 and problems[0].startswith("oracle table: no row "), problems


def test_a_targets_row_edited_is_refused(board):
    def better_target(data: dict[str, Any]) -> None:
        data["targets"][0]["test_error"] = data["targets"][0]["test_error"] / 2

    _edit(board, better_target)
    problems = check_aggregates(load_suite(BOARD), board)
    assert len(problems) == 1 and problems[0].startswith("results.json targets.0.test_error is "), problems


def test_a_comparison_value_edited_is_refused(tmp_path):
    board = tmp_path / "cpu-mini"
    shutil.copytree(ROOT / "leaderboards" / "cpu-mini", board)
    assert check_aggregates(load_suite("cpu-mini"), board) == []

    def shift(data: dict[str, Any]) -> None:
        comp = next(iter(data["comparisons"].values()))
        point = comp["rows"][0]["values"][0]
        metric = next(m for m in point.values() if isinstance(m, dict) and m.get("values"))
        metric["values"] = [v + 1 for v in metric["values"]]

    _edit(board, shift)
    problems = check_aggregates(load_suite("cpu-mini"), board)
    assert len(problems) == 1 and problems[0].startswith("results.json comparisons."), problems


@pytest.mark.parametrize(("change", "where"), [
    (lambda d: d["header"]["cells"].update(planned=d["header"]["cells"]["planned"] + 40), "header.cells"),
    (lambda d: d["header"].update(cell_seconds=d["header"]["cell_seconds"] / 10), "header.cell_seconds"),
    (lambda d: d["header"].update(git_commits=["0000000"]), "header.git_commits"),
    (lambda d: d.update(not_run=["mnist-binary--haim_binary_kkt-f64--gaussian--s9"]), "not_run"),
], ids=["planned", "cell-seconds", "commits", "not-run"])
def test_a_header_number_the_cells_give_edited_is_refused(board, change, where):
    _edit(board, change)
    problems = check_aggregates(load_suite(BOARD), board)
    assert len(problems) == 1 and problems[0].startswith(f"results.json {where} is "), problems


def test_a_failed_attack_left_out_of_the_header_is_refused(tmp_path):
    board = tmp_path / "cpu-mini"
    shutil.copytree(ROOT / "leaderboards" / "cpu-mini", board)
    _edit(board, lambda d: d["header"].update(attack_failed=d["header"]["attack_failed"][1:]))
    problems = check_aggregates(load_suite("cpu-mini"), board)
    assert len(problems) == 1 and problems[0].startswith("results.json header.attack_failed is "), problems
