"""Hostile boards: names and paths read from a board's files (figures in results.json, cell ids, recipe keys) never
make a reader or writer leave the folder the user named; each case ends with one line naming the file and the fix,
and nothing is written outside the output folder."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest
from _helpers.cli import run_cli
from _helpers.sitekit import BOARD, fixture_leaderboards

from reconbench.safe_paths import UnsafePathError, check_name, inside, member


@pytest.fixture
def boards(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the ci board three folders down, so that ``../../..`` from it still lands inside tmp_path."""
    monkeypatch.chdir(tmp_path)
    return fixture_leaderboards(tmp_path / "a" / "b")


def refused(args: list[str], capsys: Any, expect: str) -> str:
    code, out, err = run_cli(args, capsys)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code != 0, out[-300:]
    assert "Traceback" not in err and len(lines) == 1, err[-1500:]
    assert "internal error" not in lines[0] and expect in lines[0], lines[0]
    return lines[0]


def everything_under(root: Path) -> set[Path]:
    return {p for p in root.rglob("*")}


# -- the helpers themselves ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "..\\x", "x\ny", "a\x00b", "x" * 300])
def test_a_name_that_is_not_one_plain_file_name_is_refused(name: str) -> None:
    with pytest.raises(UnsafePathError, match="one plain file name"):
        check_name(name, "cell id")


@pytest.mark.parametrize("name", ["digits-binary--haim_binary_kkt--gaussian--s0", "t@lr=0.1,wd=1e-3", "..x", "a.b"])
def test_plain_names_pass(name: str, tmp_path: Path) -> None:
    assert member(tmp_path, name, ".json", "cell id") == tmp_path / f"{name}.json"


@pytest.mark.parametrize("rel", ["../x.png", "figures/../../x.png", "/etc/passwd", "~/x.png", "C:\\x.png", "a\x00b"])
def test_a_relative_path_that_leaves_its_root_is_refused(rel: str, tmp_path: Path) -> None:
    with pytest.raises(UnsafePathError, match="leaves"):
        inside(tmp_path / "root", rel, "figure")


def test_a_link_that_leads_outside_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "figures").mkdir(parents=True)
    (tmp_path / "secret.png").write_text("outside")
    (root / "figures" / "f.png").symlink_to(tmp_path / "secret.png")
    with pytest.raises(UnsafePathError, match="through a link"):
        inside(root, "figures/f.png", "figure")
    (root / "figures" / "g.png").write_text("inside")
    assert inside(root, "figures/g.png", "figure") == root / "figures" / "g.png"


# -- reconbench site -------------------------------------------------------------------------------------------------
def _edit_results(board: Path, edit: Any) -> None:
    data = json.loads((board / "results.json").read_text())
    edit(data)
    (board / "results.json").write_text(json.dumps(data))


def test_site_does_not_follow_a_figure_path_out_of_the_board(boards: Path, tmp_path: Path, capsys: Any) -> None:
    board = boards / BOARD
    (tmp_path / "PAYLOAD.txt").write_text("a file outside the board")
    rel = os.path.relpath(tmp_path / "PAYLOAD.txt", board)  # ../../../PAYLOAD.txt
    _edit_results(board, lambda d: d["figures"]["reconstructions"].update(file=rel))
    before = everything_under(tmp_path)
    line = refused(["site", "--leaderboards", str(boards), "--out", str(tmp_path / "a" / "site"), "--no-images"],
                   capsys, "results.json")
    assert "figure" in line and "restore" in line
    assert everything_under(tmp_path) - before <= {tmp_path / "a" / ".site.lock"}


def test_site_refuses_a_figure_that_is_not_an_image(boards: Path, tmp_path: Path, capsys: Any) -> None:
    board = boards / BOARD
    _edit_results(board, lambda d: d["figures"]["reconstructions"].update(file="cells/" + next(
        (board / "cells").glob("*.json")).name))
    refused(["site", "--leaderboards", str(boards), "--out", str(tmp_path / "site"), "--no-images"], capsys,
            "not an image")


def test_site_does_not_follow_a_figure_link_out_of_the_board(boards: Path, tmp_path: Path, capsys: Any) -> None:
    board = boards / BOARD
    (tmp_path / "secret.png").write_text("outside")
    (board / "figures" / "reconstructions.png").unlink()
    (board / "figures" / "reconstructions.png").symlink_to(tmp_path / "secret.png")
    refused(["site", "--leaderboards", str(boards), "--out", str(tmp_path / "site"), "--no-images"], capsys,
            "through a link")
    assert not (tmp_path / "site").exists()


@pytest.mark.parametrize("cell_id", ["../../../X", "..", "a/b", "x\ny"])
def test_site_writes_no_page_for_a_cell_id_that_leaves_the_site(cell_id: str, boards: Path, tmp_path: Path,
                                                                 capsys: Any) -> None:
    path = next((boards / BOARD / "cells").glob("*.json"))
    rec = json.loads(path.read_text())
    rec["cell_id"] = cell_id
    path.write_text(json.dumps(rec))
    before = everything_under(tmp_path)
    line = refused(["site", "--leaderboards", str(boards), "--out", str(tmp_path / "a" / "site"), "--no-images"],
                   capsys, "cell id")
    assert path.name in line and "one plain file name" in line
    assert everything_under(tmp_path) - before <= {tmp_path / "a" / ".site.lock"}
    assert not list(tmp_path.rglob("X.html"))


def test_verify_refuses_a_recipe_key_that_leaves_the_board(boards: Path, capsys: Any) -> None:
    board = boards / BOARD
    path = next((board / "cells").glob("*.json"))
    rec = json.loads(path.read_text())
    rec["target"]["recipe_key"] = "../../../../etc/passwd"
    path.write_text(json.dumps(rec))
    from reconbench.leaderboard.board_cards import load_board_card

    with pytest.raises(UnsafePathError, match="recipe key"):
        load_board_card(board, rec["target"]["recipe_key"], None)


def test_two_site_builds_into_one_folder_do_not_race(boards: Path, tmp_path: Path, capsys: Any) -> None:
    """The second build while the first holds the folder's lock is refused with one line; the first completes."""
    from reconbench.leaderboard.site import build as site_build

    out = tmp_path / "site"
    held = threading.Event()
    release = threading.Event()
    real = site_build.check_replaceable

    def slow_check(folder: Path) -> None:  # the first build waits inside its lock until the second has been refused
        real(folder)
        held.set()
        release.wait(20)

    errors: list[BaseException] = []

    def first() -> None:
        try:
            site_build.build_site(boards, out, images=False)
        except BaseException as exc:  # noqa: BLE001 (reported below)
            errors.append(exc)

    site_build.check_replaceable = slow_check  # type: ignore[assignment]
    try:
        t = threading.Thread(target=first)
        t.start()
        assert held.wait(20)
        site_build.check_replaceable = real  # type: ignore[assignment]
        refused(["site", "--leaderboards", str(boards), "--out", str(out), "--no-images"], capsys,
                "being written by another")
        release.set()
        t.join(60)
    finally:
        site_build.check_replaceable = real  # type: ignore[assignment]
        release.set()
    assert not errors and (out / "index.html").is_file()


MALFORMED_CELLS = {
    "runs-of-numbers": lambda rec: rec.update(runs=[5, 6]),
    "selections-list": lambda rec: rec.update(selections=[1]),
    "target-string": lambda rec: rec.update(target="x"),
    "attack-number": lambda rec: rec.update(attack=3),
}


@pytest.mark.parametrize("edit", list(MALFORMED_CELLS))
def test_site_names_a_malformed_cell_instead_of_an_internal_error(edit: str, boards: Path, tmp_path: Path,
                                                                   capsys: Any) -> None:
    path = sorted((boards / BOARD / "cells").glob("*.json"))[0]
    rec = json.loads(path.read_text())
    MALFORMED_CELLS[edit](rec)
    path.write_text(json.dumps(rec))
    line = refused(["site", "--leaderboards", str(boards), "--out", str(tmp_path / "site"), "--no-images"], capsys,
                   str(boards / BOARD))
    assert "restore" in line
    assert not (tmp_path / "site").exists()


@pytest.mark.parametrize("field,value", [("id", "../../../evil"), ("cells", ["../../../evil"])])
def test_outside_submissions_named_by_a_board_stay_inside_it(field: str, value: Any, boards: Path) -> None:
    """Re-rendering a board puts its outside submissions back from the names its results.json lists."""
    from reconbench.leaderboard import outside

    board = boards / BOARD
    sub = {"id": "abc", "contributor": "x", "cells": ["c"], field: value}
    _edit_results(board, lambda d: d["header"].update(submissions=[sub]))
    (boards.parent / "evil.toml").write_text("outside the board")
    with pytest.raises(UnsafePathError, match="one plain file name"):
        outside.snapshot(board)
