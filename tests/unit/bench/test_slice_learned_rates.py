"""A later plan learns the evaluation's rate and training's rates by stack size from what the slices measured (a
ledger's ``measured`` rows): an ``evaluation`` row of a cell evaluated whole and a ``train`` row of a training piece
each carry their planner's units, so their rate is seconds / units. Checked against prices worked out by hand from
the rows; rows written before the units read as before (no rate); the break-even line and the executor's least
training agree with the plan."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from _helpers.slicekit import digits_sizes, digits_works

from reconbench.bench.slice_costs import (
    MIN_TRAINING_SECONDS,
    PRIORS,
    SAFETY_SECONDS,
    CostModel,
    plan_slices,
    stack_size,
    target_training_seconds,
    training_seconds,
    with_measured,
)
from reconbench.records.cost_table import CostTable, PhaseCost
from reconbench.records.measured_rate import MeasuredRate

PIECES = Path(__file__).resolve().parents[3] / "benchmarks" / "gpu" / "tiny-pieces.toml"


def evaluation(cell: str, seconds: float, units: float, device: str = "cpu") -> dict[str, Any]:
    return {"cell": cell, "phase": "evaluation", "precision": "", "runs": 0, "m": 0, "weights": 100, "steps": 0,
            "seconds": seconds, "device": device, "units": units}


def train(cell: str, seconds: float, units: float, targets: int, device: str = "cpu") -> dict[str, Any]:
    return {"cell": cell, "phase": "train", "precision": "float64", "runs": 0, "m": 0, "weights": 100,
            "steps": 10 * targets, "seconds": seconds, "device": device, "units": units, "targets": targets}


def rows(*dicts: dict[str, Any]) -> list[MeasuredRate]:
    return [MeasuredRate.from_dict(d) for d in dicts]


def test_an_evaluation_and_a_train_rows_rate_is_seconds_per_unit():
    assert MeasuredRate.from_dict(evaluation("a", 6.0, 3e8)).rate == 6.0 / 3e8
    assert MeasuredRate.from_dict(train("t", 2.0, 4e6, 2)).rate == 2.0 / 4e6
    assert MeasuredRate.from_dict({**evaluation("a", 6.0, 3e8), "seconds": 0.0}).rate is None


def test_rows_written_before_the_units_read_and_write_back_unchanged_with_no_rate():
    old = {k: v for k, v in evaluation("a", 6.0, 3e8).items() if k != "units"}
    row = MeasuredRate.from_dict(old)
    assert row.units == 0.0 and row.targets == 0 and row.rate is None
    assert row.to_dict() == old
    table = PRIORS["cpu"]
    assert with_measured(table, [row, MeasuredRate.from_dict({**old, "phase": "train"})], "cpu") == table


def test_a_row_without_units_is_written_as_before_and_an_evaluation_row_with_them():
    from reconbench.bench.slice_watch import phase_row

    old_keys = ["cell", "phase", "precision", "runs", "m", "weights", "steps", "seconds", "device"]
    assert list(phase_row("c", "setup", 1.0, "cpu", 10).to_dict()) == old_keys
    row = phase_row("c", "evaluation", 2.0, "cpu", 10, units=4.0)
    assert list(row.to_dict()) == [*old_keys, "units"] and row.rate == 0.5


def test_the_evaluation_rows_of_the_devices_kind_price_the_evaluate_phase_its_fixed_seconds_kept():
    """Two CPU rows, 2 s on 1e8 units and 10 s on 2e8, one GPU row (another kind: left out), the CPU table's fixed
    3 s: less the fixed seconds, 0 (not -1 s) and 7 s on 2e8 units, 3.5e-8 s per unit, above the rows' least whole
    rate (2e-8): 3.5e-8, so 1e9 units cost 3 + 35 s; the cells measured are priced at their own units as they took,
    2 s and 10 s (the fixed-plus-rate price would put the first at 6.5 s)."""
    table = PRIORS["cpu"]
    got = with_measured(table, rows(evaluation("a", 2.0, 1e8), evaluation("b", 10.0, 2e8),
                                    evaluation("gpu", 1e5, 1e8, device="NVIDIA H100")), "cpu")
    assert table.evaluate.fixed == 3.0
    assert got.evaluate.fixed == 3.0 and got.evaluate.rate == pytest.approx(7.0 / 2e8, rel=1e-14)
    model = CostModel(prior=got)
    assert model.phase_seconds("evaluate", 1e9) == pytest.approx(3.0 + 35.0, rel=1e-14)
    assert model.phase_seconds("evaluate", 1e8) == 2.0
    assert got.evaluate.seconds(1e8) == pytest.approx(6.5, rel=1e-14)
    assert got.evaluate_at == {"100000000": 2.0, "200000000": 10.0}
    assert model.phase_seconds("evaluate", 2e8) == pytest.approx(10.0, rel=1e-14)
    assert got.about["measured_evaluation"]["cells"] == ["a", "b"]
    assert got.train == table.train and got.attack == table.attack and got.train_targets == table.train_targets


def test_train_rows_price_their_stack_size_the_slowest_per_size_over_the_tables():
    """A table with 1- and 4-target prices (the probe's); rows of a 4-stack at 1e-9 and 3e-9 s per unit, and of a
    2-stack (a size the table lacks) at 5e-9: 4 -> 3e-9, 2 added at 5e-9, 1 kept; each size's fixed seconds kept."""
    sizes = {"1": PhaseCost(fixed=15.0, rate=8e-9), "4": PhaseCost(fixed=15.0, rate=4e-9)}
    table = CostTable(train=sizes["1"], attack=PhaseCost(fixed=5.0, rate=1e-12), evaluate=PhaseCost(fixed=15.0,
                      rate=7.6e-9), train_targets=sizes)
    gpu = "NVIDIA H100 80GB HBM3"
    got = with_measured(table, rows(train("x", 1.0, 1e9, 4, gpu), train("y", 3.0, 1e9, 4, gpu),
                                    train("z", 5.0, 1e9, 2, gpu), train("cpu", 1e3, 1.0, 2, device="cpu")), "cuda")
    assert got.train_targets == {"1": sizes["1"], "2": PhaseCost(fixed=15.0, rate=5e-9),
                                 "4": PhaseCost(fixed=15.0, rate=3e-9)}
    assert got.phase("train", targets=3).rate == 5e-9   # between 2 and 4: the 2-target rate
    assert [(m["targets"], m["pieces"]) for m in got.about["measured_training"]] == [(2, 1), (4, 2)]
    assert got.evaluate == table.evaluate


def test_a_ledgers_evaluation_and_train_rows_change_the_plans_prices_as_computed_by_hand(tmp_path, capsys):
    """tiny-pieces.toml on the CPU's built-in table, with a ledger whose evaluation row took 1,000 s on exactly a
    cell's evaluation units and whose train row took 40 s on exactly the 2-target stack's units: a cell's evaluation
    then costs the 1,000 s measured on its units (no 60 s slice holds a whole cell: each runs in groups of its
    runs, evaluated where they are merged) and the stack's training 3 + 40 s (it ends in the first slice). Without
    the ledger the plan trains it over two slices and runs the second cell whole."""
    from _helpers.cli import run_cli

    from reconbench.cli.bench_plan import ledger_measured, plan_table

    works = digits_works(PIECES)
    w = works[0]
    stack = sum(x.train for x in works)
    ledger = tmp_path / "finished.json"
    ledger.write_text(json.dumps({
        "format": "reconbench-finished-cells/3", "suite": "gpu-tiny-pieces", "cells": {}, "training": {},
        "measured": [evaluation(w.cell_id, 1000.0, w.evaluate), train("a+b", 40.0, stack, 2)]}))
    table = plan_table("cpu", None, ledger_measured(ledger))
    assert table is not None
    prior = PRIORS["cpu"]
    model = CostModel(prior=table)
    for work in works:   # both cells have the same units
        assert model.phase_seconds("evaluate", work.evaluate) == 1000.0
    (group,) = {x.group for x in works}
    assert training_seconds(model, works) == {group: pytest.approx(prior.train.fixed + 40.0, rel=1e-14)}
    # a lone target keeps the table's flat rate (the built-in CPU table prices no stack size)
    assert training_seconds(model, works[:1]) == {group: pytest.approx(prior.train.seconds(w.train), rel=1e-14)}

    args = ["bench", str(PIECES), "--plan", "--deadline", "60", "--device", "cpu", "--out", str(tmp_path / "res"),
            "--pack", str(tmp_path / "pack")]
    code, text, err = run_cli([*args, "--finished", str(ledger)], capsys)
    assert code == 0, err
    assert "built-in cost table and the slices' measured rates:" in text
    assert "evaluation priced at a rate measured on slices (--finished)" in text
    assert "training in pieces priced by targets stacked: 1, 2 (measured on a slice, 1 piece(s), " in text
    assert "digits-a + digits-b 43s" in text and "each evaluated where its last group is merged" in text
    code, text, err = run_cli(args, capsys)
    assert code == 0, err
    assert "measured" not in text and "digits-a + digits-b 43s" not in text
    assert "each evaluated where its last group is merged" not in text


def test_the_break_even_lines_training_per_target_is_the_stacks_price():
    """tiny-pieces' two targets train as one stack: at a table whose 2-target rate is half its 1-target rate, a
    target's training costs half what the flat rate says."""
    works = digits_works(PIECES)
    w = works[0]
    assert stack_size(works, w.target_key) == 2 and stack_size(works, "elsewhere") == 1
    table = PRIORS["cpu"].updated(train_targets={"1": PhaseCost(fixed=3.0, rate=2e-8),
                                                 "2": PhaseCost(fixed=3.0, rate=1e-8)})
    assert target_training_seconds(table, w, 2) == 1e-8 * w.train
    assert target_training_seconds(table, w) == 2e-8 * w.train
    assert target_training_seconds(PRIORS["cpu"], w, 2) == PRIORS["cpu"].train.rate * w.train   # no sizes: flat


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(("past_setup", "trains"), [(MIN_TRAINING_SECONDS - 0.5, False),
                                                    (MIN_TRAINING_SECONDS + 0.5, True)])
def test_the_executor_trains_only_with_min_training_seconds_left_past_the_setup_as_the_plan(
        tmp_path, monkeypatch, past_setup, trains):
    """A slice whose time left past the margin is the set-up (10 s) plus half a second less, or more, than
    MIN_TRAINING_SECONDS: the executor starts a training piece only in the second, as the plan trains only there."""
    from reconbench.bench import slice_executor
    from reconbench.bench.cells import expand
    from reconbench.bench.executors import CellJob, RunContext
    from reconbench.bench.slice_executor import DeadlineExecutor
    from reconbench.bench.suite import load_suite
    from reconbench.targets.resumable import Piece

    suite = load_suite(str(PIECES))
    cells = expand(suite)
    setup = 10.0
    table = CostTable(train=PhaseCost(fixed=setup, rate=0.0), attack=PhaseCost(fixed=1.0, rate=0.0),
                      evaluate=PhaseCost(fixed=0.0, rate=0.0))
    deadline = SAFETY_SECONDS + setup + past_setup
    called: list[float] = []

    def device(recipes: list[Any], cards: list[Any], states: Any, *, seconds: float, **_: Any) -> list[Piece]:
        called.append(seconds)
        return [Piece(r.key(), 1, r.train.steps, seconds, stacked=len(recipes)) for r in recipes]

    monkeypatch.setattr(slice_executor, "train_pieces", device)
    ctx = RunContext(suite, tmp_path / "out", 0, "cpu", suite.dtype, None, str(tmp_path / "cache"), True)
    executor = DeadlineExecutor(deadline, CostModel(prior=table), digits_sizes(suite), start=0.0, clock=Clock(),
                                states=tmp_path / "states")
    list(executor.run([CellJob(c, c.run_spec(suite, "cpu", suite.dtype)) for c in cells], ctx))
    assert called == ([pytest.approx(setup + past_setup, rel=1e-14)] if trains else [])
    plan = plan_slices(digits_works(PIECES), CostModel(prior=table), deadline)
    assert bool(plan.training and plan.training[0]) == trains
