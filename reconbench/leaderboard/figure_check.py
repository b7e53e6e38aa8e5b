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
  many per target (printed).
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
