"""End to end: a run records the protocol, `reconbench evaluate` reproduces it exactly, swaps it, and fails clearly."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from _helpers.cli import run_cli

from reconbench import hookimpl, plugins
from reconbench.config import option
from reconbench.interfaces import InitRegime

TINY = ["--dataset", "digits", "--task", "binary", "--n-per-class", "3", "--widths", "16,16", "--steps", "30"]
PNG = b"\x89PNG\r\n\x1a\n"


@dataclass
class TruthConfig:
    noise: float = option(0.01, "standard deviation of the noise added to the copies")


@dataclass(frozen=True)
class TruthCopyInit(InitRegime):
    """Test-only oracle init: noisy copies of the training images (so that there is something to find)."""

    name: str = "test_truth_copy"
    description: str = "test-only: noisy copies of the training images"
    oracle: bool = True
    config_cls: type = TruthConfig

    def is_oracle(self, config: Any) -> bool:
        return True

    def make(self, problem: Any, labels: torch.Tensor, config: TruthConfig, *, generator: torch.Generator,
             dtype: torch.dtype) -> torch.Tensor:
        x = problem.x_train(torch.float64)
        idx = torch.arange(len(labels)) % len(x)
        return (x[idx] + config.noise * torch.randn(x[idx].shape, generator=generator, dtype=torch.float64)).to(dtype)


class TruthPlugin:
    @hookimpl
    def register_inits(self, register):  # type: ignore[no-untyped-def]
        register(TruthCopyInit())


@pytest.fixture
def truth_init_registered():
    host = plugins.host()
    name = host.register(TruthPlugin(), name="test-truth-plugin")
    yield
    host.unregister(name)



def test_run_records_the_protocol_and_evaluate_reproduces_it(tmp_path, capsys, toy_attack_registered,
                                                             truth_init_registered):
    card, res = tmp_path / "card", tmp_path / "res"
    code, _, err = run_cli(["train", *TINY, "--out", str(card), "-q"], capsys)
    assert code == 0, err
    code, out, err = run_cli(["run", "--attack", "toy_identity", "--model", str(card), "--init", "test_truth_copy",
                              "--search-runs", "2", "--out", str(res), "-q"], capsys)
    assert code == 0, err
    assert "reconstructed (papers' protocol) [higher = more leakage]: 6" in out
    assert "init_copy_share [lower = more leakage]" in out
    assert "reconstructed (calibrated headline): 6 of 6  | held-out null" in out
    result = json.loads((res / "result.json").read_text())
    ev = result["evaluation"]
    assert ev["protocol"]["distance"] == "ncc2" and ev["protocol"]["avg_threshold"] == 1.1
    assert ev["protocol"]["family"] == "mlp" and ev["protocol"]["metrics"]["ssim"]["config"]["window_size"] == 3
    assert ev["summary"]["reconstructed"] == 6 and ev["summary"]["membership_precision"] == 1.0
    assert ev["summary"]["lpips_mean"] in ("unavailable",) or isinstance(ev["summary"]["lpips_mean"], float)
    broken = {n: m["reason"] for n, m in ev["metrics"].items() if not m["available"] and n != "lpips"}
    assert not broken
    rows = ev["per_image"]
    assert len(rows) == 6 and all(r["margin"] is not None for r in rows)
    margins = json.loads((card / "card.json").read_text())["metrics"]["margins"]
    assert [r["margin"] for r in rows] == margins
    assert all(set(r["candidate_runs"]) <= {0, 1} for r in rows)
    for fig in ("reconstructions", "score_vs_boundary"):
        assert (res / ev["figures"][fig]).read_bytes()[:8] == PNG

    # re-scoring with the stored protocol reproduces every stored number exactly
    code, out, err = run_cli(["evaluate", str(res), "--check"], capsys)
    assert code == 0, err
    assert "stored numbers reproduced (relative tolerance" in out
    assert ev["summary"]["membership_auc"] == 1.0 and ev["summary"]["membership_tpr_at_fpr"] == 1.0

    # a result stored before a metric was registered still checks: re-scoring computes the metrics it computed
    older = json.loads(json.dumps(result))
    e = older["evaluation"]
    del e["protocol"]["metrics"]["membership_test"], e["metrics"]["membership_test"]
    new_keys = ("membership_auc", "membership_tpr_at_fpr")
    for part in (e["summary"], e["null"]["summary"], e["null"]["spread"], *e["null"]["per_draw"]):
        for k in new_keys:
            del part[k]
    for row in e["per_image"]:
        del row["membership_score"]
    (res / "result.json").write_text(json.dumps(older))
    code, out, err = run_cli(["evaluate", str(res), "--check"], capsys)
    assert code == 0 and "stored numbers reproduced (relative tolerance" in out, err
    (res / "result.json").write_text(json.dumps(result))

    # a swapped protocol is written beside the result, with its parameters
    code, out, err = run_cli(["evaluate", str(res), "--protocol-set", "distance=ncc", "--protocol-set",
                              "ssim.window_size=5", "-q"], capsys)
    assert code == 0, err
    written = list((res / "evaluations").glob("*/evaluation.json"))
    swapped = [json.loads(p.read_text()) for p in written]
    swapped = [s for s in swapped if not s["stored_protocol"]][0]
    assert swapped["evaluation"]["protocol"]["distance"] == "ncc"
    assert swapped["evaluation"]["protocol"]["metrics"]["ssim"]["config"]["window_size"] == 5
    assert swapped["reproduces_stored"] is None

    # the calibration is recorded with every parameter, and re-scored like every other number
    cal = ev["protocol"]["calibration"]
    assert cal["calibration_draws"] == 19 and cal["null_draws"] == 5 and cal["score"] == "corr"
    assert cal["threshold"] == ev["summary"]["calibrated_threshold"] == max(cal["draw_maxima"])
    assert ev["summary"]["reconstructed_calibrated"] == 6 and ev["null"]["draws"] == 5
    tampered = json.loads((res / "result.json").read_text())
    tampered["evaluation"]["null"]["per_draw"][0]["reconstructed"] += 1
    (res / "result.json").write_text(json.dumps(tampered))
    code, out, err = run_cli(["evaluate", str(res), "--check"], capsys)
    assert code != 0 and "null.per_draw[0].reconstructed" in out + err
    (res / "result.json").write_text(json.dumps(result))

    # a tampered stored number is caught
    result["evaluation"]["summary"]["reconstructed"] = 5
    (res / "result.json").write_text(json.dumps(result))
    code, _, err = run_cli(["evaluate", str(res), "--check", "-q"], capsys)
    assert code == 2 and "not reproduced" in err and "summary.reconstructed" in err and "Traceback" not in err

    # bad protocol keys: one clear line
    code, _, err = run_cli(["evaluate", str(res), "--protocol-set", "distanse=ncc"], capsys)
    assert code == 2 and "Did you mean: distance" in err and "Traceback" not in err

    # the problem cannot be rebuilt when the card's recorded subset does not match the data
    card_json = card / "card.json"
    original = card_json.read_text()
    data = json.loads(original)
    data["problem"]["indices"]["train"] = data["problem"]["indices"]["train"][::-1]
    card_json.write_text(json.dumps(data))
    code, _, err = run_cli(["evaluate", str(res)], capsys)
    assert code == 2 and "content_sha256" in err and "Traceback" not in err  # the card's hash catches the edit
    del data["content_sha256"]  # a card without the hash: rebuilding the subset still catches it
    card_json.write_text(json.dumps(data))
    code, _, err = run_cli(["evaluate", str(res)], capsys)
    assert code == 2 and "cannot rebuild the problem" in err and "other images" in err and "Traceback" not in err
    card_json.write_text(original)

    # the problem cannot be rebuilt when the card is gone; --model points at where it went
    moved = tmp_path / "moved-card"
    shutil.move(str(card), str(moved))
    code, _, err = run_cli(["evaluate", str(res)], capsys)
    assert code == 2 and "cannot rebuild the problem" in err and "--model" in err and "Traceback" not in err
    code, _, err = run_cli(["evaluate", str(res), "--model", str(moved), "-q"], capsys)
    assert code == 0, err


def test_evaluate_on_a_folder_without_a_result(tmp_path, capsys):
    code, _, err = run_cli(["evaluate", str(tmp_path)], capsys)
    assert code == 2 and "no result.json" in err
    (tmp_path / "result.json").write_text("{not json")
    code, _, err = run_cli(["evaluate", str(tmp_path)], capsys)
    assert code == 2 and "not valid JSON" in err
    (tmp_path / "result.json").write_text(json.dumps({"kind": "reconbench-result/1", "target": {}, "spec": {}}))
    code, _, err = run_cli(["evaluate", str(tmp_path)], capsys)
    assert code == 2 and "candidates.safetensors is missing" in err


def test_run_rejects_a_bad_protocol_before_any_work(tmp_path, capsys, toy_attack_registered):
    code, _, err = run_cli(["run", "--attack", "toy_identity", *TINY, "--protocol-set", "ssim.window=5", "-q",
                            "--out", str(tmp_path / "r")], capsys)
    assert code == 2 and "unknown option 'window'" in err and "window_size" in err
    assert not (tmp_path / "r").exists()


def test_list_metrics_shows_them(capsys):
    code, out, _ = run_cli(["list", "metrics"], capsys)
    assert code == 0
    for name in ("ssim", "ssim_standard", "lpips", "membership", "init_copy", "collapse"):
        assert name in out
    assert "higher is better" in out and "lower is better" in out
