"""Every consumer of published boards on a board like the first publication of a GPU board: partial (one of its
three planned cells not run), its cells from slice packs at two commits and without git metadata in their records,
its folder named unlike its suite (tests/_helpers/partial_board.py). ``--verify``, each export, the site, docs'
results table and a release read it, and each states "k of N cells" and the commits its cells ran at where the
board's README does, with the not-run cell listed apart from failures."""

from __future__ import annotations

import csv
import io
import json
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from _helpers.cli import run_cli_redirected
from _helpers.export_checks import check_csv, check_json, check_latex, check_markdown, export
from _helpers.partial_board import BOARD, CELLS, SLICE_A, SLICE_B, TINY, build_partial_board

from reconbench.bench.suite import load_suite
from reconbench.claims.board_state import board_state
from reconbench.leaderboard.results_page import board_results_table
from reconbench.leaderboard.site.build import build_site

PROGRESS = "2 of 3 cells"


@pytest.fixture(scope="module")
def board(tmp_path_factory: pytest.TempPathFactory) -> Path:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return build_partial_board(tmp_path_factory.mktemp("partial"))
    finally:
        torch.set_num_threads(before)


@pytest.fixture(scope="module")
def figures_suite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny suite with its figures on, as paper.toml has them."""
    path = tmp_path_factory.mktemp("suite") / "tiny-figures.toml"
    text = TINY.read_text()
    assert "\nfigures = false\n" in text
    path.write_text(text.replace("\nfigures = false\n", "\nfigures = true\n"))
    return path


def test_the_partial_board_verifies(board: Path) -> None:
    code, out, err = run_cli_redirected(["leaderboard", str(TINY), "--out", str(board), "--verify"])
    assert code == 0, out + err


def test_csv_rows_say_the_board_is_partial(board: Path) -> None:
    rows = check_csv(board)
    assert {r["progress"] for r in rows} == {PROGRESS}
    assert CELLS[2] not in {c for r in rows for c in r["cells"].split(";")}   # no row counts the not-run cell
    # each row names the commit its cells ran at: the slice's, which their records (no git metadata) do not name
    by_cells = {r["cells"]: r["commit"] for r in rows}
    assert by_cells == {CELLS[0]: SLICE_A, CELLS[1]: SLICE_B}


def test_json_names_the_progress_the_not_run_cell_and_each_commit(board: Path) -> None:
    doc = check_json(board)
    assert doc["progress"] == PROGRESS and doc["not_run"] == [CELLS[2]]
    assert doc["cells"] == {"planned": 3, "ok": 2, "failed": 0, "not_run": 1, "stale": 0}
    assert doc["git_commits"] == [SLICE_A, SLICE_B]   # not the records' missing commit
    assert [(c["commit"], c["cells"], len(c["packs"]), c["cell_ids"]) for c in doc["cell_commits"]] == [
        (SLICE_A, 1, 1, [CELLS[0]]), (SLICE_B, 1, 1, [CELLS[1]])]
    assert {(tuple(r["cells"]), tuple(r["commit"])) for r in doc["rows"]} == {((CELLS[0],), (SLICE_A,)),
                                                                            ((CELLS[1],), (SLICE_B,))}


@pytest.mark.parametrize("check", [check_latex, check_markdown], ids=["latex", "markdown"])
def test_wide_tables_say_the_progress_and_commits_in_their_title(board: Path, check) -> None:
    title = check(board).split("\n\n")[0]
    assert f"partial board: {PROGRESS}" in title
    assert f"{SLICE_A} \\(1 cell\\(s\\), 1 slice pack\\(s\\)\\)" in title if check is check_markdown \
        else f"{SLICE_A} (1 cell(s), 1 slice pack(s))" in title
    assert SLICE_B in title


def test_the_site_shows_the_progress_the_commits_and_the_not_run_cell(board: Path, tmp_path: Path) -> None:
    summary = build_site(board.parent, tmp_path / "site", images=True)
    assert summary.boards == [BOARD] and summary.cell_pages == 2
    # the float16 sample is drawn, and the figure's cell from the figure pairs the board keeps of it
    assert (summary.cells_with_images, summary.cells_with_pairs, summary.cells_not_drawn) == (2, 1, 0)
    index = (tmp_path / "site" / "index.html").read_text()
    row = index.split(f'href="{BOARD}/index.html"')[1].split("</tr>")[0]
    assert "2 / 3" in row and "partial" in row and SLICE_A[:12] in row and SLICE_B[:12] in row and "None" not in row
    page = (tmp_path / "site" / BOARD / "index.html").read_text()
    assert f"<b>Partial board: {PROGRESS}.</b>" in page
    commits = page.split('id="commits">')[1].split("</dd>")[0]
    assert f"<code>{SLICE_A[:12]}</code> (1 cell(s), 1 slice pack(s))" in commits and SLICE_B[:12] in commits
    assert "None" not in commits
    missing = page.split('id="without-result"')[1].split("</section>")[0]
    assert CELLS[2] in missing and "Not run (1 of 3 planned)" in missing and "not failures" in missing
    assert CELLS[2] not in page.split('id="without-result"')[0]   # no table row stands for it
    cell_page = (tmp_path / "site" / BOARD / "cells" / f"{CELLS[0]}.html").read_text()
    # its record names the commit its slice ran at (RECONBENCH_SLICE_COMMIT, else git's), not a missing one
    assert f"<th>git_commit</th><td><code>{SLICE_A}</code>" in cell_page
    assert "without git metadata" not in cell_page
    # the board is named by its suite and its folder where they differ
    assert f"reconbench leaderboard gpu-tiny --out leaderboards/{BOARD} --release" in page


def test_the_results_page_marks_the_board_partial(board: Path) -> None:
    rows = [line for line in board_results_table(board.parent).splitlines() if line.startswith(f"| [{BOARD}]")]
    assert rows and all(f"(partial: {PROGRESS})" in r for r in rows)


def test_the_claims_pages_account_of_the_board_and_of_its_results_folder_agree(board: Path) -> None:
    """What ``python -m reconbench.claims --gpu`` states of a board that grows over slices, read from the published
    board's header and from the results folder it was published from (the merges' invocation records)."""
    suite = load_suite(str(TINY))
    said = []
    for folder in (board, board.parents[1] / "local"):
        state = board_state(suite, folder)
        assert state.partial and state.not_run == {CELLS[2]}
        said.append(state.line())
    assert said[0] == said[1] == (f"`gpu-tiny`: {PROGRESS}, from commits `{SLICE_A[:12]}` (1 cell(s)), "
                                  f"`{SLICE_B[:12]}` (1 cell(s)).")


def test_a_release_of_the_partial_board_is_named_in_its_exports(board: Path, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    copy = repo / "leaderboards" / BOARD
    shutil.copytree(board, copy)

    def git(*args: str) -> None:
        subprocess.run(["git", "-c", "user.email=t@t", "-c", "user.name=t", *args], cwd=repo, check=True,
                       capture_output=True)

    git("init", "-q")
    git("add", "-A")
    git("commit", "-qm", "board")
    code, out, err = run_cli_redirected(["leaderboard", str(TINY), "--out", str(copy), "--release"])
    assert code == 0, out + err
    rows = list(csv.DictReader(io.StringIO(export(copy, "csv"))))
    # named after its folder, not its suite (gpu-tiny), whose own board would number gpu-tiny-r1, ...
    assert {(r["release"], r["progress"]) for r in rows} == {(f"{BOARD}-r1", PROGRESS)}
    assert json.loads(export(copy, "json"))["release"] == f"{BOARD}-r1"


def test_with_figures_the_reconstructions_are_drawn_from_figure_pairs_and_the_site_builds(
        figures_suite: Path, tmp_path: Path) -> None:
    """The reconstructions figure picks each attack's best cell, whose candidates stayed on the device unless the
    suite sampled it: the figure is drawn from the figure pairs every slice brings back (docs/slices.md, "The
    pack"), says so, and ``--verify`` re-scores them; the site builds (the SSIM-vs-margin figure, drawn from the
    cells' rows, is there too)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        board = build_partial_board(tmp_path / "figures", suite=figures_suite)
    finally:
        torch.set_num_threads(before)
    figures = json.loads((board / "results.json").read_text())["figures"]
    shown = figures["reconstructions"]
    assert shown["file"] == "figures/reconstructions.png" and "Drawn from a subset of matched pairs" in shown["caption"]
    assert figures["ssim_vs_margin"]["file"] == "figures/ssim_vs_margin.png"
    code, out, err = run_cli_redirected(["leaderboard", str(figures_suite), "--out", str(board), "--verify"])
    assert code == 0, out + err
    assert "figure pairs: 1 cell(s) kept in float16" in out + err
    summary = build_site(board.parent, tmp_path / "site", images=False)
    page = (summary.out / BOARD / "index.html").read_text()
    assert "figures/ssim_vs_margin.png" in page and f"Partial board: {PROGRESS}." in page
