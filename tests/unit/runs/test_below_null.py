"""`reconbench run` says why when its calibrated headline does not beat the held-out null: the line appears exactly
when the headline is at or below the null's maximum, and names the causes the record shows (a target outside the
attack's regime, an attack whose loss did not move)."""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from _helpers.cli import run_cli
from conftest import ToyAttack

from reconbench import hookimpl, plugins
from reconbench.interfaces import AttackOutput
from reconbench.records import RunResult, SearchRun
from reconbench.runs.below_null import below_null_line, loss_moved
from reconbench.targets.regime import MAX_RESIDUAL, residual_for

TINY = ["--dataset", "digits", "--task", "binary", "--n-per-class", "3", "--widths", "16,16", "--steps", "30"]


@dataclass(frozen=True)
class StillAttack(ToyAttack):
    """Returns its starting candidates with a loss trace that stays flat: an attack that did not move."""

    name: str = "toy_still"

    def run(self, target: Any, x0: torch.Tensor, labels: torch.Tensor, config: Any, *, generator: Any,
            progress: Any = None) -> AttackOutput:
        trace = [{"step": s, "loss": 2.5} for s in range(config.steps + 1)]
        return AttackOutput(candidates=x0.clone(), labels=labels, final_loss=2.5, trace=trace, steps=config.steps)


class StillPlugin:
    @hookimpl
    def register_attacks(self, register):  # type: ignore[no-untyped-def]
        register(StillAttack())


@pytest.fixture
def still_attack_registered():  # type: ignore[no-untyped-def]
    host = plugins.host()
    name = host.register(StillPlugin(), name="still-test-plugin")
    yield StillAttack()
    host.unregister(name)


@pytest.fixture(scope="module")
def card(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("below-null") / "card"
    from reconbench.cli import main

    try:
        main(["train", *TINY, "--out", str(path), "-q"])
    except SystemExit as exc:
        assert exc.code in (0, None)
    return path


def record(headline: int, null_max: float, **extra: Any) -> dict[str, Any]:
    """A result record with only the fields the line reads."""
    rec: dict[str, Any] = {
        "attack": "toy_still",
        "evaluation": {"summary": {"reconstructed_calibrated": headline, "n_train": 20},
                       "null": {"draws": 20, "spread": {"reconstructed_calibrated": {"mean": 0.1, "max": null_max}}}},
        "target": {"train_metrics": {"train_error": 0.0}},
        "runs": [{"initial_loss": 4.0, "final_loss": 1.0, "steps": 100, "stopped": "completed"}],
    }
    rec.update(extra)
    return rec


def line_of(rec: dict[str, Any]) -> str | None:
    """The line of a result record given as its JSON (read as the record, strictly)."""
    return below_null_line(RunResult.from_dict(rec))


def runs_of(runs: list[dict[str, Any]]) -> list[SearchRun]:
    return [SearchRun.from_dict(r) for r in runs]


def test_no_line_when_the_headline_beats_the_null() -> None:
    assert line_of(record(3, 2.0)) is None
    assert line_of(record(1, 0.0)) is None


def test_a_line_at_or_below_the_nulls_maximum() -> None:
    for headline, top in ((0, 0.0), (2, 2.0), (1, 3.0)):
        line = line_of(record(headline, top))
        assert line is not None and f"({headline} of 20) does not beat" in line and f"max {top:.0f}" in line
        assert "\n" not in line and "--search-runs" in line and "--set steps=" in line and "--steps N" in line


@pytest.mark.parametrize("bar", [0.85, 0.95, 0.973])
def test_a_high_correlation_bar_is_named(bar: float) -> None:
    from reconbench.runs.below_null import HIGH_CORR_BAR

    rec = record(0, 0.0)
    rec["evaluation"]["summary"]["calibrated_threshold"] = bar
    rec["evaluation"]["protocol"] = {"calibration": {"score": "corr"}}
    line = line_of(rec)
    high = bar >= HIGH_CORR_BAR
    assert line is not None and ("bar is high" in line) == high and ("mnist_test" in line) == high
    rec["evaluation"]["protocol"] = {"calibration": {"score": "ssim"}}   # another score: another scale, not judged
    assert "bar is high" not in (line_of(rec) or "")


def test_no_line_without_a_calibrated_headline() -> None:
    rec = record(0, 0.0)
    rec["evaluation"]["summary"]["reconstructed_calibrated"] = None
    assert line_of(rec) is None


def test_a_flat_loss_is_an_attack_that_did_not_move() -> None:
    flat = [{"initial_loss": 2.5, "final_loss": 2.5, "steps": 10, "stopped": "completed"}]
    assert loss_moved(runs_of(flat)) is False
    assert loss_moved(runs_of([{"initial_loss": 2.5, "final_loss": 1.0}])) is True
    assert loss_moved(runs_of([{"final_loss": 1.0}])) is None
    line = line_of(record(0, 0.0, runs=flat))
    assert line is not None and "did not move" in line and "2.5 -> 2.5" in line
    moving = line_of(record(0, 0.0))
    assert moving is not None and "did not move" not in moving and "4 -> 1" in moving


def test_a_failed_run_does_not_count_as_a_flat_one() -> None:
    runs = [{"initial_loss": 2.5, "final_loss": 2.5, "stopped": "failed"},
            {"initial_loss": 2.5, "final_loss": 0.5, "stopped": "completed"}]
    line = line_of(record(0, 0.0, runs=runs))
    assert line is not None and "did not move" not in line


@pytest.mark.parametrize("residual", [0.05, MAX_RESIDUAL, 0.9])
def test_the_regime_residual_is_named_only_above_the_bound(residual: float) -> None:
    cert = {"regime": {"theta": {"residual": residual}}}
    rec = record(0, 0.0, attack="haim_binary_kkt", target={"train_metrics": {"certificate": cert}})
    line = line_of(rec)
    assert line is not None
    assert ("outside the attack's regime" in line) == (residual > MAX_RESIDUAL)
    assert ("train the target longer (--steps N) or with weight decay" in line) == (residual > MAX_RESIDUAL)
    assert ("inside the attack's regime" in line) == (residual <= MAX_RESIDUAL)


def test_a_regularised_target_is_told_to_train_to_stationarity() -> None:
    """general_loss_wd reads the weight-decay residual; its target already has weight decay, so the fix is training."""
    cert = {"regime": {"regularised": {"residual": 1.7}, "theta": {"residual": 0.1}}}
    line = line_of(record(0, 0.0, attack="general_loss_wd", target={"train_metrics": {"certificate": cert}}))
    assert line is not None and "regularised residual is 1.7" in line
    assert "stationary point of its regularised loss" in line and "with weight decay" not in line


def test_an_attack_without_a_stationarity_premise_is_not_gated() -> None:
    cert = {"regime": {"theta": {"residual": 0.99}}}
    line = line_of(record(0, 0.0, attack="runkel_bilevel", target={"train_metrics": {"certificate": cert}}))
    assert line is not None and "regime" not in line


@pytest.mark.slow
def test_run_prints_why_on_a_tiny_target(card: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                         still_attack_registered: Any) -> None:
    """End to end: the flat toy attack on a tiny target cannot beat the null, and the run says so on one line."""
    code, out, err = run_cli(["run", "--attack", "toy_still", "--model", str(card), "--search-runs", "2",
                              "--out", str(tmp_path / "res"), "-q"], capsys)
    assert code == 0, err
    result = json.loads((tmp_path / "res" / "result.json").read_text())
    summary = result["evaluation"]["summary"]
    top = result["evaluation"]["null"]["spread"]["reconstructed_calibrated"]["max"]
    assert summary["reconstructed_calibrated"] <= top   # the starting candidates are not reconstructions
    notes = [line for line in out.splitlines() if line.startswith("note: the calibrated headline")]
    assert len(notes) == 1 and "the attack did not move" in notes[0]
    # the same record read as a stationarity attack's: the regime clause follows the card's own residual
    cert = result["target"]["train_metrics"]["certificate"]
    residual, _ = residual_for(cert, "theta")
    assert residual is not None
    as_kkt = copy.deepcopy(result)
    as_kkt["attack"] = "haim_binary_kkt"
    line = line_of(as_kkt)
    assert line is not None and ("outside the attack's regime" in line) == (residual > MAX_RESIDUAL)


def test_a_baseline_that_takes_no_steps_is_not_told_to_take_more() -> None:
    """weight_rows and the other baselines record 0 steps: more steps or search runs would change nothing."""
    stepless = [{"initial_loss": None, "final_loss": 0.0, "steps": 0, "stopped": "completed"}]
    line = line_of(record(0, 0.0, attack="weight_rows", runs=stepless))
    assert line is not None and "takes no steps" in line and "no recorded cause" not in line
    assert "--set steps=" not in line and "--search-runs" not in line and "reconbench list attacks" in line
    stepping = line_of(record(0, 0.0, runs=[{"initial_loss": 4.0, "final_loss": 1.0, "steps": 0},
                                            {"initial_loss": 4.0, "final_loss": 1.0, "steps": 100}]))
    assert stepping is not None and "takes no steps" not in stepping and "--set steps=" in stepping
