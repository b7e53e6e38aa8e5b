"""The record builders of tests/_helpers/recordkit.py make files that the strict doors read: what a test builds with
them is a file reconbench could have written, not a dict that only the test's reader accepts."""

from __future__ import annotations

import json

import pytest
from _helpers.recordkit import (
    board_results,
    cell_record,
    invocation,
    model_card,
    run_result,
    selection,
    target_info,
    train_metrics,
    write_results,
)

from reconbench.bench.cells import expand
from reconbench.bench.suite import load_suite
from reconbench.data import ProblemSpec
from reconbench.errors import ReconbenchError
from reconbench.records import CARD_FILE, CELL_FILE, INVOCATION_FILE, RUN_RESULT_FILE
from reconbench.targets.recipe import TargetRecipe, TrainSpec

SUITE = """\
[suite]
name = "built"
seeds = [0, 1]

[targets.bin]
dataset = "digits"
task = "binary"
n_per_class = 3
widths = [8]
steps = 10

[attacks.a]
attack = "toy_identity"

[inits.gaussian]

[[grid]]
targets = ["bin"]
attacks = ["a"]
"""

RECIPE = TargetRecipe(problem=ProblemSpec(dataset="digits", task="binary", n_per_class=3), model={"widths": [8]},
                      train=TrainSpec(steps=10))


def written_and_read(door, record, path):  # type: ignore[no-untyped-def]
    path.write_text(json.dumps(record.to_dict()))
    return door.read(path)


@pytest.fixture
def suite(tmp_path, toy_attack_registered):  # type: ignore[no-untyped-def]
    path = tmp_path / "built.toml"
    path.write_text(SUITE)
    return load_suite(path)


def cells(suite):  # type: ignore[no-untyped-def]
    out = []
    for cell in expand(suite):
        sel = {name: selection({"good_count": 2.0 + cell.seed, "reconstructed_calibrated": 1.0 + cell.seed},
                               null_spread={"reconstructed_calibrated": {"mean": 0.5, "max": 1.0}}, attack_loss=0.1,
                               run=None if name == "pool" else 0, oracle=name == "oracle")
               for name in ("pool", "blind", "oracle")}
        metrics = train_metrics(final_loss=0.01, test_error=0.25, certificate={"ratio": 0.2})
        out.append(cell_record(cell, suite, sel, target=target_info(cell, n_train=6, margins=(0.5, 2.0),
                                                                    metrics=metrics)))
    return out


def test_cells_and_invocations_read_back_unchanged_through_their_doors(suite, tmp_path):
    built = cells(suite)
    res = write_results(tmp_path / "res", built, [invocation(0, "reconbench bench built.toml", 5.0, status="completed")])
    for rec in built:
        back = CELL_FILE.read(res / "cells" / f"{rec.cell_id}.json")
        assert back == rec and back.to_dict() == rec.to_dict()
        assert back.target.metrics.stationarity_ratio == 0.2 and back.target.margin_min == 0.5
    assert INVOCATION_FILE.read(res / "invocations" / "000.json").elapsed_seconds == 5.0


def test_a_board_rendered_from_built_cells_aggregates_their_numbers(suite, tmp_path):
    res = write_results(tmp_path / "res", cells(suite), [invocation(0, "reconbench bench built.toml", 5.0)])
    board = board_results(suite, res, tmp_path / "lb")
    (row,) = board.table("pool")
    stat = row.metrics["papers' protocol"]
    # two seeds: good_count 2 and 3, mean 2.5, sample sd sqrt(0.5), computed here independently of the tables
    assert stat.values == [2.0, 3.0] and stat.mean == 2.5 and stat.sd == pytest.approx(0.5 ** 0.5, rel=1e-12)
    assert sorted(row.cells) == sorted(c.cell_id for c in expand(suite))


def test_a_run_result_and_a_card_read_back_through_their_doors(tmp_path):
    metrics = train_metrics(final_loss=0.02, train_error=0.0, test_error=0.5)
    result = run_result("toy_identity", {"good_count": 3.0}, recipe=RECIPE, metrics=metrics,
                        runs=[{"run": 0, "final_loss": 0.1, "stopped": "completed"}])
    back = written_and_read(RUN_RESULT_FILE, result, tmp_path / "result.json")
    assert back.kind == "reconbench-result/1" and back.target.recipe == RECIPE
    assert back.target.recipe_key == RECIPE.key() and back.evaluation.summary == {"good_count": 3.0}
    card = written_and_read(CARD_FILE, model_card(RECIPE, metrics), tmp_path / "card.json")
    assert card.recipe == RECIPE and card.metrics.test_error == 0.5 and card.recipe_key == RECIPE.key()


def test_a_built_record_edited_by_hand_is_refused_by_its_door(suite, tmp_path):
    rec = cells(suite)[0].to_dict()
    rec["seed"] = "zero"
    path = tmp_path / "cell.json"
    path.write_text(json.dumps(rec))
    with pytest.raises(ReconbenchError, match="seed"):
        CELL_FILE.read(path)
