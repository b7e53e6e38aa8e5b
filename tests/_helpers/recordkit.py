"""Record builders: a run's result, a cell, a results folder, a model card and a rendered board's results, made from the
typed records of ``reconbench/records/``, so that leaderboard, site and verify tests build what they read without
running a suite (every record is checked by its strict decoder when read; tests/unit/records/test_record_builders.py reads each
through its file format's door)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from reconbench.bench.cells import CELL_FORMAT, Cell
from reconbench.bench.suite import Suite
from reconbench.provenance import write_json
from reconbench.records import (
    BOARD_RESULTS_FILE,
    AttackInfo,
    BoardResults,
    CardData,
    CellRecord,
    HeldOutNull,
    InitInfo,
    Invocation,
    RunResult,
    RunTarget,
    Selection,
    Spread,
    StoredEvaluation,
    TargetInfo,
    TrainMetrics,
)
from reconbench.targets.recipe import TargetRecipe

#: the provenance of a made-up cell (one commit, one version: a board renders it without a dirty-tree refusal)
PROVENANCE = {"git_commit": "abc123", "reconbench_version": "9.9.9"}


def selection(summary: Mapping[str, Any], *, run: int | None = None, oracle: bool = False,
              attack_loss: float | None = None, null_spread: Mapping[str, Mapping[str, float]] | None = None,
              draws: int = 5) -> Selection:
    """A selection of a cell: its summary numbers, the held-out null's spread per summary key (mean, max) over
    ``draws`` draws, its attack loss and the run it picked (None: the pool)."""
    null = HeldOutNull.written(available=True, draws=draws,
                               spread={k: Spread.from_dict(dict(v)) for k, v in (null_spread or {}).items()})
    return Selection.written(summary=dict(summary), null=null, attack_loss=attack_loss, run=run, oracle=oracle)


def train_metrics(**fields: Any) -> TrainMetrics:
    """A target's training evidence with the fields given (e.g. ``final_loss``, ``test_error``, ``certificate``),
    its nested parts typed as a file's reader types them."""
    return TrainMetrics.from_dict(TrainMetrics.written(**fields).to_dict(), "train metrics")


def target_info(cell: Cell, *, n_train: int | None = None, margins: tuple[float, float] | None = None,
                metrics: TrainMetrics | None = None) -> TargetInfo:
    """What a cell records of its target: its name and recipe key, and, where given, n, the least and largest
    training margin and the training metrics."""
    values: dict[str, Any] = {"name": cell.target, "recipe_key": cell.recipe.key()}
    if n_train is not None:
        values["n_train"] = n_train
    if margins is not None:
        values["margin_min"], values["margin_max"] = margins
    if metrics is not None:
        values["train_metrics"] = metrics
    return TargetInfo.written(**values)


def cell_record(cell: Cell, suite: Suite, selections: Mapping[str, Selection], *, oracle_init: bool = False,
                status: str = "ok", attack_seconds: float = 1.0, wall_seconds: float = 2.0,
                provenance: Mapping[str, str] = PROVENANCE, target: TargetInfo | None = None,
                dtype: str = "float64", cpu_seconds: float | None = None) -> CellRecord:
    """The record a finished cell of ``suite`` writes, with the given selections (``pool`` is the evaluation's
    summary); no run, no per-image rows, no model card; the target's name and recipe key unless ``target`` says
    more (:func:`target_info`); ``dtype``: the attack's precision as its spec records it; ``cpu_seconds``: the
    process's CPU seconds, recorded only when given."""
    return CellRecord.written(
        format=CELL_FORMAT,
        cell_id=cell.cell_id,
        cell_key=cell.key(suite),
        groups=list(cell.groups),
        status=status,
        error=None,
        seed=cell.seed,
        spec={"dtype": dtype},
        target=target if target is not None else target_info(cell),
        attack=AttackInfo.written(label=cell.attack.label, name=cell.attack.attack),
        init=InitInfo.written(label=cell.init.label, regime=cell.init.regime, config={}, is_oracle=oracle_init),
        selections=dict(selections),
        evaluation=StoredEvaluation.written(summary=dict(selections["pool"].summary), per_image=[]),
        attack_seconds=attack_seconds,
        wall_seconds=wall_seconds,
        **({} if cpu_seconds is None else {"cpu_seconds": cpu_seconds}),
        invocation=0,
        provenance=dict(provenance),
    )


def invocation(number: int, command: str, elapsed_seconds: float, **fields: Any) -> Invocation:
    """An invocation record of ``reconbench bench`` (the fields given, in that order)."""
    return Invocation.written(invocation=number, command=command, elapsed_seconds=elapsed_seconds, **fields)


def write_results(res: Path, cells: Iterable[CellRecord], invocations: Iterable[Invocation] = ()) -> Path:
    """A results folder as ``reconbench bench`` leaves it: ``cells/<id>.json`` and ``invocations/NNN.json``."""
    for rec in cells:
        write_json(res / "cells" / f"{rec.cell_id}.json", rec.to_dict())
    for inv in invocations:
        write_json(res / "invocations" / f"{inv.invocation:03d}.json", inv.to_dict())
    return res


def run_result(attack: str, summary: Mapping[str, Any], *, init: str = "gaussian", recipe: TargetRecipe | None = None,
               runs: list[Mapping[str, Any]] | None = None, metrics: TrainMetrics | None = None,
               wall_seconds: float = 2.0, provenance: Mapping[str, str] = PROVENANCE) -> RunResult:
    """A run's ``result.json`` as ``reconbench run`` writes it, without candidates: the pooled evaluation's summary
    (no per-image rows), the runs given (each a search run's record), the target's recipe and training metrics."""
    target: dict[str, Any] = {}
    if recipe is not None:
        target.update(recipe=recipe, recipe_key=recipe.key(), family=recipe.family, task=recipe.problem.task)
    if metrics is not None:
        target["train_metrics"] = metrics.to_dict()
    return RunResult.written(kind=RunResult.SCHEMA, attack=attack, init=init, spec={"dtype": "float64"},
                             target=RunTarget.written(**target), runs=[dict(r) for r in runs or []],
                             evaluation=StoredEvaluation.written(summary=dict(summary), per_image=[]),
                             wall_seconds=wall_seconds,
                             provenance=dict(provenance))


def model_card(recipe: TargetRecipe, metrics: TrainMetrics, *, version: str = "9.9.9") -> CardData:
    """A model card's JSON as ``reconbench train`` writes it, without weights or problem indices: the recipe, its
    key, family and task, and the training metrics."""
    return CardData.written(format=CardData.SCHEMA, reconbench_version=version, recipe=recipe, recipe_key=recipe.key(),
                            family=recipe.family, task=recipe.problem.task, metrics=metrics)


def board_results(suite: Suite, res: Path, out: Path, command: str = "reconbench leaderboard test") -> BoardResults:
    """The board ``reconbench leaderboard`` renders from a results folder (e.g. one :func:`write_results` made), read
    back through the strict door of ``results.json``."""
    from reconbench.leaderboard.render import build_leaderboard

    build_leaderboard(suite, res, out, command=command, figures=False)
    return BOARD_RESULTS_FILE.read(out / "results.json")
