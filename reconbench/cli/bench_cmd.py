"""`reconbench bench SUITE`: run a benchmark suite, one JSON per cell, resumable."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from reconbench import plugins
from reconbench.attack.search import check_search
from reconbench.bench.cells import Cell, expand, select
from reconbench.bench.cross_cells import CrossTargetExecutor
from reconbench.bench.executors import Executor
from reconbench.bench.ray_executor import RayExecutor
from reconbench.bench.runner import (
    SerialExecutor,
    default_results_dir,
    is_finished,
    load_cells,
    run_suite,
    select_cells,
    still_to_run,
)
from reconbench.bench.slice_costs import CostModel, GroupRules, read_costs
from reconbench.bench.slice_executor import NOT_CARRIED, DeadlineExecutor
from reconbench.bench.slice_pack import (
    LEDGER_FILE,
    STATES_FOLDER,
    import_states,
    ledger_cards,
    read_ledger,
    read_ledger_runs,
    states_not_carried,
    write_ledger,
)
from reconbench.bench.suite import Suite, SuiteError, display_path, load_suite
from reconbench.cli.bench_plan import default_cross_target, ledger_measured, ledger_progress, plan_table, print_plan
from reconbench.cli.bench_slices import (
    PACK_RESERVE_SECONDS,
    SlicePacker,
    chain_on_cell,
    check_pack_folder,
    say_deferred,
    unpack_slice,
)
from reconbench.cli.common import (
    check_device,
    command_line,
    data_root_option,
    main_group,
    quiet_option,
    show_cost,
    track_options,
    yes_option,
)
from reconbench.cli.run_cmd import check_task
from reconbench.errors import ReconbenchError
from reconbench.leaderboard.rerun_paths import mixed_paths_line
from reconbench.preflight import (
    TargetSize,
    attack_seconds,
    attack_steps,
    ceiling_note,
    check_attack,
    check_cost,
    check_target,
    step_seconds,
)
from reconbench.provenance import check_writable, folder_lock
from reconbench.records import CellRecord
from reconbench.targets.cache import cache_dir
from reconbench.targets.problems import build_problem
from reconbench.tracking import MlflowTracker, tracker


@main_group.command("bench")
@click.argument("suite")
@click.option(
    "--only",
    multiple=True,
    metavar="PATTERN",
    help="Run only cells whose id matches this wildcard (repeatable), e.g. '*haim*' or 'digits-binary--*'. "
    "Cell ids are TARGET--ATTACK--INIT--sSEED.",
)
@click.option(
    "--resume", is_flag=True, help="Continue a previous run in the same folder: finished cells are skipped."
)
@click.option("--retry-failed", is_flag=True, help="With --resume, also re-run cells that failed.")
@click.option(
    "--strict",
    is_flag=True,
    help="Stop at the first failed cell, and treat attacks / inits that are not registered as errors.",
)
@click.option("--list", "list_only", is_flag=True, help="Only list the cells and whether each is finished.")
@click.option(
    "--plan",
    "plan_only",
    is_flag=True,
    help="With --deadline: only print the slices of that many seconds that the cells still to run need on bare "
    "machines, estimated from the cost table (--costs, else the device's built-in one), and which search runs of a "
    "cell longer than a slice each one runs as a group, with the pack bytes they take (--pack-files, "
    "--runs-per-slice, --carry-starts as a slice takes them); runs nothing.",
)
@click.option(
    "--device", default=None, help="Torch device for the attacks (default: the suite's, usually cpu)."
)
@click.option(
    "--dtype",
    type=click.Choice(["float64", "float32"]),
    default=None,
    help="Attack precision (default: the suite's).",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False),
    default=None,
    help="Results folder (default: runs/bench/<suite>).",
)
@click.option(
    "--cache", type=click.Path(file_okay=False), default=None,
    help="Cache folder for trained targets (default: $RECONBENCH_CACHE, else ~/.cache/reconbench)."
)
@click.option(
    "--executor",
    type=click.Choice(["serial", "ray"]),
    default="serial",
    help="Where cells run: one after the other here (serial), or as Ray tasks (ray; pip install "
    "'reconbench[ray]'), see docs/distributed.md.",
)
@click.option(
    "--address",
    default=None,
    metavar="ADDR",
    help="With --executor ray: the Ray cluster to use, e.g. 'auto' or 'ray://head:10001' (default: a local instance).",
)
@click.option(
    "--deadline",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    metavar="SECONDS",
    help="Run only the cells that fit in SECONDS from now: each cell starts only when its estimated cost (from what "
    "this command has measured so far, else the device's cost table, plus a safety margin) fits in the time left; "
    "the rest are left for the next run (docs/slices.md).",
)
@click.option(
    "--pack",
    type=click.Path(file_okay=False),
    default=None,
    metavar="DIR",
    help="Write the cells this command runs into DIR as a slice pack, rewritten after every cell: at most 8 files of "
    "at most 16 MiB with a manifest (a GPU machine's way back); implies --resume. Merge it with --unpack DIR.",
)
@click.option(
    "--pack-files",
    type=click.IntRange(min=2, max=8),
    default=8,
    show_default=True,
    help="With --pack: the most files the pack may hold, its manifest included (fewer when another file comes back "
    "beside it, e.g. the GPU probe's JSON: benchmarks/gpu/slice.sh passes 7 then).",
)
@click.option(
    "--unpack",
    type=click.Path(file_okay=False),
    default=None,
    metavar="DIR",
    help="Verify a slice pack (sha256 of each file, the suite file's hash) and merge its cells into the results "
    "folder (--out); runs nothing. A cell the folder already holds with other numbers is refused.",
)
@click.option(
    "--finished",
    type=click.Path(dir_okay=False),
    default=None,
    metavar="FILE",
    help="Skip the cells that this ledger (the finished.json that --unpack writes into the results folder) lists as "
    "finished elsewhere, with the same cell key: how a slice on another machine continues without the records.",
)
@click.option(
    "--costs",
    type=click.Path(dir_okay=False),
    default=None,
    metavar="FILE",
    help="With --deadline: the cost table (JSON, seconds per phase: fixed and per unit) used until a phase is "
    "measured (default: the device's built-in, pessimistic table; see docs/slices.md).",
)
@click.option(
    "--cross-target/--no-cross-target",
    "cross_target",
    default=None,
    help="Advance the search runs of every cell together, those on targets of one shape in one batched computation "
    "(KKT attacks; the same results as each cell alone, to rounding). Default: on for a slice on a GPU (--device cuda "
    "with --deadline), off otherwise.",
)
@click.option(
    "--runs-per-slice",
    type=click.IntRange(min=1),
    default=None,
    metavar="K",
    help="With --deadline: run at most K search runs of one cell in this slice; a cell of random search with more "
    "runs runs them in groups over several slices (without it, only a cell longer than a whole slice is split). The "
    "runs travel in the pack; the --unpack that brings the last of them evaluates the cell (docs/slices.md).",
)
@click.option(
    "--speed",
    type=click.FloatRange(min=0.0, min_open=True),
    default=1.0,
    show_default=True,
    metavar="FACTOR",
    help="With --plan: price every phase FACTOR times as fast per unit as the cost table (its fixed seconds and the "
    "cards' CPU seconds unchanged): what a faster step would make of the plan.",
)
@click.option(
    "--carry-starts",
    is_flag=True,
    default=False,
    help="With --pack: every search run of a group carries its start in the pack. Without it, a run whose init "
    "draws from its generator alone (gaussian, uniform) travels without its start and its sha256 instead: the "
    "--unpack draws it again and checks it (docs/slices.md, \"Starts drawn again\"). For a merge on a machine "
    "whose torch draws other numbers.",
)
@track_options
@data_root_option
@quiet_option
@yes_option
def bench_command(
    suite: str,
    only: tuple[str, ...],
    resume: bool,
    retry_failed: bool,
    strict: bool,
    list_only: bool,
    plan_only: bool,
    device: str | None,
    dtype: str | None,
    out: str | None,
    cache: str | None,
    data_root: str | None,
    executor: str,
    address: str | None,
    deadline: float | None,
    pack: str | None,
    pack_files: int,
    unpack: str | None,
    finished: str | None,
    costs: str | None,
    cross_target: bool | None,
    runs_per_slice: int | None,
    speed: float,
    carry_starts: bool,
    quiet: bool,
    track: str | None,
    track_uri: str | None,
    track_experiment: str | None,
    yes: bool,
) -> None:
    """Run benchmark SUITE (a name of a shipped suite or one in ./suites/, or a .toml path): every attack x init x target x
    seed.

    Targets are trained once and cached by recipe hash. Each cell's JSON (config, metrics for the pooled,
    blind
    and oracle selections, provenance, wall time, or the error it failed with) is written the moment the cell
    finishes; an interrupted suite loses at most the cell in progress. Render tables with
    `reconbench leaderboard SUITE`.

    On a machine lent for a few minutes (a GPU), `--deadline SECONDS --pack DIR` runs what fits and packs it; back
    here, `--unpack DIR` merges it, and the next slice skips what is merged (docs/slices.md).
    """
    started = time.monotonic()
    if deadline is not None and not math.isfinite(deadline):
        raise click.UsageError(f"--deadline {deadline}: pass a finite number of seconds, e.g. --deadline 480")
    s = load_suite(suite, strict=strict)
    if unpack is not None:
        if deadline is not None or pack is not None or list_only or only or finished:
            raise click.UsageError("--unpack merges a pack and runs nothing: leave out --deadline, --pack, --list, "
                                   "--only and --finished")
        unpack_slice(s, Path(unpack), Path(out) if out is not None else default_results_dir(s), dtype, data_root)
        return
    if pack is not None:
        resume = True   # a slice continues the results folder it was given
    if runs_per_slice is not None and deadline is None:
        raise click.UsageError("--runs-per-slice sets how a slice splits its cells: pass --deadline SECONDS too")
    if costs is not None and deadline is None:
        raise click.UsageError("--costs sets the estimates of --deadline; pass --deadline SECONDS too")
    if speed != 1.0 and not plan_only:
        raise click.UsageError("--speed prices a what-if plan: pass --plan too")
    if carry_starts and pack is None and not plan_only:
        raise click.UsageError("--carry-starts sets what a slice's pack carries: pass --pack DIR (or --plan) too")
    elsewhere = read_ledger(Path(finished), s) if finished is not None else {}
    if list_only:
        out_dir = default_results_dir(s) if out is None else out
        done = {**elsewhere, **load_cells(Path(out_dir))}
        rows = []
        for c in select(expand(s), only):
            state = "-"
            if c.cell_id in done:
                rec = done[c.cell_id]
                state = rec["status"] if is_finished(rec, c.key(s, dtype), False) else "stale"
            rows.append(
                (c.cell_id, c.attack.attack, c.init.regime, c.attack.search_runs, ", ".join(c.groups), state)
            )
        from tabulate import tabulate  # only the listing uses it (with wcwidth, about 35 ms of every bench start)

        click.echo(
            tabulate(rows, headers=["cell", "attack", "init", "runs", "groups", "status"], tablefmt="github")
        )
        return
    out_dir = Path(out) if out is not None else default_results_dir(s)
    logger = tracker(track, track_uri, track_experiment or s.name, experiment_given=track_experiment)
    cells_executor = cell_executor(executor, address)
    if device is not None and not plan_only:   # a plan is made for a device that need not be here
        if isinstance(cells_executor, RayExecutor):
            cells_executor.check_device(device)
        check_device(device)
    elif device is not None and device.split(":")[0] not in ("cpu", "cuda"):
        raise click.UsageError(f"--device {device}: --plan knows the costs of cpu and cuda; pass one of them")
    if pack is not None:
        check_pack_folder(Path(pack))
    if plan_only and deadline is None:
        raise click.UsageError("--plan prints the slices of a deadline: pass --deadline SECONDS too")
    if deadline is not None and isinstance(cells_executor, RayExecutor):
        raise click.UsageError("--deadline runs the cells here, one after the other: leave out --executor ray")
    sizes, estimate = check_cells(s, select_cells(s, only), out_dir, dtype, data_root, resume or plan_only,
                                  retry_failed, elsewhere, yes=yes or plan_only, deadline=deadline)
    measured = ledger_measured(Path(finished)) if finished is not None else []
    runs_done = read_ledger_runs(Path(finished), s, {c.cell_id: c.key(s, dtype) for c in expand(s)}) \
        if finished is not None else {}
    # how a slice with --pack splits cells into groups of runs: the pack files its records and manifest leave
    rules = GroupRules(run_files=pack_files - 2, runs_per_slice=runs_per_slice,
                       runs_done={c: frozenset(r) for c, r in runs_done.items()},
                       cross_target=cross_target is True,
                       travelled_cards=frozenset(ledger_cards(Path(finished)) if finished is not None else ()))
    if plan_only:
        assert deadline is not None
        done = {**elsewhere, **load_cells(out_dir)}
        todo = still_to_run(select_cells(s, only), done, lambda c: c.key(s, dtype), retry_failed)
        plan_device = device or s.device
        # the plan pools runs where the slice would: by default on a GPU (--device cuda with --deadline)
        rules = replace(rules, cross_target=default_cross_target(cross_target, deadline, plan_device))
        print_plan(s, todo, sizes, deadline, PACK_RESERVE_SECONDS, plan_device,
                   plan_table(plan_device, read_costs(Path(costs), **costs_dtypes(s, dtype)) if costs is not None
                              else None, measured),
                   ledger_progress(Path(finished), todo) if finished is not None else None, dtype, rules=rules,
                   carry_starts=carry_starts, speed=speed)
        return
    check_writable(out_dir, "--out")
    check_writable(cache_dir(cache), "--cache")
    show_cost(estimate, quiet)
    if (note := ceiling_note(estimate, deadline)) is not None and not yes and not quiet:
        click.echo(note, err=True)
    run_device = device or s.device
    cross_target = default_cross_target(cross_target, deadline, run_device)
    if cross_target and isinstance(cells_executor, RayExecutor):
        raise click.UsageError("--cross-target runs the cells here, together: leave out --executor ray")
    if deadline is not None:
        table = plan_table(run_device, read_costs(Path(costs), **costs_dtypes(s, dtype)) if costs is not None
                           else None, measured)
        reserve = PACK_RESERVE_SECONDS if pack is not None else 0.0
        if pack is not None or not quiet:   # what the slice sets out to do, in its log before the first cell
            done = {**elsewhere, **(load_cells(out_dir) if resume else {})}
            todo = still_to_run(select_cells(s, only), done, lambda c: c.key(s, dtype), retry_failed)
            click.echo(f"the plan this slice starts from (estimates; the slice re-plans after every cell), deadline "
                       f"{deadline:g}s:")
            print_plan(s, todo, sizes, deadline, PACK_RESERVE_SECONDS if pack is not None else 0.0, run_device, table,
                       ledger_progress(Path(finished), todo) if finished is not None else None, dtype,
                       break_even=False, rules=replace(rules, cross_target=cross_target) if pack is not None else
                       GroupRules(runs_per_slice=runs_per_slice, runs_done=rules.runs_done, cross_target=cross_target),
                       carry_starts=carry_starts)
        states = cache_dir(cache) / STATES_FOLDER if pack is not None else None
        not_carried: dict[str, str] = {}
        if states is not None and finished is not None:   # the states the ledger carried, where the slice reads them
            import_states(Path(finished), states)
            wanted = {c.recipe.key() for c in select_cells(s, only)}   # a state other cells need may stay behind
            for key, path in states_not_carried(Path(finished)).items():
                if key not in wanted or (states / f"{key}.safetensors").exists():
                    continue   # not this slice's, or this machine's cache holds it from an earlier slice
                not_carried[key] = f"{NOT_CARRIED} ({path})"
                click.echo(f"training state of target {key} not carried ({path} is absent): its cells wait for a "
                           "slice that carries it (benchmarks/gpu/travel_size.py --suite prints the carry list)",
                           err=True)
        cells_executor = DeadlineExecutor(deadline - reserve, CostModel.for_device(run_device, table), sizes,
                                          start=started, states=states, cross_target=cross_target,
                                          runs_done=runs_done, runs_per_slice=runs_per_slice,
                                          run_files=pack_files - 2 if pack is not None else None,
                                          carry_starts=carry_starts, not_carried=not_carried)
    elif cross_target:
        cells_executor = CrossTargetExecutor()
    packer = None if pack is None else SlicePacker(Path(pack), s, out_dir, cells_executor, device, dtype,
                                                   started, elsewhere, max_files=pack_files, data_root=data_root)
    on_cell = chain_on_cell(None if logger is None else cell_logger(logger, out_dir), packer)
    with folder_lock(out_dir, "results"):
        report = run_suite(s, out_dir, only=only, resume=resume, strict=strict, retry_failed=retry_failed,
                           device=device, dtype=dtype, cache=cache, data_root=data_root, quiet=quiet,
                           command=command_line(),
                           executor=cells_executor, on_cell=on_cell, finished_elsewhere=elsewhere)
        if packer is not None:
            manifest = packer.write(report.ran, complete=True)
        elif (out_dir / LEDGER_FILE).exists():   # a results folder slices merge into: its ledger follows its cells
            write_ledger(out_dir, s, {c.cell_id: c.key(s, dtype) for c in expand(s)})
    ok = len(report.ran) - len(report.failed)
    click.echo(
        f"suite {s.name}: {ok} cell(s) ran, {len(report.failed)} failed, {len(report.skipped)} already "
        f"finished ({report.elapsed:.1f}s); results in {report.out}"
    )
    if (mixed := mixed_paths_line(report.out)) is not None:
        click.echo(f"warning: {mixed}", err=True)
    for cid in report.failed:
        click.echo(f"  failed: {cid}  (see {report.out / 'cells' / (cid + '.json')})")
    for cid in report.lost:
        click.echo(f"  lost: {cid}  (its worker died; --resume runs it again)")
    click.echo(
        f"render the leaderboard: reconbench leaderboard {suite}"
        + (f" --results {report.out}" if out else "")
    )
    if isinstance(cells_executor, DeadlineExecutor):
        say_deferred(cells_executor, report, deadline)
    if pack is not None:
        click.echo(f"pack: {len(manifest.cells)} cell(s) in {len(manifest.files) + 1} file(s) in {pack}; "
                   f"{len(manifest.cells_remaining)} cell(s) of the suite remain; merge it where the results "
                   f"are kept: reconbench bench {suite} --unpack DIR --out RESULTS")
        for left in manifest.training_left_out:
            click.echo(f"  training state of target {left.recipe_key} not packed ({left.reason}): the next "
                       "slice trains it again from the start; run shorter slices with fewer cells")
    if report.failed or report.lost:
        raise SystemExit(1)  # the summary above names each cell and its record
    if (isinstance(cells_executor, DeadlineExecutor) and not report.ran and cells_executor.deferred
            and not cells_executor.pieces and not cells_executor.stopped and not cells_executor.groups):
        raise SystemExit(1)  # nothing fitted the deadline and no training advanced: say_deferred said so


def costs_dtypes(suite: Suite, dtype: str | None) -> dict[str, str]:
    """The precisions a probe's cost table is read for: the targets' training (float32 only when every target of the
    suite trains in it) and the attacks'."""
    trained = {c.recipe.train.dtype for c in expand(suite)}
    return {"train_dtype": "float32" if trained == {"float32"} else "float64", "attack_dtype": dtype or suite.dtype}


def check_cells(suite: Suite, cells: list[Cell], out: Path, dtype: str | None, data_root: str | None, resume: bool,
                retry_failed: bool, elsewhere: dict[str, dict[str, Any]] | None = None, *,
                yes: bool = False, deadline: float | None = None) -> tuple[dict[str, TargetSize], float]:
    """Before the first cell runs, what the command line checks before `reconbench run`: each target's data set,
    problem and architecture, the memory of its training and of each cell's attack, and the time all of it takes
    (cells still to run only; refused above the ceiling without ``yes``, unless a ``deadline`` bounds the command).
    The size of each target still needed, by recipe key, and the estimated seconds."""
    done = {**(elsewhere or {}), **(load_cells(out) if resume else {})}
    todo = still_to_run(cells, done, lambda c: c.key(suite, dtype), retry_failed)
    sizes: dict[str, TargetSize] = {}
    trained: set[str] = set()
    train_time = attack_time = 0.0
    where = display_path(suite.path)
    for cell in todo:
        key = cell.recipe.key()
        try:
            if cell.attack.attack in plugins.names("attacks"):  # an unregistered one: its cells are reported
                check_task(plugins.attack(cell.attack.attack), cell.recipe.problem.task)
            if key not in sizes:
                problem = build_problem(cell.recipe.problem, data_root)   # the data set loads and its checks run
                sizes[key] = check_target(cell.recipe, problem, what=f"target {cell.target!r}",
                                          fix="lower its widths (or other model options) in the suite")
            check_search(cell.attack.search, cell.attack.search_config)   # its optional dependency is installed
            check_attack(sizes[key], candidates=cell.attack.candidates, search_runs=cell.attack.search_runs,
                         dtype=cell.attack.dtype or dtype or suite.dtype,
                         fix=f"lower candidates or search_runs of [attacks.{cell.attack.label}]")
            if cell.attack.attack in plugins.names("attacks"):
                steps = attack_steps(plugins.attack(cell.attack.attack), cell.attack.config)
                attack_time += attack_seconds(sizes[key], steps=steps, candidates=cell.attack.candidates,
                                              search_runs=cell.attack.search_runs)
            if key not in trained:
                trained.add(key)
                train_time += step_seconds(sizes[key].parameters, sizes[key].n_train, cell.recipe.train.steps)
        except ReconbenchError as exc:
            raise SuiteError(f"{where}: cell {cell.cell_id}: {exc}") from None
    try:
        estimate = check_cost([("training its targets (unless cached)", train_time),
                               (f"{len(todo)} cell(s) of attacks", attack_time)], yes=yes, deadline=deadline,
                              fix="lower steps or search_runs in the suite, or run part of it with --only")
    except ReconbenchError as exc:
        raise SuiteError(f"{where}: {exc}") from None
    return sizes, estimate


def cell_logger(logger: MlflowTracker, out: Path) -> Callable[[dict[str, Any]], None]:
    """Log each cell that ran to the tracker as it is written (cells that failed have no result to log)."""
    def log(data: dict[str, Any]) -> None:
        rec = CellRecord.from_dict(data)
        if rec.status == "ok" and rec.result_dir:
            logger.log_result(out / rec.result_dir, rec.cell_id,
                              extra_params={"cell": {"suite": rec.suite, "cell_key": rec.cell_key,
                                                     "attack_label": rec.attack.label, "init_label": rec.init.label,
                                                     "target": rec.target.name}},
                              tags={"reconbench.suite": str(rec.suite), "reconbench.cell_id": rec.cell_id})
    return log


def cell_executor(name: str, address: str | None) -> Executor:
    if name == "ray":
        ray_executor = RayExecutor(address)
        ray_executor.check_address()
        return ray_executor
    if address:
        raise click.UsageError("--address needs --executor ray")
    return SerialExecutor()
