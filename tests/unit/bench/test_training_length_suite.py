"""The shipped training-length suite measures one axis: along each of its comparisons, the targets differ in the
number of training steps only, and every target trains as the axis needs (constant step, stable loss, float64)."""

from __future__ import annotations

import dataclasses

from reconbench.bench.cells import expand
from reconbench.bench.suite import load_suite

LENGTHS = [1_000, 10_000, 100_000, 1_000_000]


def test_every_target_trains_with_a_constant_step_and_the_stable_loss():
    suite = load_suite("training-length")
    assert suite.seeds == (0, 1, 2, 3, 4) and suite.seed_targets
    for entry in suite.targets.values():
        train = entry.recipe.train
        assert (train.schedule, train.loss_form, train.dtype) == ("constant", "stable", "float64")
        assert train.stop_at_gate == 0.0 and train.stop_loss == 0.0   # every target runs its full length
        assert train.steps in LENGTHS


def test_along_each_comparison_only_the_number_of_steps_changes():
    suite = load_suite("training-length")
    assert {c.axis for c in suite.comparisons} == {"steps"}
    for comp in suite.comparisons:
        recipes = [suite.targets[v.target].recipe for v in comp.variants]
        assert [r.train.steps for r in recipes] == [v.value for v in comp.variants] == sorted(v.value for v in comp.variants)
        base = recipes[0]
        for r in recipes[1:]:
            assert dataclasses.replace(r, train=dataclasses.replace(r.train, steps=base.train.steps)) == base
    # the full axis on at least one task, and both tasks with their own attack
    assert max(len(c.variants) for c in suite.comparisons) == len(LENGTHS)
    tasks = {(c.recipe.problem.task, c.attack.attack) for c in expand(suite)}
    assert tasks == {("binary", "haim_binary_kkt"), ("multiclass", "multiclass_kkt")}


def test_each_row_carries_the_regime_residual_margins_and_the_data_prior_null():
    suite = load_suite("training-length")
    sources = {c.keys[0]: c.source for c in suite.leaderboard.columns if c.source == "target"}
    assert {"theta_residual", "margin_min", "margin_set_size"} <= set(sources)
    assert suite.protocol["prior_draws"] >= 19   # a prior draw passes the headline with probability <= 1/(J + 1)
    grid_targets = {c.target for c in expand(suite) if "grid" in c.groups}
    assert grid_targets == set(suite.targets)   # every point of the axis is a row of the main tables
    assert "Budget" in suite.path.read_text()


def test_pretraining_lists_every_target_the_bench_trains_and_skips_cached_ones(tmp_path):
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parents[3] / "benchmarks" / "pretrain_suite.py"
    spec = importlib.util.spec_from_file_location("pretrain_suite", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)

    cells = expand(load_suite("training-length"))
    keys = list(dict.fromkeys(c.recipe.key() for c in cells))   # each seed retrains: one target per (target, seed)
    assert len(keys) == len({(c.target, c.seed) for c in cells})
    todo = module.missing_targets("training-length", [], str(tmp_path))
    assert [r.key() for _, r in todo] == keys
    (tmp_path / "targets" / keys[0]).mkdir(parents=True)
    (tmp_path / "targets" / keys[0] / "card.json").write_text("{}")
    assert [r.key() for _, r in module.missing_targets("training-length", [], str(tmp_path))] == keys[1:]
    only = module.missing_targets("training-length", ["binary-w100-1m--*"], str(tmp_path))
    assert {r.train.steps for _, r in only} == {1_000_000} and len(only) == 5
