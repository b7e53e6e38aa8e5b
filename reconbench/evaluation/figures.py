"""PNG figures of an evaluation (matplotlib, Agg backend).

* ``reconstructions.png``: rows of reconstructions above their training images, sorted by the headline's score
  (the calibrated headline's correlation when the null was drawn, else the papers' SSIM), best first, each pair
  labelled with the training image's index and its scores, the pairs that pass the headline framed in green (the
  papers' tables, docs/method/evaluation-protocol.md#figures);
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


def _to_hwc(img: np.ndarray) -> np.ndarray:
    return img[0] if img.shape[0] == 1 else np.transpose(img, (1, 2, 0))


def montage(recon: np.ndarray, orig: np.ndarray, idx: np.ndarray, per_row: int, pad: int = 2) -> np.ndarray:
    """One canvas (pad value 1, as the papers' tables): rows of reconstructions, each above its originals."""
    c, h, w = recon.shape[1:]
    rows = int(np.ceil(len(idx) / per_row))
    cols = min(per_row, len(idx))
    canvas = np.ones((c, 2 * rows * (h + pad) + pad, cols * (w + pad) + pad))
    for k, i in enumerate(idx):
        r, col = divmod(k, per_row)
        x = pad + col * (w + pad)
        y = pad + 2 * r * (h + pad)
        canvas[:, y:y + h, x:x + w] = recon[i]
        canvas[:, y + h + pad:y + 2 * h + pad, x:x + w] = orig[i]
    return canvas


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
                           headline: Headline, secondary: Headline | None = None, per_row: int = 10) -> Path | None:
    """Pairs (reconstruction above original) sorted by the headline's score, at most ``max_images``; None if nothing
    matched. Each pair is labelled with the training image's index, its headline score and (if given and different)
    the secondary score; pairs that pass the headline are green, with a frame.

    Drawn as one image with the scores as text (a grid of axes is ten times slower for 60 pairs).
    """
    scores = headline.scores
    idx = figure_order(headline, matched, max_images)
    if len(idx) == 0:
        return None
    passed = int(np.sum(scores[matched & ~np.isnan(scores)] > headline.threshold))
    plt = _pyplot()
    pad = 2
    c, h, w = recon.shape[1:]
    canvas = montage(np.clip(recon, 0, 1), np.clip(orig, 0, 1), idx, per_row, pad)
    rows = int(np.ceil(len(idx) / per_row))
    cols = min(per_row, len(idx))
    fig, ax = plt.subplots(figsize=(1.1 * cols + 0.4, 2.2 * rows + 0.9))
    ax.imshow(_to_hwc(canvas), cmap="gray" if c == 1 else None, vmin=0, vmax=1, interpolation="nearest")
    ax.axis("off")
    show_secondary = secondary is not None and secondary.name != headline.name
    for k, i in enumerate(idx):
        r, col = divmod(k, per_row)
        x0 = pad + col * (w + pad)
        y = pad + 2 * r * (h + pad)
        good = bool(scores[i] > headline.threshold)
        label = f"#{i} {scores[i]:.2f}"
        if show_secondary and secondary is not None and not np.isnan(secondary.scores[i]):
            label += f" ({secondary.scores[i]:.2f})"
        ax.text(x0 + w / 2, y - 0.6, label, ha="center", va="bottom", fontsize=5,
                color="green" if good else "black")
        if good:
            ax.add_patch(plt.Rectangle((x0 - 0.5, y - 0.5), w, 2 * h + pad, fill=False, edgecolor="green",
                                       linewidth=1.0))
    title = (f"{passed} of {len(scores)} training images pass {headline.rule} "
             f"({headline.name} > {headline.threshold:.3g}, green)\n"
             f"upper: reconstruction, lower: the training image it matched; #i: training image index, "
             f"then {headline.name}")
    if show_secondary and secondary is not None:
        title += f", then ({secondary.name}; {secondary.rule} counts > {secondary.threshold:g})"
    ax.set_title(title, fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
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
