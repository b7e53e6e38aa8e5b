"""`reconbench site`: render the published leaderboards into a static website (HTML, CSS, JavaScript, PNGs)."""

from __future__ import annotations

import webbrowser
from pathlib import Path

import click

from reconbench.cli.common import data_root_option, main_group
from reconbench.leaderboard.site import build_site
from reconbench.provenance import check_writable

DEFAULT_SITE_DIR = Path("runs") / "site"


@main_group.command("site")
@click.option("--leaderboards", type=click.Path(file_okay=False, exists=True), default="leaderboards", show_default=True,
              help="Folder of published boards (each a folder with results.json); the default is the "
                   "repository's, read from the working folder: run the command in the repository's root.")
@click.option("--out", type=click.Path(file_okay=False), default=str(DEFAULT_SITE_DIR), show_default=True,
              help="Folder the site is written to (replaced).")
@click.option("--board", "boards", multiple=True, help="Render only this board (repeatable; default: every board).")
@click.option("--no-images", is_flag=True,
              help="Skip the cells' reconstructions (no data set needed; the cell pages say they were not rendered).")
@click.option("--open", "open_browser", is_flag=True, help="Open the index in the default web browser afterwards.")
@data_root_option
def site_command(leaderboards: str, out: str, boards: tuple[str, ...], no_images: bool, open_browser: bool,
                 data_root: str | None) -> None:
    """Render every published board into a static site: index, sortable and filterable tables, a page per cell
    (reconstructions beside the training images they matched, settings, provenance) and the claims with verdicts.

    Plain files, nothing fetched from elsewhere: open OUT/index.html from disk, or serve the folder.
    """
    out_dir = Path(out)
    check_writable(out_dir.parent, "--out")
    summary = build_site(Path(leaderboards), out_dir, data_root=data_root, boards=list(boards) or None,
                         images=not no_images)
    index = out_dir / "index.html"
    pairs_note = (f" ({summary.cells_with_pairs} of them from figure pairs: a subset of matched pairs in float16)"
                  if summary.cells_with_pairs else "")
    click.echo(f"site: {index}  ({len(summary.boards)} board(s): {', '.join(summary.boards)}; {summary.cell_pages} cell "
               f"pages, {summary.cells_with_images} with reconstructions{pairs_note}; claims page: "
               f"{'yes' if summary.claims else 'no (claims-a and claims-b not both published)'}; {summary.files} files, "
               f"{summary.bytes / 1e6:.1f} MB)")
    if summary.cells_not_drawn:
        click.echo(f"warning: {summary.cells_not_drawn} cell(s) store candidates but have no reconstructions on the "
                   f"site: {summary.not_drawn_reason}; pass --data-root (or set $RECONBENCH_DATA) and run it again, or "
                   "--no-images to skip them", err=True)
    if open_browser:
        webbrowser.open(index.resolve().as_uri())
