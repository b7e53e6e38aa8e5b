"""benchmarks/gpu/merge_cost.py times the merge's evaluation of a cell with the functions the runner's ``finish``
calls: on the embedded digits (a tiny suite), its JSON holds one case per run count, the pooled evaluation scores
the synthetic pool, the bars are drawn (every run has the same labels), and the units are the planner's."""

from __future__ import annotations

import json
from pathlib import Path

from _helpers.examples import load_module

ROOT = Path(__file__).resolve().parents[3]


def test_merge_cost_on_digits(tmp_path, capsys):
    merge = load_module("gpu_merge_cost", ROOT / "benchmarks" / "gpu" / "merge_cost.py")
    out = tmp_path / "merge.json"
    assert merge.main([str(out), "--suite", str(ROOT / "benchmarks" / "gpu" / "tiny.toml"), "--cell",
                       "digits-binary--haim_binary_kkt--gaussian--s0", "--runs", "1", "2", "--m", "8"]) == 0
    data = json.loads(out.read_text())
    assert [c["runs"] for c in data["cases"]] == [1, 2]
    n = data["n"]
    for case in data["cases"]:
        assert case["candidates"] == case["runs"] * 8
        assert case["units"] == case["runs"] * 8 * n * 64   # digits: 8 x 8 pixels, as slice_costs counts them
        assert case["evaluations"] == (3 if case["runs"] > 1 else 1)
        assert case["bars"] is True
        assert case["seconds"]["total"] > 0 and case["pooled_summary"]["matched_images"] is not None
    assert "runs" in capsys.readouterr().out
