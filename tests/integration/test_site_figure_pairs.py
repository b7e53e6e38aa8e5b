"""The site on a board that keeps figure pairs and no candidates (tests/_helpers/pairs_board.py), as a paper-size
board from GPU slices does: the cell its figure shows gets a page with the pairs (each training image the figure
shows beside its float16 matched candidate, with the scores its per-image row stores), said to be a subset of
matched pairs in float16; the board page and the other cells' pages say where they are. Checked from the files
(the PNG's pixels against the float16 values and the training images, the table against the cell's rows) and in
headless Chromium (tests/_helpers/browser.py; skipped without one unless RECONBENCH_BROWSER_REQUIRED=1)."""

from __future__ import annotations

import html
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from _helpers.browser import Browser, open_browser
from _helpers.pairs_board import BOARD, build_pairs_board
from _helpers.sitekit import missing_files
from matplotlib.image import imread

from reconbench.bench.runner import read_cell
from reconbench.evaluation.pair_figure import read_layout
from reconbench.leaderboard.board_cards import load_board_card
from reconbench.leaderboard.figure_pairs import BOARD_FOLDER, FigurePairs, read_pairs, write_pairs
from reconbench.leaderboard.site import SiteSummary, build_site
from reconbench.leaderboard.site.images import PAIRS_FILE

PNG_TOL = 0.5 / 255 + 1e-6      # one 8-bit level of the PNG, rounded
SUBSET = "subset of matched pairs in float16"


@pytest.fixture(scope="module")
def board(tmp_path_factory: pytest.TempPathFactory) -> Path:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return build_pairs_board(tmp_path_factory.mktemp("pairs"))
    finally:
        torch.set_num_threads(before)


@pytest.fixture(scope="module")
def site(board: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[SiteSummary, Path]:
    return build_site(board.parent, tmp_path_factory.mktemp("site") / "site"), board


def pairs_cell(board: Path) -> str:
    (kept,) = (board / BOARD_FOLDER).glob("*.safetensors")
    return kept.name.removesuffix(".safetensors")


def rows_of(board: Path, cid: str) -> list[dict[str, Any]]:
    cell = read_cell(board / "cells" / f"{cid}.json")
    assert cell is not None
    return list(cell["evaluation"]["per_image"])


def table_rows(page: str) -> list[list[str]]:
    """The cells' text of each row of the page's #pairs table."""
    body = page.split('id="pairs"')[1].split("</tbody>")[0]
    return [[html.unescape(re.sub(r"<[^>]+>", "", td)) for td in re.findall(r"<td>(.*?)</td>", tr, re.S)]
            for tr in re.findall(r'<tr class="pair[^"]*">(.*?)</tr>', body, re.S)]


def fmt(v: object, spec: str) -> str:
    return "n/a" if v is None else format(v, spec)


def test_the_cell_page_shows_the_figures_pairs_with_the_rows_scores(site: tuple[SiteSummary, Path]) -> None:
    summary, board = site
    cid = pairs_cell(board)
    pairs = read_pairs(board / BOARD_FOLDER / f"{cid}.safetensors")
    rows = rows_of(board, cid)
    assert (summary.cells_with_images, summary.cells_with_pairs, summary.cells_not_drawn) == (1, 1, 0)
    page = (summary.out / BOARD / "cells" / f"{cid}.html").read_text()
    assert SUBSET in page and f"for the {len(pairs.shown)} of its {len(rows)} training images" in page
    shown = table_rows(page)
    # one row per image the figure shows, in its order, each with the scores its per-image row stores
    assert [int(r[0]) for r in shown] == pairs.shown and 0 < len(shown) < len(rows)
    for r, i in zip(shown, pairs.shown, strict=True):
        row = rows[i]
        assert r[2:5] == [fmt(row["corr"], ".2f"), fmt(row["ssim"], ".2f"), fmt(row["best_distance"], ".3g")]
        assert (r[5] == "matched") == (row["best_candidate"] is not None)
    passed = sum(bool(rows[i]["reconstructed_calibrated"]) for i in pairs.shown)
    assert page.count('<tr class="pair passed">') == passed
    assert missing_files(summary.out) == []


def test_the_pairs_png_shows_the_float16_candidates_above_their_training_images(
        site: tuple[SiteSummary, Path]) -> None:
    """Each placed pair's pixels: the training image, and above it the float16 reconstruction with the mean image
    added back and min-max scaled (written out here from the file's tensors, not through the site's code)."""
    summary, board = site
    cid = pairs_cell(board)
    pairs = read_pairs(board / BOARD_FOLDER / f"{cid}.safetensors")
    rec = read_cell(board / "cells" / f"{cid}.json")
    assert rec is not None
    problem, _ = load_board_card(board, rec["target"]["recipe_key"], None)
    mean = problem.mean_tensor(torch.float64).numpy()
    png = summary.out / BOARD / "cells" / cid / PAIRS_FILE
    layout = read_layout(png)
    assert layout is not None and [p.index for p in layout.pairs] == pairs.shown
    image = np.asarray(imread(png)[..., 0], dtype=np.float64)
    averaged = iter(range(pairs.averaged.shape[0]))
    compared = 0
    for j, placed in enumerate(layout.pairs):
        x0, y0, x1, y1 = placed.train
        train = np.asarray(problem.train_images[placed.index], dtype=np.float64)[0]
        assert np.max(np.abs(image[y0:y1:layout.zoom, x0:x1:layout.zoom] - train)) <= PNG_TOL
        m = pairs.members[j]
        if m == 0:
            assert placed.candidate is None or rows_of(board, cid)[placed.index]["best_candidate"] is None
            continue
        recon = (pairs.best[j] if m == 1 else pairs.averaged[next(averaged)]).to(torch.float64).numpy() + mean
        shown = (recon - recon.min()) / (recon.max() - recon.min())
        assert placed.candidate is not None
        x0, y0, x1, y1 = placed.candidate
        assert np.max(np.abs(image[y0:y1:layout.zoom, x0:x1:layout.zoom] - shown[0])) <= PNG_TOL
        compared += 1
    assert compared > 0


def test_the_board_page_and_the_other_cells_say_where_the_pairs_are(site: tuple[SiteSummary, Path]) -> None:
    summary, board = site
    cid = pairs_cell(board)
    index = (summary.out / BOARD / "index.html").read_text()
    assert "the candidates of 0 are stored" in index and "the figure pairs of 1 more are kept" in index
    others = [p for p in (summary.out / BOARD / "cells").glob("*.html") if p.stem != cid]
    assert len(others) == 2
    for page in others:
        text = page.read_text()
        note = text.split('class="no-images">')[1].split("</p>")[0]
        assert "not stored for this cell" in note and SUBSET in note and f'href="{cid}.html"' in note
        assert SUBSET not in text.split('class="no-images">')[0]


def test_pairs_that_do_not_fit_their_cell_are_said_on_its_page(board: Path, tmp_path: Path) -> None:
    """A kept file whose images are not the ones its cell's rows give (another order) is not drawn: the page says
    why in one line and the rest of the site builds."""
    copy = tmp_path / "leaderboards" / BOARD
    shutil.copytree(board, copy)
    cid = pairs_cell(copy)
    path = copy / BOARD_FOLDER / f"{cid}.safetensors"
    p = read_pairs(path)
    order = list(reversed(range(len(p.shown))))
    best = p.best[order]
    write_pairs(path, FigurePairs(p.cell_id, [p.shown[k] for k in order], [p.best_ids[k] for k in order],
                                  [p.members[k] for k in order], best, p.averaged))
    summary = build_site(copy.parent, tmp_path / "site")
    assert (summary.cells_with_images, summary.cells_not_drawn) == (0, 1)
    assert "PairsError" in summary.not_drawn_reason
    note = (summary.out / BOARD / "cells" / f"{cid}.html").read_text().split('class="no-images">')[1].split("</p>")[0]
    assert "could not be drawn here" in note and "its rows give" in note


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    yield from open_browser()


def test_in_a_browser_the_pairs_load_and_say_they_are_a_subset(browser: Browser,
                                                              site: tuple[SiteSummary, Path]) -> None:
    summary, board = site
    cid = pairs_cell(board)
    pairs = read_pairs(board / BOARD_FOLDER / f"{cid}.safetensors")
    rows = rows_of(board, cid)
    browser.navigate((summary.out / BOARD / "index.html").resolve().as_uri())
    browser.click_and_wait(f"document.querySelector('a.cell-link[title=\"{cid}\"]')")
    assert browser.evaluate("location.pathname").endswith(f"/cells/{cid}.html")
    images = browser.evaluate("Array.from(document.images).map(i => [i.getAttribute('src'), i.complete, "
                              "i.naturalWidth])")
    assert images and all(complete and width > 0 for _, complete, width in images), images
    assert browser.evaluate("document.querySelectorAll('img.pairs').length") == 1
    assert SUBSET in browser.evaluate("document.querySelector('#subset-note').textContent")
    assert browser.evaluate("Array.from(document.querySelectorAll('#pairs tr.pair')).map(r => "
                            "Number(r.cells[0].textContent))") == pairs.shown
    assert browser.evaluate("document.querySelectorAll('#pairs tr.pair.passed').length") == sum(
        bool(rows[i]["reconstructed_calibrated"]) for i in pairs.shown)
