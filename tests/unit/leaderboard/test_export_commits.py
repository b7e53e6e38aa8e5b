"""Each exported row names the commit its cells ran at (``commit``): on a board run at one commit, its cells' own
commit; on a board grown over slices, whose cells' records name none, the commit ``header.cell_commits`` lists each
cell under; and ``--verify`` refuses a ``cell_commits`` whose ids are not the board's cells."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from reconbench.leaderboard.board_progress import cell_commits, row_commits
from reconbench.leaderboard.export import export_board
from reconbench.leaderboard.verify import _cell_ids_problems
from reconbench.records import BoardHeader, CellRecord, CommitCells

REPO = Path(__file__).resolve().parents[3]
A, B, HERE = "a" * 40, "b" * 40, "c" * 40


def record(cid: str, commit: str | None) -> CellRecord:
    return CellRecord.from_dict({"cell_id": cid, "provenance": {"git_commit": commit}})


def test_every_csv_and_json_row_of_the_ci_board_names_its_cells_commit():
    """The committed board's cells, read as plain JSON, give each row's commit independently of the export."""
    board = REPO / "leaderboards" / "ci"
    own = {p.stem: json.loads(p.read_text())["provenance"]["git_commit"] for p in (board / "cells").glob("*.json")}
    rows = list(csv.DictReader(io.StringIO(export_board(board, "csv"))))
    assert rows and "commit" in rows[0]
    for r in rows:
        cells = r["cells"].split(";")
        assert r["commit"] == ";".join(dict.fromkeys(own[c] for c in cells)), r
    doc = json.loads(export_board(board, "json"))
    assert "commit" in doc["fields"]
    assert all(row["commit"] == list(dict.fromkeys(own[c] for c in row["cells"])) for row in doc["rows"])
    assert {c for row in doc["rows"] for c in row["commit"]} == set(doc["git_commits"])


def test_a_slices_cell_takes_the_commit_its_header_lists_it_under():
    header = BoardHeader(git_commits=[A, B, HERE], cell_commits=[CommitCells(A, 1, ["1"], ["x"]),
                                                                 CommitCells(B, 1, ["2"], ["y"]),
                                                                 CommitCells(HERE, 1, [], ["z"])])
    records = {"x": record("x", None), "y": record("y", None), "z": record("z", HERE)}
    commits = cell_commits(header, records)
    assert commits == {"x": A, "y": B, "z": HERE}
    assert row_commits(commits, ["y", "x", "z", "y"]) == [B, A, HERE]
    # a board of one commit whose header lists no ids names that commit for each cell whose record names none
    one = BoardHeader(git_commits=[A], cell_commits=[CommitCells(A, 2, ["1"])])
    assert cell_commits(one, {"x": record("x", None), "y": record("y", None)}) == {"x": A, "y": A}
    # several commits and no ids: a cell whose record names none has no commit to give
    assert cell_commits(BoardHeader(git_commits=[A, B]), {"x": record("x", None)}) == {}


def test_verify_refuses_cell_ids_that_are_not_the_boards_cells():
    records = [record("x", None), record("y", None), record("z", HERE)]
    good = [CommitCells(A, 1, ["1"], ["x"]), CommitCells(B, 1, ["2"], ["y"]), CommitCells(HERE, 1, [], ["z"])]
    assert _cell_ids_problems(good, records) == []
    assert _cell_ids_problems([CommitCells(A, 3, ["1"])], records) == []   # published before ids were listed
    swapped = [CommitCells(A, 1, ["1"], ["x"]), CommitCells(B, 1, ["2"], ["z"]), CommitCells(HERE, 1, [], ["y"])]
    (problem,) = _cell_ids_problems(swapped, records)
    assert "1 under another commit than their record's (first: z)" in problem and "publish the board again" in problem
    (problem,) = _cell_ids_problems([CommitCells(A, 2, ["1"], ["x", "w"]), CommitCells(HERE, 1, [], ["z"])], records)
    assert "1 not on the board (first: w)" in problem and "1 of the board's not listed (first: y)" in problem
    (problem,) = _cell_ids_problems([CommitCells(A, 2, ["1"], ["x", "x", "y"]), CommitCells(HERE, 1, [], ["z"])],
                                    records)
    assert "1 listed twice" in problem and f"a count that is not its ids' at {A[:12]}" in problem
