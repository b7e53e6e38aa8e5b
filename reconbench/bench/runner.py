"""The suite runner: train or reuse targets, run every cell, write one JSON per cell the moment it finishes.

Layout of a results folder (default ``runs/bench/<suite>``)::

    suite.toml                  the suite file as last run
    invocations/NNN.json        one per `reconbench bench` call: command, machine, versions, time, status
    cells/<cell id>.json        one per cell, written atomically when the cell finishes (or fails)
    targets/<recipe key>.json   the model card of every target used (no weights)
    work/<cell id>/             the cell's result folder (search runs, pooled candidates, result.json)

A cell is finished when its JSON exists with the same ``cell_key`` (a hash of everything that determines its
numbers). ``--resume`` skips finished cells; an interrupted cell restarts from its finished search runs.
"""

from __future__ import annotations

import json
import math
import shutil
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from reconbench import __version__, plugins
from reconbench.attack.pipeline import RunSpec, run_attack
from reconbench.bench import machine
from reconbench.bench.cells import CELL_FORMAT, Cell, expand, select
from reconbench.bench.suite import Suite, SuiteError, display_path
from reconbench.config import build_config, config_to_dict
from reconbench.errors import ReconbenchError, UnknownNameError
from reconbench.evaluation import evaluate
from reconbench.progress import Progress
from reconbench.provenance import git_commit, provenance, write_json
from reconbench.targets.cache import cache_dir, get_or_train
from reconbench.targets.cards import CARD_FILE, ModelCard
from reconbench.targets.problems import Problem

STATUS_OK, STATUS_FAILED, STATUS_UNAVAILABLE = "ok", "failed", "unavailable"


def default_results_dir(suite: Suite) -> Path:
    return Path("runs") / "bench" / suite.name


def cell_path(out: Path, cell_id: str) -> Path:
    return out / "cells" / f"{cell_id}.json"


def read_cell(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def load_cells(out: Path) -> dict[str, dict[str, Any]]:
    """Every readable cell JSON of a results folder, by cell id."""
    cells = {}
    for p in sorted((out / "cells").glob("*.json")):
        rec = read_cell(p)
        if rec is not None and rec.get("format") == CELL_FORMAT:
            cells[rec["cell_id"]] = rec
    return cells


# -- scoring the selections ---------------------------------------------------------------------------
def score_selection(
    problem: Problem,
    pooled: dict[str, torch.Tensor],
    run: int | None,
    *,
    family: str,
    protocol: dict[str, Any],
    card: Any,
) -> dict[str, Any]:
    """The standard evaluation of one search run's candidates (``run=None``: the whole pool)."""
    mask = torch.ones(len(pooled["run_ids"]), dtype=torch.bool) if run is None else pooled["run_ids"] == run
    return evaluate(
        problem,
        pooled["candidates"][mask],
        family=family,
        protocol=protocol,
        labels=pooled["labels"][mask],
        run_ids=pooled["run_ids"][mask],
        x0=pooled["x0"][mask],
        card=card,
        out_dir=None,
        quiet=True,
    )


def selections(result: dict[str, Any]) -> dict[str, Any]:
    """Pool (all runs), blind (lowest attack loss) and oracle (best training-set score) selections with their
    held-out nulls, as ``pipeline.finish`` scored them (each selection is evaluated once, there)."""
    runs = {r["run"]: r for r in result["runs"]}
    losses = [r["final_loss"] for r in runs.values() if math.isfinite(r["final_loss"])]
    pool_eval = result["evaluation"]
    out: dict[str, Any] = {
        "pool": {
            "runs": sorted(runs),
            "rule": f"all {len(runs)} search run(s) pooled, as the papers evaluated",
            "oracle": False,
            "attack_loss": min(losses) if losses else math.nan,
            "summary": pool_eval.get("summary", {}),
            "null": null_record(pool_eval),
        }
    }
    for name in ("blind", "oracle"):
        sel = result["selection"][name]
        k = sel["run"]
        entry: dict[str, Any] = {"run": k, "rule": sel["rule"], "oracle": name == "oracle"}
        if k is None:
            entry.update(attack_loss=math.nan, summary={}, note="no run finished with a finite loss")
        else:
            scored = (result.get("evaluation_selected") or {}).get(name, pool_eval)
            entry.update(attack_loss=runs[k]["final_loss"], config=runs[k]["config"],
                         summary=scored.get("summary", {}), null=null_record(scored))
        out[name] = entry
    return out


def null_record(evaluation: dict[str, Any]) -> dict[str, Any]:
    """The held-out null of an evaluation as a cell stores it: per summary key mean, std, min, max over draws."""
    null = evaluation.get("null") or {}
    if not null.get("available"):
        return {"available": False, "reason": null.get("reason", "no null recorded")}
    return {"available": True, "draws": null["draws"], "threshold": null.get("threshold"),
            "spread": null.get("spread", {})}


# -- targets ------------------------------------------------------------------------------------------
@dataclass
class _Target:
    card: ModelCard | None = None
    problem: Problem | None = None
    info: dict[str, Any] = field(default_factory=dict)
    error: BaseException | None = None


class TargetPool:
    """Targets trained or reused once per recipe, remembered for the rest of the invocation (failures too)."""

    def __init__(self, out: Path, cache: str | None, data_root: str | None, quiet: bool, device: str = "cpu") -> None:
        self.out, self.cache, self.data_root, self.quiet, self.device = out, cache, data_root, quiet, device
        self._targets: dict[str, _Target] = {}

    def get(self, cell: Cell) -> _Target:
        key = cell.recipe.key()
        if key not in self._targets:
            t = _Target()
            folder = cache_dir(self.cache) / "targets" / key
            reused = (folder / CARD_FILE).exists()
            t0 = time.perf_counter()
            try:
                t.card = get_or_train(
                    cell.recipe,
                    self.cache,
                    self.data_root,
                    quiet=self.quiet,
                    log=not self.quiet,
                    device=self.device,
                )
                t.problem = t.card.problem(self.data_root)
                card_file = self.out / "targets" / f"{key}.json"
                write_json(card_file, t.card.data)
                t.info = {
                    "recipe_key": key,
                    "card_file": f"targets/{key}.json",
                    "reused": reused,
                    "load_or_train_seconds": time.perf_counter() - t0,
                    "train_seconds": t.card.data["metrics"].get("train_seconds"),
                    "train_metrics": {k: v for k, v in t.card.data["metrics"].items() if k != "margins"},
                }
            except Exception as exc:  # recorded in every cell of this target
                t.error = exc
            self._targets[key] = t
        return self._targets[key]


# -- one cell -----------------------------------------------------------------------------------------
def _base_record(cell: Cell, suite: Suite, spec: RunSpec, invocation: int) -> dict[str, Any]:
    init_oracle = None
    init_config = dict(cell.init.config)
    try:
        init = plugins.get("inits", cell.init.regime)
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
        "init": {
            "label": cell.init.label,
            "regime": cell.init.regime,
            "config": init_config,
            "is_oracle": init_oracle,
        },
        "seed": cell.seed,
        "protocol": dict(suite.protocol),
        "spec": spec.to_dict(),
        "invocation": invocation,
    }


def run_cell(
    cell: Cell,
    suite: Suite,
    spec: RunSpec,
    out: Path,
    targets: TargetPool,
    *,
    invocation: int,
    data_root: str | None,
    quiet: bool,
) -> dict[str, Any]:
    """Run one cell; return its record (status ok / failed / unavailable). Raises only on interrupt."""
    t0 = time.perf_counter()
    rec = _base_record(cell, suite, spec, invocation)
    try:
        plugins.get("attacks", cell.attack.attack)
        plugins.get("inits", cell.init.regime)
        target = targets.get(cell)
        if target.error is not None:
            raise target.error
        assert target.card is not None and target.problem is not None
        rec["target"].update(target.info)
        work = out / "work" / cell.cell_id
        result = run_attack(target.card, spec, work, data_root=data_root, quiet=quiet, problem=target.problem)
        rec["init"].update(config=result["init_config"], is_oracle=result["init_is_oracle"])
        rec["target"]["n_train"] = result["target"]["n_train"]
        rec["runs"] = result["runs"]
        rec["selections"] = selections(result)
        rec["evaluation"] = result["evaluation"]
        rec["result_dir"] = f"work/{cell.cell_id}"
        rec["attack_seconds"] = float(sum(r.get("seconds", 0.0) for r in result["runs"]))
        rec["status"] = STATUS_OK
        rec["error"] = None
    except (KeyboardInterrupt, SystemExit):
        raise
    except Exception as exc:
        rec["status"] = STATUS_UNAVAILABLE if isinstance(exc, UnknownNameError) else STATUS_FAILED
        rec["error"] = {
            "type": type(exc).__name__,
            "message": str(exc),
            "traceback": None if isinstance(exc, ReconbenchError) else traceback.format_exc()[-4000:],
        }
    rec["wall_seconds"] = time.perf_counter() - t0
    rec["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    rec["provenance"] = provenance(rec["spec"], spec.device, spec.dtype, cell.seed)
    rec["machine"] = machine.describe(spec.device)
    return rec


# -- the suite ----------------------------------------------------------------------------------------
@dataclass
class BenchReport:
    out: Path
    total: int = 0
    skipped: list[str] = field(default_factory=list)
    ran: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)
    elapsed: float = 0.0


def is_finished(rec: dict[str, Any] | None, key: str, retry_failed: bool) -> bool:
    if rec is None or rec.get("cell_key") != key:
        return False
    if rec.get("status") == STATUS_OK:
        return True
    if rec.get("status") == STATUS_UNAVAILABLE:
        return False  # the plugin may be installed by now; failing again costs nothing
    return not retry_failed


def _say(msg: str, quiet: bool) -> None:
    if not quiet:
        from tqdm.auto import tqdm

        tqdm.write(msg, file=sys.stderr)


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
) -> BenchReport:
    """Run (or resume) a suite; see the module docstring for the folder layout."""
    out_dir = Path(out) if out else default_results_dir(suite)
    device, dtype = device or suite.device, dtype or suite.dtype
    cells = select(expand(suite), only)
    if not cells:
        raise SuiteError(
            f"--only {' '.join(only or [])} matches no cell of suite {suite.name!r}; cell ids look like "
            f"{expand(suite)[0].cell_id} (see `reconbench bench {suite.name} --list`)"
        )
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise SuiteError(
            f"suite {suite.name!r} runs on {device!r}, but no CUDA device is available here; "
            "pass --device cpu to run it on the CPU (slowly)"
        )
    existing = load_cells(out_dir)
    if existing and not resume:
        raise SuiteError(
            f"{out_dir} already holds {len(existing)} finished cell(s) of a previous run; pass --resume "
            "to continue it (finished cells are skipped), or --out to write elsewhere"
        )
    for w in suite.warnings:
        _say(f"warning: {w}", quiet)

    out_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(suite.path, out_dir / "suite.toml")
    inv_dir = out_dir / "invocations"
    n = len(list(inv_dir.glob("*.json"))) if inv_dir.exists() else 0
    report = BenchReport(out=out_dir, total=len(cells))
    started = time.perf_counter()
    invocation: dict[str, Any] = {
        "invocation": n,
        "command": command or "",
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "status": "running",
        "elapsed_seconds": 0.0,
        "suite": suite.name,
        "suite_sha256": suite.text_sha256,
        "only": list(only or []),
        "device": device,
        "dtype": dtype,
        "reconbench_version": __version__,
        "git_commit": git_commit(),
        "torch_version": torch.__version__,
        "machine": machine.describe(device),
        "cells_run": [],
        "cells_skipped": 0,
    }

    def save_invocation(status: str | None = None) -> None:
        invocation["elapsed_seconds"] = time.perf_counter() - started
        if status:
            invocation["status"] = status
        invocation["cells_run"] = report.ran
        invocation["cells_skipped"] = len(report.skipped)
        write_json(inv_dir / f"{n:03d}.json", invocation)

    save_invocation()
    targets = TargetPool(out_dir, cache, data_root, quiet, device)
    todo = []
    for cell in cells:
        key = cell.key(suite, dtype)
        rec = existing.get(cell.cell_id)
        if is_finished(rec, key, retry_failed):
            report.skipped.append(cell.cell_id)
        else:
            if rec is not None and rec.get("cell_key") != key:
                report.stale.append(cell.cell_id)
            todo.append(cell)
    if report.skipped:
        _say(f"resuming: {len(report.skipped)} of {len(cells)} cell(s) already finished", quiet)
    if report.stale:
        _say(f"{len(report.stale)} cell(s) changed since they ran (suite edited); they run again", quiet)
    try:
        with Progress(len(todo), f"suite {suite.name}", quiet=quiet or not todo) as bar:
            for i, cell in enumerate(todo):
                _say(f"[{len(report.skipped) + i + 1}/{len(cells)}] {cell.cell_id}", quiet)
                spec = cell.run_spec(suite, device, dtype)
                rec = run_cell(cell, suite, spec, out_dir, targets, invocation=n, data_root=data_root, quiet=quiet)
                write_json(cell_path(out_dir, cell.cell_id), rec)
                report.ran.append(cell.cell_id)
                if rec["status"] != STATUS_OK:
                    report.failed.append(cell.cell_id)
                    _say(f"    {rec['status']}: {rec['error']['type']}: {rec['error']['message']}", quiet)
                else:
                    _say(f"    ok in {rec['wall_seconds']:.1f}s", quiet)
                save_invocation()
                bar.update(i + 1)
                if strict and rec["status"] != STATUS_OK:
                    raise SuiteError(
                        f"cell {cell.cell_id} {rec['status']} ({rec['error']['type']}: "
                        f"{rec['error']['message']}); its record is in {cell_path(out_dir, cell.cell_id)}"
                    )
    except KeyboardInterrupt:
        save_invocation("interrupted")
        raise
    except BaseException:
        save_invocation("failed")
        raise
    save_invocation("completed")
    report.elapsed = invocation["elapsed_seconds"]
    return report
