"""The site tests' fixture board and the checks they run on a rendered site (shared by the browser and file tests).

The fixture is the published ``ci`` board (digits: the data set ships with scikit-learn, no download) copied with the
stored candidates of only a few cells, so that the site builds in seconds and shows both kinds of cell page.
"""

from __future__ import annotations

import shutil
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from reconbench.leaderboard.results_file import read_results
from reconbench.leaderboard.slim import candidates_file, stored_candidate_ids

REPO = Path(__file__).resolve().parents[2]
BOARD = "ci"
#: how many cells of the ci board keep their stored candidates in the fixture (their pages show reconstructions)
KEEP = 3


def kept_candidates() -> list[str]:
    """The cells whose candidates the fixture keeps: the first stored ones, one per target where possible."""
    stored = stored_candidate_ids(REPO / "leaderboards" / BOARD)
    by_target: dict[str, str] = {}
    for cid in stored:
        by_target.setdefault(cid.split("--")[0], cid)
    picks = list(by_target.values())[:KEEP]
    return picks + [c for c in stored if c not in picks][:KEEP - len(picks)]


def fixture_leaderboards(root: Path) -> Path:
    """A leaderboards folder holding a copy of the ci board with the candidates of ``kept_candidates()`` only."""
    src = REPO / "leaderboards" / BOARD
    dst = root / "leaderboards" / BOARD
    dst.mkdir(parents=True)
    for name in ("results.json", "README.md"):
        shutil.copyfile(src / name, dst / name)
    for sub in ("cells", "targets", "figures"):
        shutil.copytree(src / sub, dst / sub)
    (dst / "candidates").mkdir()
    for cid in kept_candidates():
        stored = candidates_file(src, cid)
        assert stored is not None
        shutil.copyfile(stored, dst / "candidates" / stored.name)
    return root / "leaderboards"


def results(board: Path) -> dict[str, Any]:
    return read_results(board)


class Links(HTMLParser):
    """The ``src`` of every image and the ``href`` of every link of a page, and the rows of each table by id."""

    def __init__(self) -> None:
        super().__init__()
        self.images: list[str] = []
        self.links: list[str] = []
        self.rows: dict[str, int] = {}
        self._table: list[str] = []
        self._in_body = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "img" and a.get("src"):
            self.images.append(str(a["src"]))
        elif tag in ("a", "link") and a.get("href"):
            self.links.append(str(a["href"]))
        elif tag == "script" and a.get("src"):
            self.links.append(str(a["src"]))
        elif tag == "table":
            self._table.append(str(a.get("id") or ""))
        elif tag == "tbody":
            self._in_body = True
        elif tag == "tr" and self._in_body and self._table:
            self.rows[self._table[-1]] = self.rows.get(self._table[-1], 0) + 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "table" and self._table:
            self._table.pop()
        elif tag == "tbody":
            self._in_body = False


def parse(page: Path) -> Links:
    p = Links()
    p.feed(page.read_text())
    return p


def local_target(page: Path, url: str) -> Path | None:
    """The file a relative URL of ``page`` points to (None for an in-page anchor or another scheme)."""
    parts = urlsplit(url)
    if parts.scheme or parts.netloc or not parts.path:
        return None
    return (page.parent / unquote(parts.path)).resolve()


def missing_files(site: Path) -> list[str]:
    """Every image and link of every page of the site that points to no file."""
    problems = []
    for page in sorted(site.rglob("*.html")):
        links = parse(page)
        for url in links.images + links.links:
            target = local_target(page, url)
            if target is not None and not target.is_file():
                problems.append(f"{page.relative_to(site)}: {url} does not exist")
    return problems


def row_count_problems(site: Path, board: Path) -> list[str]:
    """Main-table rows of the board page (per selection) against the rows results.json holds."""
    counts = parse(site / board.name / "index.html").rows
    problems = []
    for sel, rows in results(board)["tables"].items():
        if rows and counts.get(f"table-{sel}") != len(rows):
            problems.append(f"table-{sel}: {counts.get(f'table-{sel}')} rows on the page, {len(rows)} in results.json")
    return problems
