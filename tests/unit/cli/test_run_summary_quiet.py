"""`reconbench run`'s summary: an unavailable LPIPS (no backbone weights, the same reason on every run) takes one short
line: with -q pointing to result.json, without -q naming the reason and where its fix is, once per process; the whole
reason stays in result.json and `reconbench doctor` prints it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _helpers.cli import run_cli
from _helpers.recordkit import run_result

import reconbench.cli.run_cmd as run_cmd
from reconbench.cli.run_cmd import headline_lines
from reconbench.evaluation.lpips_metric import NO_BACKBONE
from reconbench.records import StoredEvaluation

#: a reason as long as the one LPIPS gives when its backbone weights are missing
REASON = (f"{NO_BACKBONE} (alexnet.pth does not exist) and reconbench never "
          "downloads weights; place alexnet.pth there, or set lpips.backbone_weights")
SUMMARY = {"n_train": 12, "distinct_share": 0.5, "lpips_mean": "unavailable", "lpips_mean_unavailable_reason": REASON}


def _lpips_lines(lines: list[str]) -> list[str]:
    return [line for line in lines if "lpips" in line.lower()]


@pytest.fixture(autouse=True)
def fresh_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts as a process that has said nothing about LPIPS yet."""
    monkeypatch.setattr(run_cmd, "_LPIPS_SAID", set())


def test_quiet_summary_says_unavailable_in_one_short_line() -> None:
    evaluation = StoredEvaluation.written(summary=dict(SUMMARY), per_image=[])
    quiet, full = headline_lines(evaluation, quiet=True), headline_lines(evaluation)
    assert _lpips_lines(quiet) == ["  lpips_mean: unavailable (see result.json)"]
    (line,) = _lpips_lines(full)
    assert len(line) <= 120 and "AlexNet weights" in line and "reconbench doctor" in line, line
    # every other line is the same with and without -q
    assert [line for line in quiet if "lpips" not in line] == [line for line in full if "lpips" not in line]


@pytest.mark.parametrize("flags, reason_shown", [(["-q"], False), ([], True)])
def test_run_command_hands_quiet_to_its_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch, flags: list[str],
                                                reason_shown: bool) -> None:
    """The quick start's command, its training and attack replaced by a stored result (no run)."""
    import reconbench.cli.run_cmd as run_cmd

    stored = run_result("multiclass_kkt", SUMMARY).to_dict()

    def stored_attack(card: object, resolved: object, out_dir: Path, **_: Any) -> dict[str, Any]:
        return stored

    monkeypatch.setattr(run_cmd, "get_or_train", lambda *a, **k: object())
    monkeypatch.setattr(run_cmd, "run_attack", stored_attack)
    code, out, err = run_cli(["run", "--attack", "multiclass_kkt", "--out", str(tmp_path / "run"), *flags], capsys)
    assert code == 0, err
    lines = _lpips_lines(out.splitlines())
    assert len(lines) == 1 and len(lines[0]) <= 120 and REASON not in lines[0]
    assert ("reconbench doctor" in lines[0]) is reason_shown
    assert (lines[0] == "  lpips_mean: unavailable (see result.json)") is not reason_shown


def test_the_reason_is_said_once_per_process() -> None:
    evaluation = StoredEvaluation.written(summary=dict(SUMMARY), per_image=[])
    first, second = (_lpips_lines(headline_lines(evaluation)) for _ in range(2))
    assert "reconbench doctor" in first[0] and second == ["  lpips_mean: unavailable (as above)"]


@pytest.mark.parametrize("missing", ["backbone", "package"])
def test_each_reason_lpips_gives_has_a_short_form(missing: str, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The reasons come from the check itself (not copied here): a short form names what is missing and the fix."""
    import importlib.util

    from reconbench.evaluation import lpips_metric

    if missing == "package":
        monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    elif importlib.util.find_spec("lpips") is None:
        pytest.skip("the lpips package is not installed: the check stops at the package")
    with pytest.raises(lpips_metric.LpipsUnavailable) as info:
        lpips_metric.check_available(str(tmp_path / "absent.pth"))
    whole = str(info.value)
    short = lpips_metric.short_reason(whole)
    assert len(whole) > 120 or missing == "package"
    assert len(short) < 90 and "\n" not in short
    assert ("pip install" in short) if missing == "package" else ("AlexNet weights" in short and "doctor" in short)
    assert lpips_metric.short_reason("a reason nobody wrote down yet; fix it " + "x" * 200).endswith("says more")


def test_doctor_prints_the_whole_reason(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from reconbench import blas
    from reconbench.evaluation import lpips_metric

    monkeypatch.setattr(lpips_metric, "availability", lambda: (False, REASON))
    real = blas.examine
    monkeypatch.setattr(blas, "examine", lambda seconds: real(0.01))
    code, out, err = run_cli(["doctor", "--seconds", "0.01"], capsys)
    assert code == 0, err
    assert f"LPIPS:       unavailable: {REASON}" in out.splitlines()
