"""Leaderboards: aggregation and sorting from cell JSONs, marks, header, figures, RobustBench re-scoring."""

from __future__ import annotations

import json
import statistics
import textwrap
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
from _helpers.cli import run_cli
from _helpers.recordkit import cell_record, invocation, selection, write_results
from _helpers.suitekit import TOY_SUITE

from reconbench import hookimpl, plugins
from reconbench.bench.cells import expand
from reconbench.bench.runner import run_suite
from reconbench.bench.suite import load_suite
from reconbench.errors import DataError
from reconbench.interfaces import Metric
from reconbench.leaderboard.manifest import MANIFEST_NAME, write_manifest
from reconbench.leaderboard.render import build_leaderboard
from reconbench.leaderboard.tables import Published, Stat, fmt_stat, target_rows, value_range
from reconbench.leaderboard.verify import check_tables, rescore_cell, stored_cells
from reconbench.provenance import write_json
from reconbench.records import CellRecord, StoredEvaluation

REPO = Path(__file__).resolve().parents[3]

SUITE = """\
[suite]
name = "synthetic"
description = "made-up numbers"
seeds = [0, 1, 2]

[targets.bin]
dataset = "digits"
task = "binary"
n_per_class = 3
widths = [8]
steps = 10

[attacks.a]
attack = "toy_identity"
[attacks.b]
attack = "toy_identity"

[inits.gaussian]
[inits.gt]
regime = "gaussian"

[[grid]]
targets = ["bin"]
attacks = ["a", "b"]

[comparisons.wd]
target = "bin"
axis = "weight_decay"
values = [0.0, 0.01]
attacks = ["a"]
inits = ["gaussian"]
seeds = [0]
"""

# reconstructed counts per (attack, init) and seed: pool; blind and oracle use fixed offsets
COUNTS = {
    ("a", "gaussian"): [3, 5, 4],
    ("a", "gt"): [9, 9, 8],
    ("b", "gaussian"): [6, 7, 8],
    ("b", "gt"): [1, 0, 2],
}
COLLAPSE = {("a", "gaussian"): 0.5, ("a", "gt"): 0.1, ("b", "gaussian"): 0.3, ("b", "gt"): 0.9}
OFFSET = {"pool": 0, "blind": -1, "oracle": 1}


def fake_record(cell, suite, reconstructed: float, collapse: float, oracle_init: bool) -> CellRecord:
    sel = {
        name: selection(
            {"good_count": reconstructed + off, "collapse": collapse, "distinct_share": 1 - collapse, "other": 1.0,
             "reconstructed_calibrated": (reconstructed + off) / 2},
            null_spread={"reconstructed_calibrated": {"mean": 0.1 * cell.seed, "max": float(cell.seed)}},
            attack_loss=0.1 * reconstructed, run=None if name == "pool" else 0, oracle=name == "oracle")
        for name, off in OFFSET.items()
    }
    return cell_record(cell, suite, sel, oracle_init=oracle_init, attack_seconds=1.0 + cell.seed,
                       wall_seconds=2.0 + cell.seed)


@pytest.fixture
def synthetic(tmp_path, toy_attack_registered):
    path = tmp_path / "synthetic.toml"
    path.write_text(SUITE)
    suite = load_suite(path)
    cells = []
    for cell in expand(suite):
        key = (cell.attack.label, cell.init.label)
        if "grid" in cell.groups:
            cells.append(fake_record(cell, suite, COUNTS[key][cell.seed], COLLAPSE[key], cell.init.label == "gt"))
        else:  # the comparison's derived target
            cells.append(fake_record(cell, suite, 20.0, 0.0, False))
    machine = {"cores": 2, "cpu_model": "Test CPU 3000", "memory_gib": 24.0, "gpu": None, "torch_threads": 2}
    res = write_results(tmp_path / "res", cells, [
        invocation(0, "reconbench bench synthetic.toml", 75.0, status="completed", machine=machine,
                   git_commit="abc123", reconbench_version="9.9.9"),
        invocation(1, "x", 5.0)])
    return suite, res


def row_key(row):
    return row["attack"], row["init"]


def test_tables_aggregate_the_cells_and_sort_by_direction(synthetic, tmp_path):
    suite, res = synthetic
    out = tmp_path / "lb"
    data = build_leaderboard(suite, res, out, command="reconbench leaderboard synthetic", figures=False)
    # an optional column whose key no cell records (a metric newer than the cells) is left out, not shown as n/a
    assert "membership AUC" not in [c["name"] for c in data["columns"]]
    for sel, offset in OFFSET.items():
        rows = data["tables"][sel]
        assert len(rows) == 4
        for row in rows:
            vals = np.array(COUNTS[row_key(row)], dtype=float) + offset
            m = row["metrics"]["papers' protocol"]
            assert m["mean"] == pytest.approx(vals.mean()) and m["sd"] == pytest.approx(vals.std(ddof=1))
            assert m["n"] == 3 and m["key"] == "good_count"
            # the 95% interval of the mean: Student t with 2 degrees of freedom (t = 4.3027)
            half = 4.302652729911275 * vals.std(ddof=1) / np.sqrt(3) / 2
            cal = row["metrics"]["reconstructed (calibrated)"]
            # ... clipped to the counts possible, 0..n
            n_train = json.loads(next((res / "cells").glob("*.json")).read_text())["target"].get("n_train", np.inf)
            assert cal["ci95"] == pytest.approx([max(0.0, vals.mean() / 2 - half), min(n_train, vals.mean() / 2 + half)])
            # the null: mean over cells of their null means (seeds 0, 1, 2 -> 0, .1, .2), the largest draw (2)
            assert cal["null"] == {"mean": pytest.approx(0.1), "max": 2.0, "cells": 3}
            assert row["metrics"]["distinct share"]["mean"] == pytest.approx(1 - COLLAPSE[row_key(row)])
            assert row["metrics"]["wall s"]["mean"] == pytest.approx(2.0)  # seeds 0, 1, 2 -> 1, 2, 3
        # sorted by the first column, higher is better: a/gt (8.67), b/gaussian (7), a/gaussian (4), b/gt (1)
        assert [row_key(r) for r in rows] == [("a", "gt"), ("b", "gaussian"), ("a", "gaussian"), ("b", "gt")]
        assert [r["init_is_oracle"] for r in rows] == [True, False, False, True]
        # within noise of the best: b/gaussian [7 +- 2.5] overlaps a/gt [8.67 +- 1.43]; a/gaussian and b/gt do not
        assert [r["best"] for r in rows] == [True, False, False, False]
        assert [r["within_noise_of_best"] for r in rows] == [True, True, False, False]
    assert check_tables(out) == []

    readme = (out / "README.md").read_text()
    assert "| target   | attack" in readme and "|-----" in readme  # GitHub tables
    assert "`reconbench bench synthetic.toml`" in readme and "`reconbench leaderboard synthetic`" in readme
    assert "2 cores (Test CPU 3000), 24 GiB RAM" in readme
    assert "80.0 s over 2 invocation(s)" in readme  # 75 s + 5 s
    assert "9.9.9" in readme and "`abc123`" in readme
    assert "| bin      | a (toy_identity) | gt †" in readme and "Oracle selection ‡" in readme
    assert "8.7 [7.2, 10.1]" in readme  # papers' protocol uses format .1f; its 95% interval
    assert "(null 0.1, max 2.0)" in readme
    # the comparison: derived target has 20 (+offset), the base target's a/gaussian seed 0 has 3
    comp = data["comparisons"]["wd"]
    assert comp["axis_values"] == [0.0, 0.01]
    pool = next(r for r in comp["rows"] if r["selection"] == "pool")
    assert [v["reconstructed (calibrated)"]["mean"] for v in pool["values"]] == [1.5, 10.0]
    assert "weight_decay = 0.01" in readme

    # a tampered table entry is caught
    data["tables"]["pool"][0]["metrics"]["papers' protocol"]["values"][0] += 1
    data.pop("dropped_submissions")  # what the call reports, not a key of the file
    (out / "results.json").write_text(json.dumps(data))
    assert check_tables(out)


def test_direction_follows_the_metric_plugin_and_custom_columns(synthetic, tmp_path):
    suite, res = synthetic
    for f in (res / "cells").glob("*.json"):  # without the calibrated column, rows sort by the papers' count
        rec = json.loads(f.read_text())
        for sel in rec["selections"].values():
            sel["summary"].pop("reconstructed_calibrated")
        f.write_text(json.dumps(rec))

    @dataclass(frozen=True)
    class GoodCount(Metric):  # a metric plugin declaring that fewer is better (the opposite of the column spec)
        name: str = "good_count"
        description: str = "test metric"
        higher_is_better: bool = False

    class Plugin:
        @hookimpl
        def register_metrics(self, register):  # type: ignore[no-untyped-def]
            register(GoodCount())

    host = plugins.host()
    name = host.register(Plugin(), name="lower-is-better-metric")
    try:
        data = build_leaderboard(suite, res, tmp_path / "lb", figures=False)
    finally:
        host.unregister(name)
    col = data["columns"][1]
    assert col["higher_is_better"] is False and col["direction_from"] == "metric plugin 'good_count'"
    assert [row_key(r) for r in data["tables"]["pool"]] == [
        ("b", "gt"),
        ("a", "gaussian"),
        ("b", "gaussian"),
        ("a", "gt"),
    ]

    # the evaluation records each metric's headline and direction: that wins over plugins and the column spec
    for f in (res / "cells").glob("*.json"):
        rec = json.loads(f.read_text())
        rec["evaluation"]["metrics"] = {"count_metric": {"headline": "good_count", "higher_is_better": False}}
        f.write_text(json.dumps(rec))
    data = build_leaderboard(suite, res, tmp_path / "lb3", figures=False)
    col = data["columns"][1]
    assert col["higher_is_better"] is False and "count_metric" in col["direction_from"]
    assert [row_key(r) for r in data["tables"]["pool"]][0] == ("b", "gt")

    text = suite.path.read_text() + textwrap.dedent("""
        [leaderboard]
        columns = [{ name = "collapse", key = "collapse", higher_is_better = false, format = ".2f" },
                   { name = "count", key = "good_count", higher_is_better = true }]
        """)
    custom = suite.path.with_name("custom.toml")
    custom.write_text(text.replace('name = "synthetic"', 'name = "synthetic"', 1))
    suite2 = load_suite(custom)
    data = build_leaderboard(suite2, res, tmp_path / "lb2", figures=False)
    assert [c["name"] for c in data["columns"]] == ["collapse", "count"]
    assert [row_key(r) for r in data["tables"]["pool"]] == [
        ("a", "gt"),
        ("b", "gaussian"),
        ("a", "gaussian"),
        ("b", "gt"),
    ]
    # a/gt collapse 0.1 < b/gaussian 0.3 < a/gaussian 0.5 < b/gt 0.9


def test_failed_not_run_and_stale_cells_are_reported_not_tabulated(synthetic, tmp_path):
    suite, res = synthetic
    cells = sorted((res / "cells").glob("*.json"))
    failed = json.loads(cells[0].read_text())
    failed.update(status="failed", error={"type": "DivergedError", "message": "run 0: loss | nan"})
    write_json(cells[0], failed)
    stale = json.loads(cells[1].read_text())
    stale["cell_key"] = "0" * 16
    write_json(cells[1], stale)
    cells[2].unlink()
    data = build_leaderboard(suite, res, tmp_path / "lb", figures=False)
    readme = (tmp_path / "lb" / "README.md").read_text()
    assert data["header"]["cells"] == {"planned": 13, "ok": 10, "failed": 1, "not_run": 1, "stale": 1}
    assert f"| {failed['cell_id']} | failed" in readme.replace("  ", " ") or failed["cell_id"] in readme
    assert "DivergedError: run 0: loss \\| nan" in readme
    assert stale["cell_id"] in data["stale"] and cells[2].stem in data["not_run"]
    tabulated = {c for rows in data["tables"].values() for r in rows for c in r["cells"]}
    assert not tabulated & {failed["cell_id"], stale["cell_id"], cells[2].stem}
    assert not (tmp_path / "lb" / "cells" / f"{stale['cell_id']}.json").exists()


# -- end to end with the toy attack, and re-scoring ----------------------------------------------------------



@pytest.mark.slow
def test_sampled_candidates_skip_files_over_the_size_cap(tmp_path, monkeypatch, toy_attack_registered):
    from reconbench.leaderboard import render as lbmod

    path = tmp_path / "toy.toml"
    path.write_text(TOY_SUITE)
    res = tmp_path / "res"
    run_suite(load_suite(path), res, quiet=True, command="reconbench bench toy")
    from safetensors.torch import load_file, save_file

    files = sorted(res.rglob("candidates.safetensors"))
    cap = max(f.stat().st_size for f in files)
    first = lbmod.sample_for_candidates([f.parent.name for f in files], 3)[0]
    big = next(f for f in files if f.parent.name == first)   # the sample's first pick grows past the cap
    tensors = load_file(str(big))
    save_file({**tensors, "padding": torch.zeros(4096)}, str(big))
    assert big.stat().st_size > cap
    monkeypatch.setattr(lbmod, "MAX_SAMPLED_CANDIDATE_BYTES", cap)
    lbmod.build_leaderboard(load_suite(path), res, tmp_path / "lb", figures=False)
    stored = stored_cells(tmp_path / "lb")
    assert len(stored) == 3 and big.parent.name not in stored     # 4 cells, k = 3: the other three

@pytest.mark.slow
def test_end_to_end_render_then_rescore_the_stored_cells(tmp_path, capsys, toy_attack_registered):
    path = tmp_path / "toy.toml"
    path.write_text(TOY_SUITE)
    res, lb = tmp_path / "res", tmp_path / "lb"
    run_suite(load_suite(path), res, quiet=True, command="reconbench bench toy")
    note = tmp_path / "note.md"
    note.write_text("the toy suite's\nfirst render\n")
    code, out, err = run_cli(["leaderboard", str(path), "--results", str(res), "--out", str(lb), "--note", f"@{note}"],
                             capsys)
    assert code == 0, err
    assert (lb / "README.md").exists() and (lb / "figures" / "reconstructions.png").stat().st_size > 1000
    assert "**Why the numbers moved since the last publication:** the toy suite's first render" in \
        (lb / "README.md").read_text()
    data = json.loads((lb / "results.json").read_text())
    assert data["figures"]["ssim_vs_margin"].get("reason") or data["figures"]["ssim_vs_margin"].get("file")
    # the targets table repeats each model card's training evidence
    assert sorted(t["target"] for t in data["targets"]) == ["bin", "mc"]
    for t in data["targets"]:
        card = json.loads((lb / "targets" / f"{t['recipe_key']}.json").read_text())
        assert t["train_error"] == card["metrics"]["train_error"]
        assert t["stationarity_ratio"] == card["metrics"]["certificate"]["ratio"]
        assert t["n_train"] == len(card["problem"]["indices"]["train"]) and len(t["cells"]) == 2
    assert "## Targets" in (lb / "README.md").read_text()
    stored = stored_cells(lb)
    assert len(stored) == 3 == len(data["stored_candidates"])
    assert len(list((lb / "targets").glob("*.json"))) == 2 and not list(lb.rglob("weights*"))
    for cid in stored:
        assert rescore_cell(lb, cid) == []
    code, out, err = run_cli(["leaderboard", str(path), "--out", str(lb), "--verify"], capsys)
    assert code == 0 and "3 stored cell(s) re-scored" in out, err

    # change one stored number: the re-scoring test must catch it
    cell_file = lb / "cells" / f"{stored[0]}.json"
    rec = json.loads(cell_file.read_text())
    key = next(iter(rec["selections"]["blind"]["summary"]))
    rec["selections"]["blind"]["summary"][key] *= 1.001
    cell_file.write_text(json.dumps(rec))
    problems = rescore_cell(lb, stored[0])
    assert len(problems) == 1 and f"[blind] {key}" in problems[0]
    code, _, err = run_cli(["leaderboard", str(path), "--out", str(lb), "--verify"], capsys)
    assert code == 2 and cell_file.name in err and MANIFEST_NAME in err   # the manifest names the edited file first
    write_manifest(lb)  # the manifest made to agree: re-scoring must catch the number on its own
    code, _, err = run_cli(["leaderboard", str(path), "--out", str(lb), "--verify"], capsys)
    assert code == 2 and "not reproduced" in err


# -- the published leaderboards (RobustBench-style) ----------------------------------------------------------
PUBLISHED = sorted(p.parent for p in (REPO / "leaderboards").glob("*/results.json"))


@pytest.mark.slow
@pytest.mark.skipif(not PUBLISHED, reason="no leaderboard is published in leaderboards/ yet")
@pytest.mark.parametrize("board", PUBLISHED, ids=[p.name for p in PUBLISHED])
def test_published_leaderboard_numbers_are_reproduced(board):
    assert check_tables(board) == []
    data = json.loads((board / "results.json").read_text())
    assert data["header"]["commands"] and data["header"]["machines"] and data["header"]["wall_seconds"] > 0
    sample = stored_cells(board)[:3]
    if not sample:   # a GPU board keeps its figure cells' float16 figure pairs instead, which --verify re-scores
        _assert_figure_pairs_rescored(board, str(data["header"]["suite"]))
        return
    for cid in sample:
        try:
            assert rescore_cell(board, cid) == []
        except DataError as exc:
            pytest.skip(f"data for {cid} not available here: {exc}")


def _assert_figure_pairs_rescored(board: Path, suite: str) -> None:
    """A board without stored candidates passes only where --verify re-scores some cells' figure pairs."""
    from reconbench.leaderboard.figure_check import check_figures

    try:
        check = check_figures(load_suite(suite), board)
    except DataError as exc:
        pytest.skip(f"data for {board.name}'s figure pairs not available here: {exc}")
    assert check.problems == []
    assert check.pairs_cells, ("a published leaderboard must store the candidates of some cells, or the figure pairs "
                               "of some cells that --verify re-scores")


def test_statistics_module_agrees_with_numpy():  # the aggregation relies on statistics.stdev being ddof=1
    vals = [3.0, 5.0, 4.0]
    assert statistics.stdev(vals) == pytest.approx(np.std(vals, ddof=1))


MIX_SUITE = """\
[suite]
name = "mix"
seeds = [0, 1]

[targets.bin]
dataset = "digits"
task = "binary"
n_per_class = 3
widths = [8]
steps = 10

[attacks.a]
attack = "toy_identity"

[inits.m00]
regime = "mixture"
config = { l1 = 0.0, l2 = 0.0 }
[inits.m01]
regime = "mixture"
config = { l1 = 0.0, l2 = 1.0 }
[inits.m10]
regime = "mixture"
config = { l1 = 1.0, l2 = 0.0 }
[inits.m11]
regime = "mixture"
config = { l1 = 1.0, l2 = 1.0 }

[[grid]]
targets = ["bin"]
attacks = ["a"]
"""


def test_heatmap_and_scatter_figures_from_cells(tmp_path, toy_attack_registered):
    path = tmp_path / "mix.toml"
    path.write_text(MIX_SUITE)
    suite = load_suite(path)
    res = tmp_path / "res"
    n = 6
    margins = [0.5 * i for i in range(n)]
    for cell in expand(suite):
        l1, l2 = cell.init.config["l1"], cell.init.config["l2"]
        rec = fake_record(cell, suite, 10 * l1 * l2 + cell.seed, 0.0, False)
        rec = rec.updated(init=rec.init.updated(config=dict(cell.init.config)),
                          evaluation=(rec.evaluation or StoredEvaluation()).updated(
                              per_image=[{"ssim": 0.1 * i + 0.01 * cell.seed} for i in range(n)]))
        write_results(res, [rec])
        write_json(res / "targets" / f"{cell.recipe.key()}.json", {"metrics": {"margins": margins}})
    data = build_leaderboard(suite, res, tmp_path / "lb")
    figs = data["figures"]
    assert figs["mixture_heatmap"]["file"] == "figures/mixture_heatmap.png"
    assert figs["ssim_vs_margin"]["file"] == "figures/ssim_vs_margin.png"
    for f in ("mixture_heatmap", "ssim_vs_margin"):
        assert (tmp_path / "lb" / figs[f]["file"]).stat().st_size > 5000
    # the candidates of these made-up cells do not exist: that figure is skipped with its reason, tables stand
    assert "reason" in figs["reconstructions"] and data["tables"]["pool"]
    readme = (tmp_path / "lb" / "README.md").read_text()
    assert "![Mixture initialisations](figures/mixture_heatmap.png)" in readme
    assert "**Sample reconstructions per attack:** not drawn" in readme


def test_convergence_gate_flags_targets_above_it(synthetic, tmp_path):
    suite, res = synthetic
    gated = suite.path.with_name("gated.toml")
    gated.write_text(suite.path.read_text().replace('seeds = [0, 1, 2]', 'seeds = [0, 1, 2]\nmax_stationarity_ratio = 0.5'))
    suite2 = load_suite(gated)
    ratios = {"bin": 0.9}  # the base target is far from a KKT point; the weight-decay variant below the gate
    for f in (res / "cells").glob("*.json"):
        rec = json.loads(f.read_text())
        ratio = ratios.get(rec["target"]["name"], 0.1)
        rec["target"]["train_metrics"] = {"certificate": {"ratio": ratio}}
        rec["cell_key"] = next(c for c in expand(suite2) if c.cell_id == rec["cell_id"]).key(suite2)
        f.write_text(json.dumps(rec))
    data = build_leaderboard(suite2, res, tmp_path / "gated", figures=False)
    assert all(r["converged"] is False for r in data["tables"]["pool"])  # every grid row is on `bin`
    targets = {t["target"]: t for t in data["targets"]}
    assert targets["bin"]["converged"] is False and targets["bin@weight_decay=0.01"]["converged"] is True
    readme = (tmp_path / "gated" / "README.md").read_text()
    assert "| bin ⚠ " in readme and "0.9 ⚠ > 0.5" in readme and "0.1 ✓" in readme


def test_publishing_refuses_cells_from_a_dirty_tree(synthetic, tmp_path):
    from reconbench.errors import ReconbenchError
    from reconbench.leaderboard.render import check_publishable
    from reconbench.leaderboard.tables import collect

    suite, res = synthetic
    pub = collect(suite, res)
    check_publishable(pub, "abc123")  # every cell ran at the clean commit being published
    with pytest.raises(ReconbenchError, match="this checkout is dirty"):
        check_publishable(pub, "abc123-dirty")
    with pytest.raises(ReconbenchError, match="cells ran at abc123, this checkout is def456"):
        check_publishable(pub, "def456")
    first = next(iter(pub.records.values()))
    first.provenance["git_commit"] = "abc123-dirty"
    with pytest.raises(ReconbenchError, match="dirty or unknown tree"):
        check_publishable(pub, "abc123")


@pytest.mark.parametrize("values, value_range", [([0.0, 0.0, 3.0], (0.0, 20.0)), ([9.0, 10.0, 10.0], (0.0, 10.0)),
                                                  ([0.2, 0.5], (None, None)), ([-0.9, 0.95], (-1.0, 1.0))])
def test_interval_over_seeds_is_clipped_to_what_the_metric_can_take(values, value_range):
    from scipy import stats

    arr = np.asarray(values)
    half = stats.t.ppf(0.975, len(arr) - 1) * arr.std(ddof=1) / np.sqrt(len(arr))
    lo, hi = value_range
    expected = [arr.mean() - half if lo is None else max(lo, arr.mean() - half),
                arr.mean() + half if hi is None else min(hi, arr.mean() + half)]
    ci = Stat(values, value_range).ci95
    assert ci is not None and list(ci) == pytest.approx(expected)
    assert (lo is None or ci[0] >= lo) and (hi is None or ci[1] <= hi)
    assert fmt_stat(Stat(values, value_range).to_dict(), ".2f") == fmt_stat(Stat(values, value_range), ".2f")


def test_value_ranges_follow_what_each_key_counts():
    recs = [CellRecord.from_dict({"target": {"n_train": 20}}) for _ in range(2)]
    assert value_range("reconstructed_calibrated", recs) == (0.0, 20.0)
    assert value_range("reconstructed", recs) == (0.0, 20.0)
    assert value_range("reconstructed_per_candidate", recs) == (0.0, 1.0)
    assert value_range("membership_precision", recs) == (0.0, 1.0)
    assert value_range("init_copy_share", recs) == (0.0, 1.0)
    assert value_range("top_k_mean_ssim", recs) == (-1.0, 1.0)
    assert value_range("attack_seconds", recs) == (0.0, None)
    assert value_range("extraction_score", recs) == (0.0, None)  # a mean of squared distances
    assert value_range("membership_auc", recs) == (0.0, 1.0)
    assert value_range("no_metric_declares_this", recs) == (None, None)


def typed(records):
    return {cid: CellRecord.from_dict(r) for cid, r in records.items()}


def test_targets_table_has_one_row_per_trained_target_when_seeds_retrain_it():
    def rec(cid, name, key, seed, ratio):
        return {"cell_id": cid, "status": "ok", "seed": seed,
                "target": {"name": name, "recipe_key": key, "recipe": {},
                           "train_metrics": {"certificate": {"ratio": ratio}}}}
    records = {"a0": rec("a0", "t", "k0", 0, 0.9), "a1": rec("a1", "t", "k1", 1, 0.8),
               "b0": rec("b0", "t", "k0", 0, 0.9), "c0": rec("c0", "u", "k2", 0, 0.1)}
    rows = target_rows(Published(plan=[], records=typed(records), not_run=[], stale=[]), gate=0.5)
    assert [(r.target, r.cells, r.stationarity_ratio, r.converged) for r in rows] == [
        ("t (seed 0)", ["a0", "b0"], 0.9, False), ("t (seed 1)", ["a1"], 0.8, False), ("u", ["c0"], 0.1, True)]


def test_targets_table_shows_the_learned_part_ratio_only_where_cards_have_it():
    from reconbench.leaderboard.tables import render_targets

    def rec(cid, cert):
        return {"cell_id": cid, "status": "ok", "seed": 0,
                "target": {"name": cid, "recipe_key": cid, "recipe": {}, "train_metrics": {"certificate": cert}}}
    old = {"a": rec("a", {"ratio": 0.9})}
    rows = target_rows(Published(plan=[], records=typed(old), not_run=[], stale=[]))
    assert "learned_ratio" not in rows[0].to_dict() and "learned-part ratio" not in render_targets(rows)
    new = {**old, "b": rec("b", {"ratio": 0.95, "learned": {"ratio": 0.0432}})}
    rows = target_rows(Published(plan=[], records=typed(new), not_run=[], stale=[]))
    assert [r.learned_ratio for r in rows] == [None, 0.0432]
    table = render_targets(rows)
    assert "learned-part ratio" in table and "0.0432" in table


def test_the_learned_part_gate_flags_targets_on_its_own_measure():
    """A suite's max_learned_ratio marks targets by the learned-part ratio, not by the θ ratio; a card without the
    learned part is undecided rather than passed; both gates set: a target must pass both."""
    from reconbench.leaderboard.tables import in_regime, render_targets

    def rec(cid, cert):
        return {"cell_id": cid, "status": "ok", "seed": 0,
                "target": {"name": cid, "recipe_key": cid, "recipe": {}, "train_metrics": {"certificate": cert}}}
    records = {"in": rec("in", {"ratio": 0.95, "learned": {"ratio": 0.05}}),
               "out": rec("out", {"ratio": 0.2, "learned": {"ratio": 0.3}}),
               "old": rec("old", {"ratio": 0.2})}
    rows = target_rows(Published(plan=[], records=typed(records), not_run=[], stale=[]), learned_gate=0.1)
    assert [(r.target, r.converged) for r in rows] == [("in", True), ("out", False), ("old", None)]
    table = render_targets(rows)
    assert "0.05 ✓" in table and "0.3 ⚠ > 0.1" in table and "0.95 ✓" not in table and "0.95 ⚠" not in table
    both = {"stationarity": 0.5, "learned": 0.1}
    assert [in_regime(both, r) for r in typed(records).values()] == [False, False, None]
    assert in_regime({}, typed(records)["in"]) is None


def test_a_suite_gate_must_be_positive(tmp_path):
    from reconbench.bench.suite import load_suite
    from reconbench.errors import ReconbenchError

    text = load_suite("ci").path.read_text()
    assert "max_learned_ratio = 0.1" in text
    bad = tmp_path / "bad.toml"
    bad.write_text(text.replace("max_learned_ratio = 0.1", "max_learned_ratio = -0.1"))
    with pytest.raises(ReconbenchError, match="max_learned_ratio.*must be > 0"):
        load_suite(str(bad))


def test_targets_table_shows_the_regime_residuals_only_where_cards_have_them():
    """Published cards lack the regime block and render as before; a new card shows its θ residual against the
    bound 0.5 with its margin set, and the regularised residual where the target trained with weight decay."""
    from reconbench.leaderboard.tables import render_targets

    def rec(cid, cert):
        return {"cell_id": cid, "status": "ok", "seed": 0,
                "target": {"name": cid, "recipe_key": cid, "recipe": {}, "train_metrics": {"certificate": cert}}}
    old = {"a": rec("a", {"ratio": 0.9})}
    before = render_targets(target_rows(Published(plan=[], records=typed(old), not_run=[], stale=[])))
    assert "θ residual" not in before
    new = {**old, "b": rec("b", {"ratio": 0.9, "regime": {"theta": {"residual": 0.971, "margin_set": [0, 1, 4]}}}),
           "c": rec("c", {"ratio": 0.1, "regime": {"theta": {"residual": 0.2, "margin_set": [0]},
                                                    "regularised": {"residual": 0.3}}})}
    rows = target_rows(Published(plan=[], records=typed(new), not_run=[], stale=[]))
    assert [r.theta_residual for r in rows] == [None, 0.971, 0.2]
    table = render_targets(rows)
    assert "0.971 ⚠ > 0.5 (3 on the margin)" in table and "0.2 ✓ (1 on the margin)" in table
    assert "regularised-loss residual" in table and "0.3 ✓" in table
