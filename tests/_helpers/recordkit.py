"""Record builders: a results folder's cell records and invocations made from the typed records, so that leaderboard
tests build a board's inputs without running a suite (every record is checked by its strict decoder when read)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from reconbench.bench.cells import CELL_FORMAT, Cell
from reconbench.bench.suite import Suite
from reconbench.provenance import write_json
from reconbench.records import (
    AttackInfo,
    CellRecord,
    HeldOutNull,
    InitInfo,
    Invocation,
    Selection,
    Spread,
    StoredEvaluation,
    TargetInfo,
)

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


def cell_record(cell: Cell, suite: Suite, selections: Mapping[str, Selection], *, oracle_init: bool = False,
                status: str = "ok", attack_seconds: float = 1.0, wall_seconds: float = 2.0,
                provenance: Mapping[str, str] = PROVENANCE) -> CellRecord:
    """The record a finished cell of ``suite`` writes, with the given selections (``pool`` is the evaluation's
    summary); no run, no per-image rows, no model card."""
    return CellRecord.written(
        format=CELL_FORMAT,
        cell_id=cell.cell_id,
        cell_key=cell.key(suite),
        groups=list(cell.groups),
        status=status,
        error=None,
        seed=cell.seed,
        spec={"dtype": "float64"},
        target=TargetInfo.written(name=cell.target, recipe_key=cell.recipe.key()),
        attack=AttackInfo.written(label=cell.attack.label, name=cell.attack.attack),
        init=InitInfo.written(label=cell.init.label, regime=cell.init.regime, config={}, is_oracle=oracle_init),
        selections=dict(selections),
        evaluation=StoredEvaluation.written(summary=dict(selections["pool"].summary), per_image=[]),
        attack_seconds=attack_seconds,
        wall_seconds=wall_seconds,
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
