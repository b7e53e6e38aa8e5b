"""A pass rate with its interval: how often candidate sets of some kind passed a test, out of how many draws.

The interval is Clopper-Pearson's exact binomial interval (scipy.stats.binomtest), which holds its coverage at any
rate and any number of draws (no normal approximation, which fails near 0 where these rates live).
"""

from __future__ import annotations

from typing import Any

from scipy.stats import binomtest


def pass_rate(passed: int, draws: int, level: float = 0.95) -> dict[str, Any]:
    """``passed`` of ``draws``: the rate and its two-sided ``level`` Clopper-Pearson interval."""
    if draws <= 0:
        raise ValueError(f"a pass rate needs at least one draw, got {draws}")
    if not 0 <= passed <= draws:
        raise ValueError(f"passed must be between 0 and the {draws} draws, got {passed}")
    ci = binomtest(passed, draws).proportion_ci(confidence_level=level, method="exact")
    return {"passed": passed, "draws": draws, "rate": passed / draws, "interval": [float(ci.low), float(ci.high)],
            "interval_level": level, "interval_method": "Clopper-Pearson (exact binomial)"}
