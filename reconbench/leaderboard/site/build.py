"""Render the published boards into a static site: plain HTML, CSS, a little JavaScript and PNGs.

Layout of the output folder::

    index.html                      the boards
    claims.html                     the papers' claims with their verdicts (when the claims boards are present)
    static/site.css, static/site.js
    <board>/index.html              tables (sortable, filterable), headline, comparisons, privacy-utility, figures
    <board>/figures/*.png           the board's own figures, copied
    <board>/cells/<cell>.html       one page per cell: reconstructions beside training images, settings, provenance
    <board>/cells/<cell>/*.png      the pairs of a cell whose candidates the board stores, or whose figure pairs it
                                    keeps (a subset of matched pairs in float16: the images the board's figure shows)

Every link is relative, nothing is fetched from elsewhere: the folder works offline and from ``file://``.
The HTML comes from the Jinja2 templates in ``templates/``.
"""

from __future__ import annotations

import contextlib
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import filelock
from jinja2 import Environment, PackageLoader, StrictUndefined, UndefinedError, select_autoescape

from reconbench import __version__
from reconbench.errors import ReconbenchError
from reconbench.leaderboard.site.board import Board, cell_numbers, find_boards, load_board, settings_json
from reconbench.leaderboard.site.claims_view import ClaimsView, claims_view
from reconbench.leaderboard.site.images import ProblemCache, cell_images
from reconbench.provenance import git_commit, write_bytes_atomic, write_text_atomic
from reconbench.safe_paths import UnsafePathError, check_name, inside, member

PACKAGE = "reconbench.leaderboard.site"
T = TypeVar("T")
#: the file that marks a folder as a site this module wrote (only such a folder is replaced)
MARKER = ".reconbench-site"


@dataclass
class SiteSummary:
    out: Path
    boards: list[str]
    cell_pages: int
    cells_with_images: int
    claims: bool
    #: cells whose stored candidates could not be drawn here, and the first reason (e.g. the data set is missing)
    cells_not_drawn: int = 0
    not_drawn_reason: str = ""
    #: the site's files and their bytes, as written
    files: int = 0
    bytes: int = 0
    #: of ``cells_with_images``, those drawn from the board's figure pairs (a subset of matched pairs in float16)
    cells_with_pairs: int = 0


def fmt(v: object, spec: str = ".3g") -> str:
    """A number for a table (n/a for a missing one)."""
    if v is None or isinstance(v, bool) or not isinstance(v, (int, float)):
        return "n/a" if v is None else str(v)
    return format(v, spec)


def href(name: str) -> str:
    """A file name as a relative URL (cell ids hold '@', '=' and ',')."""
    return quote(name)


def environment() -> Environment:
    env = Environment(loader=PackageLoader(PACKAGE, "templates"), autoescape=select_autoescape(["html"]),
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["fmt"] = fmt
    env.filters["href"] = href
    return env


def _copy_static(out: Path) -> None:
    static = out / "static"
    static.mkdir(parents=True, exist_ok=True)
    for item in resources.files(PACKAGE).joinpath("static").iterdir():
        if item.is_file():
            write_bytes_atomic(static / item.name, item.read_bytes())


def figure_paths(board: Board) -> list[str]:
    """The board's figure files (relative to its folder), each checked to stay inside it (results.json is data
    anyone can send: a figure ``../../x`` must neither read nor write outside the board and the site)."""
    names = [str(f.file) for f in board.figures] + [p.figure for p in board.privacy if p.figure]
    source = board.folder / "results.json"
    for rel in names:
        inside(board.folder, rel, "figure", source=source)
        if not rel.lower().endswith((".png", ".svg", ".jpg", ".jpeg")):
            raise UnsafePathError(f"figure {rel!r} in {source} is not an image (.png, .svg, .jpg); restore the board's "
                                  "results.json from its source")
    return names


def _copy_figures(board: Board, out: Path) -> None:
    for rel in figure_paths(board):
        src = inside(board.folder, rel, "figure")
        if src.is_file():
            dest = inside(out, rel, "figure")
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dest)


@contextlib.contextmanager
def site_lock(out: Path) -> Iterator[None]:
    """Hold the lock of a site folder while it is built: a second build into the same folder is refused (the folder
    itself is replaced by a rename, so the lock file lives beside it)."""
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        lock = filelock.FileLock(str(out.parent / f".{out.name}.lock"))
        lock.acquire(timeout=0)
    except filelock.Timeout:
        raise ReconbenchError(f"--out {out} is being written by another `reconbench site`; wait for it to finish, or "
                              "pass another --out") from None
    except OSError as exc:
        raise ReconbenchError(f"cannot lock --out {out} ({exc.strerror or exc}); pass a writable folder") from exc
    try:
        yield
    finally:
        lock.release()


#: what reading a malformed board entry raises (a field of the wrong type, a missing key, a template's undefined)
MALFORMED = (UndefinedError, TypeError, AttributeError, KeyError, ValueError)


def malformed_as_error(source: Path, make: Callable[[], T]) -> T:
    """``make()``, or a one-line error naming the board file whose data could not be shown."""
    try:
        return make()
    except ReconbenchError as exc:  # a record's own one-line error: said of the file it came from
        if str(source) in str(exc):
            raise
        raise ReconbenchError(f"{source}: {exc}") from None
    except MALFORMED as exc:
        raise ReconbenchError(f"{source} is malformed: the site cannot show it ({type(exc).__name__}: "
                              f"{' '.join(str(exc).split())[:200]}); restore it from the published board") from None


def render(env: Environment, template: str, source: Path, **values: Any) -> str:
    """A page, or a one-line error naming the board file whose data the template could not show."""
    return malformed_as_error(source, lambda: env.get_template(template).render(**values))


def check_replaceable(out: Path) -> None:
    """Refuse to replace a folder that holds anything but a site written here (e.g. ``--out .``)."""
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (out / MARKER).is_file())):
        raise ReconbenchError(f"--out {out} exists and is not a site written by `reconbench site` (no {MARKER} in it); "
                              "pass a new or empty folder")


def build_site(leaderboards: Path, out: Path, *, data_root: str | None = None, boards: list[str] | None = None,
               images: bool = True) -> SiteSummary:
    """Render every board under ``leaderboards`` (or the named ones) into ``out``, replacing what was there."""
    folders = find_boards(leaderboards)
    if boards:
        known = {p.name: p for p in folders}
        missing = [b for b in boards if b not in known]
        if missing:
            raise ReconbenchError(f"no published board {', '.join(missing)} in {leaderboards} (boards there: "
                                  f"{', '.join(known) or 'none'}); pass --board with one of them")
        folders = [known[b] for b in boards]
    if not folders:
        raise ReconbenchError(f"{leaderboards} holds no board (a folder with results.json); publish one with "
                              "`reconbench leaderboard SUITE --publish` or pass --leaderboards FOLDER")
    loaded = [malformed_as_error(p, partial(load_board, p)) for p in folders]
    for board in loaded:  # every name that becomes a path is checked before anything is written
        figure_paths(board)
        for cid in board.cells:
            check_name(cid, "cell id", source=board.folder / "cells", suffix=".html")
    env = environment()
    stamp = {"generated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "version": __version__,
             "commit": git_commit() or "unknown"}
    with site_lock(out):
        check_replaceable(out)
        final, out = out, out.parent / f".{out.name}.partial"
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        write_text_atomic(out / MARKER, "a site written by `reconbench site`; the next build replaces this folder\n")
        _copy_static(out)
        claims: ClaimsView | None = claims_view(leaderboards, {b.name for b in loaded})
        problems = ProblemCache(data_root)
        pages = with_images = with_pairs = not_drawn = 0
        not_drawn_reason = ""
        for board in loaded:
            folder = out / board.name
            (folder / "cells").mkdir(parents=True)
            _copy_figures(board, folder)
            write_text_atomic(folder / "index.html", render(
                env, "board.html", board.folder / "results.json",
                board=board, root="../", stamp=stamp, has_claims=claims is not None))
            figure_cells = {c: f for f in board.figures for c in f.cells or []}
            for cid, rec in board.cells.items():
                shown = cell_images(board.folder, rec, inside(folder / "cells", cid, "cell id"), problems) if images \
                    else None
                with_images += bool(shown and shown.pairs)
                with_pairs += bool(shown and shown.pairs and shown.subset)
                if shown is not None and shown.failed:
                    not_drawn += 1
                    not_drawn_reason = not_drawn_reason or shown.reason
                source = board.folder / "cells" / f"{cid}.json"
                write_text_atomic(member(folder / "cells", cid, ".html", "cell id"), render(
                    env, "cell.html", source, board=board, rec=rec, images=shown,
                    figure=figure_cells[cid] if cid in figure_cells else None,
                    settings=malformed_as_error(source, partial(settings_json, rec)),
                    numbers=malformed_as_error(source, partial(cell_numbers, rec, board.columns)),
                    root="../../", stamp=stamp, has_claims=claims is not None))
                pages += 1
        write_text_atomic(out / "index.html", env.get_template("index.html").render(
            boards=loaded, root="", stamp=stamp, has_claims=claims is not None))
        if claims is not None:
            write_text_atomic(out / "claims.html", env.get_template("claims.html").render(
                claims=claims, root="", stamp=stamp, has_claims=True))
        shutil.rmtree(final, ignore_errors=True)
        out.rename(final)  # the old site stays until the new one is complete
        written = [p for p in final.rglob("*") if p.is_file() and p.name != MARKER]
        return SiteSummary(final, [b.name for b in loaded], pages, with_images, claims is not None, not_drawn,
                           not_drawn_reason, len(written), sum(p.stat().st_size for p in written), with_pairs)
