"""`--plan` with training in pieces (reconbench/bench/slice_costs.py): a target's training is resumable work that the
slices share, its cells are units that must finish inside one slice. The plans are checked against counts worked
out by hand from synthetic cost tables, and the probe's JSON against the cost table it must give."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from _helpers.slicekit import paper_works

from reconbench.bench.cells import expand, select
from reconbench.bench.slice_costs import (
    PRIORS,
    SAFETY_FACTOR,
    SAFETY_SECONDS,
    CellWork,
    CostModel,
    cell_work,
    costs_from_probe,
    plan_slices,
    read_costs,
    training_seconds,
)
from reconbench.errors import ReconbenchError

#: the paper board's four KKT targets, one cell of 16 search runs each (in the suite's order)
KKT_CELLS = ["cifar-binary--haim_binary_kkt--gaussian--s0", "mnist-binary--haim_binary_kkt--gaussian--s0",
             "cifar-multiclass--multiclass_kkt--gaussian--s0", "cifar-regression-wd--general_loss_wd--gaussian--s0"]


def paper_piece_works(ids: list[str] | None = None) -> list[CellWork]:
    """paper.toml's cells as a slice with ``--pack`` sees them: its constant-lr MLP targets train in pieces."""
    suite, _, sizes = paper_works()
    cells = expand(suite) if ids is None else [c for c in expand(suite) if c.cell_id in ids]
    return [cell_work(c, sizes[c.recipe.key()], pieces=True) for c in cells]


def fixed_table(train: float, attack: float, evaluate: float) -> dict[str, dict[str, float]]:
    return {"train": {"fixed": train, "rate": 0.0}, "attack": {"fixed": attack, "rate": 0.0},
            "evaluate": {"fixed": evaluate, "rate": 0.0}}


def test_the_kkt_targets_train_in_pieces_and_two_of_them_share_a_stack():
    works = {w.cell_id: w for w in paper_piece_works(KKT_CELLS)}
    assert all(w.pieces for w in works.values())
    cifar, mnist = works[KKT_CELLS[0]], works[KKT_CELLS[1]]
    # CIFAR-10 and MNIST binary: one shape past the input (1000-1000-1, n = 500), one loss and lr: one stack
    assert cifar.group == mnist.group and len({w.group for w in works.values()}) == 3
    # the resumable trainer's arithmetic: the layers past the first, plus n w_1 / 3; the input dimension drops out
    _, _, sizes = paper_works()
    p = sizes[cifar.target_key].parameters
    assert p is not None
    past_first = p - 3072 * 1000   # the same for MNIST: its first layer is 784 x 1000
    assert cifar.train == pytest.approx(10**6 * 500 * (past_first + 500 * 1000 / 3), rel=1e-12)
    assert mnist.train == pytest.approx(cifar.train, rel=1e-12)
    # the cell's own estimate holds no training: the slices share it
    assert cifar.units("train", True) == 0.0 and cifar.attack == 16 * 50_000 * 1000 * p


def test_four_kkt_targets_with_16_runs_each_take_three_slices_by_hand():
    """Fixed costs only, so every number is checked by hand. Budget 470 s; a group's training 1.25 x 200 = 250 s
    (three groups: CIFAR + MNIST binary in one stack, multiclass, regression); a cell 1.25 x (100 + 4) + 2 = 132 s.

    slice 1: train the binary stack 250 s (ends: its cells are ready), the CIFAR cell 132 (382), the MNIST cell
             does not fit (514), the multiclass target trains 470 - 382 - 2 = 86 s of its 250;
    slice 2: the MNIST cell 132, multiclass training its last 164 (296), its cell 132 (428), regression trains
             470 - 428 - 2 = 40 s;
    slice 3: regression trains its last 210, its cell 132 (342).
    Three slices, and no fewer can do: 3 x 250 + 4 x 132 = 1278 s of work is more than two slices' 2 x 468."""
    works = paper_piece_works(KKT_CELLS)
    model = CostModel.for_device("cuda", fixed_table(200.0, 100.0, 4.0))
    plan = plan_slices(works, model, 470.0)
    cell = SAFETY_FACTOR * 104.0 + SAFETY_SECONDS
    assert cell == 132.0
    assert plan.slices == [[KKT_CELLS[0]], [KKT_CELLS[1], KKT_CELLS[2]], [KKT_CELLS[3]]] and plan.unfit == {}
    assert plan.seconds == pytest.approx([250 + 132 + 86, 132 + 164 + 132 + 40, 210 + 132])
    groups = {w.cell_id: w.group for w in works}
    binary, multi, regr = groups[KKT_CELLS[0]], groups[KKT_CELLS[2]], groups[KKT_CELLS[3]]
    assert plan.training == [pytest.approx({binary: 250.0, multi: 86.0}), pytest.approx({multi: 164.0, regr: 40.0}),
                             pytest.approx({regr: 210.0})]
    keys = {w.cell_id: w.target_key for w in works}
    assert [plan.trained_in[keys[c]] for c in KKT_CELLS] == [0, 0, 1, 2]
    assert plan.finished_in(KKT_CELLS) == 2
    lower = math.ceil((3 * 250 + 4 * cell) / (470 - SAFETY_SECONDS))
    assert len(plan.slices) == lower == 3


def test_the_plan_before_training_in_pieces_trained_each_target_in_one_slice():
    """The same cells counted the old way (a target's whole training inside its first cell's slice): a 250 s
    training plus a 132 s cell is 1.25 x 304 + 2 = 382 s, so one target per slice, four slices: the pieces save one."""
    suite, _, sizes = paper_works()
    cells = [c for c in expand(suite) if c.cell_id in KKT_CELLS]
    whole = [cell_work(c, sizes[c.recipe.key()]) for c in cells]
    plan = plan_slices(whole, CostModel.for_device("cuda", fixed_table(200.0, 100.0, 4.0)), 470.0)
    assert [len(s) for s in plan.slices] == [1, 1, 1, 1]


def test_training_longer_than_a_slice_spreads_over_slices_and_progress_shortens_it():
    """One target whose training needs 1.25 x 1000 = 1250 s, one cell of 1.25 x 50 + 2 = 64.5 s, slices of 400 s:
    training fills 398, 398, 398 (1194), then 56 s and the cell in the fourth. Half the steps done already (a
    travelling state): 625 s left, 398 then 227 and the cell in the second."""
    suite, _, sizes = paper_works()
    (cell,) = [c for c in expand(suite) if c.cell_id == KKT_CELLS[2]]
    work = cell_work(cell, sizes[cell.recipe.key()], pieces=True)
    rate = 1000.0 / work.train
    table = {"train": {"fixed": 0.0, "rate": rate}, "attack": {"fixed": 50.0, "rate": 0.0},
             "evaluate": {"fixed": 0.0, "rate": 0.0}}
    plan = plan_slices([work], CostModel.for_device("cuda", table), 400.0)
    assert [len(s) for s in plan.slices] == [0, 0, 0, 1]
    assert [sum(t.values()) for t in plan.training] == pytest.approx([398.0, 398.0, 398.0, 56.0])
    assert plan.seconds[-1] == pytest.approx(56.0 + 64.5)
    half = plan_slices([work], CostModel.for_device("cuda", table), 400.0, progress={work.target_key: 0.5})
    assert [len(s) for s in half.slices] == [0, 1]
    assert [sum(t.values()) for t in half.training] == pytest.approx([398.0, 227.0])


def test_every_paper_cell_is_planned_once_and_no_slice_passes_its_budget() -> None:
    """Invariants on the whole suite with rates (no hand count): each cell once, each slice within the budget, a
    target's training summed over the slices equals its group's need, and no cell runs before its target is trained."""
    works = paper_piece_works()
    table = {"train": {"fixed": 10.0, "rate": 1e-13}, "attack": {"fixed": 5.0, "rate": 1e-14},
             "evaluate": {"fixed": 10.0, "rate": 1e-9}}
    model = CostModel.for_device("cuda", table)
    plan = plan_slices(works, model, 470.0)
    planned = [c for s in plan.slices for c in s]
    assert sorted(planned + list(plan.unfit)) == sorted(w.cell_id for w in works) and len(planned) == len(set(planned))
    assert all(s <= 470.0 + 1e-9 for s in plan.seconds)
    by_id = {w.cell_id: w for w in works}
    where = {c: i for i, ids in enumerate(plan.slices) for c in ids}
    for cid, i in where.items():
        w = by_id[cid]
        if w.pieces:
            assert plan.trained_in[w.target_key] <= i
    # each group's training over all slices is what it needs (the plan completes every cell that fits)
    need = training_seconds(model, [w for w in works if w.cell_id not in plan.unfit])
    totals: dict[str, float] = {}
    for t in plan.training:
        for g, sec in t.items():
            totals[g] = totals.get(g, 0.0) + sec
    assert need and totals.keys() == need.keys()
    for g, sec in need.items():
        assert totals[g] == pytest.approx(sec, rel=1e-9)


def test_the_cuda_prior_plans_no_paper_kkt_cell_its_attack_alone_is_too_long():
    """On the built-in pessimistic table a cell's 16 runs of 50,000 steps (about 6,500 s) fit no slice even though
    training no longer has to: the probe's numbers are what lets a plan schedule the paper's cells."""
    works = paper_piece_works(KKT_CELLS)
    plan = plan_slices(works, CostModel.for_device("cuda"), 470.0)
    assert plan.slices == [] and sorted(plan.unfit) == sorted(KKT_CELLS)
    rate = PRIORS["cuda"]["attack"]["rate"]
    assert min(plan.unfit.values()) > SAFETY_FACTOR * rate * min(w.attack for w in works)


def probe_rows() -> dict[str, Any]:
    """A probe's JSON (benchmarks/gpu/probe.py's fields) with round numbers."""
    return {"conditions": {"device": "cuda"},
            "trainer": [{"targets": 1, "dtype": "float64", "cuda_graph": True, "flops_per_step": 6e9,
                         "target_steps_per_second": 100.0},
                        {"targets": 4, "dtype": "float64", "cuda_graph": True, "flops_per_step": 24e9,
                         "target_steps_per_second": 200.0},
                        {"targets": 1, "dtype": "float64", "cuda_graph": False, "flops_per_step": 6e9,
                         "target_steps_per_second": 10.0},
                        {"targets": 1, "dtype": "float32", "cuda_graph": True, "flops_per_step": 6e9,
                         "target_steps_per_second": 1000.0}],
            "attack": [{"runs": 16, "m": 1000, "layers": [3072, 1000, 1000, 1], "precision": "tf32",
                        "batch": {"cuda_graph": True}, "seconds_per_step": 0.01},
                       {"runs": 8, "m": 1000, "layers": [3072, 1000, 1000, 1], "precision": "tf32",
                        "batch": {"cuda_graph": True}, "seconds_per_step": 0.009},
                       {"runs": 16, "m": 1000, "layers": [3072, 1000, 1000, 1], "precision": "float64",
                        "batch": {"cuda_graph": True}, "seconds_per_step": 0.1},
                       {"params": [16, "float32", True], "error": "out of memory"}]}


def test_a_cost_table_from_the_probe_by_hand(tmp_path):
    """train: the slowest graph row of float64, one target: 1/100 s per step over 6e9 / 6 = 1e9 units -> 1e-11 s per
    unit (the 4-target stack's 1/200 s over 1e9 per target is faster, the eager row is left out: slices capture).
    attack: 16 runs of TF32 with the graph, 0.01 s per step over 16 x 1000 x 4,073,000 units."""
    table = costs_from_probe(probe_rows())
    assert table["train"]["rate"] == pytest.approx(1e-11)
    assert table["attack"]["rate"] == pytest.approx(0.01 / (16 * 1000 * (3072 * 1000 + 1000 * 1000 + 1000)))
    assert table["evaluate"] == PRIORS["cuda"]["evaluate"]
    assert costs_from_probe(probe_rows(), attack_precision="float64")["attack"]["rate"] == pytest.approx(
        0.1 / (16 * 1000 * 4_073_000))
    assert costs_from_probe(probe_rows(), train_dtype="float32")["train"]["rate"] == pytest.approx(1e-12)
    path = tmp_path / "probe.json"
    path.write_text(json.dumps(probe_rows()))
    # --costs takes the probe's file as it is: float32 attacks read its TF32 rows
    assert read_costs(path, attack_dtype="float32")["attack"] == pytest.approx(table["attack"])
    assert read_costs(path, attack_dtype="float64")["attack"]["rate"] == pytest.approx(0.1 / (16 * 1000 * 4_073_000))
    # a precision the probe's budget did not reach is priced as a slower one it measured (pessimistic)
    no_f32 = {**probe_rows(), "trainer": [r for r in probe_rows()["trainer"] if r["dtype"] == "float64"]}
    assert costs_from_probe(no_f32, train_dtype="float32")["train"]["rate"] == pytest.approx(1e-11)
    no_tf32 = {**probe_rows(), "attack": [r for r in probe_rows()["attack"] if r.get("precision") != "tf32"]}
    assert costs_from_probe(no_tf32)["attack"]["rate"] == pytest.approx(0.1 / (16 * 1000 * 4_073_000))
    empty = {**probe_rows(), "attack": [probe_rows()["attack"][-1]]}
    with pytest.raises(ReconbenchError, match="no attack row of precision tf32"):
        costs_from_probe(empty)


def test_the_probe_derived_table_plans_the_four_kkt_targets():
    """With the table of a probe of round numbers (a paper target's 10^6 steps in 200 s, a TF32 attack
    step of 16 runs in 6 ms: 300 s of 16 runs on CIFAR-10), the four targets and their 16-run cells need a count of slices no
    smaller than their work divided by a slice: the plan reaches it or one more (first fit wastes at most a cell)."""
    works = paper_piece_works(KKT_CELLS)
    cifar = next(w for w in works if w.cell_id == KKT_CELLS[0])
    rows = probe_rows()
    rows["trainer"] = [{"targets": 1, "dtype": "float64", "cuda_graph": True, "flops_per_step": 6 * cifar.train / 1e6,
                        "target_steps_per_second": 1e6 / 200.0}]
    rows["attack"][0]["seconds_per_step"] = 0.006
    model = CostModel.for_device("cuda", costs_from_probe(rows))
    plan = plan_slices(works, model, 470.0)
    assert plan.unfit == {} and plan.finished_in(KKT_CELLS) == len(plan.slices) - 1
    work = sum(plan.seconds)
    assert math.ceil(work / (470.0 - SAFETY_SECONDS)) <= len(plan.slices) <= math.ceil(work / (470.0 - SAFETY_SECONDS)) + 1
    assert all(s <= 470.0 + 1e-9 for s in plan.seconds)


def test_select_of_the_kkt_cells_matches_the_readme_patterns():
    """benchmarks/gpu/README.md plans and runs the four KKT targets' first cells with these --only patterns."""
    suite, _, _ = paper_works()
    patterns = ["cifar-binary--haim_binary_kkt--gaussian--*", "mnist-binary--haim_binary_kkt--gaussian--*",
                "cifar-multiclass--multiclass_kkt--gaussian--*", "cifar-regression-wd--general_loss_wd--gaussian--*"]
    assert [c.cell_id for c in select(expand(suite), patterns)] == KKT_CELLS
    # and the float64 A/B subset: the same targets, init and seed, in TF32 and in float64
    ab = [c for c in select(expand(suite), ["*-ab-*"])]
    assert len(ab) == 4 and {c.run_spec(suite).dtype for c in ab} == {"float32", "float64"}
    assert {(c.target, c.init.label, c.seed, c.attack.search_runs) for c in ab} == {
        ("cifar-binary", "gaussian", 0, 4), ("mnist-binary", "gaussian", 0, 4)}


def test_plan_command_counts_the_stack_once_and_says_when_each_target_is_done(tmp_path, capsys, no_work):
    """`--plan` on CI's two-slice suite (two digits targets of one shape, trained in pieces as one stack), by hand:
    the stack's training is 1.25 x 10 = 12.5 s, a cell 1.25 x (3 + 1) + 2 = 7 s, slices of 35 - 10 = 25 s.
    Slice 1 trains the stack (12.5), runs digits-a's cell (19.5); digits-b's (26.5) waits for slice 2."""
    from _helpers.cli import run_cli

    suite = Path(__file__).resolve().parents[3] / "benchmarks" / "gpu" / "tiny-pieces.toml"
    costs = tmp_path / "costs.json"
    costs.write_text(json.dumps(fixed_table(10.0, 3.0, 1.0)))
    code, text, err = run_cli(["bench", str(suite), "--plan", "--deadline", "35", "--costs", str(costs), "--out",
                               str(tmp_path / "res")], capsys)
    assert code == 0, err
    assert "digits-a + digits-b 12s" in text
    assert "target digits-a: trained in pieces by slice 1, its 1 cell(s) done by slice 1" in text
    assert "target digits-b: trained in pieces by slice 1, its 1 cell(s) done by slice 2" in text
    assert "2 cell(s) in 2 slice(s), 0 that fit none" in text
