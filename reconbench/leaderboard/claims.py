"""The earlier name of the claims page's command: ``python -m reconbench.leaderboard.claims`` runs
``python -m reconbench.claims`` (:mod:`reconbench.claims.page`) with the same options."""

from __future__ import annotations

import sys

from reconbench.claims.page import DEFAULT_OUT, DEFAULT_RESULTS, GPU_SUITE, generate, main

__all__ = ["DEFAULT_OUT", "DEFAULT_RESULTS", "GPU_SUITE", "generate", "main"]

if __name__ == "__main__":
    sys.exit(main())
