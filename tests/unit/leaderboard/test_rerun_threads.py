"""A re-run trains and attacks with the torch thread count its cells recorded (a product split over another number
of threads can round differently, so a re-trained target's weights would differ from its card's)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch

from reconbench.leaderboard.rerun import recorded_threads


def _cells(*threads: Any) -> dict[str, Any]:
    return {f"c{k}": SimpleNamespace(provenance=None if t is None else {"torch_threads": t})
            for k, t in enumerate(threads)}


@pytest.fixture
def two_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def test_the_block_runs_with_the_recorded_count_and_restores_the_process_count(two_threads) -> None:
    cells = _cells(1, 1)
    with recorded_threads(cells, list(cells)):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == 2


def test_the_count_is_restored_when_the_block_raises(two_threads) -> None:
    cells = _cells(1)
    with pytest.raises(RuntimeError), recorded_threads(cells, list(cells)):
        raise RuntimeError("a failed re-run")
    assert torch.get_num_threads() == 2


@pytest.mark.parametrize("threads", [(1, 3), (None,), (None, 1), (0,)])
def test_cells_that_disagree_or_record_nothing_leave_the_count_alone(two_threads, threads) -> None:
    cells = _cells(*threads)
    with recorded_threads(cells, list(cells)):
        assert torch.get_num_threads() == 2
