"""The board's reconstructions figure for targets of different image sizes: its caption names the sizes (and says
nothing new where they agree), and ``leaderboard redraw`` draws a figure whose drawing failed where it was published
while leaving out one the cells give nothing for."""

from __future__ import annotations

import numpy as np
import pytest

from reconbench.evaluation.pair_figure import Pair, PairGroup
from reconbench.leaderboard.figures import _sizes_note
from reconbench.leaderboard.redraw import redrawable
from reconbench.records import Figure


def _group(*shapes: tuple[int, ...]) -> PairGroup:
    return PairGroup("g", [Pair(i, np.zeros(s), None) for i, s in enumerate(shapes)])


def test_the_caption_names_the_sizes_only_where_they_differ() -> None:
    assert _sizes_note([_group((1, 28, 28)), _group((1, 28, 28), (1, 28, 28))]) == ""
    assert _sizes_note([_group((3, 32, 32))]) == ""
    note = _sizes_note([_group((3, 32, 32)), _group((1, 28, 28)), _group((28, 28))])
    assert "(grey 28×28, colour 32×32)" in note and note.startswith(" ")


@pytest.mark.parametrize(("record", "expected"), [
    (None, False),
    (Figure.written(title="t", reason="no finished cell under a non-oracle init"), False),
    (Figure.written(title="t", reason="ValueError: pair #14: ...", failed=True), True),
    (Figure.written(title="t", file="figures/reconstructions.png", cells=["c"]), True),
])
def test_a_failed_figure_is_redrawn_and_one_left_out_is_not(record: Figure | None, expected: bool) -> None:
    assert redrawable(record) is expected
