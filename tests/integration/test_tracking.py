"""`--track mlflow`: a run read back through MLflow's client carries result.json's numbers, its configuration and
its loss traces; a failing tracker only warns; a missing extra is one line naming it."""

from __future__ import annotations

import json
import sys

import pytest
from _helpers.cli import run_cli
from _helpers.suitekit import toy_targets

from reconbench.attack.search import RUN_SEARCH
from reconbench.targets.cache import get_or_train
from reconbench.targets.recipe import TargetRecipe

mlflow = pytest.importorskip("mlflow", reason="the mlflow extra is not installed: pip install 'reconbench[mlflow]'")


@pytest.fixture
def card():
    recipe = TargetRecipe.from_dict({
        "problem": {"dataset": "digits", "task": "binary", "n_per_class": 3, "n_test_per_class": 5},
        "family": "mlp", "model": {"widths": [16]}, "train": {"steps": 60, "lr": 0.05, "eval_every": 1000}})
    return get_or_train(recipe, quiet=True)


def attack_args(card, out) -> list[str]:
    return ["run", "--attack", "haim_binary_kkt", "--model", str(card.path), "--set", "steps=10", "--set",
            "eval_every=5", "--search-runs", "2", "--seed", "3", "--out", str(out), "--quiet",
            # a quick evaluation that still has a calibrated headline and a null to log
            "--protocol-set", "calibration_draws=2", "--protocol-set", "null_draws=2"]


def test_a_tracked_run_reads_back_with_the_numbers_of_result_json(card, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)   # MLflow's default store is local to the working folder
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    code, out, err = run_cli([*attack_args(card, tmp_path / "r"), "--track", "mlflow"], capsys)
    assert code == 0, err
    result = json.loads((tmp_path / "r" / "result.json").read_text())

    client = mlflow.MlflowClient()
    experiment = client.get_experiment_by_name("reconbench")
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.run_id in out and run.info.run_name == "r" and run.info.status == "FINISHED"
    metrics, params = run.data.metrics, run.data.params
    summary, spread = result["evaluation"]["summary"], result["evaluation"]["null"]["spread"]
    for key in ("reconstructed_calibrated", "membership_auc", "reconstructed", "top_k_mean_ssim"):
        assert metrics[f"pool.{key}"] == pytest.approx(summary[key], rel=1e-12, abs=0)
        assert metrics[f"null.{key}.mean"] == pytest.approx(spread[key]["mean"], rel=1e-12, abs=0)
        assert metrics[f"null.{key}.max"] == pytest.approx(spread[key]["max"], rel=1e-12, abs=0)
    blind = result["evaluation_selected"]["blind"]["summary"]
    assert metrics["blind.reconstructed_calibrated"] == blind["reconstructed_calibrated"]
    assert params["seed"] == "3" and params["spec.attack"] == "haim_binary_kkt"
    assert json.loads(params["spec.attack_config.steps"]) == 10 and params["search.strategy"] == RUN_SEARCH
    assert run.data.tags["reconbench.search"] == RUN_SEARCH
    for k in (0, 1):   # every trace point of every search run, as metric steps
        trace = json.loads((tmp_path / "r" / "runs" / f"run-00{k}.json").read_text())["trace"]
        history = client.get_metric_history(run.info.run_id, f"run_00{k}.loss")
        assert [(h.step, h.value) for h in sorted(history, key=lambda h: h.step)] == \
            [(int(t["step"]), pytest.approx(t["loss"], rel=1e-12)) for t in trace]
    artefacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert "result.json" in artefacts and "figures" in artefacts


def test_a_failing_tracker_warns_and_changes_nothing(card, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, _, _ = run_cli(attack_args(card, tmp_path / "plain"), capsys)
    assert code == 0
    code, out, err = run_cli([*attack_args(card, tmp_path / "tracked"), "--track", "mlflow", "--track-uri",
                              "bogus-scheme://nowhere"], capsys)
    assert code == 0 and "warning: MLflow tracking of tracked failed" in err and "tracked:" not in out
    plain, tracked = (json.loads((tmp_path / d / "result.json").read_text()) for d in ("plain", "tracked"))
    assert tracked["evaluation"]["summary"] == plain["evaluation"]["summary"]
    assert [r["final_loss"] for r in tracked["runs"]] == [r["final_loss"] for r in plain["runs"]]


def test_a_missing_mlflow_is_one_line_naming_the_extra_before_any_work(card, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "mlflow", None)
    code, _, err = run_cli([*attack_args(card, tmp_path / "r"), "--track", "mlflow"], capsys)
    assert code != 0 and "pip install 'reconbench[mlflow]'" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "r").exists()


def test_bench_logs_each_cell_as_a_run(tmp_path, toy_attack_registered, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)   # a database store keeps its artefacts in ./mlruns
    suite = tmp_path / "s.toml"
    suite.write_text('[suite]\nname = "tracked"\nseeds = [0]\nsearch_runs = 2\n\n[protocol]\nfigures = false\n'
                     'null_draws = 1\ncalibration_draws = 2\n\n' + toy_targets(10)
                     + '\n[attacks.toy_identity]\nconfig = { steps = 1 }\n\n[[grid]]\ntargets = ["bin"]\n'
                       'attacks = ["toy_identity"]\n')
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    code, _, err = run_cli(["bench", str(suite), "--out", str(tmp_path / "out"), "--quiet", "--track", "mlflow",
                            "--track-uri", uri], capsys)
    assert code == 0, err
    client = mlflow.MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name("tracked").experiment_id])
    (cell,) = (tmp_path / "out" / "cells").glob("*.json")
    rec = json.loads(cell.read_text())
    assert run.info.run_name == rec["cell_id"] == run.data.tags["reconbench.cell_id"]
    assert run.data.params["cell.cell_key"] == rec["cell_key"]
    assert run.data.metrics["pool.membership_auc"] == rec["selections"]["pool"]["summary"]["membership_auc"]
