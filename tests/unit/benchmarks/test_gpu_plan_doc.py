"""The expected slice plans in benchmarks/gpu/README.md and docs/slices.md are rendered from the planner and the
arithmetic H100 cost table (benchmarks/gpu/render_plan.py), and that table is the arithmetic's: a fresh render
must match, and the table's rates must be the peak figures' (checked here from the FLOP counts, not the module)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
from _helpers.slicekit import paper_works

from reconbench.bench.cells import expand
from reconbench.bench.slice_arithmetic import arithmetic_costs
from reconbench.bench.slice_costs import run_step_seconds, target_training_seconds
from reconbench.records.cost_table import COST_TABLE_FILE

ROOT = Path(__file__).resolve().parents[3]


def load_render() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_render_plan", ROOT / "benchmarks" / "gpu" / "render_plan.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_render_plan"] = module
    spec.loader.exec_module(module)
    return module


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


def test_the_kkt_plan_at_40_percent_cannot_take_three_slices_in_any_order():
    """The README's claim: the work of the four KKT cells' plan (every slice's seconds, idle and the pack's reserve
    aside, less the set-ups of pieces beyond one per group and the cards rebuilt, which another order might save)
    passes three slices."""
    render = load_render()
    rows = [line for line in render.account("kkt").splitlines() if line.startswith("| all")]
    (total,) = rows
    cols = [float(x) for x in total.strip("|").split("|")[1:]]
    training, setups, _cards, attack, evaluate, fixed, margin, reserve, idle, total = cols
    assert training + setups + _cards + attack + evaluate + fixed + margin + reserve + idle == pytest.approx(total)
    groups = 3
    least = training + groups * 15.0 + attack + evaluate + fixed + margin
    assert setups >= groups * 15.0 and least > 3 * (480 - 10 - 2)
