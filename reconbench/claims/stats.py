"""The tests that combine a claim's seeds into one decision, each with a stated error rate.

* :func:`binomial_p`: k seeds, each with a per-seed test whose false-positive rate under the null is at most ``p0``
  (the calibrated headline: 5%; "beyond every one of D held-out null draws": 1 / (D + 1)). Under the null the
  number of seeds that pass is stochastically at most Binomial(k, p0), so P(Binomial(k, p0) >= passes) is a valid
  one-sided p-value.
* :func:`sign_p`: per seed, is the value on the claimed side of a fixed threshold? Under the null (the median lies
  at the threshold or on the other side) each untied seed is on the claimed side with probability at most 1/2.
* :func:`trend_p`: values of several points (an axis) per seed; the statistic is the linear contrast
  sum_s sum_j (j - (m - 1)/2) v[s, j], and its null distribution permutes each seed's values across the points
  (no effect of the axis: the points are exchangeable within a seed). Exact (every permutation) up to
  :data:`EXACT_LIMIT` arrangements, else a seeded Monte Carlo estimate. With two points this is the paired
  sign-flip (permutation) test.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np

#: the level of every decision (one-sided unless a rule says otherwise)
ALPHA = 0.05
#: the largest number of arrangements :func:`trend_p` enumerates; beyond it, MONTE_CARLO random ones
EXACT_LIMIT = 1_000_000
MONTE_CARLO = 20_000


def binomial_p(passes: int, k: int, p0: float) -> float:
    """P(Binomial(k, p0) >= passes): the chance that at least ``passes`` of ``k`` seeds pass a per-seed test whose
    false-positive rate is at most ``p0`` when nothing is there."""
    if not 0 <= passes <= k:
        raise ValueError(f"passes must lie in [0, {k}], got {passes}")
    if not 0.0 < p0 < 1.0:
        raise ValueError(f"p0 must lie in (0, 1), got {p0}")
    from scipy import stats  # imported where used: scipy.stats (with scipy.optimize) takes about 0.5 s of CPU

    return float(stats.binom.sf(passes - 1, k, p0)) if passes else 1.0


def sign_p(values: Sequence[float], threshold: float, above: bool) -> tuple[float, int, int]:
    """(one-sided p-value, seeds on the claimed side, untied seeds) of the sign test of ``values`` against
    ``threshold``; ``above``: the claim is that values lie above it. Seeds exactly at the threshold are dropped."""
    wins = sum(1 for v in values if (v > threshold if above else v < threshold))
    untied = sum(1 for v in values if v != threshold)
    return binomial_p(wins, untied, 0.5) if untied else 1.0, wins, untied


def _arrangements(row: np.ndarray, contrast: np.ndarray) -> np.ndarray:
    """The contrast of every permutation of one seed's values."""
    perms = np.array(list(itertools.permutations(range(len(row)))))
    return (row[perms] * contrast).sum(axis=1)


def trend_p(values: np.ndarray, seed: int = 0) -> tuple[float, float, float, str]:
    """(p increasing, p decreasing, observed statistic, how p was computed) for ``values`` (seeds x points).

    p increasing = P(T* >= T) under within-seed permutation, p decreasing = P(T* <= T)."""
    v = np.asarray(values, dtype=np.float64)
    if v.ndim != 2 or v.shape[1] < 2 or v.shape[0] < 1:
        raise ValueError(f"trend_p needs a (seeds x points) array with at least 2 points, got shape {v.shape}")
    k, m = v.shape
    contrast = np.arange(m, dtype=np.float64) - (m - 1) / 2.0
    observed = float((v * contrast).sum())
    tol = 1e-9 * max(1.0, float(np.abs(v).max()) * float(np.abs(contrast).sum()) * k)
    rows = [_arrangements(v[s], contrast) for s in range(k)]
    total = math.factorial(m) ** k
    if total <= EXACT_LIMIT:
        sums = np.zeros(1)
        for r in rows:
            sums = (sums[:, None] + r[None, :]).ravel()
        up, down = float((sums >= observed - tol).mean()), float((sums <= observed + tol).mean())
        return up, down, observed, f"exact over {total:,} within-seed permutations"
    rng = np.random.default_rng(seed)
    draws = np.zeros(MONTE_CARLO)
    for r in rows:
        draws += r[rng.integers(0, len(r), MONTE_CARLO)]
    up = (1.0 + float((draws >= observed - tol).sum())) / (MONTE_CARLO + 1)
    down = (1.0 + float((draws <= observed + tol).sum())) / (MONTE_CARLO + 1)
    return up, down, observed, f"Monte Carlo over {MONTE_CARLO:,} within-seed permutations (seed {seed})"


def spearman(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Spearman rank correlation (average ranks for ties); None when either side is constant or fewer than 3."""
    if len(x) != len(y):
        raise ValueError(f"spearman needs equally long sequences, got {len(x)} and {len(y)}")
    a, b = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if len(a) < 3 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return None
    ra, rb = average_ranks(a), average_ranks(b)
    return float(np.corrcoef(ra, rb)[0, 1])


def average_ranks(v: np.ndarray) -> np.ndarray:
    """1-based ranks, tied values sharing their mean rank: scipy.stats.rankdata's default, equal to it bit for bit.

    Written out (six lines of numpy) because every evaluation with a model card ranks its margins, and importing
    scipy.stats for it costs about 0.5 s of CPU per process.
    """
    if np.isnan(v).any():
        return np.full(len(v), np.nan)   # as rankdata's default nan_policy ("propagate")
    order = np.argsort(v, kind="mergesort")
    sorted_v = v[order]
    starts = np.flatnonzero(np.r_[True, sorted_v[1:] != sorted_v[:-1]])   # first position of each run of ties
    ends = np.r_[starts[1:], len(v)]                                       # one past its last position
    ranks = np.empty(len(v), dtype=np.float64)
    ranks[order] = np.repeat(0.5 * (starts + 1 + ends), ends - starts)     # mean of the 1-based ranks starts+1..ends
    return ranks
