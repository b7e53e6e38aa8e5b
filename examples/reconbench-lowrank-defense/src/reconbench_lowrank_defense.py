"""An external reconbench defense: release the best low-rank approximation of every weight matrix.

Each weight tensor W (a matrix, or a convolution kernel read as out_channels x the rest) is replaced before release
by its truncated SVD sum_{i <= k} s_i u_i v_i^T with k = ceil(rank_fraction * min(rows, cols)), the closest matrix of
rank k in Frobenius norm (Eckart-Young). Bias vectors are released unchanged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from reconbench import hookimpl
from reconbench.config import option
from reconbench.errors import ReconbenchError
from reconbench.interfaces import Defense


@dataclass
class LowRankConfig:
    rank_fraction: float = option(0.5, "fraction of each weight matrix's singular values kept (largest first)",
                                  gt=0, le=1)


@dataclass(frozen=True)
class LowRank(Defense):
    name: str = "low_rank"
    description: str = "replaces every weight matrix by its truncated SVD before release (keeps a fraction of the rank)"
    config_cls: type = LowRankConfig
    strength: str = "rank_fraction"  # the option a privacy-utility axis varies

    def apply(self, model: Any, problem: Any, config: LowRankConfig, *, generator: torch.Generator) -> dict[str, Any]:
        if not 0.0 < config.rank_fraction <= 1.0:
            raise ReconbenchError(f"low_rank: rank_fraction must be in (0, 1], got {config.rank_fraction}")
        kept, full = 0, 0
        with torch.no_grad():
            for p in model.parameters():
                if p.dim() < 2:
                    continue
                w = p.reshape(p.shape[0], -1)
                u, s, vh = torch.linalg.svd(w, full_matrices=False)
                k = max(1, math.ceil(config.rank_fraction * len(s)))
                p.copy_(((u[:, :k] * s[:k]) @ vh[:k]).reshape(p.shape))
                kept, full = kept + k, full + len(s)
        return {"rank_kept_share": kept / full if full else 1.0}


@hookimpl
def register_defenses(register):  # type: ignore[no-untyped-def]
    register(LowRank())
