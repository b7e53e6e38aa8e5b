"""The privacy table's test accuracy of a target that each seed retrains is the mean over its trained models, each
model counted once however many cells attacked it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from reconbench.leaderboard.privacy import _target_info


def record(cell_id: str, name: str, key: str, test_error: float, before: float | None = None):
    metrics = SimpleNamespace(test_error=test_error, train_error=0.0, steps_run=3000, defense_records={"epsilon": 21.0},
                              before_defense={} if before is None else {"test_error": before})
    return SimpleNamespace(cell_id=cell_id, target=SimpleNamespace(name=name, has_metrics=True, metrics=metrics,
                                                                   recipe_key=key))


def published(*recs):
    return SimpleNamespace(records={r.cell_id: r for r in recs})


def test_the_accuracy_is_the_mean_over_the_seeds_models_each_once():
    # seed 0's model is attacked by two cells, seed 1's by one: a mean over cells would weigh seed 0 twice
    pub = published(record("a-s0", "t", "k0", 0.2, before=0.1), record("b-s0", "t", "k0", 0.2, before=0.1),
                    record("a-s1", "t", "k1", 0.4, before=0.3), record("a-s0", "other", "k9", 0.0))
    info = _target_info(pub, "t")
    assert info["test_accuracy"] == pytest.approx((0.8 + 0.6) / 2, rel=1e-14)
    assert info["test_accuracy_before_release"] == pytest.approx((0.9 + 0.7) / 2, rel=1e-14)
    assert info["train_accuracy"] == 1.0 and info["steps_run"] == 3000 and info["defense_records"] == {"epsilon": 21.0}


def test_one_model_keeps_its_own_accuracy_and_a_target_without_records_has_none():
    pub = published(record("a-s0", "t", "k0", 0.25), record("b-s0", "t", "k0", 0.25))
    assert _target_info(pub, "t")["test_accuracy"] == 0.75
    assert _target_info(pub, "t")["test_accuracy_before_release"] is None
    assert _target_info(pub, "missing")["test_accuracy"] is None
