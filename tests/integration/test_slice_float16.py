"""A board published from slices: its sampled candidates travelled in float16, and ``leaderboard --verify`` re-scores
them with a tolerance derived from float16 rounding (reconbench.evaluation.decisions.float16_tolerance), accepting
the honest cell and refusing a forged number or forged candidates."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from _helpers.cli import run_cli
from safetensors.torch import save

from reconbench.evaluation import decisions
from reconbench.leaderboard.slim import candidates_file, read_candidates, write_candidates
from reconbench.leaderboard.verify import check_cell, stored_cells

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TINY = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu" / "tiny.toml"


@pytest.fixture
def board(tmp_path, capsys) -> Path:
    """tiny.toml run as one slice (CPU), merged here, published: the sampled cell's candidates are float16 values."""
    code, out, err = run_cli(["bench", str(TINY), "--device", "cpu", "--deadline", "600", "--pack",
                              str(tmp_path / "pack"), "--out", str(tmp_path / "device"), "--cache",
                              str(tmp_path / "cache"), "-q"], capsys)
    assert code == 0, out + err
    local = tmp_path / "local"
    assert run_cli(["bench", str(TINY), "--unpack", str(tmp_path / "pack"), "--out", str(local)], capsys)[0] == 0
    lb = tmp_path / "lb"
    code, out, err = run_cli(["leaderboard", str(TINY), "--results", str(local), "--out", str(lb)], capsys)
    assert code == 0, out + err
    return lb


def test_the_float16_tolerance_is_float16_rounding_through_the_scores():
    u = 2.0 ** -11
    assert decisions.float16_tolerance(100) == pytest.approx(8 * (2 * u + u * u) + decisions.score_tolerance(100))
    assert 7e-3 < decisions.float16_tolerance(100) < 8e-3
    x = torch.randn(50, dtype=torch.float64)
    assert not decisions.holds_float16_values(x) and decisions.holds_float16_values(x.half().double())
    assert not decisions.holds_float16_values(torch.arange(3))   # integers are not candidates


def test_verify_accepts_the_float16_sample_and_refuses_forgeries(board, capsys, monkeypatch):
    (cid,) = stored_cells(board)
    stored = read_candidates(candidates_file(board, cid))
    assert decisions.holds_float16_values(stored["candidates"].double())
    check = check_cell(board, cid)
    assert check.problems == [], check.problems
    assert check.rtol > decisions.score_tolerance(10**6)   # the float16 tolerance was the one applied
    code, out, err = run_cli(["leaderboard", str(TINY), "--out", str(board), "--verify"], capsys)
    assert code == 0, out + err
    with monkeypatch.context() as m:   # at float64's rounding tolerance alone the float16 values do not reproduce
        m.setattr(decisions, "holds_float16_values", lambda values: False)
        assert check_cell(board, cid).problems

    # a forged number, well outside float16's rounding: refused
    cell_file = board / "cells" / f"{cid}.json"
    honest = cell_file.read_text()
    rec = json.loads(honest)
    summary = rec["selections"]["blind"]["summary"]
    key = next(k for k, v in summary.items() if isinstance(v, float) and abs(v) > 0.05)
    summary[key] *= 1.05
    cell_file.write_text(json.dumps(rec))
    problems = check_cell(board, cid).problems
    assert any(f"[blind] {key}" in p for p in problems), problems
    cell_file.write_text(honest)

    # forged candidates (the stored ones plus noise of a tenth of their spread, rounded to float16 again): refused
    path = candidates_file(board, cid)
    assert path is not None
    forged = dict(stored)
    x = stored["candidates"].double()
    noise = torch.randn(x.shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    forged["candidates"] = (x + 0.1 * float(x.std()) * noise).half().to(stored["candidates"].dtype)
    if path.name.endswith(".xz"):
        write_candidates(path, forged)
    else:
        path.write_bytes(save({k: v.contiguous() for k, v in forged.items()}))
    assert check_cell(board, cid).problems
