"""A published board's reconstructions figure drawn again in the current layout, from its stored cells
(``reconbench leaderboard redraw SUITE``).

A board whose figure failed to draw where it was published (its record names the error) is drawn too. The figure
shows, per attack, the pooled candidates of one picked cell (``figures.reconstruction_picks``); a board
keeps the candidates of a sample of its cells only (``slim.py``). Picked cells whose candidates the board stores are
drawn from them, and those whose figure pairs it keeps (``figure_pairs.py``: a GPU slice's paper-size cells) from
those; the others are run again from their recorded recipes and seeds as ``leaderboard --verify --rerun`` runs them
(``rerun.rerun_checked``: each target trained again in a temporary cache on the BLAS path its model card records,
or on both paths where it records none, each attack on the path its cell records, in a child process where that
is not this process's), and drawn, from the candidates that re-run wrote, only when every stored number of
those cells and every re-trained target's weights are reproduced.
Then the figure record in results.json (its caption), README.md (rendered again from results.json and the cells),
the palette re-encoding of the figure (``slim.compact_figures``) and MANIFEST.json are rewritten, so that
``leaderboard --verify`` passes on the result. Nothing else of the board changes.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from reconbench.bench.runner import load_cell_records, load_cells
from reconbench.bench.suite import Suite
from reconbench.errors import ReconbenchError
from reconbench.leaderboard.figures import FigureData, draw_reconstructions, reconstruction_picks
from reconbench.leaderboard.manifest import MANIFEST_NAME, check_manifest, write_manifest
from reconbench.leaderboard.readme import rerender_readme
from reconbench.leaderboard.rerun import RerunReport, rerun_checked
from reconbench.leaderboard.rerun_paths import PathPlan
from reconbench.leaderboard.results_file import read_results, write_results
from reconbench.leaderboard.slim import candidates_file, compact_figures
from reconbench.leaderboard.tables import collect, resolve_columns
from reconbench.provenance import write_text_atomic
from reconbench.records import BoardResults, CellRecord, Figure, TableRow

FIGURE = "reconstructions"


@dataclass
class Redrawn:
    cells: list[str] = field(default_factory=list)       # the cells the figure shows
    rerun: list[str] = field(default_factory=list)       # of them, the ones run again for their candidates
    changed: list[str] = field(default_factory=list)     # board files whose bytes changed
    lines: list[str] = field(default_factory=list)       # what the re-run did: per target, the path that reproduced it


def missing_candidates(suite: Suite, board: Path) -> tuple[list[str], list[str]]:
    """The cells the reconstructions figure shows, and those of them whose candidates the board does not store
    (neither in full nor as the figure pairs it draws them from, ``figure_pairs.py``)."""
    from reconbench.leaderboard.figure_pairs import BOARD_FOLDER

    data = read_results(board)
    results = BoardResults.from_dict(data)
    pub = collect(suite, board)
    picks = [r.cell_id for r in reconstruction_picks(suite, pub, _tables(results), resolve_columns(suite, pub.ok()))]
    return picks, [c for c in picks if candidates_file(board, c) is None
                   and not (board / BOARD_FOLDER / f"{c}.safetensors").is_file()]


def _tables(results: BoardResults) -> dict[str, list[TableRow]]:
    return dict(results.tables or {})


def redrawable(stored: Figure | None) -> bool:
    """Whether a board's reconstructions figure record can be redrawn: a drawn figure, or one whose drawing failed
    where the board was published; a figure left out because the cells give nothing to show stays out."""
    return stored is not None and (stored.file is not None or bool(stored.failed))


def redraw_board(suite: Suite, board: Path, *, rerun_missing: bool = False, data_root: str | None = None,
                 say: Callable[[str], None] | None = None) -> Redrawn:
    """Draw ``board``'s reconstructions figure again (see the module docstring). ``say`` is told each line of what
    the re-run of the missing cells does, as it does it."""
    data = read_results(board)
    results = BoardResults.from_dict(data)
    figures = results.figures or {}
    if not redrawable(figures.get(FIGURE)):
        raise ReconbenchError(f"{board} has no drawn reconstructions figure to redraw; publish the board to draw it")
    if results.header.suite_sha256 and results.header.suite_sha256 != suite.text_sha256:
        raise ReconbenchError(f"{board} was rendered from another version of {suite.path.name}; redraw with the suite "
                              "file it was rendered from")
    if problems := check_manifest(board):
        raise ReconbenchError(f"{board} differs from its {MANIFEST_NAME} ({problems[0]}); restore the board before "
                              "redrawing it")
    picks, missing = missing_candidates(suite, board)
    if missing and not rerun_missing:
        raise ReconbenchError(f"the board stores no candidates of {len(missing)} cell(s) the figure shows "
                              f"({', '.join(missing)}); add --rerun-missing to run them again from their recipes")
    before = {p: p.read_bytes() if p.is_file() else None for p in _touched(board)}   # a failed figure has no PNG
    pub = collect(suite, board)
    columns = resolve_columns(suite, pub.ok())
    fig_data = FigureData(board, data_root)
    lines: list[str] = []
    with tempfile.TemporaryDirectory(prefix="reconbench-redraw-") as tmp:
        if missing:
            report = rerun_checked(suite, board, missing, data_root=data_root, say=say, work=Path(tmp) / "rerun")
            lines = report.lines
            if report.problems:
                raise ReconbenchError(not_reproduced(board, missing, report))
            again = Path(tmp) / "again"
            again.mkdir()
            for results_dir in report.results:
                for cid, rec in load_cells(results_dir).items():
                    src = results_dir / CellRecord.from_dict(rec).work_dir / "candidates.safetensors"
                    if cid in missing and src.is_file():
                        shutil.copyfile(src, again / f"{cid}.safetensors")
            fig_data.candidate_dirs.append(again)
        drawn = draw_reconstructions(suite, pub, _tables(results), columns, fig_data,
                                     board / "figures" / "reconstructions.png")
    _record(suite, board, drawn)
    compact_figures(board)
    write_manifest(board)
    changed = [p.relative_to(board).as_posix() for p, b in before.items()
               if (p.read_bytes() if p.is_file() else None) != b]
    return Redrawn(picks, missing, changed, lines)


def not_reproduced(board: Path, missing: list[str], report: RerunReport) -> str:
    """The one-line error of a re-run that does not reproduce the board: the cells whose numbers or targets differ,
    the BLAS paths the re-run took for them, and what to check."""
    keys = {c: str(r.target.recipe_key) for c, r in load_cell_records(board).items() if c in missing}
    bad = [c for c in missing if any(p.startswith((f"{c} ", f"target {keys.get(c)}:")) or f"{c}:" in p
                                     or f"{c}," in p for p in report.problems)] or missing
    paths = "; ".join(f"{c}: {_plan_words(report.plans.get(c))}" for c in bad)
    return (f"running the figure's cells again does not reproduce the board ({len(report.problems)} number(s) or "
            f"target(s) of {len(bad)} cell(s); first: {report.problems[0]}); nothing was redrawn. Paths taken: "
            f"{paths}. Check the BLAS path each target's card (targets/<key>.json, training_machine) and each cell's "
            "provenance (blas.fast_path) record, and that this machine (processor, MKL version, torch) is the one "
            "the cells' provenance names")


def _plan_words(plan: PathPlan | None) -> str:
    if plan is None:
        return "not planned"
    card = "as its card records" if plan.card_says else "its card records none"
    train = " path, then on the ".join(plan.train)
    return f"target trained on the {train} path ({card}), attacked on the {plan.attack} path its cell records"


def _touched(board: Path) -> list[Path]:
    return [board / "figures" / "reconstructions.png", board / "results.json", board / "README.md",
            board / MANIFEST_NAME]


def _record(suite: Suite, board: Path, drawn: Figure) -> None:
    """The figure's record in results.json, and README.md rendered again from it."""
    data = read_results(board)
    data["figures"][FIGURE] = drawn.to_dict()
    write_results(board, data)
    write_text_atomic(board / "README.md", rerender_readme(suite, board, data))
