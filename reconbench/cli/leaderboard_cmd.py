"""`reconbench leaderboard SUITE`: render (or verify) the leaderboard of a suite from its cell results."""

from __future__ import annotations

from pathlib import Path

import click

from reconbench.bench.runner import default_results_dir
from reconbench.bench.suite import load_suite
from reconbench.cli.common import command_line, data_root_option, main_group
from reconbench.errors import ReconbenchError
from reconbench.leaderboard.render import build_leaderboard
from reconbench.leaderboard.tables import default_leaderboard_dir
from reconbench.leaderboard.verify import check_tables, rescore_cell, stored_cells


@main_group.command("leaderboard")
@click.argument("suite")
@click.option(
    "--results",
    type=click.Path(file_okay=False),
    default=None,
    help="Results folder written by `reconbench bench` (default: runs/bench/<suite>).",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False),
    default=None,
    help="Leaderboard folder (default: leaderboards/<suite>).",
)
@click.option("--no-figures", is_flag=True, help="Skip the figures.")
@click.option("--publish", is_flag=True,
              help="Refuse unless every cell ran at the current commit of a clean checkout (for published boards).")
@click.option(
    "--verify",
    is_flag=True,
    help="Do not render: re-score the published cells from their stored candidates with the standard "
    "evaluation, and recompute every table entry from the cell JSONs.",
)
@data_root_option
def leaderboard_command(
    suite: str, results: str | None, out: str | None, no_figures: bool, publish: bool, verify: bool,
    data_root: str | None
) -> None:
    """Render leaderboards/<suite>/: README.md, results.json, cells/, candidates/, figures/."""
    s = load_suite(suite)
    out_dir = Path(out) if out else default_leaderboard_dir(s)
    if verify:
        if not (out_dir / "results.json").exists():
            raise ReconbenchError(
                f"{out_dir} holds no leaderboard; render it first with `reconbench leaderboard {suite}`"
            )
        problems = check_tables(out_dir)
        ids = stored_cells(out_dir)
        for cid in ids:
            problems += rescore_cell(out_dir, cid, data_root=data_root)
        for p in problems:
            click.echo(f"MISMATCH {p}", err=True)
        if problems:
            raise ReconbenchError(f"{len(problems)} stored number(s) of {out_dir} are not reproduced")
        click.echo(
            f"{out_dir}: tables match the cells; {len(ids)} stored cell(s) re-scored, every number reproduced"
        )
        return
    res_dir = Path(results) if results else default_results_dir(s)
    data = build_leaderboard(
        s,
        res_dir,
        out_dir,
        command=command_line(),
        data_root=data_root,
        figures=False if no_figures else None,
        publish=publish,
    )
    cells = data["header"]["cells"]
    click.echo(
        f"leaderboard: {out_dir / 'README.md'}  ({cells['ok']} ok, {cells['failed']} failed, "
        f"{cells['not_run']} not run; {len(data['stored_candidates'])} cell(s) with stored candidates)"
    )
