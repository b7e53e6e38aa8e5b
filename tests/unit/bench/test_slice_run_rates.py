"""The attack's price depends on how many search runs a cell batches: the probe's (or a ledger's measured) rate at
the largest run count at most the cell's; below the smallest count, that count's whole batched step (a step never
gets cheaper with fewer runs). Checked against prices worked out by hand from round numbers, and through `--plan`
with a hand-written ledger whose measured rows the plan prefers over the cost table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from _helpers.slicekit import digits_works

from reconbench.bench.slice_costs import (
    PRIORS,
    SAFETY_FACTOR,
    SAFETY_SECONDS,
    CellWork,
    CostModel,
    costs_from_probe,
    with_measured,
)
from reconbench.errors import ReconbenchError
from reconbench.records.cost_table import CostTable, PhaseCost, runs_price
from reconbench.records.measured_rate import MeasuredRate

W = 3072 * 1000 + 1000 * 1000 + 1000   # the probe network's weights (3072-1000-1000-1)
TINY = Path(__file__).resolve().parents[3] / "benchmarks" / "gpu" / "tiny.toml"


def probe(rows: list[tuple[int, str, float]]) -> dict[str, Any]:
    """A probe's JSON with one trainer row and attack rows (runs, precision, seconds per batched step)."""
    return {"conditions": {"device": "cuda"},
            "trainer": [{"targets": 1, "dtype": "float32", "cuda_graph": True, "flops_per_step": 6e9,
                         "target_steps_per_second": 1000.0}],
            "attack": [{"runs": r, "m": 1000, "layers": [3072, 1000, 1000, 1], "precision": p,
                        "batch": {"cuda_graph": True}, "seconds_per_step": s} for r, p, s in rows]}


ROWS = [(4, "tf32", 0.004), (8, "tf32", 0.006), (16, "tf32", 0.010), (16, "float64", 0.030)]


def test_each_run_count_measured_gets_its_own_rate():
    table = costs_from_probe(probe(ROWS), train_dtype="float32")
    by = table.attack_runs["tf32"]
    assert list(by) == ["4", "8", "16"]
    for runs, _, seconds in ROWS[:3]:
        assert by[str(runs)].rate == pytest.approx(seconds / (runs * 1000 * W))
    assert table.attack.rate == pytest.approx(0.010 / (16 * 1000 * W))   # the flat rate: the most runs, as before
    assert table.attack_runs["float64"] == {"16": PhaseCost(fixed=PRIORS["cuda"].attack.fixed, rate=0.030 / (16e3 * W))}


@pytest.mark.parametrize(("runs", "priced_as"), [(16, 16), (32, 16), (12, 8), (8, 8), (5, 4), (4, 4)])
def test_a_cell_is_priced_at_the_largest_run_count_at_most_its_own(runs, priced_as):
    table = costs_from_probe(probe(ROWS), train_dtype="float32")
    seconds = {r: s for r, p, s in ROWS if p == "tf32"}
    # seconds of one batched step of `runs` runs: the measured count's rate per unit x this cell's units per step
    assert table.phase("attack", "tf32", runs).rate * runs * 1000 * W == pytest.approx(
        seconds[priced_as] / priced_as * runs)


@pytest.mark.parametrize("runs", [1, 2, 3])
def test_below_the_smallest_count_a_batched_step_costs_the_smallest_rows_step(runs):
    table = costs_from_probe(probe(ROWS), train_dtype="float32")
    assert table.phase("attack", "tf32", runs).rate * runs * 1000 * W == pytest.approx(0.004)
    # a precision measured only at 16 runs: a 4-run step costs what a 16-run step does
    assert table.phase("attack", "float64", 4).rate * 4 * 1000 * W == pytest.approx(0.030)


def test_the_estimate_of_a_4_run_cell_is_no_cheaper_per_step_than_the_smallest_row():
    """Two cells of equal units (4 runs x 50,000 steps, 16 runs x 12,500 steps): before, both priced at the 16-run
    rate; now the 4-run one at its own, 0.004 s a batched step: 1.25 x (5 + 200) + 2 against 1.25 x (5 + 125) + 2."""
    table = costs_from_probe(probe(ROWS), train_dtype="float32")
    model = CostModel(prior=table)
    units = 4 * 50_000 * 1000 * W
    four = CellWork("a", "t", 0.0, units, 0.0, precision="tf32", runs=4, steps=50_000)
    sixteen = CellWork("b", "t", 0.0, units, 0.0, precision="tf32", runs=16, steps=12_500)
    fixed = PRIORS["cuda"].attack.fixed
    assert model.estimate(four, False) == pytest.approx(SAFETY_FACTOR * (fixed + 0.004 * 50_000) + SAFETY_SECONDS)
    assert model.estimate(sixteen, False) == pytest.approx(SAFETY_FACTOR * (fixed + 0.010 * 12_500) + SAFETY_SECONDS)


def test_runs_price_refuses_an_empty_table_and_keys_that_are_not_counts():
    with pytest.raises(ReconbenchError, match="no attack price by run count"):
        runs_price({}, 4)
    with pytest.raises(ReconbenchError, match="'many' is not a number of search runs"):
        CostTable.of({"train": {"fixed": 0, "rate": 0}, "attack": {"fixed": 0, "rate": 0},
                      "evaluate": {"fixed": 0, "rate": 0}, "attack_runs": {"tf32": {"many": {"fixed": 0, "rate": 1}}}})


def measured(cell: str, runs: int, seconds_per_step: float, precision: str = "tf32", device: str = "cuda",
             m: int = 1000, weights: int = W, steps: int = 100) -> dict[str, Any]:
    return {"cell": cell, "phase": "attack", "precision": precision, "runs": runs, "m": m, "weights": weights,
            "steps": steps, "seconds": seconds_per_step * steps, "device": device}


def test_measured_rows_replace_the_probes_at_their_count_and_add_counts_it_lacks():
    table = costs_from_probe(probe(ROWS), train_dtype="float32")
    rows = [MeasuredRate.from_dict(r) for r in (
        measured("x", 16, 0.012), measured("y", 16, 0.013),         # slower than the probe's 0.010: the slowest wins
        measured("z", 2, 0.003),                                     # a count the probe lacks
        measured("cpu-cell", 8, 9.0, device="cpu"),                  # another kind of device: left out
        measured("cut", 8, 0.5, steps=0),                            # nothing timed: left out
        {**measured("eval", 8, 0.5), "phase": "evaluate"})]          # another phase: left out
    got = with_measured(table, rows, "cuda")
    by = got.attack_runs["tf32"]
    assert list(by) == ["2", "4", "8", "16"]
    assert by["16"].rate * 16 * 1000 * W == pytest.approx(0.013)
    assert by["2"].rate * 2 * 1000 * W == pytest.approx(0.003)
    assert by["8"] == table.attack_runs["tf32"]["8"]
    assert got.phase("attack", "tf32", 1).rate * 1000 * W == pytest.approx(0.003)   # below 2: 2's step
    assert [(m["precision"], m["runs"], m["cells"]) for m in got.about["measured"]] == [
        ("tf32", 2, ["z"]), ("tf32", 16, ["x", "y"])]
    assert with_measured(table, rows[3:], "cuda") == table   # nothing usable: the table as it was


def test_plan_with_a_hand_written_ledger_prices_a_cell_at_its_measured_rate(tmp_path, capsys, no_work):
    """tiny.toml's cells (2 runs of 100 steps, float64 on the CPU, built-in CPU table) with a ledger whose measured
    row says 1,000 s per batched step of 2 runs on exactly a cell's units: each cell's attack then takes 100,000 s,
    so no cell fits a 60 s slice and each is estimated at 1.25 x (100,000 + the table's fixed and other phases) + 2.
    A row of 4 runs (more than the cells') and one measured on a GPU are not used."""
    from _helpers.cli import run_cli

    works = digits_works(TINY)
    w = works[0]
    weights = int(w.weights)   # the cell's network, as a slice records it
    m = w.attack / (w.runs * w.steps * weights)
    assert m == int(m)
    m = int(m)
    ledger = tmp_path / "finished.json"
    ledger.write_text(json.dumps({
        "format": "reconbench-finished-cells/1", "suite": "gpu-tiny", "cells": {}, "training": {},
        "measured": [measured("digits-binary--haim_binary_kkt--gaussian--s0", 2, 1000.0, precision="float64",
                              device="cpu", m=m, weights=weights),
                     measured("other", 4, 1e-9, precision="float64", device="cpu", m=m, weights=weights),
                     measured("gpu", 2, 1e-9, precision="float64", device="NVIDIA H100 80GB HBM3", m=m,
                              weights=weights)]}))
    args = ["bench", str(TINY), "--plan", "--deadline", "60", "--device", "cpu", "--out", str(tmp_path / "res")]
    code, text, err = run_cli([*args, "--finished", str(ledger)], capsys)
    assert code == 0, err
    assert "built-in cost table and the slices' measured rates:" in text
    assert "float64 attack priced by runs batched: 2 (measured on a slice), 4 (measured on a slice)" in text
    prior = PRIORS["cpu"]
    for work in works:
        rest = prior.attack.fixed + prior.train.seconds(work.train) + prior.evaluate.seconds(work.evaluate)
        estimate = SAFETY_FACTOR * (1000.0 * work.steps + rest) + SAFETY_SECONDS
        assert f"fits no slice: {work.cell_id} (estimated {estimate:.0f}s on a bare machine)" in text
    # without the ledger the built-in table plans them into one slice
    code, text, err = run_cli(args, capsys)
    assert code == 0, err
    assert "fits no slice" not in text and "measured" not in text and "3 cell(s) in 1 slice(s)" in text
