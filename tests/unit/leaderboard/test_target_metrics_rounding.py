"""A cell's target metrics against the board's model card: exact when a board is verified, to a re-run's rounding
when an outside submission's target was trained again (its weights are checked equal to the board's separately)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from reconbench.leaderboard.slim import RERUN_RTOL
from reconbench.leaderboard.verify import check_records

REPO = Path(__file__).resolve().parents[3]
CARD = "7013704e134ac47f"   # digits-binary, seed 0, of the published ci board
CELL = "digits-binary--haim_binary_kkt--gaussian--s0"   # one of its cells
FIELD = "train_metrics.certificate.learned.ratio"


@pytest.fixture
def board(tmp_path: Path) -> Path:
    """The ci board, one of whose cells shows its target's metrics as a submitted entry does (the published entries
    are slim and leave them out)."""
    copy = tmp_path / "ci"
    shutil.copytree(REPO / "leaderboards" / "ci", copy)
    cell = json.loads((copy / "cells" / f"{CELL}.json").read_text())
    assert cell["target"]["recipe_key"] == CARD
    metrics = json.loads((copy / "targets" / f"{CARD}.json").read_text())["metrics"]
    cell["target"]["train_metrics"] = {k: v for k, v in metrics.items() if k != "margins"}   # as a cell shows them
    (copy / "cells" / f"{CELL}.json").write_text(json.dumps(cell))
    return copy


def metric_problems(board: Path, rtol: float = 0.0) -> list[str]:
    return [p for p in check_records(board, metrics_rtol=rtol).problems if "train_metrics." in p]


def nudge_certificate(board: Path, relative: float) -> float:
    """Scale the card's learned-part ratio by 1 + relative (what training again computes, rounded otherwise)."""
    path = board / "targets" / f"{CARD}.json"
    card = json.loads(path.read_text())
    old = card["metrics"]["certificate"]["learned"]["ratio"]
    card["metrics"]["certificate"]["learned"]["ratio"] = old * (1 + relative)
    path.write_text(json.dumps(card))
    return old


def test_the_cards_own_metrics_agree_exactly(board):
    assert metric_problems(board) == []


def test_a_last_digit_difference_is_refused_exactly_and_accepted_at_a_reruns_rounding(board):
    nudge_certificate(board, 4e-15)
    exact = metric_problems(board)
    assert len(exact) == 1 and FIELD in exact[0] and CELL in exact[0]
    assert metric_problems(board, RERUN_RTOL) == []


def test_a_real_difference_is_refused_at_a_reruns_rounding_too(board):
    nudge_certificate(board, 1e-3)
    problems = metric_problems(board, RERUN_RTOL)
    assert len(problems) == 1 and FIELD in problems[0]
