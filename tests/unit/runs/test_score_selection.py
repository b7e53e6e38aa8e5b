"""A run's selections are cut from its pool by one function (``runs/result.selection_set``), which
``score_selection`` (what ``leaderboard --verify`` calls) uses as well; the run scores its pool and selections in one
pass (``evaluate_many``), and ``score_selection`` re-scores each of them to exactly the stored numbers."""

from __future__ import annotations

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
    real = result_mod.selection_set

    def spy(pooled, run):
        calls.append(run)
        return real(pooled, run)

    monkeypatch.setattr(result_mod, "selection_set", spy)
    spec = RunSpec(attack="haim_binary_kkt", attack_config={"steps": 10}, search_runs=2, seed=1)
    res = run_attack(card, spec, tmp_path / "res", quiet=True)
    blind, oracle = res["selection"]["blind"]["run"], res["selection"]["oracle"]["run"]
    assert calls[0] is None and sorted(calls[1:]) == sorted({blind, oracle})   # a run both rules pick: scored once

    # what verify does with the stored candidates: score_selection, one set at a time; the same numbers, exactly
    pooled = load_file(str(tmp_path / "res" / "candidates.safetensors"))
    problem = card.problem(None)
    stored_all = {"pool": (None, res["evaluation"]), **{name: (run, res["evaluation_selected"][name])
                                                       for name, run in (("blind", blind), ("oracle", oracle))}}
    for name, (run, stored) in stored_all.items():
        again = result_mod.score_selection(problem, pooled, run, family=card.data["family"], protocol=spec.protocol,
                                           card=card)
        assert again["summary"] == stored["summary"], name
        assert again["null"]["per_draw"] == stored["null"]["per_draw"], name
        assert [r["corr"] for r in again["per_image"]] == [r["corr"] for r in stored["per_image"]], name


def test_a_run_both_rules_pick_is_scored_once_and_each_selection_keeps_its_numbers(tmp_path, monkeypatch):
    recipe = TargetRecipe.from_dict({
        "problem": {"dataset": "digits", "task": "binary", "n_per_class": 3, "n_test_per_class": 5},
        "family": "mlp", "model": {"widths": [16]},
        "train": {"steps": 60, "lr": 0.05, "weight_decay": 1e-3, "eval_every": 1000}})
    card = get_or_train(recipe, cache=str(tmp_path / "cache"), quiet=True)
    calls: list[int | None] = []
    real = result_mod.selection_set

    def spy(pooled, run):
        calls.append(run)
        return real(pooled, run)

    monkeypatch.setattr(result_mod, "selection_set", spy)
    monkeypatch.setattr(result_mod, "select_runs", lambda runs: (1, 1))   # blind and oracle agree on run 1
    spec = RunSpec(attack="haim_binary_kkt", attack_config={"steps": 10}, search_runs=2, seed=1)
    res = run_attack(card, spec, tmp_path / "res", quiet=True)
    assert calls == [None, 1]
    blind, oracle = (res["evaluation_selected"][k] for k in ("blind", "oracle"))
    assert {k: v for k, v in oracle.items() if k != "seconds"} == {k: v for k, v in blind.items() if k != "seconds"}

    # the oracle's numbers are the run's own: scored afresh from the stored candidates, they are the same
    pooled = load_file(str(tmp_path / "res" / "candidates.safetensors"))
    again = result_mod.score_selection(card.problem(None), pooled, 1, family=card.data["family"],
                                       protocol=spec.protocol, card=card)
    assert again["summary"] == oracle["summary"]
