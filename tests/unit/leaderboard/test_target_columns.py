"""Numbers of each cell's target as board columns (``[leaderboard] target_columns``): the regime residual and the
margins beside the attack's numbers, over seeds in the main tables and along a comparison's axis."""

from __future__ import annotations

import json
import statistics

import pytest
from _helpers.recordkit import cell_record, invocation, selection, target_info, train_metrics, write_results
from scipy import stats

from reconbench.bench.cells import expand
from reconbench.bench.runner import margin_range
from reconbench.bench.suite import load_suite
from reconbench.errors import ReconbenchError
from reconbench.leaderboard.render import build_leaderboard
from reconbench.leaderboard.verify import check_tables
from reconbench.records import CellRecord
from reconbench.records.target_quantities import TARGET_QUANTITIES, target_value

SUITE = """\
[suite]
name = "lengths"
description = "made-up numbers"
seeds = [0, 1, 2]
seed_targets = true

[leaderboard]
target_columns = ["theta_residual", "margin_min", "margin_set_size"]

[targets.short]
dataset = "digits"
task = "binary"
n_per_class = 3
widths = [8]
steps = 10

[targets.long]
dataset = "digits"
task = "binary"
n_per_class = 3
widths = [8]
steps = 100

[attacks.a]
attack = "toy_identity"

[inits.gaussian]

[[grid]]
targets = ["short", "long"]
attacks = ["a"]

[comparisons.steps]
target = "short"
axis = "steps"
values = [10, 100]
attacks = ["a"]
inits = ["gaussian"]
"""

# per target and seed: (theta residual, least margin, margin set); the long target sits nearer a KKT point
TARGETS = {"short": [(0.9, 1.0, [0, 1]), (0.8, 1.5, [0]), (0.95, 0.5, [0, 1, 2])],
           "long": [(0.5, 4.0, [0]), (0.4, 5.0, [0, 1]), (0.6, 4.5, [0])]}


def record(cell, suite) -> CellRecord:
    residual, least, margin_set = TARGETS[cell.target][cell.seed]
    sel = {name: selection({"reconstructed_calibrated": float(cell.seed), "good_count": 1.0},
                           null_spread={"reconstructed_calibrated": {"mean": 0.0, "max": 0.0}}, attack_loss=0.5,
                           run=None if name == "pool" else 0, oracle=name == "oracle")
           for name in ("pool", "blind", "oracle")}
    metrics = train_metrics(final_loss=0.01, certificate={
        "ratio": 0.9, "regime": {"theta": {"residual": residual, "margin_set": margin_set}}})
    return cell_record(cell, suite, sel, target=target_info(cell, n_train=6, margins=(least, least + 1.0),
                                                           metrics=metrics))


@pytest.fixture
def board(tmp_path, toy_attack_registered):
    path = tmp_path / "lengths.toml"
    path.write_text(SUITE)
    suite = load_suite(path)
    res = write_results(tmp_path / "res", [record(cell, suite) for cell in expand(suite)],
                        [invocation(0, "reconbench bench lengths.toml", 10.0, status="completed")])
    out = tmp_path / "lb"
    return suite, out, build_leaderboard(suite, res, out, command="reconbench leaderboard lengths", figures=False)


def t_interval(values: list[float]) -> tuple[float, float]:
    mean, half = statistics.fmean(values), stats.t.ppf(0.975, len(values) - 1) * statistics.stdev(values)
    return mean - half / len(values) ** 0.5, mean + half / len(values) ** 0.5


def test_target_columns_follow_the_default_columns_in_the_suite_order(board):
    suite, _, _ = board
    names = [c.name for c in suite.leaderboard.columns]
    assert names[-3:] == ["θ residual (NNLS)", "least training margin", "margin set size"]
    assert [c.source for c in suite.leaderboard.columns[-3:]] == ["target"] * 3


def test_main_rows_show_each_targets_numbers_over_seeds_without_a_null(board):
    _, out, data = board
    for sel in ("pool", "blind", "oracle"):   # a number of the target: the same under every selection
        rows = {r["target"]: r for r in data["tables"][sel]}
        for name, per_seed in TARGETS.items():
            residuals = [p[0] for p in per_seed]
            m = rows[name]["metrics"]["θ residual (NNLS)"]
            assert m["values"] == residuals and m["mean"] == pytest.approx(statistics.fmean(residuals))
            lo, hi = t_interval(residuals)
            assert m["ci95"] == pytest.approx([max(lo, 0.0), min(hi, 1.0)])   # a residual lies in [0, 1]
            assert m["null"] is None
            assert rows[name]["metrics"]["margin set size"]["values"] == [float(len(p[2])) for p in per_seed]
            assert rows[name]["metrics"]["least training margin"]["values"] == [p[1] for p in per_seed]
    assert check_tables(out) == []


def test_the_comparison_shows_the_target_numbers_along_its_axis(board):
    _, out, data = board
    comp = data["comparisons"]["steps"]
    assert comp["metrics"][-3:] == ["θ residual (NNLS)", "least training margin", "margin set size"]
    pool = next(r for r in comp["rows"] if r["selection"] == "pool")
    assert [v["θ residual (NNLS)"]["mean"] for v in pool["values"]] == pytest.approx(
        [statistics.fmean(p[0] for p in TARGETS[t]) for t in ("short", "long")])
    readme = (out / "README.md").read_text()
    section = readme[readme.index("**θ residual (NNLS) ↓** (of the attacked targets"):]
    table = section[:section.index("\n\n", section.index("|"))]
    assert "| selection" not in table and table.count("\n| a ") == 1   # one row: the targets, not per selection
    assert "steps = 10 " in table and "steps = 100 " in table


def test_an_edited_target_number_fails_the_table_check(board):
    _, out, data = board
    data["tables"]["pool"][0]["metrics"]["θ residual (NNLS)"]["values"][0] += 0.1
    data.pop("dropped_submissions", None)
    (out / "results.json").write_text(json.dumps(data))
    assert any("θ residual (NNLS)" in p for p in check_tables(out))


@pytest.mark.parametrize(("entry", "message"), [
    ('target_columns = ["theta_resid"]', "'theta_resid' is not a number a cell records of its target; one of: "
                                         "theta_residual"),
    ('target_columns = ["margin_min", "margin_min"]', "'margin_min' is given twice"),
])
def test_a_target_column_that_is_not_recorded_is_refused_by_name(tmp_path, entry, message):
    path = tmp_path / "bad.toml"
    path.write_text(SUITE.replace('target_columns = ["theta_residual", "margin_min", "margin_set_size"]', entry))
    with pytest.raises(ReconbenchError, match=message.replace("(", r"\(").replace("[", r"\[")):
        load_suite(path)


def test_target_quantities_read_the_card_and_are_none_where_it_lacks_them():
    full = CellRecord.from_dict({"target": {"name": "t", "margin_min": -0.5, "margin_max": 2.0, "train_metrics": {
        "final_loss": 0.25, "certificate": {"regime": {"theta": {"residual": 0.3, "margin_set": [1, 4]},
                                                       "learned": {"residual": 0.2}}}}}}).target
    assert {name: target_value(full, name) for name in TARGET_QUANTITIES} == {
        "theta_residual": 0.3, "learned_residual": 0.2, "margin_set_size": 2.0, "margin_min": -0.5,
        "margin_max": 2.0, "train_loss": 0.25}
    old = CellRecord.from_dict({"target": {"name": "t", "train_metrics": {"certificate": {"ratio": 0.9}}}}).target
    assert all(target_value(old, name) is None for name in TARGET_QUANTITIES)


@pytest.mark.parametrize("margins", [[3.0, -1.5, 2.25], [7.0], []])
def test_a_cell_records_the_least_and_largest_margin_of_its_card(margins):
    expected = {"margin_min": min(margins), "margin_max": max(margins)} if margins else {}
    assert margin_range(margins) == expected
    assert margin_range(None) == {}



def test_a_cell_shows_its_cards_least_and_largest_margin(tmp_path):
    from reconbench.bench.cells import Cell
    from reconbench.bench.runner import obtain_target
    from reconbench.targets.recipe import TargetRecipe

    recipe = TargetRecipe.from_dict({"problem": {"dataset": "digits", "task": "binary", "n_per_class": 3},
                                     "family": "mlp", "model": {"widths": [8]}, "train": {"steps": 20}})
    cell = Cell("t--a--i--s0", "t", recipe, None, None, 0, ("grid",))  # type: ignore[arg-type]
    target = obtain_target(cell, tmp_path / "out", str(tmp_path / "cache"), None, quiet=True)
    assert target.error is None and target.card is not None
    margins = target.card.data["metrics"]["margins"]
    assert (target.info["margin_min"], target.info["margin_max"]) == (min(margins), max(margins))


def test_verify_holds_a_cells_margins_to_its_card():
    from reconbench.leaderboard.verify import margin_problems

    rec = CellRecord.from_dict({"cell_id": "c", "target": {"name": "t", "margin_min": 0.5, "margin_max": 3.0}})
    assert margin_problems("c", rec, [3.0, 0.5, 1.0], "k.json") == []
    assert margin_problems("c", rec, [3.0, 0.25, 1.0], "k.json") == [
        "cell c: target margin_min is 0.5, its model card k.json gives 0.25; restore the cell or the card"]
    assert margin_problems("c", rec, None, "k.json") == [
        "cell c: target margin_min is 0.5, its model card k.json gives no margins; restore the cell or the card",
        "cell c: target margin_max is 3.0, its model card k.json gives no margins; restore the cell or the card"]
    old = CellRecord.from_dict({"cell_id": "c", "target": {"name": "t"}})   # recorded before the margins were
    assert margin_problems("c", old, [1.0], "k.json") == []
