"""The command line end to end on tiny settings, with a toy attack that exercises the harness."""

from __future__ import annotations

import json

import pytest
from _helpers.cli import run_cli

TINY = ["--dataset", "digits", "--task", "binary", "--n-per-class", "3", "--widths", "16,16", "--steps", "30"]



def test_list_and_plugins(capsys):
    code, out, _ = run_cli(["list", "models"], capsys)
    assert code == 0 and "mlp_bias" in out and "homogeneous" in out
    code, out, _ = run_cli(["plugins"], capsys)
    assert code == 0 and "register_models" in out


def test_unknown_attack_is_one_clear_line(capsys):
    code, _, err = run_cli(["run", "--attack", "toy_identiti", *TINY], capsys)
    assert code == 2 and "unknown attack 'toy_identiti'" in err and "Traceback" not in err


@pytest.mark.slow
def test_train_then_run_then_resume(tmp_path, capsys, toy_attack_registered):
    code, out, _ = run_cli(["train", *TINY, "--out", str(tmp_path / "card"), "-q"], capsys)
    assert code == 0 and "stationarity residual" in out
    args = ["run", "--attack", "toy_identity", "--model", str(tmp_path / "card"), "--search-runs", "3",
            "--out", str(tmp_path / "res"), "-q"]
    code, out, err = run_cli(args, capsys)
    assert code == 0, err
    result = json.loads((tmp_path / "res" / "result.json").read_text())
    assert len(result["runs"]) == 3 and result["target"]["task"] == "binary"
    assert result["selection"]["blind"]["run"] == min(result["runs"], key=lambda r: r["final_loss"])["run"]
    assert result["provenance"]["config_hash"] and result["provenance"]["dtype"] == "float64"
    assert (tmp_path / "res" / "candidates.safetensors").exists()
    # resume: finished runs are not recomputed
    stamps = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "res" / "runs").glob("*.safetensors")}
    before = (tmp_path / "res" / "result.json").read_bytes()
    code, _, _ = run_cli(args, capsys)
    assert code == 0
    assert stamps == {p.name: p.stat().st_mtime_ns for p in (tmp_path / "res" / "runs").glob("*.safetensors")}
    # a finished run asked again keeps its wall time instead of rewriting it with ~0 s
    assert json.loads((tmp_path / "res" / "result.json").read_text())["wall_seconds"] == json.loads(before)["wall_seconds"]
    # a partly finished run counts the attack time its read-back runs took in the earlier invocation
    (tmp_path / "res" / "result.json").unlink()
    (tmp_path / "res" / "runs" / "run-002.json").unlink()
    code, _, _ = run_cli(args, capsys)
    again = json.loads((tmp_path / "res" / "result.json").read_text())
    earlier = sum(r["seconds"] for r in again["runs"] if r["run"] in (0, 1))
    assert code == 0 and again["wall_seconds"] >= earlier > 0


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_train_warns_when_float32_gradients_underflow(tmp_path, capsys, dtype):
    # trained to margins past ~16.6, positive samples' BCE gradient is exactly 0 in float32, never in float64
    args = ["train", "--dataset", "digits", "--task", "binary", "--n-per-class", "10", "--widths", "64,64",
            "--lr", "0.05", "--steps", "1500", "--schedule", "inverse_loss", "--train-dtype", dtype,
            "--out", str(tmp_path / "card"), "-q"]
    code, out, _ = run_cli(args, capsys)
    card = json.loads((tmp_path / "card" / "card.json").read_text())
    stalled = card["metrics"]["stalled_samples"]
    assert code == 0
    if dtype == "float32":
        assert stalled > 0 and f"warning: {stalled} of 20 training samples" in out and "float64" in out
    else:
        assert stalled == 0 and "warning" not in out


def test_bad_option_values_are_clear(tmp_path, capsys, toy_attack_registered):
    code, _, err = run_cli(["run", "--attack", "toy_identity", *TINY, "--set", "stepz=3", "-q",
                            "--out", str(tmp_path / "r")], capsys)
    assert code == 2 and "unknown option 'stepz'" in err and "steps" in err
    code, _, err = run_cli(["run", "--attack", "toy_identity", *TINY, "--set", "steps=abc", "-q",
                            "--out", str(tmp_path / "r")], capsys)
    assert code == 2 and "expected an integer" in err

