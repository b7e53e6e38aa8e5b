"""PNG figures of an evaluation (matplotlib, Agg backend).

* ``reconstructions.png``: rows of reconstructions above their training images in the layout every figure of
  pairs shares (``pair_figure.py``), sorted by the headline's score (the calibrated headline's correlation when the
  null was drawn, else the papers' SSIM), best first, each pair labelled with the training image's index, its SSIM
  and matching distance, the pairs that pass the headline framed in green (the papers' tables,
  docs/method/evaluation-protocol.md#figures);
* ``score_vs_boundary.png``: SSIM against the distance to the decision boundary with the threshold line, as in the
  papers' scatter plots: binary Phi(x) (from the card's margins y*Phi), multiclass the margin Phi_y - max_j Phi_j
  (coloured by class), regression |Phi - y|. Training images that no candidate chose are drawn as crosses at the
  bottom.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np


def _pyplot():  # type: ignore[no-untyped-def]
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


@dataclass(frozen=True)
class Headline:
    """A per-training-image score and the threshold a pair must pass to count, with what the count is called."""

    name: str
    scores: np.ndarray      # (n,), NaN where unmatched
    threshold: float
    rule: str               # e.g. "the calibrated headline"


def figure_order(headline: Headline, matched: np.ndarray, max_images: int) -> np.ndarray:
    """The training images shown, best headline score first, at most ``max_images`` (unmatched ones never)."""
    idx = np.flatnonzero(matched & ~np.isnan(headline.scores))
    return idx[np.argsort(-headline.scores[idx], kind="stable")][:max(max_images, 0)]


def reconstructions_figure(path: Path, recon: np.ndarray, orig: np.ndarray, matched: np.ndarray, max_images: int,
                           headline: Headline, secondary: Headline | None = None, per_row: int = 10,
                           distances: np.ndarray | None = None) -> Path | None:
    """Pairs (reconstruction above its training image, :mod:`reconbench.evaluation.pair_figure`) sorted by the
    headline's score, at most ``max_images``; None if nothing matched. Each pair is labelled with the training
    image's index, the papers' SSIM (``secondary`` when given, else the headline) and its matching distance
    (``distances``); pairs that pass the headline are framed green.
    """
    from reconbench.evaluation.pair_figure import Pair, PairGroup, draw_pairs

    scores = headline.scores
    idx = figure_order(headline, matched, max_images)
    if len(idx) == 0:
        return None
    passed = int(np.sum(scores[matched & ~np.isnan(scores)] > headline.threshold))
    ssim = (secondary or headline).scores

    def value(arr: np.ndarray | None, i: int) -> float | None:
        return None if arr is None or np.isnan(arr[i]) else float(arr[i])

    pairs = [Pair(int(i), orig[i], recon[i], value(ssim, i), value(distances, i),
                  bool(scores[i] > headline.threshold)) for i in idx]
    title = [f"{passed} of {len(scores)} training images pass {headline.rule} ({headline.name} > "
             f"{headline.threshold:.3g}, framed green); shown best {headline.name} first.",
             "Upper: reconstruction; lower: the training image it matched; #i: training image index, SSIM, "
             "d: matching distance."]
    draw_pairs(path, [PairGroup("", pairs)], title=title, per_row=per_row)
    return path


def boundary_figure(path: Path, task: str, margins: np.ndarray, labels: np.ndarray, scores: np.ndarray,
                    matched: np.ndarray, threshold: float, score_name: str = "SSIM") -> Path:
    """Score against the distance to the decision boundary, with the threshold line."""
    plt = _pyplot()
    if task == "binary":
        x = (2.0 * labels - 1.0) * margins   # margins are y * Phi with y in {-1, +1}: recover Phi
        xlabel = "Phi(x) (model output on the training image)"
    elif task == "multiclass":
        x, xlabel = margins, "margin Phi_y(x) - max_{j != y} Phi_j(x)"
    else:
        x, xlabel = margins, "|Phi(x) - y|"
    fig, ax = plt.subplots(figsize=(6, 4))
    ymin = min(0.0, float(np.nanmin(scores))) if matched.any() else 0.0
    classes = np.unique(labels)
    cmap = plt.get_cmap("tab10")
    for k, c in enumerate(classes):
        sel = (labels == c) & matched
        ax.scatter(x[sel], scores[sel], s=12, color=cmap(k % 10), label=f"class {c}", alpha=0.8)
    if (~matched).any():
        ax.scatter(x[~matched], np.full((~matched).sum(), ymin - 0.05), marker="x", s=14, color="gray",
                   label="not matched")
    ax.axhline(threshold, color="red", linestyle="--", linewidth=1, label=f"threshold {threshold:g}")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(score_name)
    ax.set_title(f"{score_name} vs distance to the decision boundary ({task})", fontsize=9)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
