"""The Spearman ranks are scipy.stats.rankdata's, bit for bit, ties and infinities included."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import rankdata, spearmanr

from reconbench.claims.stats import average_ranks, spearman


@pytest.mark.parametrize("seed", range(5))
def test_average_ranks_equal_rankdata(seed):
    rng = np.random.default_rng(seed)
    for n in (1, 2, 3, 7, 40):
        ties = rng.integers(0, 4, size=n).astype(np.float64)
        smooth = rng.normal(size=n)
        smooth[rng.integers(0, n)] = -np.inf
        for v in (ties, smooth):
            assert np.array_equal(average_ranks(v), rankdata(v))
    assert np.isnan(average_ranks(np.array([1.0, np.nan, 2.0]))).all()


def test_spearman_against_scipy():
    rng = np.random.default_rng(9)
    x, y = rng.integers(0, 5, size=30).astype(float), rng.normal(size=30)
    assert spearman(x.tolist(), y.tolist()) == pytest.approx(spearmanr(x, y).statistic, rel=1e-14, abs=1e-15)
