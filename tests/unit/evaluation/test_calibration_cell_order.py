"""Two cells of one target scored in one process give the bars each gets alone, in either order (evaluation/null.py's
calibration cache).

The cells mirror a board where the collision happened: cell ``one_run`` searches 2 runs of 8 candidates (its blind run
is scored at m = 8, labels 00001111), cell ``two_small_runs`` searches 2 runs of 4 (its pool is scored at m = 8,
labels 00110011). Same problem, same protocol, same m, equal label counts, another order: with prior draws in the
calibration a shared cache entry hands one cell the other's threshold.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from reconbench.attack.candidates import candidate_labels
from reconbench.data import Problem, ProblemSpec
from reconbench.evaluation import evaluate
from reconbench.evaluation import null as null_mod
from reconbench.evaluation.bars import calibration_bars
from reconbench.targets.problems import build_problem

#: a null seed at which the two label orders' prior draws give different thresholds (asserted below)
PROTOCOL = {"figures": False, "metrics": ["ssim", "corr"], "null_draws": 1, "calibration_draws": 3,
            "prior_draws": 4, "null_seed": 7}
CELLS = {"one_run": (2, 8), "two_small_runs": (2, 4)}   # name -> (runs, candidates per run)


@pytest.fixture(scope="module")
def digits() -> Problem:
    return build_problem(ProblemSpec(dataset="digits", task="binary", n_per_class=2))   # n = 4, as cifar-rf


def _pooled(problem: Problem, runs: int, m: int) -> dict[str, torch.Tensor]:
    """R runs of m candidates with the runs' fixed labels (class blocks, as runs/prepare.py gives them): noisy
    copies of training images of each candidate's label, noise rising with the run."""
    labels = candidate_labels("binary", 2, m)
    gen = torch.Generator().manual_seed(runs * 100 + m)
    train = problem.x_train(torch.float64)
    by_label = {c: np.flatnonzero(problem.train_labels == c) for c in (0, 1)}
    picks = [int(by_label[int(c)][j % len(by_label[int(c)])]) for j, c in enumerate(labels)]
    truth = train[torch.as_tensor(picks)]
    cands = [truth + (0.1 + 0.5 * r) * torch.randn(truth.shape, generator=gen, dtype=torch.float64)
             for r in range(runs)]
    return {"candidates": torch.cat(cands), "labels": labels.repeat(runs), "run_ids": torch.arange(runs).repeat_interleave(m)}


def _calibrated(ev: dict[str, Any]) -> dict[str, Any]:
    """What a cell stores of an evaluation's calibration: threshold, count, draws' maxima, per-image margins and the
    reported null draws (which count against the threshold)."""
    return {"threshold": ev["summary"]["calibrated_threshold"], "count": ev["summary"]["reconstructed_calibrated"],
            "calibration": ev["protocol"]["calibration"],
            "margins": [row["reconstructed_calibrated_margin"] for row in ev["per_image"]],
            "null": ev["null"]["per_draw"]}


def _cell(problem: Problem, name: str) -> dict[str, Any]:
    """The pool, the blind run (run 0) and the calibration bars of one cell, as a bench run scores them."""
    runs, m = CELLS[name]
    pooled = _pooled(problem, runs, m)
    pool = evaluate(problem, pooled["candidates"], family="mlp", labels=pooled["labels"], protocol=PROTOCOL,
                    run_ids=pooled["run_ids"])
    keep = pooled["run_ids"] == 0
    blind = evaluate(problem, pooled["candidates"][keep], family="mlp", labels=pooled["labels"][keep],
                     protocol=PROTOCOL)
    bars = calibration_bars(problem, pooled, family="mlp", protocol=PROTOCOL, evaluation=pool, blind=0, oracle=1)
    return {"pool": _calibrated(pool), "blind": _calibrated(blind), "bars": bars}


def _in_one_process(problem: Problem, order: list[str]) -> dict[str, dict[str, Any]]:
    null_mod.clear_caches()
    return {name: _cell(problem, name) for name in order}


@pytest.fixture(scope="module")
def alone(digits) -> dict[str, dict[str, Any]]:
    """Each cell scored in a process of its own (caches cleared before it)."""
    return {name: _in_one_process(digits, [name])[name] for name in CELLS}


def test_the_cells_collide_on_problem_m_and_label_counts_but_not_on_order(alone):
    """The premise: the blind run of one cell and the pool of the other are calibrated at the same m with equal
    label counts in another order, and their thresholds alone differ (so a shared entry would show)."""
    blind_labels = candidate_labels("binary", 2, 8).numpy()
    pool_labels = np.tile(candidate_labels("binary", 2, 4).numpy(), 2)
    assert len(blind_labels) == len(pool_labels)
    assert (np.bincount(blind_labels) == np.bincount(pool_labels)).all() and (blind_labels != pool_labels).any()
    one, two = alone["one_run"]["blind"], alone["two_small_runs"]["pool"]
    assert one["calibration"]["draw_maxima"] == two["calibration"]["draw_maxima"]   # held-out draws: counts only
    assert one["threshold"] != pytest.approx(two["threshold"], rel=1e-9)          # prior draws: the order counts


@pytest.mark.parametrize("order", [["one_run", "two_small_runs"], ["two_small_runs", "one_run"]])
def test_each_cell_scores_in_one_process_as_it_does_alone(digits, alone, order):
    together = _in_one_process(digits, order)
    for name in CELLS:
        assert together[name] == alone[name], f"{name} scored after {order[0]} differs from {name} alone"
