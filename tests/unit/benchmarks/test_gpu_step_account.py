"""The step account (benchmarks/gpu/step_account.py) at a small m on the CPU: one step's products carry exactly the
FLOPs of the closed form (cell_time_account.step_flops, written from the engine's equations, not from a profile),
the list is the same at another batch size, and the pricing of single operations is their closed form."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _helpers.examples import load_module

pytestmark = pytest.mark.usefixtures("one_torch_thread")

BENCH = Path(__file__).resolve().parents[3] / "benchmarks"


def test_one_steps_products_are_the_closed_form_flops_and_the_list_scales_with_the_runs(tmp_path):
    account = load_module("gpu_step_account", BENCH / "gpu" / "step_account.py")
    flops = load_module("cell_time_account_for_test", BENCH / "cell_time_account.py").step_flops
    out = tmp_path / "account.json"
    m = 8
    # R differs from every other dimension of the step (1, 3 layers, 6, m, 1000, 3072), so that it reads as R
    account.main([str(out), "--m", str(m), "--runs", "5", "--check-runs", "7", "--model-runs", "5", "16"])
    data = json.loads(out.read_text())
    assert data["check_runs"]["same_operations"] and data["dots"] == "bmm"
    for runs in (5, 16):
        rows = data["accounts"][str(runs)]["rows"]
        products = [r for r in rows if r["kind"] == "product"]
        dots = [r for r in products if r["shapes"][0][1:2] == [1] and r["shapes"][1][2:] == [1]]
        gemms = sum(r["flops"] for r in products if r not in dots)
        assert gemms == flops([3072, 1000, 1000, 1], m, runs)["total"]
        assert len(dots) >= 2 and all(r["bound"] in ("bytes", "floor") for r in dots)
        assert not any(r["op"] == "aten::_to_copy" for r in rows)   # no dtype conversion in the step
        total = data["accounts"][str(runs)]["total"]
        assert total["h100_tf32_seconds"] == pytest.approx(sum(r["h100_tf32_seconds"] for r in rows), rel=1e-12)
    fit = data["probe_fit"]   # the committed H100 probe, fitted beside the model
    assert {line["precision"] for line in fit["lines"]} == {"tf32", "float32", "float64"}
    assert fit["dot_products"]["elements_read_per_run"] > 0


def test_operations_are_priced_by_their_closed_forms():
    account = load_module("gpu_step_account", BENCH / "gpu" / "step_account.py")
    mm = account.price("aten::mm", [[40, 30], [30, 20], [40, 20]])
    assert mm["kind"] == "product" and mm["flops"] == 2 * 40 * 30 * 20
    assert mm["bytes"] == 4 * (40 * 30 + 30 * 20 + 40 * 20)
    bmm = account.price("aten::baddbmm_", [[5, 4, 3], [5, 4, 6], [5, 6, 3], [], []])
    assert bmm["flops"] == 2 * 5 * 4 * 6 * 3 and bmm["bytes"] == 4 * (2 * 60 + 120 + 90)
    assert account.price("aten::mul", [[7, 9], [7, 9], [7, 9]])["bytes"] == 4 * 3 * 63     # out=: 2 read, 1 written
    assert account.price("aten::mul", [[7, 9], [7, 9]])["bytes"] == 4 * 3 * 63            # a new result
    assert account.price("aten::add_", [[7, 9], [7, 9], []])["bytes"] == 4 * 3 * 63        # in place
    assert account.price("aten::copy_", [[7, 9], [7, 9], []])["bytes"] == 4 * 2 * 63
    row = {"flops": 0, "bytes": 1000}
    assert account.model_seconds(row, 400e12) == account.H100["kernel_floor_s"]          # a tiny kernel: the floor
    big = {"flops": 400e12 * 1e-3, "bytes": 10}
    assert account.model_seconds(big, 400e12) == pytest.approx(1e-3)
