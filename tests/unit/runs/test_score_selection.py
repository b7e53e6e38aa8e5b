"""One function scores a run's selections: the run itself (``runs/result.py``) and ``leaderboard --verify`` call
the same ``score_selection``, so a stored selection is re-scored exactly as it was scored."""

from __future__ import annotations

import pytest
from safetensors.torch import load_file

from reconbench.runs import RunSpec, run_attack
from reconbench.runs import result as result_mod
from reconbench.targets.cache import get_or_train
from reconbench.targets.recipe import TargetRecipe


def test_a_run_scores_its_pool_and_selected_runs_with_score_selection(tmp_path, monkeypatch):
    recipe = TargetRecipe.from_dict({
        "problem": {"dataset": "digits", "task": "binary", "n_per_class": 3, "n_test_per_class": 5},
        "family": "mlp", "model": {"widths": [16]},
        "train": {"steps": 60, "lr": 0.05, "weight_decay": 1e-3, "eval_every": 1000}})
    card = get_or_train(recipe, cache=str(tmp_path / "cache"), quiet=True)
    calls: list[int | None] = []
    real = result_mod.score_selection

    def spy(problem, pooled, run, **kw):
        calls.append(run)
        return real(problem, pooled, run, **kw)

    monkeypatch.setattr(result_mod, "score_selection", spy)
    spec = RunSpec(attack="haim_binary_kkt", attack_config={"steps": 10}, search_runs=2, seed=1)
    res = run_attack(card, spec, tmp_path / "res", quiet=True)
    blind, oracle = res["selection"]["blind"]["run"], res["selection"]["oracle"]["run"]
    assert calls[0] is None and sorted(calls[1:]) == sorted({blind, oracle})   # a run both rules pick: scored once

    # what verify does with the stored candidates: the same function, the same numbers
    pooled = load_file(str(tmp_path / "res" / "candidates.safetensors"))
    problem = card.problem(None)
    for name, run in (("blind", blind), ("oracle", oracle)):
        again = real(problem, pooled, run, family=card.data["family"], protocol=spec.protocol, card=card)
        stored = res["evaluation_selected"][name]["summary"]
        assert again["summary"].keys() == stored.keys()
        for key, value in stored.items():
            numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
            assert again["summary"][key] == (pytest.approx(value, rel=1e-12, nan_ok=True) if numeric else value), key


def test_a_run_both_rules_pick_is_scored_once_and_each_selection_keeps_its_numbers(tmp_path, monkeypatch):
    recipe = TargetRecipe.from_dict({
        "problem": {"dataset": "digits", "task": "binary", "n_per_class": 3, "n_test_per_class": 5},
        "family": "mlp", "model": {"widths": [16]},
        "train": {"steps": 60, "lr": 0.05, "weight_decay": 1e-3, "eval_every": 1000}})
    card = get_or_train(recipe, cache=str(tmp_path / "cache"), quiet=True)
    calls: list[int | None] = []
    real = result_mod.score_selection

    def spy(problem, pooled, run, **kw):
        calls.append(run)
        return real(problem, pooled, run, **kw)

    monkeypatch.setattr(result_mod, "score_selection", spy)
    monkeypatch.setattr(result_mod, "select_runs", lambda runs: (1, 1))   # blind and oracle agree on run 1
    spec = RunSpec(attack="haim_binary_kkt", attack_config={"steps": 10}, search_runs=2, seed=1)
    res = run_attack(card, spec, tmp_path / "res", quiet=True)
    assert calls == [None, 1]
    blind, oracle = (res["evaluation_selected"][k] for k in ("blind", "oracle"))
    assert {k: v for k, v in oracle.items() if k != "seconds"} == {k: v for k, v in blind.items() if k != "seconds"}

    # the oracle's numbers are the run's own: scored afresh from the stored candidates, they are the same
    pooled = load_file(str(tmp_path / "res" / "candidates.safetensors"))
    again = real(card.problem(None), pooled, 1, family=card.data["family"], protocol=spec.protocol, card=card)
    for key, value in oracle["summary"].items():
        numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
        assert again["summary"][key] == (pytest.approx(value, rel=1e-12, nan_ok=True) if numeric else value), key
