"""A cell is priced by what was measured of its own network and size: the attack's batched step by the network it
was timed on (a slice's row of a smaller network does not replace the probe's rate for a larger one: a step does not
shrink with the weights), an evaluation of the units a slice measured at its seconds, a travelled card's restore as
a slice measured it. Prices worked out by hand from the rows (closed forms); the paper's CIFAR-10 binary cell checked
against the H200's committed probe."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from _helpers.slicekit import paper_works

from reconbench.bench.slice_costs import (
    SAFETY_FACTOR,
    SAFETY_SECONDS,
    CellWork,
    CostModel,
    GroupRules,
    plan_slices,
    read_costs,
    restore_seconds,
    run_step_seconds,
    with_measured,
)
from reconbench.errors import ReconbenchError
from reconbench.records.cost_table import CostTable, PhaseCost
from reconbench.records.measured_rate import MeasuredRate

REPO = Path(__file__).resolve().parents[3]
H200 = REPO / "benchmarks" / "results" / "gpu" / "probe_h200.json"

W_A = 4_000_000   # the network the table's attack was timed on
S_A = 0.006       # its 16-run batched step, seconds
W_B = 1_750_000   # a smaller network a slice measured
S_B = 0.004       # its 16-run batched step: 1.5x faster, not W_A / W_B = 2.29x
M = 1000


def table() -> CostTable:
    per_unit = S_A / (16 * M * W_A)
    return CostTable(train=PhaseCost(fixed=15.0, rate=1e-12), attack=PhaseCost(fixed=5.0, rate=per_unit),
                     evaluate=PhaseCost(fixed=15.0, rate=3e-9), card=PhaseCost(fixed=2.0, rate=4e-8),
                     attack_runs={"tf32": {"16": PhaseCost(fixed=5.0, rate=per_unit)}}, attack_network=float(W_A))


def row(phase: str, weights: int, seconds: float, **extra: Any) -> MeasuredRate:
    return MeasuredRate.from_dict({"cell": f"{phase}-{weights}", "phase": phase, "precision": extra.pop("precision", ""),
                                   "runs": 0, "m": 0, "weights": weights, "steps": 0, "seconds": seconds,
                                   "device": "NVIDIA H200", **extra})


def attack_row(weights: int, step: float, runs: int = 16) -> MeasuredRate:
    return row("attack", weights, step * 100, precision="tf32", runs=runs, m=M, steps=100)


def work(weights: float, runs: int = 16, steps: int = 50_000) -> CellWork:
    return CellWork(cell_id=f"c{weights:g}", target_key=f"k{weights:g}", train=0.0,
                    attack=float(runs) * steps * M * weights, evaluate=0.0, precision="tf32", runs=runs,
                    steps=steps, weights=weights)


def attack_seconds(t: CostTable, w: CellWork) -> float:
    return CostModel(prior=t).phase_seconds("attack", w.attack, w.precision, w.runs, weights=w.weights)


def test_the_attack_step_of_a_second_network_is_priced_by_the_measured_ratio():
    """The table's network at its 6 ms step, the slice's smaller one at its 4 ms: each priced at its own step
    (the ratio 1.5 as measured), the table's network not at 4 ms x W_A / W_B = 9.1 ms."""
    got = with_measured(table(), [attack_row(W_B, S_B)], "cuda")
    assert got.attack_runs == table().attack_runs   # the table's network keeps its own price
    big, small = work(W_A), work(W_B)
    assert attack_seconds(got, big) == pytest.approx(5.0 + S_A * 50_000, rel=1e-14)
    assert attack_seconds(got, small) == pytest.approx(5.0 + S_B * 50_000, rel=1e-14)
    assert run_step_seconds(got, big) / run_step_seconds(got, small) == pytest.approx(S_A / S_B, rel=1e-14)
    assert got.about["measured_networks"] == [{"precision": "tf32", "weights": W_B, "runs": 16,
                                                "rate": pytest.approx(S_B / (16 * M * W_B), rel=1e-14),
                                                "cells": [f"attack-{W_B}"]}]


def test_a_network_not_measured_takes_the_step_of_the_nearest_one_no_smaller_and_above_all_scales_up():
    """Between the two networks: the larger's step (a smaller network steps no slower); below both: the smaller
    one's step; above both: the larger's step times the weights' ratio."""
    got = with_measured(table(), [attack_row(W_B, S_B)], "cuda")
    assert attack_seconds(got, work(3_000_000)) == pytest.approx(5.0 + S_A * 50_000, rel=1e-14)
    assert attack_seconds(got, work(1_000_000)) == pytest.approx(5.0 + S_B * 50_000, rel=1e-14)
    assert attack_seconds(got, work(8_000_000)) == pytest.approx(5.0 + S_A * 2 * 50_000, rel=1e-14)


def test_a_slower_row_of_the_tables_own_network_replaces_its_price_and_fewer_runs_pay_the_whole_step():
    slow = with_measured(table(), [attack_row(W_A + 1000, 0.007)], "cuda")   # the cell's count, biases included
    assert attack_seconds(slow, work(W_A + 1000)) >= 5.0 + 0.007 * 50_000
    assert attack_seconds(slow, work(W_A)) == pytest.approx(5.0 + 0.007 * 50_000, rel=1e-14)
    smaller = with_measured(table(), [attack_row(W_A - 1000, 0.007)], "cuda")
    assert attack_seconds(smaller, work(W_A - 1000)) == pytest.approx(5.0 + 0.007 * 50_000, rel=1e-14)
    got = with_measured(table(), [attack_row(W_B, S_B)], "cuda")
    # 4 runs of the smaller network: its own 16-run step (a step never gets cheaper with fewer runs) is the least
    assert attack_seconds(got, work(W_B, runs=4)) == pytest.approx(5.0 + S_B * 50_000, rel=1e-14)


def test_a_table_without_networks_prices_per_unit_as_before():
    t = replace(table(), attack_network=None)
    w = work(W_B)
    assert attack_seconds(t, w) == pytest.approx(5.0 + S_A / (16 * M * W_A) * w.attack, rel=1e-14)
    assert attack_seconds(t, replace(w, weights=0.0)) == attack_seconds(t, w)


def test_a_measured_evaluation_row_of_a_cell_prices_the_same_cells_evaluation_at_that_row():
    units = 16 * M * 500 * 784.0
    got = with_measured(table(), [row("evaluation", W_B, 14.8, units=units)], "cuda")
    model = CostModel(prior=got)
    assert model.phase_seconds("evaluate", units) == 14.8
    # another size: the table's fixed seconds plus the row's seconds per unit (less the fixed seconds: nothing)
    assert model.phase_seconds("evaluate", 4 * units) == pytest.approx(15.0 + 4 * 14.8, rel=1e-14)
    # the slower of two rows of the same units
    both = with_measured(got, [row("evaluation", W_B, 16.0, units=units)], "cuda")
    assert CostModel(prior=both).phase_seconds("evaluate", units) == 16.0


def test_a_measured_restore_prices_a_travelled_card_by_its_network():
    t = table()
    assert restore_seconds(t, work(W_B)) == t.train.fixed   # none measured: a training piece's set-up
    got = with_measured(t, [row("card_restored", W_B, 0.44)], "cuda")
    assert restore_seconds(got, work(W_B)) == 0.44
    assert restore_seconds(got, work(W_B / 2)) == 0.44
    assert restore_seconds(got, work(2 * W_B)) == pytest.approx(0.88, rel=1e-14)
    assert restore_seconds(got) == 0.44
    cpu = with_measured(t, [replace(row("card_restored", W_B, 0.44), device="cpu")], "cuda")
    assert restore_seconds(cpu, work(W_B)) == t.train.fixed   # another kind of device: left out


def test_the_whole_cell_fits_one_slice_at_its_closed_form_estimate():
    """A 16-run cell of the table's network whose card travelled: restore + 1.25 x (attack + evaluation) + 2, with
    the slice's smaller network and restore measured; it runs whole in a 530 s slice (no group of its runs)."""
    w = replace(work(W_A), evaluate=2.4e10, pieces=True, group="g", split=True, card=500.0 * W_A)
    got = with_measured(table(), [attack_row(W_B, S_B), row("card_restored", W_B, 0.44)], "cuda")
    model = CostModel(prior=got)
    whole = SAFETY_FACTOR * (5.0 + S_A * 50_000 + 15.0 + 2.4e10 * 3e-9) + SAFETY_SECONDS
    assert model.estimate(w, False) == pytest.approx(whole, rel=1e-14)
    restore = 0.44 * W_A / W_B
    plan = plan_slices([w], model, 530.0, progress={w.target_key: 1.0},
                       rules=GroupRules(travelled_cards=frozenset({w.target_key})))
    assert plan.slices == [[w.cell_id]] and plan.groups == [[]] and not plan.unfit
    assert plan.seconds == [pytest.approx(restore + whole, rel=1e-14)]


def test_the_h200_probe_prices_the_paper_cifar_step_as_it_measured_it():
    """The committed H200 probe timed the 16-run TF32 step of the 3072-1000-1000-1 network: a paper CIFAR-10 binary
    cell's step is priced at it, whatever a slice measured on MNIST's network."""
    import json

    data = json.loads(H200.read_text())
    (probe_row,) = [r for r in data["attack"] if r["precision"] == "tf32" and r["runs"] == 16]
    t = read_costs(H200, train_dtype="float32", attack_dtype="float32")
    assert t.attack_network == 3072 * 1000 + 1000 * 1000 + 1000
    _, works, _ = paper_works()
    cifar = next(w for w in works if w.cell_id.startswith("cifar-binary--haim_binary_kkt--gaussian--"))
    mnist = next(w for w in works if w.cell_id.startswith("mnist-binary--haim_binary_kkt--gaussian--"))
    cifar, mnist = (replace(w, precision="tf32") for w in (cifar, mnist))
    got = with_measured(t, [attack_row(int(mnist.weights), 0.004)], "cuda")
    step = probe_row["seconds_per_step"] * cifar.weights / t.attack_network
    assert run_step_seconds(got, cifar) * cifar.runs == pytest.approx(step, rel=1e-14)
    assert run_step_seconds(got, mnist) * mnist.runs == pytest.approx(0.004, rel=1e-14)


@pytest.mark.parametrize("field, value, named", [
    ("attack_networks", {"tf32": {"1.5e6": {"16": {"fixed": 5.0, "rate": 1e-13}}}}, "'1.5e6'"),
    ("evaluate_at", {"6e9": 14.8}, "evaluate_at: '6e9'"),
    ("card_restore", {"1786000": -1.0}, "card_restore: '1786000'"),
    ("attack_network", 0.0, "attack_network 0.0"),
])
def test_a_bad_new_field_is_refused_in_one_line_naming_it(field, value, named):
    data = {**table().to_dict(), field: value}
    with pytest.raises(ReconbenchError) as err:
        CostTable.of(data)
    assert named in str(err.value) and "\n" not in str(err.value)


def test_the_new_fields_travel_through_a_cost_table_file_and_a_scaled_table():
    got = with_measured(table(), [attack_row(W_B, S_B), row("card_restored", W_B, 0.44),
                                  row("evaluation", W_B, 14.8, units=6e9)], "cuda")
    assert CostTable.of(got.to_dict()) == got
    fast = got.scaled(2.0, evaluation=False)
    assert fast.attack_network == got.attack_network and fast.card_restore == got.card_restore
    assert fast.evaluate_at == got.evaluate_at
    assert attack_seconds(fast, work(W_B)) == pytest.approx(5.0 + S_B / 2 * 50_000, rel=1e-14)
    assert got.scaled(2.0).evaluate_at == {"6000000000": 7.4}
