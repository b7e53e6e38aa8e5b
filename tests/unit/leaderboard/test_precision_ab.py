"""The float64 A/B check of a GPU board (reconbench/leaderboard/precision_ab.py): cells that differ only in their
attack's precision are paired, and their count and calibrated headline agree when they differ by no more than the
held-out null's range. Built from a published CPU cell, copied as a float64 and a TF32 GPU cell."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from reconbench.leaderboard.cost import board_records
from reconbench.leaderboard.precision_ab import ab_lines, ab_pairs
from reconbench.records import CellRecord

BOARD = Path(__file__).resolve().parents[3] / "leaderboards" / "ci"
CELL = "digits-binary--haim_binary_kkt--gaussian--s0"


def gpu_cell(raw: dict[str, Any], cell_id: str, matmul: str, shift: float = 0.0) -> CellRecord:
    rec = copy.deepcopy(raw)
    rec["cell_id"] = cell_id
    rec["spec"] = {**rec["spec"], "dtype": "float64" if matmul == "float64" else "float32"}
    rec["provenance"] = {**rec["provenance"], "device": "cuda",
                         "precision": {"training_dtype": None, "attack_matmul": matmul,
                                       "loss_accumulation_dtype": rec["spec"]["dtype"], "evaluation_dtype": "float64"}}
    if matmul != "float64":
        rec["attack"] = {**rec["attack"], "config": {**rec["attack"]["config"], "tf32": True}}
    summary = rec["selections"]["pool"]["summary"]
    summary["reconstructed"] = summary["reconstructed"] + shift
    return CellRecord.from_dict(rec)


def null_range(raw: dict[str, Any], key: str) -> float:
    mean, top = raw["selections"]["pool"]["null"]["spread"][key]   # a slim entry keeps [mean, largest]
    return float(top) - float(mean)


def test_a_cpu_board_has_no_pair_and_no_section():
    records = board_records(BOARD)
    assert records and ab_pairs(records) == [] and ab_lines(records) == []


def test_a_tf32_cell_agrees_within_the_null_range_and_not_beyond():
    raw = json.loads((BOARD / "cells" / f"{CELL}.json").read_text())
    width = null_range(raw, "reconstructed")
    assert width > 0
    for shift, agree in ((width, True), (width + 1.0, False), (-width - 1.0, False)):
        records = {"a": gpu_cell(raw, "a", "float64"), "b": gpu_cell(raw, "b", "tf32", shift)}
        (pair,) = ab_pairs(records)
        assert (pair.reference, pair.other, pair.other_precision) == ("a", "b", "tf32")
        value = pair.values["reconstructed"]
        assert value.tolerance == width and value.other - value.reference == shift
        assert value.agree is agree and pair.agree is agree
        text = "\n".join(ab_lines(records))
        assert "Precision A/B" in text and ("1 of 1 pair(s) agree" if agree else "0 of 1 pair(s) agree") in text


def test_cells_that_differ_in_more_than_precision_are_not_paired():
    raw = json.loads((BOARD / "cells" / f"{CELL}.json").read_text())
    other = copy.deepcopy(raw)
    other["seed"] = 7
    records = {"a": gpu_cell(raw, "a", "float64"), "b": gpu_cell(other, "b", "tf32")}
    assert ab_pairs(records) == []
