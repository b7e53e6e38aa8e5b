"""Every interval over seeds that a board prints stays within what its number can take: a count of training images
within [0, n], a share within [0, 1]; the case a published board printed as 13.3 [-15.4, 42.0] of 20 (three seeds
at 20, 20 and 0 in the `calibrated, own bar` column, whose key no metric declared)."""

from __future__ import annotations

import math

import pytest
from scipy import stats

from reconbench.leaderboard.tables import fmt_stat, value_range
from reconbench.records import CellRecord
from reconbench.records.board_results import Stat


def records(n: int) -> list[CellRecord]:
    return [CellRecord.from_dict({"target": {"n_train": n}}) for _ in range(3)]


def t_interval(values: list[float]) -> tuple[float, float]:
    """The unclipped 95% Student-t interval of the mean, written out independently of Stat."""
    n = len(values)
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = float(stats.t.ppf(0.975, n - 1)) * sd / math.sqrt(n)
    return mean - half, mean + half


def test_the_unclipped_case_is_the_one_the_board_printed():
    lo, hi = t_interval([20.0, 20.0, 0.0])
    assert f"{lo:.1f}, {hi:.1f}" == "-15.4, 42.0"


@pytest.mark.parametrize("key", ["calibrated", "reconstructed_calibrated", "reconstructed"])
def test_a_count_of_training_images_is_clipped_to_zero_and_n(key):
    rng = value_range(key, records(20))
    assert rng == (0.0, 20.0)
    stat = Stat([20.0, 20.0, 0.0], rng)
    assert stat.ci95 == (0.0, 20.0)
    assert fmt_stat(stat, ".1f") == "13.3 [0.0, 20.0]"
    assert fmt_stat(stat.to_dict(), ".1f") == "13.3 [0.0, 20.0]"


@pytest.mark.parametrize("key", ["distinct_share", "init_copy_share", "membership_auc", "membership_precision"])
def test_a_rate_is_clipped_to_zero_and_one(key):
    rng = value_range(key, records(20))
    assert rng == (0.0, 1.0)
    values = [1.0, 1.0, 0.1]
    lo, hi = t_interval(values)
    assert lo < 0.0 and hi > 1.0   # the case needs clipping on both sides
    ci = Stat(values, rng).ci95
    assert ci == (0.0, 1.0)
