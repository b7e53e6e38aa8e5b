"""A figure's worth of a cell: the candidates its reconstructions figure draws, small enough to travel and to keep.

A paper-size cell's pooled candidates (16 runs of m = 1000 CIFAR-10 images: about 94 MiB in float16) neither fit a
slice's pack nor a board, so a board from slices would have no picture of it. What the reconstructions figure draws
of a cell is much less: for each of the ``sample_images`` training images it shows (the first rows of the cell's
per-image table by its calibrated score, :func:`reconbench.leaderboard.cell_pairs.recorded_pairs`), the candidate
the evaluation matched to it and, where the protocol's mean vote averages several candidates, their average. This
module takes that subset from the full candidates (:func:`take_pairs`: the evaluation's own matching, as
``cell_pairs`` runs it), writes and reads it (:class:`FigurePairs`: one safetensors file, float16, a few KB to a few
hundred KB), draws the figure's pairs from it (:func:`subset_pairs`) and re-scores them against the cell's stored
per-image rows (:func:`rescore_pairs`), so that a board keeping it can check it rather than trust it.

Where it lives: ``work/<cell id>/figure_pairs.safetensors`` in a results folder (written by a slice for every cell
it packs, and by the merge for a cell it evaluates), ``figure_pairs/<cell id>.safetensors`` on a board (for the
cells its reconstructions figure drew from a subset and, where the suite sets ``[leaderboard] figure_pairs``, for
those it drew from full candidates the board does not store).
"""

from __future__ import annotations

import contextlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load, save

from reconbench.errors import ReconbenchError
from reconbench.leaderboard.cell_pairs import cell_protocol
from reconbench.provenance import write_bytes_atomic
from reconbench.records import CellRecord

if TYPE_CHECKING:
    from reconbench.leaderboard.cell_pairs import CellPair
    from reconbench.targets.problems import Problem

#: the file format's name, in the safetensors metadata
PAIRS_FORMAT = "reconbench-figure-pairs/1"
#: a results folder's ``work/<cell id>/`` file, and a board's folder of them (``<cell id>.safetensors``)
PAIRS_FILE, BOARD_FOLDER = "figure_pairs.safetensors", "figure_pairs"
#: the precision the subset travels and is kept in (as a slice's sampled candidates, docs/slices.md)
PAIRS_DTYPE = torch.float16
#: the per-image columns a re-score reproduces: the papers' SSIM, scikit-image's SSIM and the correlation of the
#: reconstruction (the figure's labels and its order), and the matching distance of the matched candidate (its third
#: label)
RESCORED = ("ssim", "ssim_standard", "corr", "best_distance")


class PairsError(ReconbenchError):
    """A figure-pairs file that cannot be read or does not fit its cell; the message names the file and the fix."""


@dataclass(frozen=True)
class FigurePairs:
    """The candidates a cell's reconstructions figure draws (module docstring).

    ``shown``: the training images, in the figure's order; per shown image, ``best_ids`` the pooled id of the
    candidate the evaluation matched to it (-1: none), ``members`` how many candidates its reconstruction averages
    (0: unmatched); ``best`` (k, C, H, W) those candidates in float16 (zeros where unmatched); ``averaged`` (a, C, H,
    W) the reconstruction (the members' mean, computed in float64 from the full candidates, then rounded to float16)
    of each shown image whose ``members`` passes 1, in the order of ``shown``."""

    cell_id: str
    shown: list[int]
    best_ids: list[int]
    members: list[int]
    best: torch.Tensor
    averaged: torch.Tensor

    def reconstruction(self, j: int) -> torch.Tensor | None:
        """The centred reconstruction of the ``j``-th shown image in float64 (None: no candidate matched it)."""
        if self.members[j] <= 0:
            return None
        if self.members[j] == 1:
            return self.best[j].to(torch.float64)
        return self.averaged[sum(1 for m in self.members[:j] if m > 1)].to(torch.float64)

    def to_bytes(self) -> bytes:
        tensors = {"shown": torch.tensor(self.shown, dtype=torch.int64),
                   "best_ids": torch.tensor(self.best_ids, dtype=torch.int64),
                   "members": torch.tensor(self.members, dtype=torch.int64),
                   "best": self.best.to(PAIRS_DTYPE).contiguous(), "averaged": self.averaged.to(PAIRS_DTYPE).contiguous()}
        return save(tensors, metadata={"format": PAIRS_FORMAT, "cell_id": self.cell_id,
                                       "values": "float16: the candidates the figure draws, rounded"})

    @classmethod
    def from_bytes(cls, data: bytes, where: str | Path) -> FigurePairs:
        """Read strictly: a file of another format or of inconsistent shapes is a one-line :class:`PairsError`."""
        fix = "take it again from the cell's candidates, or publish the board again"
        try:
            tensors = load(data)
            # the header by hand: safetensors reads a file's metadata (safe_open) but not that of bytes in memory
            meta = json.loads(data[8:8 + int.from_bytes(data[:8], "little")]).get("__metadata__") or {}
        except (SafetensorError, ValueError, OSError, UnicodeDecodeError) as exc:
            raise PairsError(f"{where} is not a readable figure-pairs file ({exc}); {fix}") from None
        if meta.get("format") != PAIRS_FORMAT or set(tensors) != {"shown", "best_ids", "members", "best", "averaged"}:
            raise PairsError(f"{where} is not a figure-pairs file ({PAIRS_FORMAT}); {fix}")
        shown, best_ids, members = (tensors[k].tolist() for k in ("shown", "best_ids", "members"))
        best, averaged = tensors["best"], tensors["averaged"]
        if (best.dtype != PAIRS_DTYPE or averaged.dtype != PAIRS_DTYPE or not len(shown) == len(best_ids)
                == len(members) == best.shape[0] or averaged.shape[0] != sum(1 for m in members if m > 1)
                or best.dim() != 4 or averaged.shape[1:] != best.shape[1:]):
            raise PairsError(f"{where}: its tensors do not fit one another (one row per shown image, one average per "
                             f"image of several members, float16); {fix}")
        return cls(str(meta.get("cell_id", "")), [int(v) for v in shown], [int(v) for v in best_ids],
                   [int(v) for v in members], best, averaged)

    @property
    def nbytes(self) -> int:
        return len(self.to_bytes())


def read_pairs(path: Path) -> FigurePairs:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise PairsError(f"{path} cannot be read ({exc}); publish the board again") from None
    return FigurePairs.from_bytes(data, path)


def write_pairs(path: Path, pairs: FigurePairs) -> None:
    """Write through a temporary file (``provenance.write_bytes_atomic``: a reader never sees half a file, and a
    failed write leaves none behind)."""
    write_bytes_atomic(path, pairs.to_bytes())


def shown_images(rec: CellRecord, k: int) -> list[int]:
    """The training images the cell's figure shows, in its order (the rows' calibrated score, best first)."""
    from reconbench.leaderboard.cell_pairs import recorded_pairs

    return [i for i, *_ in recorded_pairs(rec, k)]


def take_pairs(problem: Problem, card: object, candidates: torch.Tensor, rec: CellRecord, k: int) -> FigurePairs:
    """The subset of a cell's pooled ``candidates`` its figure draws: the evaluation's matching under the cell's
    protocol (as :func:`reconbench.leaderboard.cell_pairs.cell_pairs` runs it), read at the ``k`` images shown."""
    from reconbench.evaluation.context import build_context

    if len(rec.per_image) != problem.n:
        raise PairsError(f"cell {rec.cell_id} records {len(rec.per_image)} per-image rows for {problem.n} training "
                         "images; its figure cannot be taken")
    ev = build_context(problem, candidates, cell_protocol(rec), card=card)
    shown = shown_images(rec, k)
    best_ids, members, best, averaged = [], [], [], []
    blank = torch.zeros(ev.candidates.shape[1:], dtype=torch.float64)
    for i in shown:
        ids = ev.matching.members[i] if ev.matching.matched[i] else np.zeros(0, dtype=np.int64)
        best_ids.append(int(ev.matching.best[i]) if len(ids) else -1)
        members.append(len(ids))
        best.append(ev.candidates[int(ev.matching.best[i])] if len(ids) else blank)
        if len(ids) > 1:
            averaged.append(ev.recon_centred[i])
    shape = tuple(ev.candidates.shape[1:])
    return FigurePairs(rec.cell_id, shown, best_ids, members,
                       torch.stack(best).to(PAIRS_DTYPE) if best else torch.zeros((0, *shape), dtype=PAIRS_DTYPE),
                       torch.stack(averaged).to(PAIRS_DTYPE) if averaged
                       else torch.zeros((0, *shape), dtype=PAIRS_DTYPE))


def pairs_from_results(results: Path, rec: CellRecord, k: int, data_root: str | None = None) -> Path:
    """``results/work/<cell>/figure_pairs.safetensors``, taken from the cell's full candidates there (kept when it
    is newer than them and holds the images the cell's rows show at ``k``): the file. The training problem is rebuilt
    from the target's model card in ``results``."""
    from safetensors.torch import load_file

    from reconbench.targets.cards import ModelCard

    work = results / rec.work_dir if rec.work_dir else results / "work" / rec.cell_id
    src, dst = work / "candidates.safetensors", work / PAIRS_FILE
    if dst.is_file() and src.is_file() and dst.stat().st_mtime_ns >= src.stat().st_mtime_ns:
        with contextlib.suppress(PairsError):
            kept = read_pairs(dst)
            if kept.cell_id == rec.cell_id and kept.shown == shown_images(rec, k):
                return dst
    if not src.is_file():
        raise PairsError(f"cell {rec.cell_id} has no pooled candidates in {work} to take its figure's pairs from")
    card_path = results / "targets" / f"{rec.target.recipe_key}.json"
    card = ModelCard(path=results / "targets", data=json.loads(card_path.read_text()))
    problem = card.problem(data_root)
    write_pairs(dst, take_pairs(problem, card, load_file(str(src))["candidates"], rec, k))
    return dst


# -- the figure's pairs from a subset ------------------------------------------------------------------------
def subset_pairs(problem: Problem, pairs: FigurePairs, rec: CellRecord, k: int) -> list[CellPair]:
    """The cell's pairs (``cell_pairs.CellPair``), best first, drawn from its subset: the same images, labels and
    frames as from the full candidates, the reconstruction shown from the float16 values. A subset that does not hold
    the images the rows give is a one-line :class:`PairsError`."""
    from reconbench.evaluation.pair_figure import Pair
    from reconbench.evaluation.ssim import display
    from reconbench.leaderboard.cell_pairs import CALIBRATED_FLAG, CALIBRATED_SCORE, DISTANCE, PAPERS_SCORE, CellPair

    check_shown(problem, pairs, rec, k)
    protocol = cell_protocol(rec)
    mean = problem.mean_tensor(torch.float64)
    originals = torch.as_tensor(problem.train_images, dtype=torch.float64)
    out = []
    for j, i in enumerate(pairs.shown):
        r = rec.per_image[i]
        recon = pairs.reconstruction(j)
        shown = None if recon is None else display(recon[None], mean, protocol.base.constant_tol)[0].numpy()
        pair = Pair(i, originals[i].numpy(), shown, _num(r.raw(PAPERS_SCORE)), _num(r.raw(DISTANCE)),
                    bool(r.raw(CALIBRATED_FLAG)))
        out.append(CellPair(pair, r.label, _num(r.raw(CALIBRATED_SCORE))))
    return out


def check_shown(problem: Problem, pairs: FigurePairs, rec: CellRecord, k: int) -> None:
    """That ``pairs`` holds what the figure of ``rec`` shows: taken of that cell, its images in order, each matched as
    the rows say, of the problem's image shape."""
    fix = "take the subset again from the cell's candidates, or publish the board again"
    if pairs.cell_id != rec.cell_id:
        raise PairsError(f"the figure pairs kept for {rec.cell_id} are figure pairs of {pairs.cell_id or '(no cell)'}, "
                         f"not of {rec.cell_id}; {fix}")
    want = shown_images(rec, k)
    if pairs.shown != want:
        raise PairsError(f"the figure pairs of {rec.cell_id} hold training images {pairs.shown}, its rows give "
                         f"{want}; {fix}")
    rows = rec.per_image
    for j, i in enumerate(pairs.shown):
        if (pairs.members[j] > 0) != (rows[i].best_candidate is not None) or (
                pairs.members[j] > 0 and pairs.best_ids[j] != rows[i].best_candidate):
            raise PairsError(f"the figure pairs of {rec.cell_id} match training image {i} to candidate "
                             f"{pairs.best_ids[j]}, its row records {rows[i].best_candidate}; {fix}")
    if pairs.shown and tuple(pairs.best.shape[1:]) != tuple(problem.image_shape):
        raise PairsError(f"the figure pairs of {rec.cell_id} are images of shape {tuple(pairs.best.shape[1:])}, its "
                         f"target's are {tuple(problem.image_shape)}; {fix}")


def _num(v: object) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


# -- re-scoring the pairs ------------------------------------------------------------------------------------
def pair_tolerances(problem: Problem, pairs: FigurePairs, rec: CellRecord,
                    fresh: dict[int, dict[str, float | None]]) -> dict[int, dict[str, float | None]]:
    """Per shown image and ``RESCORED`` score, the absolute tolerance of the score re-computed from the float16
    subset (``fresh``, :func:`rescore`) against the cell's row: float16 rounding carried through the score as that
    pair's own values stretch it (``reconbench.evaluation.float16_bounds``: min-max scaling for the SSIMs, centring for
    the correlation, standardising for an ncc distance); the row's own rounding is :func:`rescore_pairs`'s. None:
    the pair's values are too flat for float16 to re-score that score (its bound reaches the score's whole range);
    a score the re-score did not compute is left out."""
    from reconbench.evaluation import float16_bounds as bounds
    from reconbench.evaluation.protocol import DISTANCES
    from reconbench.evaluation.rescore import evaluation_terms

    base = cell_protocol(rec).base
    mean = problem.mean_tensor(torch.float64)
    n_terms = evaluation_terms(problem, 1)
    out: dict[int, dict[str, float | None]] = {}
    for j, i in enumerate(pairs.shown):
        recon = pairs.reconstruction(j)
        scores = fresh.get(i, {})
        if recon is None:
            continue
        tols: dict[str, float | None] = {}
        shift = bounds.minmax_shift(recon, mean, base.constant_tol)
        ssim_tol = None if shift is None else bounds.ssim_shift_tolerance(shift, n_terms)
        for key in ("ssim", "ssim_standard"):
            if scores.get(key) is not None:
                tols[key] = ssim_tol
        if scores.get("corr") is not None:
            tols["corr"] = bounds.correlation_shift(recon, n_terms)
        distance = scores.get("best_distance")
        if distance is not None:
            tols["best_distance"] = bounds.distance_shift(
                pairs.best[j], distance, factor=DISTANCES[base.distance], standardised=base.distance.startswith("ncc"),
                eps=base.ncc_eps, per_dimension=base.per_dimension, n_terms=n_terms)
        out[i] = tols
    return out


def rescore(problem: Problem, pairs: FigurePairs, rec: CellRecord) -> dict[int, dict[str, float | None]]:
    """Per shown training image, its ``RESCORED`` scores computed from the subset, as the evaluation computes them
    (``plugins/metrics.py``'s ``ssim``, ``ssim_standard`` and ``corr``, the matching's exact distance), for the
    columns the cell's evaluation computed; an unmatched image's are None."""
    from reconbench.evaluation.distances import features, paired
    from reconbench.evaluation.ssim import display, ssim_paper, ssim_standard

    protocol = cell_protocol(rec)
    base = protocol.base
    mean = problem.mean_tensor(torch.float64)
    originals = torch.as_tensor(problem.train_images, dtype=torch.float64)
    x_train = problem.x_train(torch.float64)
    out: dict[int, dict[str, float | None]] = {}
    for j, i in enumerate(pairs.shown):
        recon = pairs.reconstruction(j)
        scores: dict[str, float | None] = dict.fromkeys(RESCORED)
        if recon is not None:
            if "ssim" in protocol.metric_configs:
                cfg = protocol.metric_configs["ssim"]
                shown = display(recon[None], mean, base.constant_tol)
                scores["ssim"] = float(ssim_paper(shown, originals[i][None], cfg.window_size, cfg.data_range,
                                                  cfg.eps)[0])
            if "ssim_standard" in protocol.metric_configs:
                cfg = protocol.metric_configs["ssim_standard"]
                shown = display(recon[None], mean, base.constant_tol)
                scores["ssim_standard"] = float(ssim_standard(shown.numpy(), originals[i][None].numpy(),
                                                              cfg.data_range, cfg.win_size, cfg.gaussian_weights)[0])
            if "corr" in protocol.metric_configs:
                scores["corr"] = float(_pearson(recon[None], x_train[i][None])[0])
            best = pairs.best[j].to(torch.float64)[None]
            scores["best_distance"] = float(paired(features(best, base.distance, base.ncc_eps),
                                                   features(x_train[i][None], base.distance, base.ncc_eps),
                                                   base.per_dimension)[0])
        out[i] = scores
    return out


def _pearson(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The ``corr`` metric's correlation of paired images (per channel over pixels, averaged over channels): the
    built-in metric plugin's ``pearson`` (``plugins/metrics.py``), repeated here because the core finds plugins only
    through their entry points and never imports their modules; tests/unit/leaderboard/test_figure_pairs.py holds the
    two equal."""
    fa, fb = a.flatten(2), b.flatten(2)
    fa = fa - fa.mean(-1, keepdim=True)
    fb = fb - fb.mean(-1, keepdim=True)
    denom = fa.norm(dim=-1) * fb.norm(dim=-1)
    return ((fa * fb).sum(-1) / torch.where(denom > 0, denom, torch.ones_like(denom))).mean(-1)


def rescore_pairs(problem: Problem, pairs: FigurePairs, rec: CellRecord, k: int, where: str,
                  unscored: list[str] | None = None) -> tuple[list[str], int]:
    """The subset checked against the cell's rows: it holds the figure's images (:func:`check_shown`), and each
    pair's scores re-computed from it agree with the stored ones within that pair's float16 bound
    (:func:`pair_tolerances`) plus the row's rounding to 7 significant digits (``entries.ROW_RTOL``, relative to
    max(1, |value|)). The problems (one line each) and the number of scores compared; a pair whose values are too
    flat to re-score a score from float16 is not compared there (its bytes are bound by the board's manifest), one
    line each in ``unscored``."""
    from reconbench.bench.entries import ROW_RTOL

    try:
        check_shown(problem, pairs, rec, k)
    except PairsError as exc:
        return [f"{where}: {exc}"], 0
    fresh_scores = rescore(problem, pairs, rec)
    tolerances = pair_tolerances(problem, pairs, rec, fresh_scores)
    problems, compared = [], 0
    for i, fresh in fresh_scores.items():
        row = rec.per_image[i]
        differ, flat = [], []
        for key, value in fresh.items():
            if not row.has(key) or value is None:
                continue
            tol = tolerances[i].get(key)
            if tol is None:
                flat.append(key)
                continue
            stored = _num(row.raw(key))
            compared += 1
            if stored is None or abs(stored - value) > tol + ROW_RTOL * max(1.0, abs(stored), abs(value)):
                differ.append(f"{key} {value:.6g} (the row stores {stored!r}, float16 allows {tol:.2g})")
        if flat and unscored is not None:
            unscored.append(f"{where}: the figure pair of training image {i} of {rec.cell_id} is too flat for "
                            f"float16 to re-score its {', '.join(flat)} (the rounding bound reaches the score's whole "
                            "range): its bytes are checked by the manifest only")
        if differ:   # one line per pair, naming every score of it that differs
            problems.append(f"{where}: the figure pair of training image {i} of {rec.cell_id} re-scores "
                            f"{', '.join(differ)} from its float16 subset, beyond float16's rounding: the subset is "
                            "not the cell's candidates; publish the board again")
    return problems, compared
