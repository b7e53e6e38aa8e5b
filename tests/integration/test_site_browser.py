"""The leaderboard site in a real browser (headless Chromium over the DevTools protocol, tests/_helpers/browser.py).

The site is rendered from a copy of the published ``ci`` board (tests/_helpers/sitekit.py) and opened from
``file://``: the main tables hold as many rows as results.json, clicking a header sorts the rows as an independent
sort of results.json's numbers does, a filter leaves the rows results.json says match, a seed link opens its cell
page, and every image there loads. Two negative tests damage the rendered site (a lost row, a deleted image) and
expect the same checks to fail. A screenshot of the board page is kept under pytest's temporary folder (its path is
printed).

Skips with the reason where no Chromium is installed, except under ``RECONBENCH_BROWSER_REQUIRED=1`` (set by
``.ci/run`` once it has installed Debian's ``chromium``), where a missing browser fails.
"""

from __future__ import annotations

import json
import math
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from _helpers.browser import Browser, open_browser
from _helpers.sitekit import BOARD, fixture_leaderboards, kept_candidates, missing_files, results, row_count_problems

from reconbench.leaderboard.site import build_site


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    yield from open_browser()


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("site")
    boards = fixture_leaderboards(root)
    build_site(boards, root / "site")
    return root / "site", boards / BOARD


def page_url(path: Path) -> str:
    return path.resolve().as_uri()


def browser_row_problems(b: Browser, site: Path, board: Path) -> list[str]:
    """Main-table rows the browser shows on the board page against results.json's rows."""
    b.navigate(page_url(site / board.name / "index.html"))
    problems = []
    for sel, rows in results(board)["tables"].items():
        shown = b.evaluate(f"document.querySelectorAll('#table-{sel} tbody tr').length")
        if rows and shown != len(rows):
            problems.append(f"table-{sel}: the browser shows {shown} rows, results.json holds {len(rows)}")
    return problems


def browser_image_problems(b: Browser) -> list[str]:
    """Images of the open page that did not load (a missing file has no width)."""
    images = b.evaluate("Array.from(document.images).map(i => [i.getAttribute('src'), i.complete, i.naturalWidth])")
    return [f"{src} did not load" for src, complete, width in images if not complete or width == 0]


def column_values(b: Browser, table: str, index: int) -> list[float | None]:
    raw = b.evaluate(f"Array.from(document.querySelectorAll('#{table} tbody tr')).filter(r => !r.hidden)"
                     f".map(r => r.cells[{index}].getAttribute('data-value'))")
    return [float(v) if v not in (None, "") else None for v in raw]


def expected_order(values: list[float | None], descending: bool) -> list[float | None]:
    """An independent sort: numbers in the given direction, missing values last."""
    present = sorted((v for v in values if v is not None), reverse=descending)
    return [*present, *[None] * sum(v is None for v in values)]


def test_board_tables_sort_filter_and_cell_page(browser: Browser, site: tuple[Path, Path],
                                                tmp_path_factory: pytest.TempPathFactory,
                                                record_property: Callable[[str, object], None]) -> None:
    out, board = site
    data = results(board)
    browser.navigate(page_url(out / "index.html"))
    assert browser.evaluate("document.querySelectorAll('#boards tbody tr').length") == 1
    browser.click_and_wait("document.querySelector('a.board-link')")
    assert browser.evaluate("location.pathname").endswith(f"/{BOARD}/index.html")

    assert browser_row_problems(browser, out, board) == []
    rows = data["tables"]["pool"]
    names = [c["name"] for c in data["columns"]]

    # sort by the last column (the attack's wall time): the board's own order is by the first column
    header = browser.evaluate("Array.from(document.querySelectorAll('#table-pool thead th')).map(th => th.textContent)")
    index = next(i for i, h in enumerate(header) if h.startswith(names[-1]))
    means: list[float | None] = [r["metrics"][names[-1]]["mean"] for r in rows]
    before = column_values(browser, "table-pool", index)
    assert before == means  # the page shows results.json's order before any click
    browser.evaluate(f"document.querySelectorAll('#table-pool thead th')[{index}].click()")
    after = column_values(browser, "table-pool", index)
    assert after == expected_order(means, descending=True)
    assert after != before, "the click did not reorder the rows"
    browser.evaluate(f"document.querySelectorAll('#table-pool thead th')[{index}].click()")
    assert column_values(browser, "table-pool", index) == expected_order(means, descending=False)

    # filter by attack, then by init regime as well: the rows left are the ones results.json says match
    attack, regime = rows[0]["attack"], rows[0]["init_regime"]
    for key, value in (("attack", attack), ("regime", regime)):
        browser.evaluate(f"(s => {{ s.value = {json.dumps(value)}; s.dispatchEvent(new Event('change')); }})"
                         f"(document.querySelector('select[data-filter={key}]'))")
    shown = browser.evaluate("document.querySelectorAll('#table-pool tbody tr:not([hidden])').length")
    assert shown == sum(r["attack"] == attack and r["init_regime"] == regime for r in rows) > 0
    assert browser.evaluate("document.querySelector('.shown[data-for=table-pool]').textContent") == str(shown)

    shot = browser.screenshot(tmp_path_factory.mktemp("artefacts") / "site-board.png")
    print(f"screenshot of the board page: {shot}")
    record_property("screenshot", str(shot))  # in the JUnit report too (pytest --junitxml)

    # a seed link of a row opens its cell page; every image on it loads, one pair per training image
    cid = next(c for c in kept_candidates() if any(c in r['cells'] for r in rows))
    browser.click_and_wait(f"document.querySelector('#table-pool a.cell-link[title=\"{cid}\"]')")
    assert browser.evaluate("location.pathname").endswith(f"/cells/{quote(cid)}.html")
    assert browser_image_problems(browser) == []
    from reconbench.bench.runner import read_cell

    cell = read_cell(board / "cells" / f"{cid}.json")   # a slim entry as the full record
    assert cell is not None
    n = cell["target"]["n_train"]
    assert browser.evaluate("document.querySelectorAll('#pairs tr.pair').length") == n
    passed = sum(bool(r["reconstructed_calibrated"]) for r in cell["evaluation"]["per_image"])
    assert browser.evaluate("document.querySelectorAll('#pairs tr.pair.passed').length") == passed
    matched = sum(r["best_candidate"] is not None for r in cell["evaluation"]["per_image"])
    assert browser.evaluate("document.querySelectorAll('#pairs .unmatched').length") == n - matched
    assert browser.evaluate("document.querySelectorAll('img.pairs').length") == 1
    assert browser.evaluate("document.querySelector('img.pairs').naturalWidth") > 0

    # a cell without stored candidates says so instead of showing images
    other = next(c for r in rows for c in r["cells"] if c not in kept_candidates())
    browser.navigate(page_url(out / BOARD / "cells" / f"{other}.html"))
    assert "not stored for this cell" in browser.evaluate("document.querySelector('.no-images').textContent")


def _damaged_copy(site: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "site"
    shutil.copytree(site, copy)
    return copy


def test_row_check_fails_when_a_table_loses_a_row(browser: Browser, site: tuple[Path, Path], tmp_path: Path) -> None:
    out, board = site
    copy = _damaged_copy(out, tmp_path)
    page = copy / BOARD / "index.html"
    html = page.read_text()
    damaged, removed = re.subn(r'<tr data-target=.*?</tr>', "", html, count=1, flags=re.S)
    assert removed == 1
    page.write_text(damaged)
    assert browser_row_problems(browser, copy, board) != []
    assert row_count_problems(copy, board) != []


def test_image_check_fails_when_a_cell_image_is_missing(browser: Browser, site: tuple[Path, Path],
                                                        tmp_path: Path) -> None:
    out, _ = site
    copy = _damaged_copy(out, tmp_path)
    cid = kept_candidates()[0]
    images = sorted((copy / BOARD / "cells" / cid).glob("*.png"))
    assert images
    images[0].unlink()
    browser.navigate(page_url(copy / BOARD / "cells" / f"{cid}.html"))
    assert browser_image_problems(browser) != []
    assert missing_files(copy) != []


def test_sort_puts_missing_values_last() -> None:
    """The reference order the browser is compared with (a missing value never sorts as a number)."""
    values: list[float | None] = [2.0, None, -1.0, math.inf, 0.5]
    assert expected_order(values, True) == [math.inf, 2.0, 0.5, -1.0, None]
    assert expected_order(values, False) == [-1.0, 0.5, 2.0, math.inf, None]
