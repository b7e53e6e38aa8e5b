"""What a newcomer meets in the first hour, from the docs' examples: each point of the list that tripped one up."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from _helpers.cli import run_cli

from reconbench.cli.run_cmd import default_out_dir, run_config
from reconbench.provenance import config_hash
from reconbench.runs.spec import RunSpec

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--dataset", "digits", "--task", "binary", "--n-per-class", "3", "--widths", "16,16", "--steps", "30"]


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs git and a checkout")
def test_the_train_examples_targets_folder_is_ignored_by_git():
    for path in ("targets/mnist-oddeven/card.json", "targets/digits-mc/weights.safetensors"):
        done = subprocess.run(["git", "check-ignore", "-q", path], cwd=ROOT, check=False)
        assert done.returncode == 0, f"{path} is not ignored by git"
    # and a tracked source file is not
    assert subprocess.run(["git", "check-ignore", "-q", "reconbench/__init__.py"], cwd=ROOT, check=False).returncode == 1


def test_the_default_run_folder_names_a_configuration_other_than_the_default():
    plain = RunSpec(attack="haim_binary_kkt", search_runs=6)
    assert default_out_dir("key", plain, 6) == Path("runs") / "haim_binary_kkt-gaussian-key-s0"
    assert default_out_dir("key", RunSpec(attack="haim_binary_kkt", search_runs=6, device="cuda"), 6) == \
        default_out_dir("key", plain, 6)   # the device does not change the numbers
    others = [RunSpec(attack="haim_binary_kkt", search_runs=12, search="optuna", search_config={"batch": 4}),
              RunSpec(attack="haim_binary_kkt", search_runs=6, attack_config={"steps": 10}),
              RunSpec(attack="haim_binary_kkt", search_runs=6, dtype="float32"),
              RunSpec(attack="haim_binary_kkt", search_runs=2)]
    folders = [default_out_dir("key", spec, 6) for spec in others]
    assert len(set(folders)) == len(others) and default_out_dir("key", plain, 6) not in folders
    for spec, folder in zip(others, folders, strict=True):
        assert folder.name.endswith(config_hash(run_config("key", spec.to_dict()))[:8])


def test_an_optuna_run_after_a_default_run_gets_its_own_folder(tmp_path, capsys, monkeypatch, toy_attack_registered):
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli(["run", "--attack", "toy_identity", *TINY, "--search-runs", "2", "-q"], capsys)
    assert code == 0, err
    code, _, err = run_cli(["run", "--attack", "toy_identity", *TINY, "--search-runs", "2", "--set", "steps=5", "-q"],
                           capsys)
    assert code == 0, err
    assert len(list((tmp_path / "runs").glob("toy_identity-gaussian-*"))) == 2


def test_rerunning_a_finished_run_keeps_its_wall_time(tmp_path, capsys, toy_attack_registered):
    args = ["run", "--attack", "toy_identity", *TINY, "--search-runs", "2", "--out", str(tmp_path / "res"), "-q"]
    assert run_cli(args, capsys)[0] == 0
    result = tmp_path / "res" / "result.json"
    first = json.loads(result.read_text())
    first["wall_seconds"] = 123.25   # as if the attack had taken that long: a re-run must not replace it
    result.write_text(json.dumps(first))
    assert run_cli(args, capsys)[0] == 0
    assert json.loads(result.read_text())["wall_seconds"] == 123.25
