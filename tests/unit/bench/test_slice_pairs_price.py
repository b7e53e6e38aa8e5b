"""A slice that packs a cell takes its figure pairs after its record (``figure_pairs.pairs_from_results``, in the
pack): the planner and the executor price that apart from the evaluation (``slice_costs.FIGURE_PAIRS``, per unit of
the evaluation), because neither price of the evaluation holds it: the probe's ``evaluation`` case takes no pairs
(checked by running it with the pairs' functions made to fail), and a slice's measured evaluation row ends with the
record. The price lies above what the committed timing measured, and a group of runs (written, not evaluated) pays
none."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from _helpers.examples import load_module
from _helpers.slicekit import paper_works

from reconbench.bench.cells import expand
from reconbench.bench.slice_costs import (
    FIGURE_PAIRS,
    SAFETY_FACTOR,
    CostModel,
    cell_work,
    group_share,
    pairs_seconds,
)
from reconbench.leaderboard import figure_pairs

ROOT = Path(__file__).resolve().parents[3]
CIFAR = "cifar-binary--haim_binary_kkt--gaussian--s0"
TABLE = {"train": {"fixed": 10.0, "rate": 1e-13}, "attack": {"fixed": 5.0, "rate": 1e-14},
         "evaluate": {"fixed": 10.0, "rate": 1e-9}}


def _cifar(pieces: bool):
    suite, _, sizes = paper_works()
    (cell,) = [c for c in expand(suite) if c.cell_id == CIFAR]
    return cell_work(cell, sizes[cell.recipe.key()], pieces=pieces, dtype=suite.dtype, device="cuda")


def test_a_packed_cell_pays_its_figure_pairs_per_unit_of_its_evaluation_and_an_unpacked_one_none():
    packed, alone = _cifar(True), _cifar(False)
    units = 16 * 1000 * 500 * 3072   # runs x m x n x pixels, counted here from the suite's numbers
    assert packed.evaluate == alone.evaluate == units
    assert (packed.pairs, alone.pairs) == (units, 0.0)
    model = CostModel.for_device("cuda", TABLE)
    added = model.estimate(packed, False) - model.estimate(replace(packed, pairs=0.0), False)
    assert added == pytest.approx(SAFETY_FACTOR * 6e-11 * units, rel=1e-12)   # the margin on 1.47 s
    assert model.estimate(alone, False) == model.estimate(replace(packed, pairs=0.0), False)
    # a group of its runs is written, not evaluated: no evaluation and no pairs (the merge takes them)
    share = group_share(packed, 4)
    assert (share.evaluate, share.pairs, pairs_seconds(share)) == (0.0, 0.0, 0.0)


def test_the_price_lies_above_every_timed_repeat_of_a_paper_cell():
    data = json.loads((ROOT / "benchmarks" / "results" / "gpu" / "figure_pairs_cpu.json").read_text())
    assert (data["runs"], data["m"], data["n"], data["pixels"]) == (16, 1000, 500, 3072)
    assert data["units"] == _cifar(True).pairs and data["torch_threads"] == 1
    assert data["repeats"] and all(FIGURE_PAIRS.seconds(data["units"]) >= r["total"] for r in data["repeats"])
    assert FIGURE_PAIRS.fixed == 0.0


def test_the_probes_evaluation_case_takes_no_figure_pairs(monkeypatch):
    """The probe's ``evaluation`` row is the evaluate phase's price on a GPU slice: were the pairs taken in it, the
    planner would count them twice. Run at its tiny size with the pairs' functions failing, it still finishes."""
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the probe's evaluation case took figure pairs")

    for name in ("take_pairs", "pairs_from_results", "subset_pairs"):
        monkeypatch.setattr(figure_pairs, name, refuse)
    probe = load_module("gpu_probe_pairs", ROOT / "benchmarks" / "gpu" / "probe.py")
    row = probe.evaluation_case(probe.SIZES["tiny"])
    assert row["seconds"] > 0 and row["evaluations"] == 3 and row["units"] > 0
