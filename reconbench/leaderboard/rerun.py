"""A seeded random sample of a board's cells re-run from their recipes (``leaderboard B --verify --rerun-sample K``).

Most cells of a board keep no candidates (``slim.py`` stores a sample), so re-scoring cannot reach them: their
numbers are bound to the board only by hashes and seals, which whoever rewrites the board can recompute. A re-run
checks them independently: the cell's target is trained again from its recorded recipe in a **temporary target
cache** (so a cache that already holds a target cannot stand in for it), the attack runs with the recorded seed, and
what is deterministic is compared (``slim.compare_rerun``: every stored count exactly, other numbers within
``RERUN_RTOL``; the re-trained weights' sha256 against the board's model card). Wall-clock seconds are never compared.

The sample is drawn without replacement from the cells that have no stored candidates, by ``random.Random(seed)``;
the seed is drawn from the operating system's entropy when not given and is always printed, so that a forger cannot
know in advance which cells are checked and a reader can repeat the same check. Of ``n`` such cells, a sample of
``k`` includes one given forged cell with probability ``k / n``, and at least one of ``f`` forged cells with
probability ``1 - C(n - f, k) / C(n, k)`` (:func:`detection_probability`).
"""

from __future__ import annotations

import random
import secrets
import tempfile
from dataclasses import dataclass
from math import comb
from pathlib import Path

from reconbench.bench.runner import card_reader
from reconbench.bench.suite import Suite
from reconbench.errors import ReconbenchError
from reconbench.leaderboard.slim import rerun_cells, stored_candidate_ids
from reconbench.leaderboard.verify import read_board_json
from reconbench.records import CardData, CellRecord

#: the largest seed ``--rerun-seed`` takes (and the range a drawn seed comes from)
MAX_SEED = 2**32 - 1


def draw_seed() -> int:
    """A sample seed nobody can predict (the operating system's entropy)."""
    return secrets.randbelow(MAX_SEED + 1)


def unstored_cells(board: Path) -> list[str]:
    """The cells of ``board`` whose candidates are not stored (re-scoring cannot reach them), sorted."""
    stored = set(stored_candidate_ids(board))
    return sorted(p.stem for p in (board / "cells").glob("*.json") if p.stem not in stored)


@dataclass(frozen=True)
class RerunSample:
    """The cells drawn for re-running, the seed they were drawn with and how many cells they were drawn from."""

    seed: int
    cells: list[str]
    population: int

    def probability(self, forged: int = 1) -> float:
        """Probability that this sample holds at least one of ``forged`` forged cells among its population."""
        return detection_probability(len(self.cells), self.population, forged)


def detection_probability(k: int, n: int, forged: int = 1) -> float:
    """Probability that ``k`` cells drawn without replacement from ``n`` include at least one of ``forged`` forged
    ones (1 - C(n - f, k) / C(n, k); one forged cell: k / n)."""
    if n <= 0 or forged <= 0:
        return 0.0
    k, forged = min(k, n), min(forged, n)
    return 1.0 - comb(n - forged, k) / comb(n, k)


def draw_sample(board: Path, k: int, seed: int) -> RerunSample:
    """``k`` cells (all when fewer) drawn at random with ``seed`` from the board's cells without stored candidates."""
    if not 0 <= seed <= MAX_SEED:
        raise ReconbenchError(f"--rerun-seed {seed} is out of range; give an integer from 0 to {MAX_SEED}")
    pool = unstored_cells(board)
    return RerunSample(seed=seed, cells=sorted(random.Random(seed).sample(pool, min(k, len(pool)))),
                       population=len(pool))


def rerun_checked(suite: Suite, board: Path, cell_ids: list[str], *, data_root: str | None = None) -> list[str]:
    """Re-run ``cell_ids`` with their targets trained again in a temporary cache; the problems (empty: every
    deterministic number agrees): the board's stored numbers against the re-run's, and each re-trained target's
    weights sha256 against the board's model card."""
    with tempfile.TemporaryDirectory(prefix="reconbench-rerun-") as tmp:
        work = Path(tmp) / "work"
        problems = rerun_cells(suite, board, cell_ids, data_root=data_root, cache=str(Path(tmp) / "cache"),
                               work=work)
        problems += _weights_problems(board, work, cell_ids)
    return problems


def _weights_problems(board: Path, work: Path, cell_ids: list[str]) -> list[str]:
    """Each re-run cell whose target, trained again, has other weights than the board's model card records."""
    published = card_reader(board)
    fresh_cards = [card_reader(folder) for folder in sorted(work.iterdir()) if folder.is_dir()]
    problems: list[str] = []
    seen: set[str] = set()
    for cid in cell_ids:
        raw = published_cell(board, cid)
        key = str(raw.target.recipe_key)
        if key in seen:
            continue
        seen.add(key)
        theirs = published(key)
        ours = next((c for read in fresh_cards if (c := read(key)) is not None), None)
        if theirs is None or ours is None:
            continue   # a missing card is named by the stored numbers' check
        want = CardData.from_dict(theirs).weights
        got = CardData.from_dict(ours).weights
        want_sha = None if want is None else want.sha256
        got_sha = None if got is None else got.sha256
        if want_sha != got_sha:
            problems.append(f"{cid}: its target trained again from recipe {key} has weights sha256 "
                            f"{str(got_sha)[:16]}, the board's model card {str(want_sha)[:16]} (another processor "
                            "or library rounds training differently; compare the cell's machine and provenance)")
    return problems


def published_cell(board: Path, cell_id: str) -> CellRecord:
    """A board's cell as stored (its target's recipe key is all this module reads of it)."""
    return CellRecord.from_dict(read_board_json(board / "cells" / f"{cell_id}.json", f"cell {cell_id}"))


@dataclass(frozen=True)
class CheckCount:
    """How the cells of a board were checked by ``--verify``: re-scored from stored candidates, re-run from their
    recipe and seed, or through their files' hashes and seals only."""

    cells: int
    rescored: int
    rerun: int

    @property
    def hashes_only(self) -> int:
        return max(0, self.cells - self.rescored - self.rerun)

    def line(self) -> str:
        return (f"checked {self.cells} cell(s): {self.rescored} re-scored from stored candidates, {self.rerun} re-run "
                f"from their recipe and seed, {self.hashes_only} through hashes and seals only")

    def problem(self) -> str | None:
        """Why the check proves nothing about any number (None: at least one cell was re-derived)."""
        if self.cells and self.rescored + self.rerun == 0:
            return ("0 cells re-scored or re-run: no number of the board was re-derived; restore its stored "
                    "candidates, or add --rerun-sample K to re-run cells from their recipes")
        return None
