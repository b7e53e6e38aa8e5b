"""The reconstructions of a cell next to the training images they matched, as one PNG for its page.

Only cells whose pooled candidates the board stores (``candidates/<cell>.safetensors.xz``) have them. The training
problem is rebuilt from the board's model card (it needs the data set); the pairs are the board figure's
(:mod:`reconbench.leaderboard.cell_pairs`), drawn in the layout every figure of pairs shares
(:mod:`reconbench.evaluation.pair_figure`), and listed beside it with their stored numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reconbench.bench.runner import STATUS_OK
from reconbench.errors import ReconbenchError
from reconbench.leaderboard.cell_pairs import CellPair, cell_pairs
from reconbench.leaderboard.slim import candidates_file, read_candidates
from reconbench.records import CellRecord

#: the file of a cell's pairs, beside its page (cells/<cell>/pairs.png)
PAIRS_FILE = "pairs.png"


@dataclass
class CellImages:
    pairs: list[CellPair] = field(default_factory=list)
    reason: str = ""        # why there are none
    failed: bool = False    # stored candidates that could not be drawn here (e.g. the data set is missing)
    figure: str | None = None   # the PNG of the pairs, beside the cell page


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
    if stored is None:
        return CellImages([], "images are not stored for this cell: the board keeps the candidates of a sample of "
                              "its cells only")
    try:
        return _draw(stored, rec, out, problems.problem(board, rec), max_images)
    except (ReconbenchError, OSError, KeyError, ValueError) as exc:
        return CellImages([], f"images could not be drawn here ({type(exc).__name__}: {exc})", failed=True)


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
