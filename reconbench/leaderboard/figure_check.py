"""A board's figures checked by ``--verify`` through what they are drawn from, not through their bytes.

Why not their bytes: a PNG drawn by matplotlib depends on the versions of matplotlib and FreeType, on the fonts
installed and on Agg's anti-aliasing, and a board re-encodes each figure as a palette PNG with Pillow's quantiser
(``slim.compact_figures``), so the same numbers give other bytes on another machine; and the reconstructions figure
draws the candidates of cells whose candidates a board does not keep (``slim.py`` stores a sample). The bytes of
each figure are bound by the board's manifest (``manifest.py``); what is decidable on any machine is re-derived here
from the cells and compared with the figure records of ``results.json``:

* whether each figure is drawn or, if not, why not (the same rules as ``figures.py``);
* the reconstructions figure: the cells it shows (per attack, the best cell of its first row under an eligible
  init), in order;
* the SSIM-vs-margin figure: that the cells hold the points it plots (it is drawn exactly when they do), and how
  many per target (printed);
* the figure pairs a board keeps (``figure_pairs/<cell>.safetensors``: the float16 candidates the figure drew of a
  cell whose full candidates it does not store, ``figure_pairs.py``): each belongs to a cell the figure shows, holds
  the images its rows give, draws the pairs the figure records, and re-scores, pair by pair, to the cell's stored
  per-image scores within float16's rounding as that pair's values carry it (``figure_pairs.pair_tolerances``; a
  pair too flat for float16 to re-score is said in one line and left to the manifest): checked, not trusted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from reconbench.bench.suite import Suite
from reconbench.leaderboard.figures import FigureData, reconstruction_picks, ssim_margin_points
from reconbench.leaderboard.results_file import read_results
from reconbench.leaderboard.tables import Published, collect, resolve_columns
from reconbench.records import BoardResults, Figure


@dataclass
class FigureCheck:
    """The figure records re-derived from the cells: the problems, and what was checked."""

    problems: list[str] = field(default_factory=list)
    checked: list[str] = field(default_factory=list)
    #: cells whose figure pairs (figure_pairs.py) were re-scored against their per-image rows
    pairs_cells: list[str] = field(default_factory=list)


def _drawn(fig: Figure | None) -> bool:
    return fig is not None and fig.file is not None


def _failed(fig: Figure | None) -> bool:
    """Whether drawing the figure failed where the board was rendered (e.g. candidates that did not come back from
    a GPU slice), as opposed to a figure left out because the cells give nothing for it."""
    return fig is not None and fig.file is None and bool(fig.failed)


def check_figures(suite: Suite, board: Path, data_root: str | None = None) -> FigureCheck:
    """Each figure of ``board``'s results.json against what its cells give (see the module docstring)."""
    out = FigureCheck()
    data = read_results(board)
    results = BoardResults.from_dict(data)
    figures = results.figures or {}
    if not figures:
        return out
    pub = collect(suite, board)
    columns = resolve_columns(suite, pub.ok())
    where = f"{board}/results.json"
    if "reconstructions" in figures:
        stored = figures["reconstructions"]
        picks = [r.cell_id for r in reconstruction_picks(suite, pub, dict(results.tables or {}), columns)]
        if not _drawn(stored) and picks and _failed(stored):
            out.checked.append(f"reconstructions: not drawn where it was published ({stored.reason})")
        elif _drawn(stored) != bool(picks):
            out.problems.append(f"{where}: the reconstructions figure is {'drawn' if _drawn(stored) else 'not drawn'}"
                                f", but the cells give {len(picks)} cell(s) to show; publish the board again")
        elif _drawn(stored) and list(stored.cells or []) != picks:
            out.problems.append(f"{where}: the reconstructions figure shows cells {list(stored.cells or [])}, the "
                                f"cells and tables give {picks}; publish the board again")
        else:
            out.checked.append(f"reconstructions: {len(picks)} cell(s) shown")
            if _drawn(stored):
                out.problems += _pair_problems(suite, pub, board, str(stored.file), picks, where)
        pairs_check = check_kept_pairs(suite, pub, board, picks if _drawn(stored) else [], str(stored.file or ""),
                                       data_root)
        out.problems += pairs_check.problems
        out.checked += pairs_check.checked
        out.pairs_cells = pairs_check.pairs_cells
    if "ssim_vs_margin" in figures:
        stored = figures["ssim_vs_margin"]
        points = ssim_margin_points(pub, FigureData(board, data_root))
        counts = {t: sum(len(xs) for xs, _ in by.values()) for t, by in points.items()}
        if _drawn(stored) != bool(points):
            out.problems.append(f"{where}: the SSIM-vs-margin figure is "
                                f"{'drawn' if _drawn(stored) else 'not drawn'}, but the cells hold "
                                f"{sum(counts.values())} point(s) for it; publish the board again")
        else:
            out.checked.append("ssim_vs_margin: " + (", ".join(f"{n} point(s) of {t}" for t, n in counts.items())
                                                     or "not drawn, no point"))
    return out


def _pair_problems(suite: Suite, pub: Published, board: Path, file: str, picks: list[str], where: str) -> list[str]:
    """The pairs the reconstructions figure records (its layout, ``pair_figure.read_layout``) against the cells'
    stored rows: per cell, the same training images in the same order with the same labels and frames. A figure
    drawn before the layout was recorded is not checked here (its bytes are, by the manifest)."""
    from reconbench.evaluation.pair_figure import read_layout
    from reconbench.leaderboard.cell_pairs import recorded_pairs

    path = board / file
    try:
        layout = read_layout(path)
    except (OSError, ValueError, KeyError) as exc:
        return [f"{path}: its layout record cannot be read ({exc}); redraw it with `reconbench leaderboard redraw`"]
    if layout is None:
        return []
    if len(layout.groups) != len(picks):
        return [f"{where}: the reconstructions figure draws {len(layout.groups)} group(s) of pairs for {len(picks)} "
                "cell(s); redraw it with `reconbench leaderboard redraw`"]
    problems = []
    records = {r.cell_id: r for r in pub.usable()}
    k = suite.leaderboard.sample_images
    for g, cid in enumerate(picks):
        drawn = [(p.index, p.label, p.passed, p.candidate is not None) for p in layout.pairs if p.group == g]
        if cid in records and drawn != recorded_pairs(records[cid], k):
            problems.append(f"{where}: the reconstructions figure's pairs of {cid} are not the ones its rows give "
                            "(index, SSIM, distance, frame); redraw it with `reconbench leaderboard redraw`")
    return problems


def figure_line(check: FigureCheck) -> str:
    """One line on the figures for ``--verify``."""
    what = "; ".join(check.checked) or "no figure records"
    return (f"  figures: re-derived from the cells ({what}); their bytes are checked by the manifest (a redrawn PNG "
            "differs across matplotlib, FreeType and font versions)")


def check_kept_pairs(suite: Suite, pub: Published, board: Path, picks: list[str], file: str,
                     data_root: str | None) -> FigureCheck:
    """The board's ``figure_pairs/`` against its figure and its cells (module docstring)."""
    import tempfile

    from reconbench.evaluation.pair_figure import PairGroup, draw_pairs, read_layout
    from reconbench.leaderboard.board_cards import load_board_card
    from reconbench.leaderboard.figure_pairs import BOARD_FOLDER, PairsError, read_pairs, rescore_pairs, subset_pairs
    from reconbench.leaderboard.slim import candidates_file

    out = FigureCheck()
    folder = board / BOARD_FOLDER
    kept = sorted(p for p in folder.glob("*.safetensors")) if folder.is_dir() else []
    if suite.leaderboard.figure_pairs:   # the suite keeps the pairs of every figure cell without stored candidates
        out.problems += [f"{folder}: no figure pairs of {cid}, which the reconstructions figure shows and whose "
                         "candidates the board does not store; publish the board again"
                         for cid in picks if candidates_file(board, cid) is None
                         and not (folder / f"{cid}.safetensors").is_file()]
    if not kept:
        return out
    records = {r.cell_id: r for r in pub.usable()}
    k = suite.leaderboard.sample_images
    layout = None
    try:
        layout = read_layout(board / file) if file else None
    except (OSError, ValueError, KeyError):
        layout = None   # _pair_problems says so
    compared = 0
    unscored: list[str] = []   # pairs too flat for float16 to re-score
    for path in kept:
        cid = path.name.removesuffix(".safetensors")
        if cid not in picks or cid not in records:
            out.problems.append(f"{path}: figure pairs of a cell the reconstructions figure does not show; remove it, "
                                "or publish the board again")
            continue
        rec = records[cid]
        try:
            pairs = read_pairs(path)
            problem, _card = load_board_card(board, str(rec.target.recipe_key), data_root)
            problems, n = rescore_pairs(problem, pairs, rec, k, str(path), unscored)
            out.problems += problems
            compared += n
            if problems:
                continue
            out.pairs_cells.append(cid)
            drawn = subset_pairs(problem, pairs, rec, k)
            with tempfile.TemporaryDirectory(prefix="reconbench-pairs-") as tmp:
                again = draw_pairs(Path(tmp) / "pairs.png", [PairGroup(cid, [p.pair for p in drawn])], per_row=k)
            group = picks.index(cid)
            if layout is not None and [a for p, a in zip(layout.pairs, layout.arrangement(), strict=True)
                                       if p.group == group] != again.arrangement():
                out.problems.append(f"{path}: the pairs drawn again from it are not the ones the reconstructions "
                                    "figure shows of that cell; redraw it with `reconbench leaderboard redraw`")
        except PairsError as exc:
            out.problems.append(str(exc))
    out.checked.append(f"figure pairs: {len(kept)} cell(s) kept in float16, {compared} per-image score(s) re-scored "
                       "from them")
    out.checked += unscored
    return out
