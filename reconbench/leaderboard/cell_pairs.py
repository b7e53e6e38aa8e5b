"""The pairs of one board cell (its reconstructions beside the training images they matched), as the board figure
and the site's cell page both show them.

The pooled candidates are matched and averaged by the evaluation's own matching
(:func:`reconbench.evaluation.context.build_context` under the cell's recorded protocol) and shown as the
evaluation's figures show them (mean added back, min-max scaled). The scores beside each pair are the cell's stored
per-image numbers; a pair whose fresh match differs from the stored one carries a note. Pairs are ordered by the
calibrated headline's score (the papers' SSIM where a cell has none), best first.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from reconbench.data import Problem
from reconbench.evaluation.pair_figure import Pair
from reconbench.records import CellRecord, ImageRow

if TYPE_CHECKING:
    from reconbench.evaluation.protocol import ResolvedProtocol

#: the per-image keys of the calibrated headline and the papers' score, as the evaluation writes them
CALIBRATED_SCORE, CALIBRATED_FLAG, PAPERS_SCORE, DISTANCE = "corr", "reconstructed_calibrated", "ssim", "best_distance"


def _num(v: object) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


@dataclass(frozen=True)
class CellPair:
    """A pair as drawn, with the numbers the cell page lists beside the figure."""

    pair: Pair
    label: int | None
    corr: float | None
    note: str = ""


def _order_key(row: ImageRow) -> float:
    v = _num(row.raw(CALIBRATED_SCORE))
    v = _num(row.raw(PAPERS_SCORE)) if v is None else v
    return -math.inf if v is None else v


def recorded_pairs(rec: CellRecord, max_images: int) -> list[tuple[int, list[str], bool, bool]]:
    """What the figure of a cell's pairs shows, from its stored rows alone (no candidates, no data set): per pair, best
    first, the training image's index, its label lines, whether it passes and whether a candidate matched it."""
    from reconbench.evaluation.pair_figure import pair_label

    rows = rec.per_image
    order = sorted(range(len(rows)), key=lambda i: -_order_key(rows[i]))[:max(max_images, 0)]
    out = []
    for i in order:
        r = rows[i]
        shown = Pair(i, np.zeros((1, 1, 1)), None, _num(r.raw(PAPERS_SCORE)), _num(r.raw(DISTANCE)))
        out.append((i, pair_label(shown), bool(r.raw(CALIBRATED_FLAG)), r.best_candidate is not None))
    return out


def cell_protocol(rec: CellRecord) -> ResolvedProtocol:
    """The resolved protocol the cell was scored with (its overrides, the metrics its evaluation computed)."""
    from reconbench.evaluation.protocol import resolve_protocol
    from reconbench.evaluation.rescore import pinned_protocol

    stored = rec.evaluation.protocol if rec.evaluation is not None else None
    return resolve_protocol(pinned_protocol(dict(rec.protocol or {}), stored), str(rec.target.trained_from.family))


def cell_pairs(problem: Problem, card: object, candidates: torch.Tensor, rec: CellRecord,
               max_images: int) -> list[CellPair]:
    """The cell's pairs, best first, at most ``max_images`` (ValueError when its rows do not fit the problem)."""
    from reconbench.evaluation.context import build_context

    rows = rec.per_image  # the pooled candidates' evaluation
    if len(rows) != problem.n:
        raise ValueError(f"the cell records {len(rows)} per-image rows for {problem.n} training images")
    ev = build_context(problem, candidates, cell_protocol(rec), card=card)

    order = sorted(range(problem.n), key=lambda i: -_order_key(rows[i]))[:max(max_images, 0)]
    recon, originals, best = ev.recon_display.numpy(), ev.originals.numpy(), ev.matching.best
    out = []
    for i in order:
        r = rows[i]
        matched = bool(ev.matching.matched[i])
        note = ""
        if matched and r.best_candidate != int(best[i]):
            note = f"matched again to candidate {int(best[i])}, the cell records {r.best_candidate}: re-score the board"
        pair = Pair(i, originals[i], recon[i] if matched else None, _num(r.raw(PAPERS_SCORE)), _num(r.raw(DISTANCE)),
                    bool(r.raw(CALIBRATED_FLAG)))
        out.append(CellPair(pair, r.label, _num(r.raw(CALIBRATED_SCORE)), note))
    return out
