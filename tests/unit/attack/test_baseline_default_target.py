"""`reconbench run --attack BASELINE` without --model trains the quick start's small target (multiclass_kkt's default
target), not the long default recipe of `reconbench train`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _helpers.cli import run_cli

from reconbench import plugins
from reconbench.targets.recipe import TargetRecipe

BASELINES = ["weight_rows", "init_only", "data_prior", "relu_kinks"]


@pytest.mark.parametrize("attack", BASELINES)
def test_each_baseline_names_the_quick_starts_target(attack: str) -> None:
    quick_start = plugins.attack("multiclass_kkt").default_recipe
    assert quick_start is not None and plugins.attack(attack).default_recipe == quick_start
    trained = TargetRecipe.from_dict(quick_start)
    bare = TargetRecipe.from_dict({})   # what `reconbench train` trains with no option
    assert trained.train.steps * trained.problem.n_per_class < bare.train.steps * bare.problem.n_per_class


def test_run_weight_rows_trains_the_quick_starts_target_and_gives_advice_it_can_follow(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("RECONBENCH_CACHE", str(tmp_path / "cache"))
    code, out, err = run_cli(["run", "--attack", "weight_rows", "--out", str(tmp_path / "res")], capsys)
    assert code == 0, err
    result = json.loads((tmp_path / "res" / "result.json").read_text())
    quick_start = TargetRecipe.from_dict(plugins.attack("multiclass_kkt").default_recipe or {})
    assert result["target"]["recipe_key"] == quick_start.key()
    assert "--set steps=" not in out + err   # weight_rows has no steps option: the note must not suggest one
