"""One attack on one target: the init, the search runs (random search by default) asked of the strategy round by
round, each written the moment it finishes, then the evaluated result (:func:`reconbench.runs.result.finish`)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import time
from collections.abc import Iterable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from reconbench import plugins
from reconbench.attack import watch
from reconbench.attack.cross_target import serve_batch
from reconbench.attack.outcome import derive_run_outcome
from reconbench.attack.search import check_proposals, start_session, tell
from reconbench.config import config_to_dict
from reconbench.data import Problem
from reconbench.errors import DivergedError, ReconbenchError
from reconbench.evaluation import oracle_score
from reconbench.interfaces import Attack, AttackOutput, AttackTarget
from reconbench.progress import Progress
from reconbench.provenance import config_hash, save_tensors_atomic, write_json
from reconbench.records import RUN_RESULT_FILE, RunResult, SearchRun
from reconbench.runs.prepare import prepare
from reconbench.runs.resolved import ResolvedRun, resolve_run
from reconbench.runs.result import finish
from reconbench.runs.seconds import attack_seconds
from reconbench.runs.spec import RunSpec
from reconbench.targets.cards import ModelCard


class RunGroupDone(BaseException):
    """The runs of a group (:func:`only_runs`) are done and written (``runs/run-NNN.json`` and ``.safetensors``);
    the cell is not evaluated here, since its evaluation pools every run. ``ran``: the runs done now; ``present``:
    every run the folder holds for this cell (read back or done now). A :class:`BaseException`, as an interrupt is:
    the code between the attack and the slice's executor lets it through, so the cell is neither recorded nor
    failed."""

    def __init__(self, ran: list[int], present: list[int]) -> None:
        super().__init__(f"runs {ran} done")
        self.ran, self.present = ran, present


_RUN_GROUP: ContextVar[frozenset[int] | None] = ContextVar("reconbench_run_group", default=None)
_GATHERED: ContextVar[bool] = ContextVar("reconbench_gathered_runs", default=False)


@contextlib.contextmanager
def gathered_runs() -> Iterator[None]:
    """In the block, :func:`run_attack` reads every search run back from its folder (slices ran them in groups and
    the merge gathered them) and evaluates the cell, without loading the target's weights: a run not there is a
    one-line error instead of an attack."""
    token = _GATHERED.set(True)
    try:
        yield
    finally:
        _GATHERED.reset(token)


@contextlib.contextmanager
def only_runs(runs: Iterable[int]) -> Iterator[None]:
    """In the block, :func:`run_attack` runs only the search runs numbered ``runs`` of a search that proposes all
    its runs at once (random search; the others are left as they are, read back when on disk), writes each, and
    raises :class:`RunGroupDone` instead of evaluating: how a slice runs a cell's runs in groups."""
    token = _RUN_GROUP.set(frozenset(runs))
    try:
        yield
    finally:
        _RUN_GROUP.reset(token)


def run_attack(card: ModelCard, spec: RunSpec | ResolvedRun, out_dir: str | Path, *, data_root: str | None = None,
               quiet: bool = False, problem: Problem | None = None) -> dict[str, Any]:
    """Run ``spec`` against ``card``: resolved here unless the edge that starts the run (``reconbench run``, a bench
    cell) resolved it already (:class:`ResolvedRun`); every option is then read from that one resolution."""
    out = Path(out_dir)
    run = spec if isinstance(spec, ResolvedRun) else resolve_run(spec, card.data["family"])
    spec = run.spec
    if _GATHERED.get():   # every run is on disk already: no target weights needed (gathered_runs)
        attack, target, labels = run.attack or plugins.attack(spec.attack), None, None
    else:
        attack, target, labels = prepare(card, spec, run.attack)
    problem = problem or card.problem(data_root)
    session = start_session(run.search, run.search_config, attack, spec.attack_config, spec.search_runs, spec.seed)
    runs_dir = out / "runs"
    runs: list[dict[str, Any]] = []
    resumed: list[dict[str, Any]] = []   # runs finished by an earlier invocation, read back
    t_all = time.perf_counter()
    total = max(spec.search_runs, 1)
    group = _RUN_GROUP.get()   # a slice running some of the runs only (reconbench.bench.slice_executor)
    with Progress(total, f"{attack.name} runs", quiet=quiet or total == 1) as outer:
        while len(runs) < total:   # one batch per round of the strategy (random search: one round)
            asked = [{}] if session is None else session.ask()
            check_proposals(asked, total - len(runs), spec.search)
            first = len(runs)
            if group is not None and len(asked) < total:
                raise ReconbenchError(f"the search of {attack.name} proposes its {total} runs in rounds, each from "
                                      "the results of the last: its runs cannot be split across slices")
            pending = _start_round(card, run, problem, labels, target, asked, runs, runs_dir, outer, resumed)
            if group is not None:
                pending = [p for p in pending if p.k in group]
            if pending:
                assert target is not None and labels is not None   # _start_round refused pending runs without them
                _run_pending(attack, target, labels, pending, runs_dir, problem, runs, outer, quiet)
            if group is not None:   # no evaluation: it waits for every run (RunGroupDone's docstring)
                raise RunGroupDone(sorted(p.k for p in pending), sorted(r["run"] for r in runs))
            if session is not None:
                batch = sorted(runs[first:], key=lambda r: r["run"])
                tell(session, spec.search, asked, batch)
    runs.sort(key=lambda r: r["run"])
    usable = [r for r in runs if r["stopped"] != "failed"]
    if not usable:
        raise DivergedError(f"all {len(runs)} run(s) of {attack.name} failed; first: {runs[0]['message']}")
    wall = time.perf_counter() - t_all + resumed_seconds(resumed)
    if len(resumed) == len(runs) and (done := finished_result(out, card, spec)) is not None:
        # every run was read back: re-evaluated as before, with the attack's wall time recorded when it ran
        recorded = done.wall_seconds
        if recorded is not None and math.isfinite(recorded):
            wall = float(recorded)
    watcher = watch.current()   # a slice's: the evaluation starts (a phase of its progress lines and rows)
    if watcher is not None:
        watcher.evaluating()
    return finish(card, spec, out, problem, runs, wall, oracle_init=run.init_is_oracle,
                  init_config=config_to_dict(run.init_config), quiet=quiet, protocol=run.protocol)


def finished_result(out: Path, card: ModelCard, spec: RunSpec) -> RunResult | None:
    """The result.json already in ``out`` when it is this configuration's (same spec, same target), else None (also
    when it is not a result this version reads): a finished command run again keeps its recorded wall time instead
    of this invocation's near-zero one."""
    path = out / "result.json"
    try:
        old = RUN_RESULT_FILE.decode(json.loads(path.read_text()), path)
    except (OSError, ValueError, ReconbenchError):
        return None
    if old.spec != spec.to_dict() or old.target.recipe_key != card.data["recipe_key"]:
        return None
    return old


def _finished_run(data: object, path: Path) -> SearchRun | None:
    """The record of a run finished by an earlier invocation; None when the file is not one this version reads (the
    run is done again)."""
    try:
        return SearchRun.from_dict(data, path)
    except ReconbenchError:
        return None


def resumed_seconds(resumed: list[dict[str, Any]]) -> float:
    """Attack time spent on the read-back runs in earlier invocations (a batch counted once: runs/seconds.py)."""
    return attack_seconds(resumed)


def _start_round(card: ModelCard, run: ResolvedRun, problem: Problem, labels: torch.Tensor | None,
                 target: AttackTarget | None,
                 asked: list[dict[str, Any]], runs: list[dict[str, Any]], runs_dir: Path, outer: Progress,
                 resumed: list[dict[str, Any]]) -> list[_Pending]:
    """The runs of one round (numbered on from ``len(runs)``): those finished earlier with the same key are read back
    into ``runs`` (resume), the others are returned with their starts drawn."""
    pending: list[_Pending] = []
    spec = run.spec
    for k, values in enumerate(asked, start=len(runs)):
        cfg = run.run_config(values)
        run_init_cfg, init_overrides = run.init_config_for(cfg)
        record_path = runs_dir / f"run-{k:03d}.json"
        cfg_dict = config_to_dict(cfg)
        run_key = config_hash({"card": card.data["recipe_key"], "spec": spec.to_dict(), "run": k, "cfg": cfg_dict})
        if record_path.exists():
            old = json.loads(record_path.read_text())
            done = _finished_run(old, record_path)
            if done is not None and done.run_key == run_key and (
                    done.stopped == "failed" or (runs_dir / f"run-{k:03d}.safetensors").exists()):
                runs.append(old)
                resumed.append(old)
                outer.update(len(runs))
                continue
        if target is None or labels is None:
            raise ReconbenchError(f"search run {k} is not in {runs_dir} (or not with this cell's run key), and the "
                                  "runs are only gathered here, not run: merge the pack that holds it")
        x0, gen = draw_start(run, problem, labels, run_init_cfg, k, target.dtype)
        x0 = x0.to(target.device)
        pending.append(_Pending(k, cfg, gen, x0, {"run": k, "run_key": run_key, "config": cfg_dict,
                                                  "init_config": config_to_dict(run_init_cfg),
                                                  "init_overrides": init_overrides}))
    return pending


#: the init regimes whose starts a merge may draw again instead of carrying them: they read nothing but the
#: generator, the candidates' labels and count and the problem's image shape and mean (``uniform``), all of which
#: the machine that evaluates the cell has; an init that reads training or decoy images, or a third-party one,
#: is not listed (docs/slices.md, "Starts drawn again")
REDRAWN_INITS = frozenset({"gaussian", "uniform"})


def start_generator(seed: int, k: int) -> torch.Generator:
    """The CPU generator of search run ``k`` of a cell of ``seed``: its init draws the start from it, then the attack
    goes on drawing from it."""
    return torch.Generator().manual_seed(seed * 100_003 + k)


def draw_start(run: ResolvedRun, problem: Problem, labels: torch.Tensor, init_config: object, k: int,
               dtype: torch.dtype) -> tuple[torch.Tensor, torch.Generator]:
    """Search run ``k``'s start, drawn on the CPU by the run's init regime in the attack's ``dtype``, and the
    generator after the draw: how a run starts, and how a merge draws a start again that did not travel."""
    gen = start_generator(run.spec.seed, k)
    return run.init.make(problem, labels, init_config, generator=gen, dtype=dtype), gen


def start_sha256(x0: torch.Tensor, dtype: torch.dtype) -> str:
    """The sha256 of a start's bytes in the attack's ``dtype`` (C order, the machine's byte order): what a pack
    records of a start it does not carry."""
    return hashlib.sha256(x0.detach().to("cpu", dtype).contiguous().numpy().tobytes()).hexdigest()


@dataclass
class _Pending:
    """A run still to do: its index, config, generator (after the init drew from it), start and record header."""

    k: int
    cfg: Any
    gen: torch.Generator
    x0: torch.Tensor
    rec: dict[str, Any]


def _run_pending(attack: Attack[Any], target: AttackTarget, labels: torch.Tensor, pending: list[_Pending], runs_dir: Path,
                 problem: Problem, runs: list[dict[str, Any]], outer: Progress, quiet: bool) -> None:
    """The pending runs through the attack's ``run_batch`` (the KKT attacks advance them together; others run them
    one by one); each run is written the moment ``run_batch`` reports it done. Resume: finished runs are skipped
    and the rest start again from their starts (a run's trajectory does not depend on which runs share its
    batch)."""
    t0 = time.perf_counter()
    ids = ", ".join(str(p.k) for p in pending)

    with Progress(0, f"run(s) {ids}", quiet=quiet) as bar:
        def on_done(index: int, result: AttackOutput | Exception, batch: dict[str, Any] | None) -> None:
            nonlocal t0
            if batch is not None:
                batch = {**batch, "runs": [pending[j].k for j in batch["runs"]]}
            # a run of a cross-target batch (reconbench/attack/cross_target.py) ran before this cell: its batch's time
            took = float(batch["cross_target_seconds"]) if batch and "cross_target_seconds" in batch else None
            runs.append(_write_run(runs_dir, problem, pending[index], result,
                                   time.perf_counter() - t0 if took is None else took, batch))
            if batch is None:   # one run at a time: the next one's clock starts now
                t0 = time.perf_counter()
            outer.update(len(runs))

        args = (target, [p.x0 for p in pending], labels.to(target.device), [p.cfg for p in pending])
        if not serve_batch(attack, *args, [p.gen for p in pending], on_done):   # a cross-target bench's batch
            attack.run_batch(*args, generators=[p.gen for p in pending], progress=bar, on_done=on_done)


def _write_run(runs_dir: Path, problem: Problem, p: _Pending, result: AttackOutput | Exception, seconds: float,
               batch: dict[str, Any] | None) -> dict[str, Any]:
    """Write one finished run (record + tensors) the moment it is done; a DivergedError is a failed run."""
    rec = dict(p.rec)
    record_path = runs_dir / f"run-{p.k:03d}.json"
    runs_dir.mkdir(parents=True, exist_ok=True)
    if isinstance(result, Exception):
        rec.update({"final_loss": math.inf, "steps": 0, "stopped": "failed", "message": str(result),
                    "seconds": seconds, "trace": [], "oracle_score": math.inf})
        rec["outcome"] = derive_run_outcome(rec).to_dict()
        write_json(record_path, rec)
        return rec
    cand = result.candidates.detach().to("cpu", torch.float64)
    finite = bool(torch.isfinite(cand).all())
    rec.update({
        "final_loss": result.final_loss, "initial_loss": initial_loss(result.trace), "steps": result.steps,
        "stopped": result.stopped,
        "message": result.message, "seconds": seconds, "trace": result.trace,
        "oracle_score": oracle_score(problem, cand) if finite else math.inf, "candidates_finite": finite,
    })
    rec["outcome"] = derive_run_outcome(rec).to_dict()
    if batch is not None:
        rec["batch"] = batch
    if getattr(result, "early_stop", None) is not None:
        rec["early_stop"] = result.early_stop
    tensors = {"candidates": cand.contiguous(), "labels": result.labels.detach().cpu().long().contiguous(),
               "x0": p.x0.detach().cpu().double().clone()}   # its own storage: an attack may return its start
    if result.multipliers is not None:
        tensors["multipliers"] = result.multipliers.detach().cpu().double().reshape(-1).contiguous()
    save_tensors_atomic(tensors, runs_dir / f"run-{p.k:03d}.safetensors")
    write_json(record_path, rec)
    pause_after_first_run(record_path)
    return rec


#: fault tests only: a folder in which the first search run to finish (in any process) announces itself and whose
#: process then waits there to be killed, so that a test kills a worker at a known point instead of racing it
PAUSE_ENV = "RECONBENCH_TEST_PAUSE_AFTER_FIRST_RUN"
PAUSE_MARK = "first-run-finished"
PAUSE_SECONDS = 120.0


def pause_after_first_run(record_path: Path) -> None:
    """With ``$RECONBENCH_TEST_PAUSE_AFTER_FIRST_RUN`` set (never in normal use): the first finished run anywhere
    writes ``<folder>/first-run-finished`` (its pid and record) and waits; later runs (the retry) go on."""
    folder = os.environ.get(PAUSE_ENV)
    if not folder:
        return
    try:
        fd = os.open(Path(folder) / PAUSE_MARK, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return
    with os.fdopen(fd, "w") as fh:
        json.dump({"pid": os.getpid(), "record": str(record_path)}, fh)
    deadline = time.monotonic() + PAUSE_SECONDS
    while time.monotonic() < deadline:
        time.sleep(0.05)


def initial_loss(trace: list[dict[str, float]]) -> float | None:
    """The attack's own loss at its start (the first trace entry, step 0), kept in the run record beside
    ``final_loss``; None when the attack recorded no step 0."""
    first = trace[0] if trace else {}
    loss = first.get("loss")
    return float(loss) if first.get("step") == 0 and isinstance(loss, (int, float)) else None
