"""`reconbench run`'s summary: with -q an unavailable number (LPIPS without its backbone weights) takes one short
line pointing to result.json; without -q it keeps its whole reason."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _helpers.cli import run_cli
from _helpers.recordkit import run_result

from reconbench.cli.run_cmd import headline_lines
from reconbench.records import StoredEvaluation

#: a reason as long as the one LPIPS gives when its backbone weights are missing
REASON = ("the ImageNet AlexNet backbone weights are not available (alexnet.pth does not exist) and reconbench never "
          "downloads weights; place alexnet.pth there, or set lpips.backbone_weights")
SUMMARY = {"n_train": 12, "distinct_share": 0.5, "lpips_mean": "unavailable", "lpips_mean_unavailable_reason": REASON}


def _lpips_lines(lines: list[str]) -> list[str]:
    return [line for line in lines if "lpips" in line.lower()]


def test_quiet_summary_says_unavailable_in_one_short_line() -> None:
    evaluation = StoredEvaluation.written(summary=dict(SUMMARY), per_image=[])
    quiet, full = headline_lines(evaluation, quiet=True), headline_lines(evaluation)
    assert _lpips_lines(quiet) == ["  lpips_mean: unavailable (see result.json)"]
    assert len(_lpips_lines(full)) == 1 and REASON in _lpips_lines(full)[0]
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
    assert len(lines) == 1 and (REASON in lines[0]) is reason_shown
    assert (lines[0] == "  lpips_mean: unavailable (see result.json)") is not reason_shown
