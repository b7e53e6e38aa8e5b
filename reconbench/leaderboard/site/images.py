"""The reconstructions of a cell next to the training images they matched, as one PNG for its page.

A cell whose pooled candidates the board stores (``candidates/<cell>.safetensors.xz``) shows every training image
with its reconstruction (:mod:`reconbench.leaderboard.cell_pairs`, as the board figure draws them). A cell whose
candidates the board does not store but whose **figure pairs** it keeps (``figure_pairs/<cell>.safetensors``: a GPU
slice's paper-size cell, whose candidates never left the machine that ran it; :mod:`reconbench.leaderboard.figure_pairs`)
shows that subset instead: the training images its figure shows, each beside the float16 candidate the evaluation
matched to it (:func:`~reconbench.leaderboard.figure_pairs.subset_pairs`). Either way the training problem is rebuilt
from the board's model card (it needs the data set), the pairs are drawn in the layout every figure of pairs shares
(:mod:`reconbench.evaluation.pair_figure`) and listed beside it with the numbers the cell's rows store.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reconbench.bench.runner import STATUS_OK
from reconbench.errors import ReconbenchError
from reconbench.leaderboard.cell_pairs import CellPair, cell_pairs
from reconbench.leaderboard.slim import candidates_file, read_candidates
from reconbench.records import CellRecord
from reconbench.safe_paths import member

if TYPE_CHECKING:
    from reconbench.targets.problems import Problem

#: the file of a cell's pairs, beside its page (cells/<cell>/pairs.png)
PAIRS_FILE = "pairs.png"


@dataclass
class CellImages:
    pairs: list[CellPair] = field(default_factory=list)
    reason: str = ""        # why there are none
    failed: bool = False    # stored candidates that could not be drawn here (e.g. the data set is missing)
    figure: str | None = None   # the PNG of the pairs, beside the cell page
    #: drawn from the board's figure pairs (a subset of matched pairs, float16), not from stored candidates
    subset: bool = False


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
    """Draw the pairs of one cell into ``out``/pairs.png; best calibrated score first."""
    cid = rec.cell_id
    if rec.status != STATUS_OK:
        return CellImages([], f"the cell did not finish (status {rec.status}): it has no reconstructions")
    stored = candidates_file(board, cid)
    kept = None if stored is not None else figure_pairs_file(board, cid)
    if stored is None and kept is None:
        return CellImages([], "images are not stored for this cell: the board keeps the candidates of a sample of "
                              "its cells only")
    try:
        if stored is not None:
            return _draw(stored, rec, out, problems.problem(board, rec), max_images)
        assert kept is not None
        return _draw_subset(kept, rec, out, problems.problem(board, rec)[0])
    except (ReconbenchError, OSError, KeyError, ValueError) as exc:
        return CellImages([], f"images could not be drawn here ({type(exc).__name__}: {exc})", failed=True,
                          subset=stored is None)


def figure_pairs_file(board: Path, cell_id: str) -> Path | None:
    """The board's figure pairs of a cell (``figure_pairs/<cell>.safetensors``), or None where it keeps none."""
    from reconbench.leaderboard.figure_pairs import BOARD_FOLDER

    path = member(board / BOARD_FOLDER, cell_id, ".safetensors", "cell id")
    return path if path.is_file() else None


def _draw(stored: Path, rec: CellRecord, out: Path, problem_card: tuple[Any, Any], max_images: int) -> CellImages:
    from reconbench.evaluation.pair_figure import PairGroup, draw_pairs

    problem, card = problem_card
    try:
        pairs = cell_pairs(problem, card, read_candidates(stored)["candidates"], rec, max_images)
    except ValueError as exc:
        return CellImages([], str(exc))
    if not pairs:
        return CellImages([], "the cell has no training image to show")
    out.mkdir(parents=True, exist_ok=True)
    draw_pairs(out / PAIRS_FILE, [PairGroup("", [p.pair for p in pairs])],
               title=["Upper: reconstruction (pooled candidates, matched and averaged); lower: the training image it "
                      "matched; best calibrated score first; framed green: passes the calibrated headline."])
    return CellImages(pairs, figure=PAIRS_FILE)


def _draw_subset(kept: Path, rec: CellRecord, out: Path, problem: Problem) -> CellImages:
    """The pairs of a cell from the figure pairs the board keeps: the images its figure shows, in its order."""
    from reconbench.evaluation.pair_figure import PairGroup, draw_pairs
    from reconbench.leaderboard.figure_pairs import read_pairs, subset_pairs

    subset = read_pairs(kept)
    if len(rec.per_image) != problem.n:
        return CellImages([], f"the cell records {len(rec.per_image)} per-image rows for {problem.n} training images",
                          subset=True)
    # the file holds as many images as the figure showed (the suite's sample_images, at most n): the same count
    # names the same images (the rows' order), which subset_pairs checks
    pairs = subset_pairs(problem, subset, rec, len(subset.shown))
    if not pairs:
        return CellImages([], "the cell's figure pairs hold no training image", subset=True)
    out.mkdir(parents=True, exist_ok=True)
    draw_pairs(out / PAIRS_FILE, [PairGroup("", [p.pair for p in pairs])],
               title=["A subset of matched pairs, float16", f"({len(pairs)} of {problem.n} training images)"])
    return CellImages(pairs, figure=PAIRS_FILE, subset=True)
