"""The evaluation protocol (to be completed by the evaluation issue).

``evaluate(problem, candidates, ...)`` scores candidates (centred space, (M, C, H, W)) against a problem and returns
a JSON-serialisable dict with ``protocol`` (every parameter), ``summary`` (flat headline numbers) and ``per_image``
(one row per training image). ``oracle_score`` is the papers' in-run extraction score used for oracle selection.
"""

from __future__ import annotations

from typing import Any

import torch

from ..problems import Problem


def oracle_score(problem: Problem, candidates: torch.Tensor) -> float:
    """The reference "extraction score": mean NCC distance of the 10 best distinct training matches (lower is better)."""
    x = problem.x_train(torch.float64).flatten(1)
    c = candidates.double().flatten(1)
    xs = (x - x.mean(1, keepdim=True)) / (x.std(1, keepdim=True) + 1e-8)
    cs = (c - c.mean(1, keepdim=True)) / (c.std(1, keepdim=True) + 1e-8)
    d = torch.cdist(cs, xs) ** 2 / x.shape[1]
    best_per_train = d.min(dim=0).values
    return float(best_per_train.sort().values[:10].mean())


def evaluate(problem: Problem, candidates: torch.Tensor, *, family: str, protocol: dict[str, Any] | None = None,
             labels: torch.Tensor | None = None, run_ids: torch.Tensor | None = None,
             x0: torch.Tensor | None = None, card: Any = None, out_dir: Any = None,
             quiet: bool = False) -> dict[str, Any]:
    """Placeholder protocol: nearest-training-image NCC distance only."""
    return {"protocol": dict(protocol or {}), "summary": {"oracle_score": oracle_score(problem, candidates)},
            "per_image": []}
