"""The suite runner: train or reuse targets, run every cell, write one JSON per cell the moment it finishes.

Layout of a results folder (default ``runs/bench/<suite>``)::

    suite.toml                  the suite file as last run
    invocations/NNN.json        one per `reconbench bench` call: command, machine, versions, time, status
    cells/<cell id>.json        one per cell, written atomically when the cell finishes (or fails); ``status`` says
                                whether the cell ran, ``outcome`` whether its attack did its work
                                (reconbench.attack.outcome: ok, diverged, non_finite, stopped_early)
    targets/<recipe key>.json   the model card of every target used (no weights)
    work/<cell id>/             the cell's result folder (search runs, pooled candidates, result.json)

A cell is finished when its JSON exists with the same ``cell_key`` (a hash of everything that determines its
numbers). ``--resume`` skips finished cells; an interrupted cell restarts from its finished search runs.

``run_suite`` is a sequence of named steps (select, check, plan, start the invocation, execute, finish); the cells
themselves run through an executor (``reconbench.bench.executors``): serial in this process by default, or as Ray
tasks (``reconbench.bench.ray_executor``). Whatever runs them, this process alone writes ``cells/`` and
``invocations/``, through the helpers of the "results folder" section below.
"""

from __future__ import annotations

import json
import math
import shutil
import sys
import time
import traceback
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

import torch

from reconbench import __version__, plugins
from reconbench.attack.outcome import cell_outcome
from reconbench.attack.search import search_record
from reconbench.bench import machine
from reconbench.bench.cells import CELL_FORMAT, Cell, expand, select
from reconbench.bench.entries import expand as expand_entry
from reconbench.bench.entries import is_entry
from reconbench.bench.executors import CellJob, Executor, Finished, Lost, Outcome, RunContext, Started
from reconbench.bench.seal import SEAL_FIELD, sealed
from reconbench.bench.slice_commit import ran_commit, with_ran_commit
from reconbench.bench.suite import Suite, SuiteError, display_path
from reconbench.config import build_config, config_to_dict
from reconbench.data import Problem
from reconbench.errors import ReconbenchError, UnknownNameError
from reconbench.evaluation.bars import selection_record
from reconbench.progress import Progress
from reconbench.provenance import provenance, write_json
from reconbench.records import (
    RUN_RESULT_FILE,
    Calibrated,
    CellRecord,
    HeldOutNull,
    Invocation,
    RunResult,
    Selection,
    StoredEvaluation,
    TrainMetrics,
)
from reconbench.records.cell_status import CellStatus
from reconbench.runs.execute import run_attack
from reconbench.runs.resolved import resolve_run
from reconbench.runs.seconds import attack_seconds
from reconbench.runs.spec import RunSpec
from reconbench.safe_paths import check_name, member
from reconbench.targets.cache import cache_dir, get_or_train
from reconbench.targets.cards import CARD_FILE, ModelCard, card_p_over_dn, load_card

STATUS_OK, STATUS_FAILED, STATUS_UNAVAILABLE = "ok", "failed", "unavailable"


def default_results_dir(suite: Suite) -> Path:
    return Path("runs") / "bench" / suite.name


# -- the results folder: every read and write of the runner goes through these -------------------------
def cell_path(out: Path, cell_id: str) -> Path:
    return member(out / "cells", cell_id, ".json", "cell id")


def invocation_path(out: Path, number: int) -> Path:
    return out / "invocations" / f"{number:03d}.json"


def read_cell(path: Path) -> dict[str, Any] | None:
    """A cell record; a slim board entry (``bench/entries.py``) comes back in the full record's shape."""
    try:
        rec = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not is_entry(rec):
        return rec
    return expand_entry(rec, card_reader(path.parent.parent), protocol_reader(path.parent.parent))


def card_reader(folder: Path, sub: str = "targets") -> Callable[[str], dict[str, Any] | None]:
    """The model cards of a results folder or board (``targets/<recipe key>.json``) by recipe key, read once each
    (``sub``: another folder of JSON files by name, e.g. a board's ``protocols``)."""
    cache: dict[str, dict[str, Any] | None] = {}

    def card(key: str) -> dict[str, Any] | None:
        if key not in cache:
            try:
                data = json.loads((folder / sub / f"{key}.json").read_text())
            except (OSError, UnicodeDecodeError, json.JSONDecodeError):
                data = None
            cache[key] = data if isinstance(data, dict) else None
        return cache[key]

    return card


def protocol_reader(folder: Path) -> Callable[[str], dict[str, Any] | None]:
    """The evaluation protocols a board stores once (``protocols/<ref>.json``, ``bench/entries.py``), by name."""
    return card_reader(folder, "protocols")


def load_cells(out: Path) -> dict[str, dict[str, Any]]:
    """Every readable cell JSON of a results folder, by cell id."""
    cells = {}
    for p in sorted((out / "cells").glob("*.json")):
        rec = read_cell(p)
        if rec is not None and CellStatus.from_dict(rec, p).format == CELL_FORMAT:
            cells[check_name(str(rec["cell_id"]), "cell id", source=p, suffix=".json")] = rec
    return cells


def load_cell_records(out: Path) -> dict[str, CellRecord]:
    """Every readable cell of a results folder read as its record (strictly: a cell that is not is a one-line error
    naming it), by cell id."""
    return {cid: CellRecord.from_dict(rec, f"{out / 'cells'} (cell {cid})") for cid, rec in load_cells(out).items()}


def next_invocation_number(out: Path) -> int:
    folder = out / "invocations"
    return len(list(folder.glob("*.json"))) if folder.exists() else 0


def write_suite_file(out: Path, suite: Suite) -> None:
    out.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(suite.path, out / "suite.toml")


def write_cell(out: Path, rec: CellRecord | dict[str, Any]) -> CellRecord:
    """The cell's file, written from its record (a dict is read as a :class:`~reconbench.records.CellRecord` first,
    strictly: a key or a type the record does not know is refused before anything is written) and sealed; a dict
    gets its seal too. Returns the record as read (so that its progress line need not read the dict again)."""
    record = rec if isinstance(rec, CellRecord) else CellRecord.from_dict(rec, "the cell record to write")
    data = sealed(record.to_dict())
    write_json(cell_path(out, record.cell_id), data)
    if isinstance(rec, dict):
        rec[SEAL_FIELD] = data[SEAL_FIELD]
    return record


def write_invocation(out: Path, number: int, data: dict[str, Any]) -> None:
    write_json(invocation_path(out, number), data)


def write_target_card(out: Path, key: str, card: ModelCard) -> str:
    """The target's model card (no weights) beside the cells; returns its path relative to ``out``."""
    write_json(out / "targets" / f"{key}.json", card.data)
    return f"targets/{key}.json"


# -- scoring the selections ---------------------------------------------------------------------------
def selections(result: RunResult) -> dict[str, Selection]:
    """Pool (all runs), blind (lowest attack loss) and oracle (best training-set score) selections with their
    held-out nulls, as ``pipeline.finish`` scored them (each selection is evaluated once, there)."""
    runs = {r.run: r for r in result.runs}
    losses = [loss for r in runs.values() if (loss := r.final_loss) is not None and math.isfinite(loss)]
    pool_eval = result.evaluation
    out: dict[str, Selection] = {
        "pool": Selection.written(
            runs=sorted(k for k in runs if k is not None),
            rule=f"all {len(runs)} search run(s) pooled, as the papers evaluated",
            oracle=False,
            attack_loss=min(losses) if losses else math.nan,
            summary=pool_eval.numbers,
            null=null_record(pool_eval),
        )
    }
    for name in ("blind", "oracle"):
        picked = result.selection[name]
        k = picked.run
        entry = Selection.written(run=k, rule=picked.rule, oracle=name == "oracle")
        if k is None:
            entry = entry.updated(attack_loss=math.nan, summary={}, note="no run finished with a finite loss")
        else:
            scored = result.evaluation_selected.get(name, pool_eval)
            entry = entry.updated(attack_loss=runs[k].final_loss, config=runs[k].config, summary=scored.numbers,
                                  null=null_record(scored))
        out[name] = entry
    for name, entry in out.items():   # the count against the bar calibrated for this selection (bars.py)
        calibrated = selection_record(result.calibration_bars, name)
        if calibrated is not None:
            out[name] = entry.updated(calibrated=Calibrated.from_dict(calibrated))
    return out


def null_record(evaluation: StoredEvaluation) -> HeldOutNull:
    """The held-out null of an evaluation as a cell stores it: per summary key mean, std, min, max over draws."""
    null = evaluation.held_out
    if not null.available:
        return HeldOutNull.written(available=False, reason=null.reason or "no null recorded")
    return HeldOutNull.written(available=True, draws=null.draws, threshold=null.threshold, spread=null.spread or {})


# -- targets ------------------------------------------------------------------------------------------
@dataclass
class Target:
    """A cell's target: the card and problem (None when it failed), what to record, or the error to record."""

    card: ModelCard | None = None
    problem: Problem | None = None
    info: dict[str, Any] = field(default_factory=dict)
    error: BaseException | None = None


class TargetSource(Protocol):
    def get(self, cell: Cell) -> Target: ...


def margin_range(margins: object) -> dict[str, float]:
    """The least and the largest of a card's training margins (empty without margins: a card that lacks them)."""
    values = [float(m) for m in margins] if isinstance(margins, list) and margins else []
    return {"margin_min": min(values), "margin_max": max(values)} if values else {}


def obtain_target(cell: Cell, out: Path, cache: str | None, data_root: str | None, quiet: bool,
                  device: str = "cpu") -> Target:
    """Train the cell's target or reuse it from the cache, and write its card beside the cells. Never raises: a
    failure is returned, to be recorded in every cell of that target."""
    key = cell.recipe.key()
    t = Target()
    reused = (cache_dir(cache) / "targets" / key / CARD_FILE).exists()
    t0 = time.perf_counter()
    try:
        t.card = get_or_train(cell.recipe, cache, data_root, quiet=quiet, log=not quiet, device=device)
        t.problem = t.card.problem(data_root)
        t.info = target_info(key, t.card, write_target_card(out, key, t.card), reused, time.perf_counter() - t0)
    except Exception as exc:  # recorded in every cell of this target
        t.error = exc
    return t


def target_info(key: str, card: ModelCard, card_file: str, reused: bool, seconds: float) -> dict[str, Any]:
    """What a cell records of its target (``card_file``: the card's path in the results folder)."""
    metrics = TrainMetrics.from_dict(card.data["metrics"], f"the model card of target {key}: metrics")
    return {
        "recipe_key": key,
        "card_file": card_file,
        "reused": reused,
        "load_or_train_seconds": seconds,
        "train_seconds": metrics.train_seconds,
        "train_metrics": metrics.without("margins").to_dict(),
        "p_over_dn": card_p_over_dn(card.data),
        **margin_range(metrics.margins),
    }


def load_obtained_target(cell: Cell, obtained: Target, cache: str | None, data_root: str | None) -> Target:
    """A target that ``obtain_target`` trained (maybe in another process), read back from the cache folder."""
    if obtained.error is not None:
        return obtained
    folder = cache_dir(cache) / "targets" / cell.recipe.key()
    t = Target(info=obtained.info)
    try:
        if not (folder / CARD_FILE).exists():
            raise ReconbenchError(
                f"target {cell.recipe.key()} was trained, but {folder} is not visible here; put the target cache "
                "(--cache / $RECONBENCH_CACHE) on a folder every worker shares"
            )
        t.card = load_card(folder)
        t.problem = t.card.problem(data_root)
    except Exception as exc:
        t.error = exc
    return t


class TargetPool:
    """Targets trained or reused once per recipe, remembered for the rest of the invocation (failures too)."""

    def __init__(self, out: Path, cache: str | None, data_root: str | None, quiet: bool, device: str = "cpu") -> None:
        self.out, self.cache, self.data_root, self.quiet, self.device = out, cache, data_root, quiet, device
        self._targets: dict[str, Target] = {}

    def get(self, cell: Cell) -> Target:
        key = cell.recipe.key()
        if key not in self._targets:
            self._targets[key] = obtain_target(cell, self.out, self.cache, self.data_root, self.quiet, self.device)
        return self._targets[key]


# -- one cell -----------------------------------------------------------------------------------------
def _base_record(cell: Cell, suite: Suite, spec: RunSpec, invocation: int) -> dict[str, Any]:
    init_oracle = None
    init_config = dict(cell.init.config)
    try:
        init = plugins.init(cell.init.regime)
        cfg = build_config(init.config_cls, cell.init.config, f"init {init.name}")
        init_oracle, init_config = bool(init.is_oracle(cfg)), config_to_dict(cfg)
    except ReconbenchError:
        pass
    return {
        "format": CELL_FORMAT,
        "suite": suite.name,
        "suite_file": display_path(suite.path),
        "suite_sha256": suite.text_sha256,
        "cell_id": cell.cell_id,
        "cell_key": cell.key(suite, spec.dtype),
        "groups": list(cell.groups),
        "status": None,
        "target": {"name": cell.target, "recipe": cell.recipe.to_dict(), "recipe_key": cell.recipe.key()},
        "attack": {
            "label": cell.attack.label,
            "name": cell.attack.attack,
            "config": cell.attack.config,
            "search_runs": cell.attack.search_runs,
            "candidates": cell.attack.candidates,
        },
        "search": search_record(cell.attack.search, cell.attack.search_config),
        "init": {
            "label": cell.init.label,
            "regime": cell.init.regime,
            "config": init_config,
            "is_oracle": init_oracle,
        },
        "seed": cell.seed,
        "protocol": cell.protocol(suite),
        "spec": spec.to_dict(),
        "invocation": invocation,
    }


def run_cell(
    cell: Cell,
    suite: Suite,
    spec: RunSpec,
    out: Path,
    targets: TargetSource,
    *,
    invocation: int,
    data_root: str | None,
    quiet: bool,
) -> dict[str, Any]:
    """Run one cell; return its record (status ok / failed / unavailable). Raises only on interrupt."""
    t0, cpu0 = time.perf_counter(), time.process_time()
    rec = _base_record(cell, suite, spec, invocation)
    try:
        resolved = resolve_run(spec, cell.recipe.family)   # names, options and protocol: once, before training
        target = targets.get(cell)
        if target.error is not None:
            raise target.error
        assert target.card is not None and target.problem is not None
        rec["target"].update(target.info)
        work = out / "work" / cell.cell_id
        data = run_attack(target.card, resolved, work, data_root=data_root, quiet=quiet, problem=target.problem)
        result = RUN_RESULT_FILE.decode(data, work / "result.json")
        rec["init"].update(config=data["init_config"], is_oracle=data["init_is_oracle"])
        rec["target"]["n_train"] = result.target.n_train
        rec["runs"] = data["runs"]
        rec["outcome"] = data["outcome"]
        rec["selections"] = {name: sel.to_dict() for name, sel in selections(result).items()}
        rec["evaluation"] = data["evaluation"]
        if result.calibration_bars is not None:
            rec["calibration_bars"] = data["calibration_bars"]
        rec["result_dir"] = f"work/{cell.cell_id}"
        rec["attack_seconds"] = attack_seconds(data["runs"])   # a batch of runs counted once
        rec["status"] = STATUS_OK
        rec["error"] = None
    except (KeyboardInterrupt, SystemExit):
        raise
    except Exception as exc:
        record_error(rec, exc)
    return stamp_record(rec, cell, spec, time.perf_counter() - t0, cpu_seconds=time.process_time() - cpu0)


def record_error(rec: dict[str, Any], exc: BaseException) -> None:
    """A failed cell's status and error (``unavailable`` when a plugin is not registered)."""
    rec["status"] = STATUS_UNAVAILABLE if isinstance(exc, UnknownNameError) else STATUS_FAILED
    tb = "".join(traceback.format_exception(exc))[-4000:]
    rec["error"] = {
        "type": type(exc).__name__,
        "message": str(exc),
        "traceback": None if isinstance(exc, ReconbenchError) else tb,
    }


def stamp_record(rec: dict[str, Any], cell: Cell, spec: RunSpec, wall_seconds: float, *,
                 cpu_seconds: float | None = None) -> dict[str, Any]:
    """Wall time (and the process's CPU time, where the cell ran in this process), finish time, provenance and the
    machine that ran the cell."""
    rec["wall_seconds"] = wall_seconds
    if cpu_seconds is not None:
        rec["cpu_seconds"] = cpu_seconds
    rec["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    rec["provenance"] = with_ran_commit(provenance(rec["spec"], spec.device, spec.dtype, cell.seed))
    rec["machine"] = machine.describe(spec.device)
    return rec


def failed_record(cell: Cell, suite: Suite, spec: RunSpec, exc: BaseException, *, invocation: int) -> dict[str, Any]:
    """The record of a cell whose run raised outside ``run_cell`` (say, in an executor's worker)."""
    rec = _base_record(cell, suite, spec, invocation)
    record_error(rec, exc)
    return stamp_record(rec, cell, spec, 0.0)




# -- the serial executor ------------------------------------------------------------------------------
class SerialExecutor:
    """One cell after the other, in this process (the default)."""

    name = "serial"

    def check(self, ctx: RunContext) -> None:
        if ctx.device.startswith("cuda") and not torch.cuda.is_available():
            raise SuiteError(
                f"suite {ctx.suite.name!r} runs on {ctx.device!r}, but no CUDA device is available here; "
                "pass --device cpu to run it on the CPU (slowly)"
            )

    def describe(self) -> dict[str, Any]:
        return {"name": self.name}

    def run(self, jobs: Sequence[CellJob], ctx: RunContext) -> Generator[Outcome, None, None]:
        targets = TargetPool(ctx.out, ctx.cache, ctx.data_root, ctx.quiet, ctx.device)
        for job in jobs:
            yield Started(job.cell)
            rec = run_cell(
                job.cell, ctx.suite, job.spec, ctx.out, targets, invocation=ctx.invocation, data_root=ctx.data_root,
                quiet=ctx.quiet,
            )
            yield Finished(job.cell, rec)


# -- the suite, step by step --------------------------------------------------------------------------
@dataclass
class BenchReport:
    out: Path
    total: int = 0
    skipped: list[str] = field(default_factory=list)
    ran: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)  # cells that did not end (worker died); --resume runs them
    elapsed: float = 0.0


def is_finished(rec: Mapping[str, Any] | None, key: str, retry_failed: bool) -> bool:
    """Whether a cell's record (None: it has none) is finished under the cell's current key: ok, or failed when
    ``retry_failed`` is not set."""
    if rec is None:
        return False
    cell = CellStatus.from_dict(rec, "a cell record")
    if cell.cell_key != key:
        return False
    if cell.status == STATUS_OK:
        return True
    if cell.status == STATUS_UNAVAILABLE:
        return False  # the plugin may be installed by now; failing again costs nothing
    return not retry_failed


def still_to_run(cells: Iterable[Cell], done: Mapping[str, Mapping[str, Any]], key: Callable[[Cell], str],
                 retry_failed: bool) -> list[Cell]:
    """The cells with no finished record in ``done`` (by cell id) under their current ``key(cell)``."""
    return [c for c in cells if c.cell_id not in done or not is_finished(done[c.cell_id], key(c), retry_failed)]


def _say(msg: str, quiet: bool) -> None:
    if not quiet:
        from tqdm.auto import tqdm

        tqdm.write(msg, file=sys.stderr)


def select_cells(suite: Suite, only: tuple[str, ...] | list[str] | None) -> list[Cell]:
    """The suite's cells matching ``--only`` (all without it); an error when none does."""
    cells = select(expand(suite), only)
    if not cells:
        raise SuiteError(
            f"--only {' '.join(only or [])} matches no cell of suite {suite.name!r}; cell ids look like "
            f"{expand(suite)[0].cell_id} (see `reconbench bench {suite.name} --list`)"
        )
    return cells


def check_resume(out: Path, resume: bool) -> dict[str, dict[str, Any]]:
    """The cells already in ``out``; an error when there are some and ``--resume`` was not given."""
    existing = load_cells(out)
    if existing and not resume:
        raise SuiteError(
            f"{out} already holds {len(existing)} finished cell(s) of a previous run; pass --resume "
            "to continue it (finished cells are skipped), or --out to write elsewhere"
        )
    return existing


def plan_cells(
    cells: Sequence[Cell], existing: dict[str, dict[str, Any]], ctx: RunContext, retry_failed: bool, report: BenchReport
) -> list[CellJob]:
    """The jobs still to run; finished cells go to ``report.skipped``, changed ones also to ``report.stale``."""
    todo = []
    for cell in cells:
        key = cell.key(ctx.suite, ctx.dtype)
        recorded = cell.cell_id in existing
        if recorded and is_finished(existing[cell.cell_id], key, retry_failed):
            report.skipped.append(cell.cell_id)
        else:
            if recorded and CellStatus.from_dict(existing[cell.cell_id], "a cell record").cell_key != key:
                report.stale.append(cell.cell_id)
            todo.append(CellJob(cell, cell.run_spec(ctx.suite, ctx.device, ctx.dtype)))
    return todo


#: seconds between two rewrites of the invocation record while cells end (:meth:`InvocationLog.progress`)
PROGRESS_EVERY = 5.0


class InvocationLog:
    """This call's record (:class:`~reconbench.records.Invocation`, ``invocations/NNN.json``): written at the start,
    rewritten as cells end (at most every :data:`PROGRESS_EVERY` seconds) and at the end with the call's status."""

    def __init__(self, ctx: RunContext, report: BenchReport, *, only: tuple[str, ...] | list[str] | None, command: str | None,
                 executor: Executor) -> None:
        self.ctx, self.report, self.started = ctx, report, time.perf_counter()
        self.saved_at = -math.inf   # when the record was last written
        self.record = Invocation.written(   # cells_lost is written once a cell was lost
            invocation=ctx.invocation,
            command=command or "",
            started=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            status="running",
            elapsed_seconds=0.0,
            suite=ctx.suite.name,
            suite_sha256=ctx.suite.text_sha256,
            only=list(only or []),
            device=ctx.device,
            dtype=ctx.dtype,
            executor=executor.describe(),
            reconbench_version=__version__,
            git_commit=ran_commit(),
            torch_version=torch.__version__,
            machine=machine.describe(ctx.device),
            cells_run=[],
            cells_skipped=0,
        )

    def progress(self) -> None:
        """The record after a cell ended, rewritten when the last write is :data:`PROGRESS_EVERY` seconds old. Each
        rewrite replaces the file and so is flushed to the disk (about 10 ms, most of a short cell's bookkeeping);
        the trade: a process killed outright leaves a record up to that many seconds behind its cells' own files,
        which are what a resumed run reads (the record is an account of the call, not the results)."""
        if time.perf_counter() - self.saved_at >= PROGRESS_EVERY:
            self.save()

    def save(self, status: str | None = None) -> None:
        self.saved_at = time.perf_counter()
        self.record = replace(self.record, elapsed_seconds=time.perf_counter() - self.started,
                              status=status or self.record.status, cells_run=list(self.report.ran),
                              cells_skipped=len(self.report.skipped),
                              cells_lost=list(self.report.lost) if self.report.lost else self.record.cells_lost)
        write_invocation(self.ctx.out, self.ctx.invocation, self.record.to_dict())


def _outcome_line(event: Finished | Lost, announced: bool, position: str, record: CellRecord | None = None) -> str:
    """The progress line of an ended cell: indented under its start line when one was printed, else its own
    (``record``: the cell's record as :func:`write_cell` read it, else its dict is read)."""
    head = "    " if announced else f"{position} {event.cell.cell_id}: "
    if isinstance(event, Lost):
        return f"{head}lost ({event.reason}); --resume runs it again"
    rec = event.record
    if rec["status"] != STATUS_OK:
        return f"{head}{rec['status']}: {rec['error']['type']}: {rec['error']['message']}"
    outcome = cell_outcome(rec if record is None else record)
    failed = "" if outcome is None or outcome.ok else f"; the attack failed: {outcome.reason}"
    return f"{head}ok in {rec['wall_seconds']:.1f}s{failed}"


def execute(
    jobs: Sequence[CellJob],
    executor: Executor,
    ctx: RunContext,
    report: BenchReport,
    invocation: InvocationLog,
    *,
    strict: bool,
    on_cell: Callable[[dict[str, Any]], None] | None = None,
) -> None:
    """Run the jobs through the executor; write each cell's JSON the moment it ends (then hand it to ``on_cell``, e.g.
    an experiment tracker); progress lines and a bar."""
    events = executor.run(jobs, ctx)
    announced: set[str] = set()
    try:
        with Progress(len(jobs), f"suite {ctx.suite.name}", quiet=ctx.quiet or not jobs) as bar:
            for event in events:
                cid = event.cell.cell_id
                position = f"[{len(report.skipped) + len(report.ran) + len(report.lost) + 1}/{report.total}]"
                if isinstance(event, Started):
                    announced.add(cid)
                    _say(f"{position} {cid}", ctx.quiet)
                    continue
                written = None
                if isinstance(event, Lost):
                    report.lost.append(cid)
                else:
                    written = write_cell(ctx.out, event.record)
                    if on_cell is not None:
                        on_cell(event.record)
                    report.ran.append(cid)
                    if event.record["status"] != STATUS_OK:
                        report.failed.append(cid)
                _say(_outcome_line(event, cid in announced, position, written), ctx.quiet)
                invocation.progress()
                bar.update(len(report.ran) + len(report.lost))
                if strict and isinstance(event, Finished) and event.record["status"] != STATUS_OK:
                    rec = event.record
                    raise SuiteError(
                        f"cell {cid} {rec['status']} ({rec['error']['type']}: {rec['error']['message']}); its "
                        f"record is in {cell_path(ctx.out, cid)}"
                    )
    finally:
        events.close()  # stops the executor's remaining work (a no-op once it has ended)


def run_suite(
    suite: Suite,
    out: str | Path | None = None,
    *,
    only: tuple[str, ...] | list[str] | None = None,
    resume: bool = False,
    strict: bool = False,
    retry_failed: bool = False,
    device: str | None = None,
    dtype: str | None = None,
    cache: str | None = None,
    data_root: str | None = None,
    quiet: bool = False,
    command: str | None = None,
    executor: Executor | None = None,
    on_cell: Callable[[dict[str, Any]], None] | None = None,
    finished_elsewhere: dict[str, dict[str, Any]] | None = None,
) -> BenchReport:
    """Run (or resume) a suite; see the module docstring for the folder layout. ``finished_elsewhere``: records (at
    least ``cell_id``, ``cell_key``, ``status``) of cells finished in another results folder, skipped like the
    folder's own (a slice's ledger, ``bench/slice_pack.py``)."""
    executor = executor or SerialExecutor()
    out_dir = Path(out) if out else default_results_dir(suite)
    cells = select_cells(suite, only)
    ctx = RunContext(
        suite=suite,
        out=out_dir,
        invocation=next_invocation_number(out_dir),
        device=device or suite.device,
        dtype=dtype or suite.dtype,
        data_root=data_root,
        cache=cache,
        quiet=quiet,
    )
    existing = {**(finished_elsewhere or {}), **check_resume(out_dir, resume)}
    executor.check(ctx)
    for w in suite.warnings:
        _say(f"warning: {w}", quiet)

    write_suite_file(out_dir, suite)
    report = BenchReport(out=out_dir, total=len(cells))
    invocation = InvocationLog(ctx, report, only=only, command=command, executor=executor)
    invocation.save()
    jobs = plan_cells(cells, existing, ctx, retry_failed, report)
    if report.skipped:
        _say(f"resuming: {len(report.skipped)} of {len(cells)} cell(s) already finished", quiet)
    if report.stale:
        _say(f"{len(report.stale)} cell(s) changed since they ran (suite edited); they run again", quiet)
    try:
        execute(jobs, executor, ctx, report, invocation, strict=strict, on_cell=on_cell)
    except KeyboardInterrupt:
        invocation.save("interrupted")
        raise
    except BaseException:
        invocation.save("failed")
        raise
    invocation.save("incomplete" if report.lost else "completed")
    report.elapsed = float(invocation.record.elapsed_seconds or 0.0)
    return report
