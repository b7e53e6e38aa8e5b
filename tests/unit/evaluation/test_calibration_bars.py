"""Calibrated counts per run, pooled and per selection, each against its own bar (evaluation/bars.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from reconbench.attack.candidates import candidate_labels
from reconbench.data import ProblemSpec
from reconbench.evaluation import evaluate, extraction_score, resolve_protocol
from reconbench.evaluation import null as null_mod
from reconbench.evaluation.bars import calibration_bars, light_scorer, selection_record
from reconbench.targets.problems import build_problem

PROTOCOL = {"figures": False, "metrics": ["ssim", "corr"], "null_draws": 1, "calibration_draws": 4}


@pytest.fixture(scope="module")
def digits():
    return build_problem(ProblemSpec(dataset="digits", task="multiclass", n_per_class=1))   # n = 10


def _pool(digits, runs: int, m: int):
    """R runs of m candidates: run r holds noisy copies of the training images (noise falling with r)."""
    labels = candidate_labels("multiclass", 10, m)
    gen = torch.Generator().manual_seed(0)
    truth = digits.x_train(torch.float64)[torch.arange(m) % digits.n]
    cands = [truth + (0.2 + 0.4 * r) * torch.randn(truth.shape, generator=gen, dtype=torch.float64)
             for r in range(runs)]
    return {"candidates": torch.cat(cands), "labels": torch.as_tensor(np.tile(digits.train_labels[np.arange(m) % 10], runs)),
            "run_ids": torch.arange(runs).repeat_interleave(m)}, labels


def test_selected_bar_applies_the_pick_to_null_runs(digits):
    """Independent recomputation: each calibration draw is R null runs; the one of lowest extraction score is scored
    with the full evaluation, and the threshold is the largest calibrated score of a picked run."""
    resolved = resolve_protocol(PROTOCOL, "mlp")
    labels = np.asarray(digits.train_labels)
    m, runs = digits.n, 3
    got = null_mod.calibrate_selected(digits, resolved, labels, m, runs, light_scorer(digits, resolved, labels),
                                      lambda c: extraction_score(digits, c), "lowest")
    maxima = []
    for k in range(PROTOCOL["calibration_draws"]):
        draws = [null_mod.draw(digits, labels, m, 0, null_mod.SELECTION_STREAM, k * runs + r) for r in range(runs)]
        best = min(range(runs), key=lambda r: extraction_score(digits, draws[r]))
        ev = evaluate(digits, draws[best], family="mlp", labels=torch.as_tensor(labels), protocol=PROTOCOL)
        maxima.append(max(row["corr"] for row in ev["per_image"] if row["corr"] is not None))
    assert got["threshold"] == pytest.approx(max(maxima), rel=1e-12)
    assert got["draw_maxima"] == pytest.approx(maxima, rel=1e-12)
    # picking the lowest rank is what the bar follows: the opposite pick gives other runs in some draw
    worst = null_mod.calibrate_selected(digits, resolved, labels, m, runs, light_scorer(digits, resolved, labels),
                                        lambda c: -extraction_score(digits, c), "highest")
    assert worst["picked"] != got["picked"]


def test_bars_agree_with_the_evaluations_of_each_selection(digits):
    runs, m = 3, digits.n
    pooled, _ = _pool(digits, runs, m)
    pool_eval = evaluate(digits, pooled["candidates"], family="mlp", labels=pooled["labels"], protocol=PROTOCOL)
    bars = calibration_bars(digits, pooled, family="mlp", protocol=PROTOCOL, evaluation=pool_eval, blind=2, oracle=0)
    assert bars is not None
    assert bars["pool"]["count"] == pool_eval["summary"]["reconstructed_calibrated"]
    assert bars["pool"]["m"] == runs * m and bars["run_bar"]["m"] == m
    for r in range(runs):   # each run alone, evaluated on its own, against the single-run bar
        keep = pooled["run_ids"] == r
        ev = evaluate(digits, pooled["candidates"][keep], family="mlp", labels=pooled["labels"][keep],
                      protocol=PROTOCOL)
        assert bars["runs"][r] == {"run": r, "count": ev["summary"]["reconstructed_calibrated"]}
        assert bars["run_bar"]["threshold"] == ev["summary"]["calibrated_threshold"]
    assert bars["blind"]["count"] == bars["runs"][2]["count"]
    oracle = bars["oracle"]
    assert oracle["threshold"] == max(oracle["draw_maxima"])
    scores = np.array([row["corr"] for row in evaluate(digits, pooled["candidates"][pooled["run_ids"] == 0],
                                                          family="mlp", labels=pooled["labels"][:m],
                                                          protocol=PROTOCOL)["per_image"]], dtype=float)
    assert oracle["count"] == int((scores > oracle["threshold"]).sum())
    # a cell's selection stores its count, threshold and bar
    rec = selection_record(bars, "oracle")
    assert rec is not None and rec["count"] == oracle["count"] and "oracle-selected" in rec["bar"]
    assert selection_record(None, "pool") is None


def test_no_bars_without_a_calibrated_headline(digits):
    pooled, _ = _pool(digits, 2, digits.n)
    off = {**PROTOCOL, "calibration_draws": 0}
    ev = evaluate(digits, pooled["candidates"], family="mlp", labels=pooled["labels"], protocol=off)
    assert calibration_bars(digits, pooled, family="mlp", protocol=off, evaluation=ev, blind=0, oracle=1) is None


def test_tables_read_the_own_bar_count_and_verify_rechecks_it():
    from reconbench.bench.suite import default_columns
    from reconbench.leaderboard.tables import column_value
    from reconbench.leaderboard.verify import _check_tables
    from reconbench.records import BoardResults, CellRecord

    col = next(c for c in default_columns() if c.source == "calibrated")
    bar = {"count": 3, "threshold": 0.9, "bar": "oracle-selected: best of 2 null runs by extraction score, m = 20"}
    rec = {"selections": {"oracle": {"summary": {"reconstructed_calibrated": 5}, "calibrated": bar}}}
    assert column_value(CellRecord.from_dict(rec), "oracle", col) == (3.0, "calibrated")
    old = {"selections": {"oracle": {"summary": {"reconstructed_calibrated": 5}}}}   # a cell without bars
    assert column_value(CellRecord.from_dict(old), "oracle", col) == (None, None)
    data = {"columns": [{"name": col.name, "source": "calibrated"}],
            "tables": {"oracle": [{"attack": "a", "init": "i", "target": "t", "cells": ["c"],
                                   "metrics": {col.name: {"key": "calibrated", "values": [3.0], "mean": 3.0}}}]}}
    board = BoardResults.from_dict(data)
    assert _check_tables(board, {"c": CellRecord.from_dict(rec)}) == []
    rec["selections"]["oracle"]["calibrated"] = {**bar, "count": 4}
    assert len(_check_tables(board, {"c": CellRecord.from_dict(rec)})) == 1
