"""The leaderboard site as files: every link and image resolves, the tables hold results.json's rows, a cell's
pictures are its training images and the average of the candidates its evaluation matched to them (recomputed here
from the stored candidates), the claims page carries docs/claims.md's verdicts, and ``reconbench site`` refuses to
replace a folder it did not write. The browser checks are in test_site_browser.py."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import numpy as np
import pytest
from _helpers.cli import run_cli
from _helpers.sitekit import BOARD, REPO, fixture_leaderboards, kept_candidates, missing_files, parse, row_count_problems

from reconbench.evaluation.pair_figure import read_layout
from reconbench.leaderboard.results_file import read_results
from reconbench.leaderboard.site import build_site
from reconbench.leaderboard.site.build import MARKER
from reconbench.leaderboard.site.images import PAIRS_FILE
from reconbench.leaderboard.slim import candidates_file, read_candidates

#: the site rounds each value in [0, 1] to the nearest of 256 levels (half a step), and imread returns float32
PNG_TOL = 0.5 / 255 + 1e-6


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("site-files")
    boards = fixture_leaderboards(root)
    build_site(boards, root / "site")
    return root / "site", boards / BOARD


def test_every_link_and_image_resolves_and_tables_hold_every_row(site: tuple[Path, Path]) -> None:
    out, board = site
    assert missing_files(out) == []
    assert row_count_problems(out, board) == []
    cells = sorted(p.stem for p in (board / "cells").glob("*.json"))
    assert sorted(p.stem for p in (out / BOARD / "cells").glob("*.html")) == cells
    assert (out / MARKER).is_file() and (out / "static" / "site.js").is_file()
    # every seed of every main-table row links to its cell page
    links = parse(out / BOARD / "index.html").links
    for row in json.loads((board / "results.json").read_text())["tables"]["pool"]:
        for cid in row["cells"]:
            assert any(link.endswith(".html") and cid.replace("@", "%40") in link for link in links), cid
    # nothing is fetched from elsewhere: no absolute URL in any page
    for page in out.rglob("*.html"):
        parsed = parse(page)
        assert not [u for u in parsed.images + parsed.links if re.match(r"^[a-z]+:", u)], page


def test_headline_is_the_best_non_oracle_row_per_target(site: tuple[Path, Path]) -> None:
    from reconbench.leaderboard.site.board import load_board

    _, board = site
    data = read_results(board)
    first = data["columns"][0]
    sign = 1.0 if first["higher_is_better"] else -1.0
    expected: dict[str, tuple[float, set[tuple[str, str]]]] = {}
    for r in data["tables"]["pool"]:
        v = r["metrics"][first["name"]]["mean"]
        if r["init_is_oracle"] or v is None:
            continue
        best = expected.get(r["target"])
        if best is None or sign * v > sign * best[0]:
            expected[r["target"]] = (v, {(r["attack"], r["init"])})
        elif v == best[0]:
            best[1].add((r["attack"], r["init"]))
    shown = {t: (rows[0].metrics[0].value, {(r.attack, r.init) for r in rows}) for t, rows in load_board(board).headline}
    assert expected and shown == expected


def _png(path: Path) -> np.ndarray:
    from matplotlib.image import imread

    img = imread(path)
    return np.asarray(img[..., 0], dtype=np.float64)  # grey: R = G = B


def test_cell_images_are_its_training_images_and_averaged_matches(site: tuple[Path, Path]) -> None:
    from reconbench.bench.runner import read_cell
    from reconbench.targets.cards import ModelCard

    out, board = site
    cid = kept_candidates()[0]
    rec = read_cell(board / "cells" / f"{cid}.json")   # a slim entry as the full record
    assert rec is not None
    card = ModelCard(path=board / "targets",
                     data=json.loads((board / "targets" / f"{rec['target']['recipe_key']}.json").read_text()))
    problem = card.problem(None)
    assert problem.train_images.shape[1] == 1, "digits are grey images"
    stored = candidates_file(board, cid)
    assert stored is not None
    candidates = read_candidates(stored)["candidates"].numpy().astype(np.float64)
    folder = out / BOARD / "cells" / cid
    layout = read_layout(folder / PAIRS_FILE)
    assert layout is not None
    image = _png(folder / PAIRS_FILE)
    z = layout.zoom

    def tile(box: tuple[int, int, int, int]) -> np.ndarray:  # one PNG pixel per image pixel (the top-left copy)
        x0, y0, x1, y1 = box
        return image[y0:y1:z, x0:x1:z]

    placed = {p.index: p for p in layout.pairs}
    rows = rec["evaluation"]["per_image"]
    assert set(placed) <= {r["index"] for r in rows} and len(placed) == min(len(rows), 60)
    checked = 0
    for row in rows:
        i = row["index"]
        if i not in placed:
            continue
        at = placed[i]
        assert np.max(np.abs(tile(at.train) - problem.train_images[i][0])) <= PNG_TOL
        if row["best_candidate"] is None:
            assert at.candidate is None
            continue
        assert at.candidate is not None
        if "candidate_ids" not in row:   # a slim entry keeps the matched image, not which candidates it averaged
            continue
        # the evaluation's reconstruction: the matched candidates averaged (centred space), the mean image added
        # back, scaled to [0, 1] over the image
        shown = candidates[row["candidate_ids"]].reshape(len(row["candidate_ids"]), *problem.mean.shape).mean(0)
        shown = shown + problem.mean
        shown = (shown - shown.min()) / (shown.max() - shown.min())
        assert np.max(np.abs(tile(at.candidate) - shown[0])) <= PNG_TOL
        checked += 1
    assert checked > 0 or "candidate_ids" not in rows[0]


def test_site_without_images_says_so(tmp_path: Path) -> None:
    boards = fixture_leaderboards(tmp_path)
    summary = build_site(boards, tmp_path / "site", images=False)
    assert summary.cells_with_images == 0 and not list((tmp_path / "site" / BOARD / "cells").glob("*/*.png"))
    page = (tmp_path / "site" / BOARD / "cells" / f"{kept_candidates()[0]}.html").read_text()
    assert "were not rendered" in page


def test_a_failed_cell_gets_a_page_with_its_error(tmp_path: Path) -> None:
    boards = fixture_leaderboards(tmp_path)
    cid = kept_candidates()[0]
    path = boards / BOARD / "cells" / f"{cid}.json"
    rec = json.loads(path.read_text())
    for key in ("selections", "evaluation", "runs", "attack_seconds", "result_dir"):
        rec.pop(key, None)
    for key in ("n_train", "train_metrics", "train_seconds", "reused"):
        rec["target"].pop(key, None)
    rec.update(status="failed", error={"type": "AttackError", "message": "the attack diverged", "traceback": None})
    path.write_text(json.dumps(rec))
    build_site(boards, tmp_path / "site")
    page = (tmp_path / "site" / BOARD / "cells" / f"{cid}.html").read_text()
    assert "failed: AttackError: the attack diverged" in page
    assert "did not finish (status failed)" in page and not (tmp_path / "site" / BOARD / "cells" / cid).exists()
    assert missing_files(tmp_path / "site") == []


def test_claims_page_carries_the_verdicts_of_docs_claims(tmp_path: Path) -> None:
    """docs/claims.md is generated from the same boards when they are published: its verdicts are the reference."""
    from reconbench.claims.page import DEFAULT_RESULTS

    summary = build_site(REPO / "leaderboards", tmp_path / "site", boards=list(DEFAULT_RESULTS), images=False)
    assert summary.claims
    doc = (REPO / "docs" / "claims.md").read_text()
    expected = dict(re.findall(r"^\| `([\w-]+)`<br>.*\| \*\*([^*]+)\*\*", doc, flags=re.M))
    page = (tmp_path / "site" / "claims.html").read_text()
    shown = {k: html.unescape(v) for k, v in
             re.findall(r'<tr id="claim-([\w-]+)">.*?<b class="verdict[^"]*">([^<]+)</b>', page, flags=re.S)}
    assert expected and shown == expected
    assert missing_files(tmp_path / "site") == []


def test_cli_refuses_to_replace_a_folder_it_did_not_write(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    keep = tmp_path / "notes"
    keep.mkdir()
    (keep / "mine.txt").write_text("do not delete")
    code, _, err = run_cli(["site", "--out", str(keep), "--no-images"], capsys)
    assert code == 2 and "not a site written by" in err
    assert (keep / "mine.txt").read_text() == "do not delete"
    code, _, err = run_cli(["site", "--board", "no-such-board", "--out", str(tmp_path / "s")], capsys)
    assert code == 2 and "no published board no-such-board" in err



def test_a_board_with_target_columns_renders_them_on_its_cell_pages(tmp_path: Path) -> None:
    """A target column (training-length's θ residual) is a number of the cell's target: each cell page shows the
    value its cell records, read the same way as the tables read it."""
    from reconbench.leaderboard.site.board import load_board
    from reconbench.records.target_quantities import target_value

    build_site(REPO / "leaderboards", tmp_path / "site", boards=["training-length"], images=False)
    cell_id, rec = sorted(load_board(REPO / "leaderboards" / "training-length").cells.items())[0]
    residual = target_value(rec.target, "theta_residual")
    assert residual is not None
    pages = list((tmp_path / "site" / "training-length").rglob(f"{cell_id}.html"))
    assert len(pages) == 1
    text = html.unescape(pages[0].read_text())
    assert "θ residual (NNLS)" in text and format(residual, ".3g") in text
