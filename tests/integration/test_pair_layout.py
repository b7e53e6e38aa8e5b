"""One layout of reconstructions beside their training images (``evaluation/pair_figure.py``) for the run figure
(and so the audit report, which embeds it), the board figure and the site's cell page, and the command that redraws
a published board's figure in it (``reconbench leaderboard redraw``), tried on a board of the ``ci`` suite run and
published here (its targets trained on this processor: a redraw re-trains the figure's targets and requires their
weights bit for bit, which the committed board's, trained on another processor, need not give here).

The same cell is drawn by all three; each PNG carries where it put each pair (its layout record), and the pixels
at those places are compared across the three files and with the training images themselves.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from _helpers.cli import run_cli
from matplotlib.image import imread

from reconbench.evaluation.pair_figure import Pair, PairGroup, PairLayout, draw_pairs, layout_pairs, read_layout

REPO = Path(__file__).resolve().parents[2]
CI = REPO / "leaderboards" / "ci"
#: the ci suite is run and published here (73 cells), then the redraw runs the figure's cells without stored
#: candidates again (targets trained anew) and verifies the board
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

PNG_TOL = 0.5 / 255 + 1e-6      # one 8-bit level, rounded
PALETTE_TOL = 8 / 255           # a board re-encodes its figures with a 256-colour palette (slim.compact_figures)


def _grey(path: Path) -> np.ndarray:
    return np.asarray(imread(path)[..., 0], dtype=np.float64)


def _tile(image: np.ndarray, box: tuple[int, int, int, int] | None, zoom: int) -> np.ndarray:
    assert box is not None
    x0, y0, x1, y1 = box
    return image[y0:y1:zoom, x0:x1:zoom]


def _folder_digest(folder: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            h.update(p.relative_to(folder).as_posix().encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


# -- the layout itself -------------------------------------------------------------------------------------------
def test_each_candidate_sits_directly_above_its_training_image_and_nothing_overlaps() -> None:
    rng = np.random.default_rng(0)
    pairs = [Pair(i, rng.uniform(size=(1, 7, 5)), None if i == 2 else rng.uniform(size=(1, 7, 5)), 0.5, 0.25, i == 1)
             for i in range(13)]
    layout = layout_pairs([PairGroup("a", pairs), PairGroup("b", pairs[:3])], (7, 5), per_row=4, title_lines=2)
    boxes = []
    for p in layout.pairs:
        x0, y0, x1, y1 = p.train
        assert (x1 - x0, y1 - y0) == (5 * layout.zoom, 7 * layout.zoom)
        if p.candidate is not None:
            cx0, cy0, cx1, cy1 = p.candidate
            assert (cx0, cx1) == (x0, x1) and cy1 < y0 and cy1 - cy0 == y1 - y0   # same column, above
            boxes.append(p.candidate)
        boxes.append(p.train)
        assert 0 <= x0 and x1 <= layout.width and y1 <= layout.height
    for k, a in enumerate(boxes):
        for b in boxes[k + 1:]:
            assert a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1], (a, b)
    assert [p.index for p in layout.pairs] == list(range(13)) + [0, 1, 2]
    assert [row[3] for row in layout.arrangement()][:3] == [(0, -1), (0, -1), None]


def test_a_known_pair_lands_where_the_record_says(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    train = rng.uniform(size=(1, 8, 6))
    cand = 1.0 - train                                   # distinct from its training image everywhere
    path = tmp_path / "p.png"
    layout = draw_pairs(path, [PairGroup("g", [Pair(4, train, cand, 0.91, 0.125, True)])], title=["t"])
    assert read_layout(path) == layout
    image = _grey(path)
    placed = layout.pairs[0]
    assert np.max(np.abs(_tile(image, placed.train, layout.zoom) - train[0])) <= PNG_TOL
    assert np.max(np.abs(_tile(image, placed.candidate, layout.zoom) - cand[0])) <= PNG_TOL
    assert placed.label == ["#4", "SSIM 0.91", "d 0.125"]
    assert PairLayout.from_json(layout.to_json()) == layout


# -- a published board, redrawn -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ci suite run and published (slim: candidates of a sample of cells) on this machine, as
    leaderboards/ci was on its own (the clean-commit check left out: the working tree may have edits)."""
    from reconbench.bench.runner import run_suite
    from reconbench.bench.suite import load_suite
    from reconbench.leaderboard import render as render_mod
    from reconbench.leaderboard.render import build_leaderboard

    suite = load_suite("ci")
    folder = tmp_path_factory.mktemp("published")
    with pytest.MonkeyPatch.context() as mp, _one_thread():
        mp.setenv("RECONBENCH_CACHE", str(folder / "cache"))
        mp.setattr(render_mod, "check_publishable", lambda pub, commit: None)
        run_suite(suite, folder / "res", quiet=True, command="reconbench bench ci")
        build_leaderboard(suite, folder / "res", folder / "ci", publish=True, command="reconbench leaderboard ci")
    return folder / "ci"


@contextlib.contextmanager
def _one_thread() -> Iterator[None]:
    """One torch thread, as the board's targets are trained and trained again with (tiny networks: a second thread
    only waits on the first; another thread count may also train other weights)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@pytest.fixture(scope="module")
def redrawn(published: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A scratch copy of the published board with its reconstructions figure redrawn (cells without stored
    candidates run again, targets trained in a temporary cache)."""
    before = _folder_digest(published)
    board = tmp_path_factory.mktemp("board") / "ci"
    shutil.copytree(published, board)
    with pytest.MonkeyPatch.context() as mp, _one_thread():
        mp.setenv("RECONBENCH_CACHE", str(tmp_path_factory.mktemp("cache")))
        code, out, err = _Capture().run(["leaderboard", "redraw", "ci", "--out", str(board), "--rerun-missing"])
    assert code == 0, err
    assert "of them run again for their candidates" in out, out   # the figure's cells without stored candidates
    # a board drawn in the shared layout is drawn again the same (the same machine re-ran the same cells)
    assert "changed: nothing" in out or ("figures/reconstructions.png" in out and "MANIFEST.json" in out), out
    assert _folder_digest(published) == before, "the published board was written to"
    return board


def _shown_and_stored(board: Path) -> str:
    """The first cell the board's reconstructions figure shows whose candidates the board stores."""
    from reconbench.leaderboard.verify import stored_cells

    shown = json.loads((board / "results.json").read_text())["figures"]["reconstructions"]["cells"]
    both = [c for c in shown if c in stored_cells(board)]
    assert both, f"the figure of {board} shows no cell whose candidates it stores"
    return str(both[0])


class _Capture:
    """run_cli for a module-scoped fixture (no capsys there)."""

    def run(self, args: list[str]) -> tuple[int, str, str]:
        import io

        from reconbench.cli import main

        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main(args)
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (1 if exc.code else 0)
        return code, out.getvalue(), err.getvalue()


def test_redrawn_board_passes_verify(redrawn: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(["leaderboard", "ci", "--out", str(redrawn), "--verify"], capsys)
    assert code == 0, err
    assert "reconstructions: 6 cell(s) shown" in out or "reconstructions:" in out
    layout = read_layout(redrawn / "figures" / "reconstructions.png")
    assert layout is not None
    shown = json.loads((redrawn / "results.json").read_text())["figures"]["reconstructions"]["cells"]
    assert len(layout.groups) == len(shown) and all(c.split("--")[1] in g for c, g in zip(shown, layout.groups, strict=True))


def test_redraw_without_the_candidates_names_the_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    board = tmp_path / "ci"
    shutil.copytree(CI, board)
    code, _, err = run_cli(["leaderboard", "redraw", "ci", "--out", str(board)], capsys)
    assert code != 0 and "--rerun-missing" in err and len(err.strip().splitlines()) == 1
    assert _folder_digest(board) == _folder_digest(CI)


def test_run_board_and_site_draw_the_same_pairs_the_same_way(redrawn: Path, tmp_path: Path) -> None:
    import torch

    from reconbench.bench.runner import read_cell
    from reconbench.evaluation import evaluate
    from reconbench.leaderboard.site.images import PAIRS_FILE, ProblemCache, cell_images
    from reconbench.leaderboard.verify import rescore_inputs
    from reconbench.records import CellRecord

    rec = CellRecord.from_dict(read_cell(redrawn / "cells" / f"{_shown_and_stored(redrawn)}.json"))
    # the board figure: the group of this cell
    board_png = redrawn / "figures" / "reconstructions.png"
    board = read_layout(board_png)
    assert board is not None
    group = next(i for i, g in enumerate(board.groups) if g.startswith(f"{rec.attack.label} · init {rec.init.label}"))
    board_pairs = [p for p in board.pairs if p.group == group]
    # the site's cell page
    site = cell_images(redrawn, rec, tmp_path / "site", ProblemCache(None))
    assert site.figure == PAIRS_FILE
    site_png = tmp_path / "site" / PAIRS_FILE
    site_layout = read_layout(site_png)
    assert site_layout is not None
    # the run: the evaluation of the same candidates, as `reconbench run` evaluates (and the audit embeds)
    problem, pooled, protocol, family, card = rescore_inputs(redrawn, rec, None)
    evaluate(problem, pooled["candidates"].to(torch.float64), family=family, protocol={**protocol, "figures": True}, card=card,
             out_dir=tmp_path / "run", quiet=True)
    run_png = tmp_path / "run" / "figures" / "reconstructions.png"
    run = read_layout(run_png)
    assert run is not None

    # the same pairs in the same order with the same labels, frames and arrangement (candidate above)
    def seen(layout_pairs: list) -> list:  # noqa: ANN001
        return [(p.index, p.label, p.passed) for p in layout_pairs]

    k = len(board_pairs)
    assert seen(board_pairs) == seen(site_layout.pairs[:k])
    matched_site = [p for p in site_layout.pairs if p.candidate is not None]
    assert seen(run.pairs) == seen(matched_site)
    for layout in (board, site_layout, run):
        assert {row[3] for row in layout.arrangement() if row[3] is not None} == {(0, -1)}

    # and the same pixels at the places each record names (the board's PNG is palette-encoded)
    images = {"board": (_grey(board_png), board_pairs, board.zoom, PALETTE_TOL),
              "site": (_grey(site_png), site_layout.pairs, site_layout.zoom, PNG_TOL),
              "run": (_grey(run_png), run.pairs, run.zoom, PNG_TOL)}
    for i, train in enumerate(problem.train_images):
        tiles = {}
        for name, (image, placed_pairs, zoom, tol) in images.items():
            placed = next((p for p in placed_pairs if p.index == i), None)
            if placed is None:
                continue
            assert np.max(np.abs(_tile(image, placed.train, zoom) - train[0])) <= tol, (name, i)
            if placed.candidate is not None:
                tiles[name] = (_tile(image, placed.candidate, zoom), tol)
        if "run" in tiles and "site" in tiles:
            assert np.max(np.abs(tiles["run"][0] - tiles["site"][0])) <= 2 * PNG_TOL
        if "board" in tiles and "site" in tiles:
            assert np.max(np.abs(tiles["board"][0] - tiles["site"][0])) <= PALETTE_TOL + PNG_TOL


def test_verify_compares_the_figures_pairs_with_the_cells_rows(redrawn: Path, tmp_path: Path) -> None:
    from dataclasses import replace

    from PIL import Image
    from PIL.PngImagePlugin import PngInfo

    from reconbench.bench.suite import load_suite
    from reconbench.evaluation.pair_figure import LAYOUT_KEY
    from reconbench.leaderboard.figure_check import check_figures

    board = tmp_path / "ci"
    shutil.copytree(redrawn, board)
    suite = load_suite("ci")
    assert check_figures(suite, board).problems == []
    path = board / "figures" / "reconstructions.png"
    layout = read_layout(path)
    assert layout is not None
    first, second = layout.pairs[0], layout.pairs[1]
    swapped = replace(layout, pairs=[replace(first, index=second.index), replace(second, index=first.index),
                                     *layout.pairs[2:]])
    info = PngInfo()
    info.add_text(LAYOUT_KEY, swapped.to_json())
    with Image.open(path) as im:
        im.save(path, pnginfo=info)
    problems = check_figures(suite, board).problems
    assert len(problems) == 1 and "pairs of" in problems[0] and "leaderboard redraw" in problems[0]
