"""A slice prints, before its first cell, the plan it starts from (its cells, their estimates, the deadline): the
log of a slice killed at its time limit says what it was doing."""

from __future__ import annotations

from pathlib import Path

TINY = Path(__file__).resolve().parents[3] / "benchmarks" / "gpu" / "tiny.toml"


def test_a_slice_prints_its_plan_before_the_first_cell(tmp_path, capsys):
    from _helpers.cli import run_cli

    code, text, err = run_cli(["bench", str(TINY), "--device", "cpu", "--deadline", "120", "--pack",
                               str(tmp_path / "pack"), "--only", "*--gaussian--*", "--out", str(tmp_path / "res"),
                               "--cache", str(tmp_path / "cache"), "-q"], capsys)
    assert code == 0, err
    head = text.index("the plan this slice starts from (estimates; the slice re-plans after every cell), deadline 120s:")
    assert text.index("suite gpu-tiny on cpu, slices of 120s (10s kept for the pack), built-in cost table:") > head
    assert text.index("digits-binary--haim_binary_kkt--gaussian--s0") > head
    assert "break-even" not in text   # the slice's log keeps to its plan
    assert text.index("suite gpu-tiny: 1 cell(s) ran") > text.index("1 cell(s) in 1 slice(s), 0 that fit none")
