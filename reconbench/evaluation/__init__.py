"""The evaluation protocol: match candidates to training images, score them with metric plugins, draw figures.

The one entry point is :func:`evaluate` (``evaluate.py``); every published number comes from it. The steps follow
the papers' protocol (``protocol.py``): features (``distances.py``), best-buddy matching and the B-vote
(``matching.py``), SSIM (``ssim.py``), then every metric plugin registered under ``metrics``; ``null.py`` adds the
held-out null and the calibrated headline (docs/calibration.md). ``rescore.py`` re-scores a stored result;
``context.py`` holds what the metrics are handed.
"""

from reconbench.evaluation.context import CandidateError
from reconbench.evaluation.evaluate import evaluate, extraction_score, extraction_score_from_features, oracle_score
from reconbench.evaluation.protocol import resolve_protocol

__all__ = ["CandidateError", "evaluate", "extraction_score", "extraction_score_from_features", "oracle_score",
           "resolve_protocol"]
