"""`--plan` pools search runs where the slice it plans would: by default on a GPU (``--device cuda``), never on a CPU,
and never with ``--no-cross-target`` (a plan that priced a GPU slice's cells alone would show slices it will not run)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _helpers.cli import run_cli

from reconbench.cli.bench_plan import default_cross_target

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "benchmarks" / "gpu" / "tiny.toml"
POOLED = "cross-target (the default on cuda"


@pytest.mark.parametrize(("asked", "deadline", "device", "expected"), [
    (None, 60.0, "cuda", True), (None, 60.0, "cuda:1", True), (None, 60.0, "cpu", False), (None, None, "cuda", False),
    (False, 60.0, "cuda", False), (True, 60.0, "cpu", True), (True, None, "cpu", True)])
def test_the_default(asked, deadline, device, expected):
    assert default_cross_target(asked, deadline, device) is expected


@pytest.mark.parametrize(("options", "pooled"), [
    (["--device", "cuda"], True), (["--device", "cuda", "--no-cross-target"], False), (["--device", "cpu"], False),
    (["--device", "cpu", "--cross-target"], True)])
def test_the_plan_says_whether_it_pools(tmp_path, capsys, no_work, options, pooled):
    costs = tmp_path / "costs.json"
    costs.write_text(json.dumps({"train": {"fixed": 4.0, "rate": 0.0}, "attack": {"fixed": 3.0, "rate": 0.0},
                                 "evaluate": {"fixed": 1.0, "rate": 0.0}}))
    code, text, err = run_cli(["bench", str(TINY), "--plan", "--deadline", "35", "--costs", str(costs), "--out",
                               str(tmp_path / "res"), *options], capsys)
    assert code == 0, err
    assert (POOLED in text) is pooled
