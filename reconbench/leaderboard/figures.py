"""Leaderboard figures: sample reconstructions per attack, SSIM vs margin, and the mixture-init heatmap."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from safetensors.torch import load_file

from reconbench.bench.suite import Suite
from reconbench.leaderboard.tables import Published, column_value
from reconbench.records import CellRecord, Figure, TableRow, TrainMetrics
from reconbench.records.parameter_ratio import ParameterRatio
from reconbench.safe_paths import member
from reconbench.targets.cards import ModelCard
from reconbench.targets.problems import Problem

MIXTURE_REGIME = "mixture"
#: the per-image keys of reconbench.evaluation: the candidate matched to a training image, and the SSIM of its
#: reconstruction (the papers' variant)
CANDIDATE_KEY, SSIM_KEY = "best_candidate", "ssim"


def _num(v: object) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


if TYPE_CHECKING:
    from matplotlib.figure import Figure as MplFigure

    from reconbench.evaluation.pair_figure import PairGroup

TITLES = {
    "reconstructions": "Sample reconstructions per attack",
    "ssim_vs_margin": "SSIM vs margin",
    "mixture_heatmap": "Mixture initialisations",
    "share_vs_p_over_dn": "Reconstructed share against p / (d n)",
}


class FigureData:
    """Problems and pooled candidates of cells, loaded once."""

    def __init__(self, results: Path, data_root: str | None) -> None:
        self.results, self.data_root = results, data_root
        self._problems: dict[str, Problem] = {}
        self._cards: dict[str, dict[str, Any]] = {}
        self.candidate_dirs: list[Path] = []

    def card(self, rec: CellRecord) -> dict[str, Any]:
        key = str(rec.target.recipe_key)
        if key not in self._cards:
            self._cards[key] = json.loads(member(self.results / "targets", key, ".json", "recipe key").read_text())
        return self._cards[key]

    def margins(self, rec: CellRecord) -> list[Any]:
        """The target's per-image margins from its model card ([] when the card is not at hand)."""
        try:
            return list(TrainMetrics.from_dict(self.card(rec)["metrics"]).margins or [])
        except (OSError, KeyError, ValueError):
            return []

    def problem(self, rec: CellRecord) -> Problem:
        key = str(rec.target.recipe_key)
        if key not in self._problems:
            card = ModelCard(path=self.results / "targets", data=self.card(rec))
            self._problems[key] = card.problem(self.data_root)
        return self._problems[key]

    def problem_card(self, rec: CellRecord) -> tuple[Problem, ModelCard]:
        """The training problem and its model card (a board's compact card restored to the full one)."""
        from reconbench.leaderboard.board_cards import load_board_card

        return load_board_card(self.results, str(rec.target.recipe_key), self.data_root)  # type: ignore[no-any-return]

    def pooled(self, rec: CellRecord) -> dict[str, torch.Tensor]:
        """The cell's pooled candidates: from its run folder, else the ones a board stores, else from
        ``candidate_dirs`` (cells run again)."""
        from reconbench.leaderboard.slim import candidates_file, read_candidates

        plain = self.results / rec.work_dir / "candidates.safetensors" if rec.work_dir else None
        if plain is not None and plain.is_file():
            return load_file(str(plain))
        stored = candidates_file(self.results, rec.cell_id)
        if stored is not None:
            return read_candidates(stored)
        for folder in self.candidate_dirs:
            again = folder / f"{rec.cell_id}.safetensors"
            if again.is_file():
                return load_file(str(again))
        if str(rec.ran.device or "cpu").split(":")[0] != "cpu":   # a GPU slice's: a paper cell's pass a pack file
            raise FileNotFoundError(f"the pooled candidates of cell {rec.cell_id} stayed on the {rec.ran.device} "
                                    "machine that ran it, and no figure pairs of it came back (docs/slices.md, "
                                    "\"The pack\")")
        raise FileNotFoundError(f"the pooled candidates of cell {rec.cell_id} are not at hand (the board stores "
                                "a sample): redraw with --rerun-missing to run it again")

    def pairs_file(self, rec: CellRecord) -> Path | None:
        """The cell's figure pairs (``figure_pairs.py``): a board's ``figure_pairs/<cell>.safetensors``, else a
        results folder's ``work/<cell>/figure_pairs.safetensors``; None when neither is there."""
        from reconbench.leaderboard.figure_pairs import BOARD_FOLDER, PAIRS_FILE

        kept = member(self.results / BOARD_FOLDER, rec.cell_id, ".safetensors", "cell id")
        if kept.is_file():
            return kept
        work = self.results / rec.work_dir / PAIRS_FILE if rec.work_dir else None
        return work if work is not None and work.is_file() else None


def _primary(rec: CellRecord, columns: list[dict[str, Any]]) -> float:
    v, _ = column_value(rec, "pool", columns[0]["spec"])
    if v is None:
        return -math.inf
    return v if columns[0]["higher_is_better"] else -v


def reconstruction_picks(suite: Suite, pub: Published, tables: dict[str, list[TableRow]],
                         columns: list[dict[str, Any]]) -> list[CellRecord]:
    """The cells the reconstructions figure shows: per attack, the best cell (by the first column) of its first
    pooled row under an eligible init; an attack whose row has no usable cell (every cell failed, or the board
    keeps none of them) is left out: it has no picture. Rows of outside submissions (``leaderboard add``) are left
    out too: the figure is the board's own, drawn when it was published, and a merge does not redraw it."""
    picks = []
    for label in suite.attacks:
        rows = [r for r in tables["pool"] if r.attack == label and not r.outside]
        if not rows:
            continue
        eligible = suite.leaderboard.figure_inits
        fair = [r for r in rows if (r.init in eligible if eligible is not None else not r.init_is_oracle)
                and r.cells]   # a row whose attack failed in every cell has none
        if not fair:
            continue
        recs = pub.usable(fair[0].cells)
        if not recs:
            continue
        picks.append(max(recs, key=lambda r: _primary(r, columns)))
    return picks


def draw_reconstructions(
    suite: Suite,
    pub: Published,
    tables: dict[str, list[TableRow]],
    columns: list[dict[str, Any]],
    data: FigureData,
    path: Path,
) -> Figure:
    """Per attack, its picked cell's pairs (:mod:`reconbench.leaderboard.cell_pairs`, as the site's cell page shows
    them), one group a row, in the layout every figure of pairs shares (:mod:`reconbench.evaluation.pair_figure`)."""
    from reconbench.evaluation.pair_figure import PairGroup, draw_pairs
    from reconbench.leaderboard.cell_pairs import cell_pairs
    from reconbench.leaderboard.figure_pairs import read_pairs, subset_pairs, take_pairs

    title = TITLES["reconstructions"]
    picks = reconstruction_picks(suite, pub, tables, columns)
    eligible = suite.leaderboard.figure_inits
    inits_text = "a non-oracle init" if eligible is None else "one of the inits " + ", ".join(eligible)
    if not picks:
        return Figure.written(title=title, reason=f"no finished cell under {inits_text}")
    k = suite.leaderboard.sample_images
    board = path.parent.parent
    stored = set(stored_ids(board))
    groups, from_pairs = [], []
    keep: dict[str, bytes] = {}   # the figure pairs the board keeps, written once the figure is drawn
    for rec in picks:
        problem, card = data.problem_card(rec)
        try:
            pooled = data.pooled(rec)["candidates"]
        except FileNotFoundError:
            if (subset := data.pairs_file(rec)) is None:
                raise
            pairs = subset_pairs(problem, read_pairs(subset), rec, k)   # the figure's worth that came back
            keep[rec.cell_id] = subset.read_bytes()
            from_pairs.append(rec.cell_id)
        else:
            pairs = cell_pairs(problem, card, pooled, rec, k)
            if suite.leaderboard.figure_pairs and rec.cell_id not in stored:   # the board keeps its figure's worth
                keep[rec.cell_id] = take_pairs(problem, card, pooled, rec, k).to_bytes()
        oracle = " †" if rec.init.is_oracle else ""
        groups.append(PairGroup(f"{rec.attack.label} · init {rec.init.label}{oracle} · {rec.target.name} · seed "
                                f"{rec.seed}", [p.pair for p in pairs]))
    draw_pairs(path, groups, per_row=k)
    for cid, subset_bytes in keep.items():   # a figure that fails keeps none: --verify would call them stray
        keep_pairs(board, cid, subset_bytes)
    return Figure.written(
        title=title,
        file=f"figures/{path.name}",
        cells=[r.cell_id for r in picks],
        caption=f"For each attack, its best cell under {inits_text} (by the first column, pooled "
        f"candidates): the reconstruction (upper) above the training image it matched (lower), best calibrated "
        f"score first; #i: the training image's index, SSIM: the papers' score, d: the matching distance; framed "
        f"green: passes the calibrated headline.{_sizes_note(groups)}{_pairs_note(from_pairs)}",
    )


def _pairs_note(cells: list[str]) -> str:
    """The caption's sentence naming the cells drawn from their figure pairs ('' when none was)."""
    if not cells:
        return ""
    return (f" Drawn from a subset of matched pairs in float16, the candidates that came back from the machine that "
            f"ran the cell (figure_pairs/<cell>.safetensors, re-scored by --verify): {', '.join(cells)}.")


def stored_ids(board: Path) -> list[str]:
    """The cells whose full candidates the board folder stores (none where it holds no ``candidates/``)."""
    from reconbench.leaderboard.slim import stored_candidate_ids

    return stored_candidate_ids(board) if (board / "candidates").is_dir() else []


def keep_pairs(board: Path, cell_id: str, data: bytes) -> None:
    """A cell's figure pairs into the board's ``figure_pairs/`` (unchanged where it holds them already)."""
    from reconbench.leaderboard.figure_pairs import BOARD_FOLDER
    from reconbench.provenance import write_bytes_atomic

    dst = member(board / BOARD_FOLDER, cell_id, ".safetensors", "cell id")
    if dst.is_file() and dst.read_bytes() == data:
        return
    write_bytes_atomic(dst, data)


def _sizes_note(groups: list[PairGroup]) -> str:
    """The caption's sentence on image sizes, for a figure whose targets' images differ in size ('' otherwise)."""
    from reconbench.evaluation.pair_figure import image_chw

    shapes = sorted({tuple(image_chw(p.train, p.index).shape) for g in groups for p in g.pairs},
                    key=lambda s: (s[1] * s[2], s[0]))
    if len(shapes) < 2:
        return ""
    named = ", ".join(f"{'grey' if c == 1 else 'colour'} {h}×{w}" for c, h, w in shapes)
    return (f" The targets' images differ in size ({named}): each attack's pairs are drawn at their own size, "
            "scaled up by a whole factor without smoothing.")


def ssim_margin_points(pub: Published, data: FigureData) -> dict[str, dict[str, tuple[list[float], list[float]]]]:
    """The points of the SSIM-vs-margin figure: per target and attack, the margins and SSIMs of every training image
    of every non-oracle grid cell (targets and attacks without a point left out)."""
    points: dict[str, dict[str, tuple[list[float], list[float]]]] = {}
    for rec in pub.usable():
        if "grid" not in rec.groups or rec.init.is_oracle:
            continue
        rows = rec.per_image
        card_margins = data.margins(rec) if any(_num(r.margin) is None for r in rows) else []
        xs, ys = points.setdefault(rec.target.name, {}).setdefault(rec.attack.label, ([], []))
        for i, r in enumerate(rows):
            ssim = _num(r.raw(SSIM_KEY))
            margin = _num(r.margin)
            if margin is None and len(card_margins) == len(rows):
                margin = _num(card_margins[i])
            if ssim is not None and margin is not None:
                xs.append(margin)
                ys.append(ssim)
    points = {t: {a: v for a, v in by.items() if v[0]} for t, by in points.items()}
    points = {t: by for t, by in points.items() if by}
    return points


def draw_ssim_vs_margin(suite: Suite, pub: Published, data: FigureData, path: Path) -> Figure:
    import matplotlib.pyplot as plt

    title = TITLES["ssim_vs_margin"]
    points = ssim_margin_points(pub, data)
    if not points:
        return Figure.written(title=title, reason="the cells' evaluations record no per-image SSIM")
    fig, axes = plt.subplots(1, len(points), figsize=(4.2 * len(points), 3.4), squeeze=False)
    for ax, (target, by_attack) in zip(axes[0], points.items(), strict=True):
        for label, (xs, ys) in by_attack.items():
            ax.scatter(xs, ys, s=8, alpha=0.6, label=label)
        ax.set_xlabel("margin of the training image under the target")
        ax.set_ylabel("SSIM of its best reconstruction")
        ax.set_title(target, fontsize=9)
        ax.legend(fontsize=7)
    return _saved(
        fig, path, title,
        caption="Every training image of every non-oracle grid cell (pooled candidates): the SSIM of "
        "its best "
        "reconstruction against its margin under the trained target. The KKT theory predicts that "
        "images on or near the margin are the reconstructable ones.",
    )


def draw_mixture_heatmap(suite: Suite, pub: Published, columns: list[dict[str, Any]], path: Path) -> Figure:
    import matplotlib.pyplot as plt

    title = TITLES["mixture_heatmap"]
    recs = [r for r in pub.usable() if r.init.regime == MIXTURE_REGIME]
    if not recs:
        return Figure.written(title=title, reason=f"the suite runs no `{MIXTURE_REGIME}` init")
    numeric = sorted(
        {k for r in recs for k, v in r.init.config.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    )
    varying = [k for k in numeric if len({r.init.config[k] if k in r.init.config else None for r in recs}) > 1]
    if len(varying) != 2:
        return Figure.written(
            title=title,
            reason=f"mixture cells vary {len(varying)} numeric init options "
            f"({', '.join(varying) or 'none'}); a heatmap needs exactly two",
        )
    kx, ky = varying
    col = columns[0]
    panels: dict[tuple[str, str], dict[tuple[float, float], list[float]]] = {}
    for r in recs:
        v, _ = column_value(r, "pool", col["spec"])
        if v is None:
            continue
        cell = (float(r.init.config[kx]), float(r.init.config[ky]))
        panels.setdefault((r.attack.label, r.target.name), {}).setdefault(cell, []).append(v)
    if not panels:
        return Figure.written(title=title, reason=f"no mixture cell has a value for {col['name']}")
    fig, axes = plt.subplots(1, len(panels), figsize=(3.8 * len(panels), 3.4), squeeze=False)
    for ax, ((attack, target), grid) in zip(axes[0], panels.items(), strict=True):
        xs = sorted({c[0] for c in grid})
        ys = sorted({c[1] for c in grid})
        z = np.full((len(ys), len(xs)), np.nan)
        for (x, y), vals in grid.items():
            z[ys.index(y), xs.index(x)] = statistics.fmean(vals)
        im = ax.imshow(z, origin="lower", cmap="viridis", aspect="auto")
        ax.set_xticks(range(len(xs)), [f"{x:g}" for x in xs])
        ax.set_yticks(range(len(ys)), [f"{y:g}" for y in ys])
        ax.set_xlabel(kx)
        ax.set_ylabel(ky)
        ax.set_title(f"{attack} · {target}", fontsize=9)
        for (i, j), val in np.ndenumerate(z):
            if not np.isnan(val):
                ax.text(j, i, format(val, col["format"]), ha="center", va="center", fontsize=7, color="w")
        fig.colorbar(im, ax=ax, label=col["name"])
    return _saved(
        fig, path, title,
        caption=f"{col['name']} (pooled candidates, mean over seeds) for mixture inits as a function of "
        "the "
        f"mixture weights `{kx}` and `{ky}`; inits that include training images are oracles.",
    )


Panel = tuple[str, int, int]   # (model family, d, n)


def share_points(pub: Published, col: dict[str, Any]) -> dict[Panel, dict[str, dict[float, list[float]]]]:
    """{(family, d, n): {attack: {p / (d n): [share of the training set the first column counts, one per cell]}}},
    from every usable cell whose target records p / (d n) (pooled candidates, non-oracle inits); panels with a
    single p / (d n) (a target that is not swept) are left out."""
    points: dict[Panel, dict[str, dict[float, list[float]]]] = {}
    for rec in pub.usable():
        ratio = rec.target.p_over_dn or ParameterRatio()
        if rec.init.is_oracle or not isinstance(ratio.ratio, (int, float)) or not rec.target.n_train:
            continue
        value, _ = column_value(rec, "pool", col["spec"])
        if value is None:
            continue
        family = rec.target.trained_from.family or "?"
        panel = points.setdefault((family, int(ratio.d or 0), int(ratio.n or 0)), {})
        panel.setdefault(rec.attack.label, {}).setdefault(float(ratio.ratio), []).append(value / rec.target.n_train)
    return {key: by for key, by in points.items() if len({r for a in by.values() for r in a}) > 1}


def draw_share_vs_p_over_dn(pub: Published, columns: list[dict[str, Any]], path: Path) -> Figure:
    """Iurada et al.'s law on the board's own cells: the share of the training set each attack reconstructs
    (the first column, a count, over n) against p / (d n), one panel per input dimension and training-set size."""
    import matplotlib.pyplot as plt

    title = TITLES["share_vs_p_over_dn"]
    col = columns[0]
    points = share_points(pub, col)
    if not points:
        return Figure.written(title=title, reason=f"no finished cells of one model family at two or more p / (d n) with "
                                          f"{col['name']}")
    fig, axes = plt.subplots(1, len(points), figsize=(4.4 * len(points), 3.4), squeeze=False)
    for ax, ((family, d, n), by_attack) in zip(axes[0], sorted(points.items()), strict=True):
        for label, by_ratio in sorted(by_attack.items()):
            xs = sorted(by_ratio)
            line = ax.plot(xs, [statistics.fmean(by_ratio[x]) for x in xs], marker="o", label=label)[0]
            for x in xs:
                ax.scatter([x] * len(by_ratio[x]), by_ratio[x], s=10, alpha=0.35, color=line.get_color())
        ax.axvline(1.0, color="grey", linestyle=":", linewidth=1)
        ax.set_xscale("log", base=2)
        ax.set_ylim(-0.05, 1.05)
        ax.set_xlabel("p / (d n)")
        ax.set_ylabel(f"share of the training set ({col['name']})")
        ax.set_title(f"{family}, d = {d}, n = {n}", fontsize=9)
        ax.legend(fontsize=7)
    return _saved(
        fig, path, title,
        caption=f"For each attack, the share of the training set counted by {col['name']} (pooled candidates; "
        "dots: one cell each, line: the mean over seeds) against p / (d n), the number of trained parameters over "
        "the input dimension times the number of training points. Iurada et al.'s law predicts near-full recovery "
        "well above 1 (dotted) and none well below, for random-features targets.",
    )


def draw_all(
    suite: Suite,
    pub: Published,
    tables: dict[str, list[TableRow]],
    columns: list[dict[str, Any]],
    results: Path,
    out: Path,
    *,
    data_root: str | None = None,
) -> dict[str, Figure]:
    import matplotlib

    matplotlib.use("Agg")
    data = FigureData(results, data_root)
    figs = out / "figures"
    info: dict[str, Figure] = {}
    jobs = {
        "reconstructions": lambda: draw_reconstructions(suite, pub, tables, columns, data, figs / "reconstructions.png"),
        "ssim_vs_margin": lambda: draw_ssim_vs_margin(suite, pub, data, figs / "ssim_vs_margin.png"),
        "mixture_heatmap": lambda: draw_mixture_heatmap(suite, pub, columns, figs / "mixture_heatmap.png"),
    }
    if columns and len({r.target.p_over_dn.ratio for r in pub.usable() if r.target.p_over_dn is not None}) > 1:
        # only boards that vary p / (d n): the boards published before it keep their figures
        jobs["share_vs_p_over_dn"] = lambda: draw_share_vs_p_over_dn(pub, columns, figs / "share_vs_p_over_dn.png")
    for name, job in jobs.items():
        try:
            info[name] = job()
        except Exception as exc:  # a figure that cannot be drawn must not cost the tables: say why
            info[name] = Figure.written(title=TITLES[name], reason=f"{type(exc).__name__}: {exc}", failed=True)
    return info


def _saved(fig: MplFigure, path: Path, title: str, **fields: object) -> Figure:
    """Lay out, save (110 dpi) and close ``fig``; its record, naming the file as the board links it."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Figure.written(title=title, file=f"figures/{path.name}", **fields)
