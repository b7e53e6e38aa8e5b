"""The expected slice plans in benchmarks/gpu/README.md and docs/slices.md are rendered from the planner and the
committed H100 probe (benchmarks/gpu/render_plan.py): a fresh render must match, and the README's claims about them
hold from the probe's JSON alone. The arithmetic H100 cost table must be the peak figures' (checked here from the
FLOP counts, not the module)."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest
from _helpers.examples import load_module
from _helpers.slicekit import paper_works

from reconbench.bench.cells import expand
from reconbench.bench.slice_arithmetic import arithmetic_costs
from reconbench.bench.slice_costs import run_step_seconds, target_training_seconds
from reconbench.records.cost_table import COST_TABLE_FILE

ROOT = Path(__file__).resolve().parents[3]


def load_render() -> ModuleType:
    return load_module('gpu_render_plan', ROOT / "benchmarks" / "gpu" / "render_plan.py")


def test_the_docs_plans_match_a_fresh_render(capsys):
    render = load_render()
    assert render.main(["--check"]) == 0, capsys.readouterr().out
    for doc in render.DOCS:   # every doc names the blocks it holds
        assert render.markers("kkt")[0] in (ROOT / doc).read_text()


def test_the_arithmetic_table_is_an_h100_at_40_percent_of_peak():
    """A paper CIFAR-10 target: 10^6 steps of 6 n P_piece FLOPs at 40% of the FP32 peak (66.9 TFLOP/s); a search
    run's step: about 12 m P FLOPs at 40% of the TF32 peak (494.7 TFLOP/s): the README's 131 s and 3.95 ms."""
    table = COST_TABLE_FILE.read(ROOT / "benchmarks" / "gpu" / "arithmetic_h100.json")
    assert table == arithmetic_costs(0.4)
    suite, _, sizes = paper_works()
    (cell,) = [c for c in expand(suite) if c.cell_id == "cifar-binary--haim_binary_kkt--gaussian--s0"]
    from reconbench.bench.slice_costs import cell_work

    work = cell_work(cell, sizes[cell.recipe.key()], pieces=True, dtype=suite.dtype, device="cuda")
    p = sizes[cell.recipe.key()].parameters
    assert p is not None and work.precision == "tf32"
    p_piece = p - 3072 * 1000 + 500 * 1000 / 3
    assert target_training_seconds(table, work) == pytest.approx(10**6 * 6 * 500 * p_piece / (0.4 * 66.9e12))
    assert round(target_training_seconds(table, work)) == 131
    assert 16 * run_step_seconds(table, work) == pytest.approx(16 * 12 * 1000 * p / (0.4 * 494.7e12))
    assert round(16 * run_step_seconds(table, work) * 1e3, 2) == 3.95


def probe_step(runs: int, precision: str = "tf32") -> float:
    """The committed probe's seconds per batched attack step (m = 1000, CIFAR-10 shape) with the CUDA graph."""
    data = json.loads((ROOT / "benchmarks" / "results" / "gpu" / "probe_h100.json").read_text())
    (row,) = [r for r in data["attack"] if r["runs"] == runs and r["precision"] == precision and r["batch"]["cuda_graph"]]
    return float(row["seconds_per_step"])


def test_at_the_probes_step_no_16_run_cifar_cell_fits_a_480_s_slice():
    """The README's claim, from the probe's JSON alone: a 16-run CIFAR-10 cell's attack (16 runs x 50,000 steps at
    the 16-run step) passes the 470 s a slice holds before any margin; the 4-run A/B cell, priced at the smallest
    measured count's whole step (8 runs), passes it with the margin. The render lists both as fitting no slice."""
    assert probe_step(16) * 50_000 > 470
    assert 1.25 * probe_step(8) * 50_000 + 2 > 470
    render = load_render()
    text = render.render("kkt")
    assert "fits no slice: cifar-binary--haim_binary_kkt--gaussian--s0" in text
    suite, _, sizes = paper_works()
    (ab,) = [c for c in expand(suite) if c.cell_id == "cifar-binary--haim_binary_kkt-ab-tf32--gaussian--s0"]
    from reconbench.bench.slice_costs import cell_work

    table = render.probe_table(suite)
    work = cell_work(ab, sizes[ab.recipe.key()], pieces=True, dtype=suite.dtype, device="cuda")
    assert work.runs == 4 and work.steps == 50_000
    # a 4-run step costs the 8-run one (per unit of P: the cell's network counts its parameters, the probe's rate
    # its 4,073,000 weights, 0.03% apart)
    assert run_step_seconds(table, work) * work.runs == pytest.approx(probe_step(8), rel=1e-3)


def test_the_next_slice_prices_mnist_at_the_probes_step_and_the_account_adds_up():
    """The README's next occasion from the H100 probe alone: the probe timed CIFAR-10's network only, and a smaller
    network's step is priced at the measured step of the nearest one no smaller (the H200 measured MNIST's 16-run
    step at 0.72x CIFAR-10's, not the weights' 0.44x), so MNIST's 16-run cell costs 16 x 50,000 steps at the probe's
    16-run step, which passes the 470 s a slice holds with the margin: none of its cells fits a slice."""
    from reconbench.bench.cells import select
    from reconbench.bench.slice_costs import cell_work

    assert 1.25 * probe_step(16) * 50_000 + 2 > 470
    render = load_render()
    text = render.render("next")
    for cell in ("mnist-binary--haim_binary_kkt--gaussian--s0", "mnist-binary--haim_binary_kkt-ab-tf32--gaussian--s0",
                 "mnist-binary--haim_binary_kkt-ab-float64--gaussian--s0"):
        assert f"fits no slice: {cell}" in text
    suite, _, sizes = paper_works()
    table = render.probe_table(suite)
    (mnist,) = [c for c in select(expand(suite), ["mnist-binary--haim_binary_kkt--gaussian--*"])]
    work = cell_work(mnist, sizes[mnist.recipe.key()], pieces=True, dtype=suite.dtype, device="cuda")
    assert work.runs == 16 and work.weights < 4_073_000
    assert run_step_seconds(table, work) * work.runs == pytest.approx(probe_step(16), rel=1e-14)
    rows = [line for line in render.account("next").splitlines() if line.startswith("| all")]
    (total,) = rows
    cols = [float(x) for x in total.strip("|").split("|")[1:]]
    assert sum(cols[:-1]) == pytest.approx(cols[-1], abs=0.5 * (len(cols) - 1))   # each column rounded to 1 s


@pytest.mark.parametrize(("name", "per_slice"), [("groups-carried-x2", 2), ("groups-x2", 4)])
def test_the_groups_of_the_cifar_binary_cell_are_what_the_pack_holds(name, per_slice):
    """The README's before and after: at twice the probe's step a group of the 16-run CIFAR-10 cell fits the 410 s
    a slice of 420 holds (8.4 ms / 2 x 50,000 steps with the margin and the card), the whole cell does not, and the
    4 files the call leaves to runs hold 16 MiB // 11.7 MiB = 1 image tensor each: 2 runs when a run carries its
    start, 4 when it does not; but slice 1 rebuilds the target's card from its final state, which then travels in
    its own file (so that later slices restore the card), and its group is what the other 3 files hold: 1 run, or
    3. So the cell takes 1 + ceil((16 - first) / per_slice) slices, each group in its own."""
    from reconbench.bench.cells import select
    from reconbench.bench.slice_costs import CostModel, cell_work, plan_slices

    render = load_render()
    deadline, patterns, options = render.PLANS[name]
    rules, carry, speed = render.rules_of(options)
    assert rules.run_files == 4 and speed == 2.0 and carry == (name == "groups-carried-x2")
    assert (16 * 2**20 - 64 * 1024) // (1000 * 3072 * 4) == 1
    suite, _, sizes = paper_works()
    cells = select(expand(suite), patterns)
    works = [cell_work(c, sizes[c.recipe.key()], pieces=True, dtype=suite.dtype, device="cuda", carry_starts=carry)
             for c in cells]
    plan = plan_slices(works, CostModel(prior=render.probe_table(suite).scaled(speed, evaluation=False)), deadline - 10,
                       render.progress_of(cells), rules)
    groups = [g for gs in plan.groups for g in gs]
    first = (4 - 1) // (2 if carry else 1)   # the files the rebuilt card's final state leaves, a run per 1 or 2
    assert plan.cards[0] == 1 and not any(plan.cards[1:])
    assert [g.runs for g in groups] == [tuple(range(first))] + [
        tuple(range(k, min(k + per_slice, 16))) for k in range(first, 16, per_slice)]
    assert [len(gs) for gs in plan.groups[:len(groups)]] == [1] * len(groups)
    assert all(g.bytes == len(g.runs) * (1000 * 3072 * 4 * (2 if carry else 1) + 16_000) for g in groups)
    assert 1.25 * probe_step(8) / speed * 50_000 + 2 < deadline - 10 < 1.25 * probe_step(16) / speed * 50_000 + 2 + 67
    text = render.render(name)
    assert f"2 cell(s) in {1 + -(-(16 - first) // per_slice) + 1} slice(s)" in text


def test_pooling_takes_the_cifar_binary_cells_in_one_slice_fewer():
    """The README's claim, at twice the probe's step: pooled (a plan on cuda, as a slice on a GPU, by default) the
    16-run cell's group of 4 runs in slice 2 and the 4-run A/B cell share one 8-run step (priced once: the margin
    on its fixed 5 s and 50,000 steps of the probe's 8-run row at twice its speed) and the cells take 5 slices;
    priced alone (``--no-cross-target``), 6 (slice 1's group is 3 runs: the rebuilt card's final state takes a
    file)."""
    render = load_render()
    for options in (opts for _, _, opts in render.PLANS.values()):
        assert render.rules_of(options)[0].cross_target == ("--no-cross-target" not in options)
    pooled, alone = render.render("groups-x2-cross"), render.render("groups-x2")
    assert "2 cell(s) in 5 slice(s)" in pooled and "2 cell(s) in 6 slice(s)" in alone
    step = 1.25 * (5.0 + 50_000 * probe_step(8) / 2)
    assert f"advances 8 tf32 search runs of 2 cells in one batched computation, priced at 8 runs: {step:.0f}s" in pooled
    assert "advances" not in alone and "cross-target (" not in alone


def test_the_readmes_stack_seconds_are_the_planners():
    """The README's seconds of training stacks (the weight-decay comparison's four 10-class targets as one stack
    against one at a time; mnist-binary + cifar-regression-wd) are ``training_seconds`` at the committed probe's
    rates by stack size, set-ups aside (each stack, or each target alone, pays the table's fixed seconds once)."""
    from reconbench.bench.cells import select
    from reconbench.bench.slice_costs import CostModel, cell_work, training_seconds
    from reconbench.bench.suite import load_suite

    render = load_render()
    suite = load_suite("paper")
    table = render.probe_table(suite)
    model, setup = CostModel(prior=table), table.train.fixed

    def works(patterns: list[str]) -> list:
        cells = select(expand(suite), patterns)
        sizes = render.sizes_of(cells)
        return [cell_work(c, sizes[c.recipe.key()], pieces=True, dtype=suite.dtype, device="cuda") for c in cells]

    wd = works(["cifar-multiclass--multiclass_kkt--gaussian--s0",
                "cifar-multiclass@weight_decay=*--multiclass_kkt--gaussian--s0"])
    assert len(wd) == 4 and len({w.group for w in wd}) == 1
    (stacked,) = training_seconds(model, wd).values()
    alone = sum(sum(training_seconds(model, [w]).values()) - setup for w in wd)
    (pair,) = training_seconds(model, works(["mnist-binary--haim_binary_kkt--gaussian--s0",
                                             "cifar-regression-wd--general_loss_wd--gaussian--s0"])).values()
    text = " ".join((ROOT / "benchmarks" / "gpu" / "README.md").read_text().split())
    assert (f"planned at {stacked - setup:.0f} s of training ({stacked:.0f} s with the set-up) where one at a time "
            f"they would take {alone:.0f} s") in text
    assert f"at the {pair - setup:.0f} s of two alone" in text
    assert stacked - setup < 0.65 * alone   # the 4-target rate: 1.64x the one-target rate
