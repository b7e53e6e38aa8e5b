"""The reconstructions of a cell next to the training images they matched, as small PNGs for its page.

Only cells whose pooled candidates the board stores (``candidates/<cell>.safetensors.xz``) have them. The training
problem is rebuilt from the board's model card (it needs the data set), the candidates are matched and averaged by
the evaluation's own matching (:func:`reconbench.evaluation.context.build_context` under the cell's recorded
protocol) and shown as the evaluation's figures show them (mean added back, min-max scaled). The scores beside each
pair are the cell's stored per-image numbers; a pair whose fresh match differs from the stored one is flagged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from reconbench.bench.runner import STATUS_OK
from reconbench.errors import ReconbenchError
from reconbench.leaderboard.slim import candidates_file, read_candidates
from reconbench.records import CellRecord

#: the per-image keys of the calibrated headline and the papers' score, as the evaluation writes them
CALIBRATED_SCORE, CALIBRATED_FLAG, PAPERS_SCORE = "corr", "reconstructed_calibrated", "ssim"


@dataclass(frozen=True)
class Pair:
    index: int
    label: int | None
    recon: str | None       # file name beside the cell page, None: no candidate chose this training image
    train: str
    corr: float | None
    ssim: float | None
    passed: bool
    note: str = ""


@dataclass
class CellImages:
    pairs: list[Pair]
    reason: str = ""        # why there are none
    failed: bool = False    # stored candidates that could not be drawn here (e.g. the data set is missing)


def _num(v: object) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def _save(path: Path, img: np.ndarray) -> None:
    """A (C, H, W) image in [0, 1] as an 8-bit RGB PNG, each value rounded to the nearest of the 256 levels."""
    from matplotlib.image import imsave

    levels = np.rint(np.clip(img, 0.0, 1.0) * 255.0).astype(np.uint8)
    rgb = np.repeat(levels, 3, axis=0) if levels.shape[0] == 1 else levels
    imsave(path, np.ascontiguousarray(np.transpose(rgb, (1, 2, 0))))


class ProblemCache:
    """Training problems rebuilt from the boards' model cards, once per recipe key."""

    def __init__(self, data_root: str | None) -> None:
        self.data_root = data_root
        self._problems: dict[str, Any] = {}

    def problem(self, board: Path, rec: CellRecord) -> tuple[Any, Any]:
        from reconbench.leaderboard.board_cards import load_board_card

        key = str(rec.target.recipe_key)
        if key not in self._problems:
            self._problems[key] = load_board_card(board, key, self.data_root)
        return self._problems[key]  # type: ignore[no-any-return]


def cell_images(board: Path, rec: CellRecord, out: Path, problems: ProblemCache, max_images: int = 60) -> CellImages:
    """Write the pairs of one cell under ``out`` (recon-<i>.png, train-<i>.png); best calibrated score first."""
    cid = rec.cell_id
    if rec.status != STATUS_OK:
        return CellImages([], f"the cell did not finish (status {rec.status}): it has no reconstructions")
    stored = candidates_file(board, cid)
    if stored is None:
        return CellImages([], "images are not stored for this cell: the board keeps the candidates of a sample of "
                              "its cells only")
    try:
        return _draw(stored, rec, out, problems.problem(board, rec), max_images)
    except (ReconbenchError, OSError, KeyError, ValueError) as exc:
        return CellImages([], f"images could not be drawn here ({type(exc).__name__}: {exc})", failed=True)


def _draw(stored: Path, rec: CellRecord, out: Path, problem_card: tuple[Any, Any], max_images: int) -> CellImages:
    from reconbench.evaluation.context import build_context
    from reconbench.evaluation.protocol import resolve_protocol
    from reconbench.evaluation.rescore import pinned_protocol

    problem, card = problem_card
    pooled = read_candidates(stored)
    protocol = resolve_protocol(pinned_protocol(dict(rec.protocol or {}), rec.evaluation.protocol if rec.evaluation else None),
                                str(rec.target.trained_from.family))
    ev = build_context(problem, pooled["candidates"], protocol, card=card)
    rows = rec.per_image  # the pooled candidates' evaluation
    if len(rows) != problem.n:
        return CellImages([], f"the cell records {len(rows)} per-image rows for {problem.n} training images")
    order = sorted(range(problem.n), key=lambda i: -(_num(rows[i].raw(CALIBRATED_SCORE)) or -math.inf))[:max_images]
    out.mkdir(parents=True, exist_ok=True)
    recon = ev.recon_display.numpy()
    originals = ev.originals.numpy()
    best = ev.matching.best
    pairs = []
    for i in order:
        r = rows[i]
        train = f"train-{i}.png"
        _save(out / train, originals[i])
        recon_name = None
        note = ""
        if bool(ev.matching.matched[i]):
            recon_name = f"recon-{i}.png"
            _save(out / recon_name, recon[i])
            if r.best_candidate != int(best[i]):
                note = (f"matched again to candidate {int(best[i])}, the cell records {r.best_candidate}: "
                        "re-score the board")
        pairs.append(Pair(i, r.label, recon_name, train, _num(r.raw(CALIBRATED_SCORE)),
                          _num(r.raw(PAPERS_SCORE)), bool(r.raw(CALIBRATED_FLAG)), note))
    return CellImages(pairs)
