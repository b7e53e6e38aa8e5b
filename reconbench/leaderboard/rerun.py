"""A seeded random sample of a board's cells re-run from their recipes (``leaderboard B --verify --rerun-sample K``).

Most cells of a board keep no candidates (``slim.py`` stores a sample), so re-scoring cannot reach them: their
numbers are bound to the board only by hashes and seals, which whoever rewrites the board can recompute. A re-run
checks them independently: the cell's target is trained again from its recorded recipe in a **temporary target
cache** (so a cache that already holds a target cannot stand in for it), the attack runs with the recorded seed, and
what is deterministic is compared (``slim.compare_rerun``: every stored count exactly, other numbers within
``RERUN_RTOL``; the re-trained weights' sha256 against the board's model card). Wall-clock seconds are never compared.
Each target is trained, and each attack runs, on the BLAS path (stock MKL or its fast path) the card and the cell
record, in a child process where that is not this process's path (``rerun_paths.py``).

The sample is drawn without replacement from the cells that have no stored candidates, by ``random.Random(seed)``;
the seed is drawn from the operating system's entropy when not given and is always printed, so that a forger cannot
know in advance which cells are checked and a reader can repeat the same check. Of ``n`` such cells, a sample of
``k`` includes one given forged cell with probability ``k / n``, and at least one of ``f`` forged cells with
probability ``1 - C(n - f, k) / C(n, k)`` (:func:`detection_probability`).
"""

from __future__ import annotations

import contextlib
import random
import secrets
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from math import comb
from pathlib import Path

from reconbench import fast_blas
from reconbench.bench.runner import card_reader, load_cell_records
from reconbench.bench.suite import Suite
from reconbench.errors import ReconbenchError
from reconbench.leaderboard.published_suite import published_suite
from reconbench.leaderboard.rerun_paths import (
    PathPlan,
    Trainer,
    cell_attack_path,
    plan_paths,
    retrain_target,
    run_child,
    train_on_path,
)
from reconbench.leaderboard.slim import rerun_cells, stored_candidate_ids
from reconbench.leaderboard.submit import board_suite
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


def suite_for_verify(suite: Suite, board: Path) -> Suite:
    """The suite ``--verify`` checks ``board`` against: the version it was rendered from where the suite file changed
    since (read from git), else ``suite`` with the board's outside submissions' additions appended."""
    published = published_suite(suite, board)
    return published.suite if published.commit else board_suite(suite, board)


@dataclass
class RerunReport:
    """What a re-run found (``problems``, empty: every deterministic number agrees) and did (``lines``: one per
    target, where it was trained, and one per group of cells attacked in a child process)."""

    problems: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    #: called with each line as it is made (the command prints them while the re-run goes on)
    say: Callable[[str], None] | None = field(default=None, repr=False, compare=False)
    #: each cell's BLAS paths: where its target was to be trained and its attack to run
    plans: dict[str, PathPlan] = field(default_factory=dict)
    #: the results folders the re-run wrote its cells to (one per attack path and precision; they outlive the re-run
    #: only where the caller gave ``work``)
    results: list[Path] = field(default_factory=list)

    def tell(self, line: str) -> None:
        self.lines.append(line)
        if self.say is not None:
            self.say(line)


def rerun_checked(suite: Suite, board: Path, cell_ids: list[str], *, data_root: str | None = None,
                  trainer: Trainer | None = None, say: Callable[[str], None] | None = None,
                  work: Path | None = None, attacker: Attacker | None = None) -> RerunReport:
    """Re-run ``cell_ids`` with their targets trained again in a temporary cache, each on the BLAS path its board
    card records (where it records none: the cell's attack path, then the other path if the weights differ from
    the card's; ``rerun_paths.plan_paths``), and each attack on the path its cell records (in a child process where
    that is not this process's). The board's stored numbers are compared with the re-run's, and each re-trained
    target's weights sha256 with the board's model card. ``say`` is told each line of what was done as it is.
    ``work``: where the re-run's cells (their records and candidates) are written, to outlive it (default: a
    temporary folder); ``attacker`` runs the attacks of one path (default: :func:`attack_on_path`)."""
    stored = load_cell_records(board)
    missing = [c for c in cell_ids if c not in stored]
    if missing:
        raise ReconbenchError(f"{board} has no cell {missing[0]!r}; name cells of the board (its cells/ folder)")
    current = fast_blas.current_path()
    plans = {cid: plan_paths(_card_path(board, stored[cid]), cell_attack_path(stored[cid].provenance), current)
             for cid in cell_ids}
    report = RerunReport(say=say, plans=plans)
    attack = attacker or attack_on_path
    with recorded_threads(stored, cell_ids), tempfile.TemporaryDirectory(prefix="reconbench-rerun-") as tmp:
        cache = Path(tmp) / "cache"
        cells_root = work or Path(tmp) / "work"
        train = trainer or train_on_path(suite.device, data_root, torch_threads())
        for key, (card, plan) in _targets(board, stored, cell_ids, plans).items():
            weights = card.weights
            done = retrain_target(key, card.recipe.to_dict() if card.recipe is not None else {}, plan,
                                  None if weights is None else weights.sha256, train, Path(tmp) / "train" / key, cache)
            report.tell(done.line)
            if done.problem is not None:
                report.problems.append(done.problem)
        for path in sorted({p.attack for p in plans.values()}):
            ids = [c for c in cell_ids if plans[c].attack == path]
            folder = cells_root / path
            problems, line = attack(suite, board, ids, path, cache, folder, data_root, stored)
            if line is not None:
                report.tell(line)
            report.problems += problems
            report.results += sorted(p for p in folder.iterdir() if (p / "cells").is_dir()) if folder.is_dir() else []
    return report


#: re-runs cells of a board whose attacks ran on one BLAS path against the targets of a cache, writing them under a
#: folder: ``(suite, board, ids, path, cache, folder, data_root, stored) -> (problems, line or None)``
Attacker = Callable[[Suite, Path, list[str], str, Path, Path, str | None, Mapping[str, CellRecord]],
                    tuple[list[str], str | None]]


def attack_on_path(suite: Suite, board: Path, ids: list[str], path: str, cache: Path, folder: Path,
                   data_root: str | None, stored: Mapping[str, CellRecord]) -> tuple[list[str], str | None]:
    """Re-run ``ids`` on BLAS ``path`` into ``folder/<precision>``: in this process where it is this process's path
    (no line), else in a child process (its line)."""
    if path == fast_blas.current_path():
        return rerun_cells(suite, board, ids, data_root=data_root, cache=str(cache), work=folder, stored=stored), None
    return _attack_in_child(suite, board, ids, path, cache, folder, data_root)


def torch_threads() -> int:
    import torch

    return int(torch.get_num_threads())


@contextlib.contextmanager
def recorded_threads(stored: Mapping[str, CellRecord], cell_ids: list[str]) -> Iterator[None]:
    """Torch's thread count set, for the block, to the one the cells' provenance records (a product split over
    another number of threads can round differently, and a re-trained target's weights sha256 then differs from
    its card's); left as it is where the cells record none or disagree. Child processes read it from here."""
    import torch

    counts = {(stored[c].provenance or {}).get("torch_threads") for c in cell_ids}
    want = counts.pop() if len(counts) == 1 else None
    before = torch.get_num_threads()
    if isinstance(want, int) and want > 0 and want != before:
        torch.set_num_threads(want)
    try:
        yield
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)


def _card_path(board: Path, cell: CellRecord) -> str | None:
    data = card_reader(board)(str(cell.target.recipe_key))
    return None if data is None else CardData.from_dict(data).training_path


def _targets(board: Path, stored: Mapping[str, CellRecord], cell_ids: list[str], plans: Mapping[str, PathPlan]
             ) -> dict[str, tuple[CardData, PathPlan]]:
    """Each target of the cells that the board has a model card with a recipe of, and the plan of its first cell
    (a target without one is trained by the re-run itself, and the stored numbers' check names what is missing)."""
    read = card_reader(board)
    out: dict[str, tuple[CardData, PathPlan]] = {}
    for cid in cell_ids:
        key = str(stored[cid].target.recipe_key)
        if key in out or (data := read(key)) is None:
            continue
        card = CardData.from_dict(data)
        if card.recipe is not None:
            out[key] = (card, plans[cid])
    return out


def _attack_in_child(suite: Suite, board: Path, ids: list[str], path: str, cache: Path, work: Path,
                     data_root: str | None) -> tuple[list[str], str]:
    """Re-run ``ids`` in a child process on BLAS ``path`` against the targets of ``cache``: the problems, one line."""
    work.mkdir(parents=True, exist_ok=True)
    args = ["--suite", str(suite.path), "--suite-sha256", suite.text_sha256, "--board", str(board.resolve()),
            "--cells", ",".join(ids), "--cache", str(cache), "--work", str(work), "--threads", str(torch_threads()),
            *(["--data-root", data_root] if data_root else [])]
    got, note = run_child("attack", args, path, work.parent / f"attacked-{path}.json")
    if got is None:
        return [f"{', '.join(ids)}: the re-run on the {path} path did not finish: {note}"], \
            f"{len(ids)} cell(s) attacked on the {path} path in a child process: failed ({note})"
    ran = str(got["path"])
    line = f"{len(ids)} cell(s) attacked on the {ran} path their provenance records, in a child process"
    if note:
        line = f"{len(ids)} cell(s) recorded on the {path} path attacked on the {ran} path: {note}"
    return [str(p) for p in got["problems"]], line


@dataclass(frozen=True)
class CheckCount:
    """How the cells of a board were checked by ``--verify``: re-scored from stored candidates, re-run from their
    recipe and seed, or through their files' hashes and seals only."""

    cells: int
    rescored: int
    rerun: int
    #: cells of a board without their stored candidates whose figure pairs were re-scored (``figure_pairs.py``): the
    #: per-image scores of the pairs the figure shows re-derived, their other numbers through hashes and seals
    pairs: int = 0

    @property
    def hashes_only(self) -> int:
        return max(0, self.cells - self.rescored - self.rerun - self.pairs)

    def line(self) -> str:
        pairs = f", {self.pairs} through the figure pairs re-scored from float16" if self.pairs else ""
        return (f"checked {self.cells} cell(s): {self.rescored} re-scored from stored candidates, {self.rerun} re-run "
                f"from their recipe and seed{pairs}, {self.hashes_only} through hashes and seals only")

    def problem(self) -> str | None:
        """Why the check proves nothing about any number (None: at least one cell was re-derived, in full or through
        the figure pairs a paper-size board keeps instead of candidates)."""
        if self.cells and self.rescored + self.rerun + self.pairs == 0:
            return ("0 cells re-scored or re-run: no number of the board was re-derived; restore its stored "
                    "candidates, or add --rerun-sample K to re-run cells from their recipes")
        return None
