"""Small helpers shared by the metrics: thresholded counts, top-k means, JSON-safe values."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from reconbench.evaluation import decisions


def top_k_mean(scores: np.ndarray, k: int) -> float:
    """Mean of the k highest scores, NaN (unmatched) counting as 0; k is capped at the number of images."""
    if len(scores) == 0:
        return 0.0
    filled = np.where(np.isnan(scores), 0.0, scores)
    k = min(k, len(filled))
    return float(np.sort(filled)[::-1][:k].mean())


def threshold_summary(scores: np.ndarray, threshold: float, k: int, column: str,
                      suffix: str = "") -> tuple[dict[str, Any], dict[str, list[Any]]]:
    """Headline numbers and per-image columns for a higher-is-better score (NaN = unmatched): the score, the decision
    ``reconstructed{suffix}`` (score > threshold) and its margin ``reconstructed{suffix}_margin`` (score - threshold),
    which says how near rounding could bring the decision (``decisions.py``)."""
    good = decisions.above(scores, threshold, f"reconstructed{suffix}")
    matched = ~np.isnan(scores)
    summary: dict[str, Any] = {
        f"reconstructed{suffix}": int(good.sum()),
        f"top_k_mean_{column}": top_k_mean(scores, k),
        f"mean_{column}_matched": float(scores[matched].mean()) if matched.any() else None,
    }
    per_image: dict[str, list[Any]] = {column: column_values(scores), f"reconstructed{suffix}": [bool(g) for g in good],
                                       f"reconstructed{suffix}_margin": column_values(scores - threshold)}
    return summary, per_image


def column_values(values: np.ndarray) -> list[float | None]:
    """Floats for JSON, None where NaN or infinite."""
    return [None if not math.isfinite(float(v)) else float(v) for v in values]


def jsonable(obj: object) -> Any:
    """Recursively convert numpy/torch scalars and arrays; NaN and infinities become None."""
    import torch

    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, torch.Tensor):
        return jsonable(obj.detach().cpu().tolist())
    if isinstance(obj, np.ndarray):
        return jsonable(obj.tolist())
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        f = float(obj)
        return f if math.isfinite(f) else None
    return obj
