"""`reconbench leaderboard SUITE`: render (or verify) the leaderboard of a suite from its cell results."""

from __future__ import annotations

from pathlib import Path

import click

from reconbench.bench.runner import default_results_dir
from reconbench.bench.suite import Suite, load_suite
from reconbench.bench.suite.files import SHIPPED_SUITES
from reconbench.cli.common import command_line, data_root_option, main_group
from reconbench.errors import ReconbenchError
from reconbench.leaderboard.accept import add_submission, outside_cells
from reconbench.leaderboard.export import FORMATS, export_board
from reconbench.leaderboard.figure_check import check_figures, figure_line
from reconbench.leaderboard.manifest import MANIFEST_NAME, RELEASES_DIR, RELEASES_NAME, check_manifest
from reconbench.leaderboard.published_suite import published_suite
from reconbench.leaderboard.releases import check_releases, make_release, release_line
from reconbench.leaderboard.render import build_leaderboard
from reconbench.leaderboard.rerun import (
    MAX_SEED,
    CheckCount,
    draw_sample,
    draw_seed,
    rerun_checked,
    suite_for_verify,
)
from reconbench.leaderboard.rerun_paths import mixed_paths_line
from reconbench.leaderboard.slim import RERUN_RTOL, slim_board
from reconbench.leaderboard.submit import board_results, board_suite, pack, submission_text
from reconbench.leaderboard.tables import SELECTIONS, default_leaderboard_dir
from reconbench.leaderboard.verify import (
    check_aggregates,
    check_cell,
    check_entries,
    check_readme,
    check_records,
    check_stored,
    check_tables,
    corrupt_cells,
    stored_cells,
)
from reconbench.progress import Progress
from reconbench.provenance import check_writable, folder_lock, write_text_atomic
from reconbench.records import BoardHeader


class BoardGroup(click.Group):
    """``leaderboard SUITE ...`` renders, verifies or exports a board (the ``render`` command, the default);
    ``leaderboard submit`` and ``leaderboard add`` pack and take in outside submissions."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args or args[0] not in self.commands:
            args = [RENDER, *args]
        return super().parse_args(ctx, args)


RENDER = "render"


@main_group.group("leaderboard", cls=BoardGroup)
def leaderboard_group() -> None:
    """Leaderboards: `leaderboard SUITE` renders (see `leaderboard render -h`); `leaderboard submit` and
    `leaderboard add` pack and merge outside submissions."""


@leaderboard_group.command(RENDER)
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
    help="Leaderboard folder (default: runs/leaderboards/<suite>; with --publish, --verify or --format: "
    "leaderboards/<suite>).",
)
@click.option(
    "--publish",
    is_flag=True,
    help="Write the published leaderboard leaderboards/<suite>/ (tracked in git) instead of a run folder; refuses "
    "unless this checkout is clean and every cell ran at its commit, or was merged by `bench --unpack` from a "
    "slice pack run at a clean commit (docs/slices.md).",
)
@click.option("--no-figures", is_flag=True, help="Skip the figures.")
@click.option(
    "--note",
    default=None,
    help="Why the numbers moved since the board's last publication (one paragraph; '@FILE' reads it from FILE); "
    "kept in results.json and shown at the top of README.md.",
)
@click.option(
    "--verify",
    is_flag=True,
    help="Do not render: check first that the board holds exactly the files its MANIFEST.json lists (sha256 and "
    "size; a missing, added or changed file fails, named), and that the candidates results.json names are stored; "
    "then re-score the published cells from their stored candidates with the standard "
    "evaluation (numbers to the float64 rounding tolerance, counts exactly except decisions within rounding of their "
    "threshold, reported as borderline), check each cell's seal, recompute every table entry from the cell JSONs "
    "and re-render README.md to compare it.",
)
@click.option(
    "--slim",
    is_flag=True,
    help="Do not render: rewrite the published board in place as slim entries (docs/leaderboard-entries.md): each "
    "cell a small entry with compact per-image rows, model cards without their training curve and test indices, "
    "candidates kept for a sample of cells only (in the attack's precision, xz-compressed), no target weights; "
    "nothing is run again, and a board already in this form is left as it is; MANIFEST.json (every file's sha256 "
    "and size) is written last. `--verify` passes on the result.",
)
@click.option(
    "--rerun",
    default=None,
    metavar="CELL[,CELL...]",
    help="With --verify: also re-run these cells and check that the board's numbers agree: each target trained again "
    "from its recipe in a temporary cache on the BLAS path (stock, or MKL's fast path of RECONBENCH_FAST_BLAS=1) its "
    "model card records (a card that records none: the cell's attack path, then the other path when the weights' "
    "sha256 differs from the card's; the path that reproduced it is printed), each attack from its recorded seed "
    "on the path the cell's provenance records (in a child process where that is not this command's).",
)
@click.option(
    "--rerun-sample",
    type=click.IntRange(min=1),
    default=None,
    metavar="K",
    help="With --verify: also re-run K cells drawn at random from the cells that keep no candidates (seeded: "
    "--rerun-seed; the sample and its seed are printed), each target trained again from its recipe in a temporary "
    "cache (each target and attack on the BLAS path its card and cell record, as --rerun), and compare "
    "what is deterministic (counts exactly, other numbers within relative 1e-6, the weights' "
    "sha256; never seconds). Of n such cells, one forged cell is in the sample with probability K/n.",
)
@click.option(
    "--rerun-seed",
    type=click.IntRange(min=0, max=MAX_SEED),
    default=None,
    metavar="S",
    help="With --rerun-sample: the seed of the sample (default: drawn at random, and printed so the check can be "
    "repeated).",
)
@click.option(
    "--release",
    is_flag=True,
    help="Do not render: number the published board's current state as its next release (<board>-r1, -r2, ...; "
    "<board> is the board's folder, e.g. paper-gpu-r1 for suite paper in leaderboards/paper-gpu) in its "
    "RELEASES.json, naming the git commit its files are committed at and the sha256 of its MANIFEST.json; the "
    "board must match its manifest and be committed. An older release's manifest and README stay under "
    "releases/<id>/. On an unchanged board it names the release it already is.",
)
@click.option(
    "--format",
    "export_format",
    type=click.Choice(FORMATS),
    default=None,
    help="Do not render: print the published board's tables as csv or json (one record per row and metric, full "
    "precision) or latex or markdown (ready to paste: mean [95% interval] and null columns).",
)
@click.option(
    "--columns",
    default=None,
    help="With --format latex|markdown: the metric columns, comma-separated, or 'all' (default: the board's first two).",
)
@click.option(
    "--selection",
    type=click.Choice(SELECTIONS),
    default="pool",
    show_default=True,
    help="With --format latex|markdown: which search-run selection the main table shows.",
)
@data_root_option
def leaderboard_command(
    suite: str,
    results: str | None,
    out: str | None,
    publish: bool,
    no_figures: bool,
    note: str | None,
    verify: bool,
    export_format: str | None,
    columns: str | None,
    selection: str,
    data_root: str | None,
    slim: bool = False,
    rerun: str | None = None,
    rerun_sample: int | None = None,
    rerun_seed: int | None = None,
    release: bool = False,
) -> None:
    """Render a leaderboard of SUITE: README.md, results.json, cells/, candidates/, figures/ (`reconbench leaderboard
    SUITE ...`; outside results: `reconbench leaderboard submit -h`, `reconbench leaderboard add -h`; a published
    board's reconstructions figure drawn again: `reconbench leaderboard redraw -h`).

    Without --publish it goes to runs/leaderboards/<suite>/, leaving the committed leaderboards/<suite>/ untouched.
    """
    s = load_suite(suite)
    if (rerun or rerun_sample) and not verify:
        raise ReconbenchError("--rerun and --rerun-sample check a published board: add --verify")
    if rerun_seed is not None and not rerun_sample:
        raise ReconbenchError("--rerun-seed seeds the sample of --rerun-sample: add --rerun-sample K")
    if out:
        out_dir = Path(out)
    elif publish or verify or export_format or slim or release:
        out_dir = default_leaderboard_dir(s)
    else:
        out_dir = draft_leaderboard_dir(s)
    if export_format:
        if publish or verify:
            raise ReconbenchError("--format prints a published board; it does not combine with --publish or --verify")
        if not (out_dir / "results.json").exists():
            raise ReconbenchError(no_board(out_dir, s))
        click.echo(export_board(out_dir, export_format, columns=columns, selection=selection), nl=False)
        return
    if release:
        if publish or verify or export_format or slim:
            raise ReconbenchError("--release numbers a published board as it is; run it alone (after --publish and "
                                  "a commit)")
        if not (out_dir / "results.json").exists():
            raise ReconbenchError(no_board(out_dir, s))
        check_writable(out_dir, "--out")
        with folder_lock(out_dir, "leaderboard"):
            made, new = make_release(out_dir)
        click.echo(f"{out_dir}: {'released' if new else 'already released'} as {made.id} (commit "
                   f"{str(made.commit)[:12]}, manifest sha256 {made.manifest_sha256[:16]}, {made.files} files); "
                   f"commit {out_dir / RELEASES_NAME}" + (" and releases/" if (out_dir / RELEASES_DIR).is_dir() else ""))
        return
    if slim:
        if publish or verify or export_format:
            raise ReconbenchError("--slim rewrites a published board; run it alone, then --verify")
        check_writable(out_dir, "--out")
        with folder_lock(out_dir, "leaderboard"):
            report = slim_board(s, out_dir)
        click.echo(f"{out_dir}: {report.cells} cell(s) as slim entries ({report.already} already were), "
                   f"{report.cards} model card(s) and {report.protocols} protocol(s) made compact, candidates "
                   f"kept for {len(report.sample)} cell(s) ({', '.join(report.sample) or 'none'}), "
                   f"{len(report.removed)} file(s) removed; {report.bytes_before / 2**20:.2f} MiB -> "
                   f"{report.bytes_after / 2**20:.2f} MiB")
        if not report.readme_rendered:
            click.echo(f"  README.md kept (only its count of stored candidates updated): it was rendered from another "
                       f"version of {s.path.name}; slim with that suite file to render it again, or publish again")
        return
    if verify:
        published = published_suite(s, out_dir)   # the version it was rendered from, when the file changed since
        s = suite_for_verify(s, out_dir)   # that version, or with outside submissions' tables appended
        rescored, pairs = verify_leaderboard(s, out_dir, data_root)
        if (note := published.note(out_dir)) is not None:
            click.echo(note)
        ids = [c.strip() for c in (rerun or "").split(",") if c.strip()]
        if rerun_sample:
            sample = draw_sample(out_dir, rerun_sample, draw_seed() if rerun_seed is None else rerun_seed)
            click.echo(f"re-run sample: {len(sample.cells)} of the {sample.population} cell(s) without stored "
                       f"candidates, seed {sample.seed} (--rerun-seed {sample.seed} repeats it): "
                       f"{', '.join(sample.cells) or 'none'}; one forged cell among them is sampled with probability "
                       f"{sample.probability():.2f}")
            ids += [c for c in sample.cells if c not in ids]
        if ids:
            click.echo(f"re-running {len(ids)} cell(s), targets trained again in a temporary cache: {', '.join(ids)}")
            problems = rerun_checked(s, out_dir, ids, data_root=data_root,
                                     say=lambda line: click.echo(f"re-run: {line}")).problems
            for p in problems:
                click.echo(f"MISMATCH (re-run) {p}")
            if problems:
                raise ReconbenchError(f"{len(problems)} number(s) of {out_dir} are not reproduced by re-running "
                                      f"their cells; first: {problems[0]}")
            click.echo(f"re-run: {len(ids)} cell(s) give the board's numbers (counts exactly, others within relative "
                       f"{RERUN_RTOL:g}; weights' sha256 equal)")
        click.echo(release_line(out_dir))
        if releases := check_releases(out_dir):
            raise ReconbenchError(f"{len(releases)} problem(s) with the releases of {out_dir}; first: {releases[0]}")
        stored = set(stored_cells(out_dir))   # a cell counts once: re-scored in full, else re-run, else its pairs
        count = CheckCount(cells=len(list((out_dir / "cells").glob("*.json"))), rescored=rescored,
                           rerun=len(set(ids) - stored), pairs=len(set(pairs) - stored - set(ids)))
        click.echo(count.line())
        if (why := count.problem()) is not None:
            raise ReconbenchError(f"{out_dir}: {why}")
        return
    res_dir = Path(results) if results else default_results_dir(s)
    for problem in corrupt_cells(res_dir):
        click.echo(f"warning: skipped {problem} (counted as not run)", err=True)
    check_writable(out_dir, "--out")
    with folder_lock(out_dir, "leaderboard"):
        data = build_leaderboard(
            s,
            res_dir,
            out_dir,
            command=command_line(),
            data_root=data_root,
            figures=False if no_figures else None,
            publish=publish,
            note=_read_note(note),
        )
    for line in data["dropped_submissions"]:
        click.echo(f"warning: {line}", err=True)
    if (mixed := mixed_paths_line(res_dir)) is not None:
        click.echo(f"warning: {mixed}", err=True)
    cells = data["header"]["cells"]
    click.echo(
        f"leaderboard: {out_dir / 'README.md'}  ({cells['ok']} ok, {cells['failed']} failed, "
        f"{cells['not_run']} not run; {len(data['stored_candidates'])} cell(s) with stored candidates)"
    )
    if not out and not publish:
        click.echo(f"  (a draft; `reconbench leaderboard {suite} --publish` writes {default_leaderboard_dir(s)})")


def _read_note(note: str | None) -> str | None:
    """The --note text, or the contents of FILE for '@FILE'."""
    if note is None or not note.startswith("@"):
        return note
    path = Path(note[1:])
    if not path.is_file():
        raise ReconbenchError(f"--note {note}: no such file {path}; give the text itself or '@' and a file that exists")
    return path.read_text()


def draft_leaderboard_dir(suite: Suite) -> Path:
    """Where an unpublished render goes: a run folder beside the results, never the tracked leaderboard."""
    return Path("runs") / "leaderboards" / suite.name


def no_board(out_dir: Path, suite: Suite) -> str:
    """Why a published board is not where a command looks, and the fix: the published boards are found relative to
    the working folder."""
    where = ("the published boards are read from ./leaderboards: run this in the repository's root, " if
             out_dir == default_leaderboard_dir(suite) else "")
    return (f"{out_dir} holds no leaderboard (no results.json); {where}pass --out with a board's folder, or publish "
            f"it first with `reconbench leaderboard {suite.name} --publish`")


def verify_leaderboard(s: Suite, out_dir: Path, data_root: str | None) -> tuple[int, list[str]]:
    """Check a published board (manifest, stored candidates, seals, entries, tables, README, re-scoring); the number
    of cells re-scored from their stored candidates, and the cells whose figure pairs were re-scored."""
    if not (out_dir / "results.json").exists():
        raise ReconbenchError(no_board(out_dir, s))
    files = check_manifest(out_dir)  # first: every file the board was published with, unchanged, and no other
    for p in files:
        click.echo(f"MISMATCH {p}")
    if files:
        raise ReconbenchError(f"{len(files)} file(s) of {out_dir} differ from its {MANIFEST_NAME}; first: {files[0]}")
    corrupt = corrupt_cells(out_dir)
    if corrupt:
        raise ReconbenchError(f"{len(corrupt)} corrupt cell file(s), first: {corrupt[0]}; render the leaderboard again")
    records = check_records(out_dir, trained_elsewhere=outside_cells(out_dir, board_results(out_dir)))
    entries = check_entries(out_dir)
    figures = check_figures(s, out_dir, data_root)
    problems = (check_stored(out_dir) + records.problems + entries.problems + check_tables(out_dir)
                + check_aggregates(s, out_dir) + check_readme(s, out_dir) + figures.problems)
    ids = stored_cells(out_dir)
    borderline: list[str] = []
    explained: list[str] = []
    rtol = 0.0
    with Progress(len(ids), f"re-scoring {s.name}'s stored cells") as bar:
        for k, cid in enumerate(ids):
            check = check_cell(out_dir, cid, data_root=data_root)
            problems += check.problems
            borderline += check.borderline
            explained += check.explained
            rtol = max(rtol, check.rtol)
            bar.update(k + 1)
    explained += entries.explained
    for line in explained:
        click.echo(f"borderline, agrees within rounding: {line}")
    for p in problems:
        click.echo(f"MISMATCH {p}")
    if problems:
        raise ReconbenchError(f"{len(problems)} stored number(s) or README line(s) of {out_dir} are not reproduced; "
                              f"first: {problems[0]}")
    click.echo(
        f"{out_dir}: tables and README.md match the cells; {len(ids)} stored cell(s) re-scored, every number "
        f"reproduced (relative tolerance {rtol:.2g}); {len(borderline)} decision(s) borderline (within rounding of "
        f"their threshold), {len(explained)} stored number(s) differ only through them"
    )
    if entries.checked:
        click.echo(f"  slim entries: {entries.checked} count(s) and score mean(s) re-derived from their per-image rows "
                   f"(stored to 7 significant digits), {len(entries.borderline)} decision(s) within that rounding of "
                   "their threshold")
    click.echo(figure_line(figures))
    if records.unsealed:
        click.echo(f"  {records.unsealed} cell record(s) carry no seal (written before seals): their timings are "
                   "checked against their runs' times, their targets' metrics against the model cards")
    return len(ids), figures.pairs_cells


@leaderboard_group.command("submit")
@click.argument("run_dir", type=click.Path(file_okay=False, exists=True))
@click.option("--board", required=True, type=click.Path(file_okay=False, exists=True),
              help="The published board the cells are for, e.g. leaderboards/ci.")
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="The submission file to write (.json).")
@click.option("--contributor", default=None, help="Who submits (a name, an e-mail or a URL), shown on the board.")
def submit_command(run_dir: str, board: str, out: str, contributor: str | None) -> None:
    """Pack the cells of RUN_DIR (`reconbench bench` with the board's suite file and your tables appended) that the
    board lacks into one submission file: slim entries, their candidates, provenance (docs/leaderboard-entries.md)."""
    sub = pack(Path(run_dir), Path(board), contributor)
    target = Path(out)
    check_writable(target.parent if str(target.parent) else Path("."), "--out")
    write_text_atomic(target, submission_text(sub))
    click.echo(f"submission: {target}  ({len(sub['entries'])} cell(s), candidates of {len(sub['candidates'])}, "
               f"{target.stat().st_size / 1024:.0f} KiB); add it with `reconbench leaderboard add {target} "
               f"--board {board}`")


@leaderboard_group.command("add")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--board", required=True, type=click.Path(file_okay=False, exists=True),
              help="The published board to merge the submission into, e.g. leaderboards/ci.")
@data_root_option
def add_command(file: str, board: str, data_root: str | None) -> None:
    """Validate a submission FILE against the board (suite and recipe hashes, seals, clean provenance, candidates
    re-scored to the submitted numbers) and merge it: cells, results.json, README.md, marked as outside."""
    board_dir = Path(board)
    header = BoardHeader.from_dict(board_results(board_dir)["header"], board_dir / "results.json")
    # the suite file the board names (a path relative to here, else a shipped suite of the board's name)
    recorded = Path(str(header.suite_file))
    suite = load_suite(recorded if recorded.is_file() else str(header.suite or board_dir.name))
    # how `leaderboard --verify` is given the same suite: a shipped one by its name, any other by its file
    shipped = not recorded.is_file() or recorded.resolve().parent == SHIPPED_SUITES
    suite_arg = suite.name if shipped else str(recorded)
    check_writable(board_dir, "--board")
    with folder_lock(board_dir, "leaderboard"):
        report = add_submission(Path(file), suite, board_dir, data_root=data_root)
    for line in report.refusals:
        click.echo(f"refused: {line}", err=True)
    if report.refusals:
        raise ReconbenchError(f"submission {report.submission} refused ({len(report.refusals)} problem(s)), nothing "
                              f"merged; first: {report.refusals[0]}")
    click.echo(f"{board_dir}: merged submission {report.submission}: {len(report.cells)} cell(s), "
               f"{len(report.rescored)} re-scored to the submitted numbers; README.md and results.json rendered again "
               f"(`reconbench leaderboard {suite_arg} --out {board_dir} --verify` checks the board)")


@leaderboard_group.command("redraw")
@click.argument("suite")
@click.option("--out", type=click.Path(file_okay=False, exists=True), default=None,
              help="The published board (default: leaderboards/<suite>).")
@click.option("--rerun-missing", is_flag=True,
              help="Run the figure's cells whose candidates the board does not store again from their recipes, as "
              "`leaderboard SUITE --verify --rerun` does (each target trained again in a temporary cache on the BLAS "
              "path its model card records, or on both where it records none; each attack on the path its cell "
              "records, in a child process where that is not this command's; the path that reproduced each target "
              "is printed), and draw them only if every stored number and the targets' weights are reproduced.")
@data_root_option
def redraw_command(suite: str, out: str | None, rerun_missing: bool, data_root: str | None) -> None:
    """Draw a published board's reconstructions figure again in the current layout of pairs, from its stored cells,
    also where its drawing failed when the board was published; results.json's figure record, README.md and
    MANIFEST.json are rewritten so that `--verify` passes. Runs from either BLAS path (stock MKL or
    RECONBENCH_FAST_BLAS=1)."""
    from reconbench.leaderboard.redraw import redraw_board

    s = load_suite(suite)
    board = Path(out) if out else default_leaderboard_dir(s)
    if not (board / "results.json").exists():
        raise ReconbenchError(f"{board} holds no leaderboard (no results.json); pass the board's folder with --out")
    s = board_suite(s, board)
    check_writable(board, "--out")
    with folder_lock(board, "leaderboard"):
        done = redraw_board(s, board, rerun_missing=rerun_missing, data_root=data_root,
                            say=lambda line: click.echo(f"re-run: {line}"))
    again = f", {len(done.rerun)} of them run again for their candidates" if done.rerun else ""
    click.echo(f"{board}: reconstructions figure redrawn from {len(done.cells)} cell(s){again}; changed: "
               f"{', '.join(done.changed) or 'nothing'} (check with `reconbench leaderboard {s.name} --out {board} "
               "--verify`)")
