"""A repeated evaluation (a cell whose blind and oracle selections are the same run) is served from the last ones:
the same numbers, an independent copy, and a fresh computation whenever an input differs."""

from __future__ import annotations

import importlib

import pytest
import torch

from reconbench.data import ProblemSpec
from reconbench.evaluation import evaluate as evaluate_fn
from reconbench.targets.problems import build_problem

module = importlib.import_module("reconbench.evaluation.evaluate")

PROTOCOL = {"figures": False, "metrics": ["ssim", "corr"], "calibration_draws": 3, "null_draws": 2}


@pytest.fixture(scope="module")
def digits():
    return build_problem(ProblemSpec(dataset="digits", task="multiclass", n_per_class=2))  # n = 20, 10 classes


def _candidates(seed: int, problem) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = problem.x_train(torch.float64)
    return x + 0.3 * torch.randn(x.shape, generator=g, dtype=torch.float64), torch.as_tensor(problem.train_labels).long()


def _without_seconds(d: dict) -> dict:
    return {k: v for k, v in d.items() if k != "seconds"}


def test_a_repeated_evaluation_is_served_once_and_as_a_copy(digits, monkeypatch):
    monkeypatch.setattr(module, "_MEMO", [])
    calls = []
    real = module._score
    monkeypatch.setattr(module, "_score", lambda *a, **k: calls.append(1) or real(*a, **k))
    cand, labels = _candidates(0, digits)
    first = evaluate_fn(digits, cand, family="mlp", protocol=PROTOCOL, labels=labels)
    n_first = len(calls)
    second = evaluate_fn(digits, cand.clone(), family="mlp", protocol=dict(PROTOCOL), labels=labels.clone())
    assert len(calls) == n_first                      # nothing scored again, the null draws included
    assert _without_seconds(second) == _without_seconds(first)
    second["summary"]["reconstructed"] = -1           # the caller's copy is its own
    third = evaluate_fn(digits, cand, family="mlp", protocol=PROTOCOL, labels=labels)
    assert third["summary"]["reconstructed"] == first["summary"]["reconstructed"]


def test_any_changed_input_is_scored_afresh(digits, monkeypatch):
    monkeypatch.setattr(module, "_MEMO", [])
    cand, labels = _candidates(1, digits)
    base = evaluate_fn(digits, cand, family="mlp", protocol=PROTOCOL, labels=labels)
    moved = cand.clone()
    moved[0, 0, 0, 0] += 1e-9
    calls = []
    real = module._score
    monkeypatch.setattr(module, "_score", lambda *a, **k: calls.append(1) or real(*a, **k))
    evaluate_fn(digits, moved, family="mlp", protocol=PROTOCOL, labels=labels)
    assert calls
    calls.clear()
    other = evaluate_fn(digits, cand, family="mlp", protocol={**PROTOCOL, "top_k": 3}, labels=labels)
    assert calls and other["protocol"]["top_k"] == 3 != base["protocol"]["top_k"]
    assert len(module._MEMO) <= 4

