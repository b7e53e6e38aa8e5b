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
from reconbench.records import CellRecord, Figure, ImageRow, TableRow, TrainMetrics
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

    def pooled(self, rec: CellRecord) -> dict[str, torch.Tensor]:
        return load_file(str(self.results / rec.work_dir / "candidates.safetensors"))


def _display(x: np.ndarray, mean: np.ndarray) -> np.ndarray:
    """Centred (C, H, W) -> an imshow image: add the mean back, min-max scale per image.

    Method: docs/method/evaluation-protocol.md#display-scaling.
    """
    img = x + mean
    lo, hi = float(img.min()), float(img.max())
    img = (img - lo) / (hi - lo) if hi > lo else np.zeros_like(img)
    return img[0] if img.shape[0] == 1 else np.transpose(img, (1, 2, 0))


def matches(problem: Problem, candidates: torch.Tensor, rows: list[ImageRow]) -> tuple[list[tuple[int, int, float]], str]:
    """(train index, candidate index, score) per training image, best first, and what the score is.

    Uses the evaluation's per-image matches when it records them; otherwise the nearest candidate by
    normalised cross-correlation (display only: no table number comes from this).
    """
    if any(isinstance(r.best_candidate, int) for r in rows) and len(rows) == problem.n:
        out = [(i, int(r.best_candidate), _num(r.raw(SSIM_KEY))) for i, r in enumerate(rows)
               if isinstance(r.best_candidate, int)]
        ranked: list[tuple[int, int, float]] = [(i, c, -math.inf if v is None else v) for i, c, v in out]
        return sorted(ranked, key=lambda t: -t[2]), SSIM_KEY
    x = problem.x_train(torch.float64).flatten(1)
    c = candidates.double().flatten(1)
    xs = (x - x.mean(1, keepdim=True)) / (x.std(1, keepdim=True) + 1e-12)
    cs = (c - c.mean(1, keepdim=True)) / (c.std(1, keepdim=True) + 1e-12)
    corr = xs @ cs.T / (x.shape[1] - 1)
    best = corr.max(dim=1)
    nearest = [(i, int(best.indices[i]), float(best.values[i])) for i in range(len(x))]
    return sorted(nearest, key=lambda t: -t[2]), "NCC"


def _primary(rec: CellRecord, columns: list[dict[str, Any]]) -> float:
    v, _ = column_value(rec, "pool", columns[0]["spec"])
    if v is None:
        return -math.inf
    return v if columns[0]["higher_is_better"] else -v


def reconstruction_picks(suite: Suite, pub: Published, tables: dict[str, list[TableRow]],
                         columns: list[dict[str, Any]]) -> list[CellRecord]:
    """The cells the reconstructions figure shows: per attack, the best cell (by the first column) of its first
    pooled row under an eligible init."""
    picks = []
    for label in suite.attacks:
        rows = [r for r in tables["pool"] if r.attack == label]
        if not rows:
            continue
        eligible = suite.leaderboard.figure_inits
        fair = [r for r in rows if (r.init in eligible if eligible is not None else not r.init_is_oracle)
                and r.cells]   # a row whose attack failed in every cell has none
        if not fair:
            continue
        recs = pub.usable(fair[0].cells)
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
    import matplotlib.pyplot as plt

    title = TITLES["reconstructions"]
    picks = reconstruction_picks(suite, pub, tables, columns)
    eligible = suite.leaderboard.figure_inits
    inits_text = "a non-oracle init" if eligible is None else "one of the inits " + ", ".join(eligible)
    if not picks:
        return Figure.written(title=title, reason=f"no finished cell under {inits_text}")
    k = suite.leaderboard.sample_images
    # one block per attack: a label line, the training images, the matched candidates (with their scores)
    fig = plt.figure(figsize=(0.9 * k, 2.05 * len(picks)))
    grid = fig.add_gridspec(
        3 * len(picks),
        k,
        height_ratios=[0.25, 1, 1] * len(picks),
        hspace=0.12,
        wspace=0.06,
        left=0.01,
        right=0.99,
        top=0.99,
        bottom=0.03,
    )
    score_names = set()
    for a, rec in enumerate(picks):
        problem = data.problem(rec)
        pooled = data.pooled(rec)
        found, score_name = matches(problem, pooled["candidates"], rec.per_image)
        score_names.add(score_name)
        mean = problem.mean
        header = fig.add_subplot(grid[3 * a, :])
        header.axis("off")
        oracle = " †" if rec.init.is_oracle else ""
        header.text(
            0.0,
            0.0,
            f"{rec.attack.label} · init {rec.init.label}{oracle} · {rec.target.name} · seed {rec.seed}",
            fontsize=8,
            va="bottom",
        )
        for j, (ti, ci, score) in enumerate(found[:k]):
            top = fig.add_subplot(grid[3 * a + 1, j])
            bottom = fig.add_subplot(grid[3 * a + 2, j])
            top.imshow(_display(problem.x_train(torch.float64)[ti].numpy(), mean), cmap="gray")
            bottom.imshow(_display(pooled["candidates"][ci].numpy(), mean), cmap="gray")
            for ax in (top, bottom):
                ax.set_xticks([])
                ax.set_yticks([])
            bottom.set_xlabel(f"{score:.2f}", fontsize=6, labelpad=1)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Figure.written(
        title=title,
        file=f"figures/{path.name}",
        cells=[r.cell_id for r in picks],
        caption=f"For each attack, its best cell under {inits_text} (by the first column, pooled "
        f"candidates): training images (upper row) and the matched candidate (lower row, with its "
        f"{' / '.join(sorted(score_names))} score), best matches first.",
    )


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
        ratio = rec.target.p_over_dn or {}
        if rec.init.is_oracle or not isinstance(ratio.get("ratio"), (int, float)) or not rec.target.n_train:
            continue
        value, _ = column_value(rec, "pool", col["spec"])
        if value is None:
            continue
        family = rec.target.trained_from.family or "?"
        panel = points.setdefault((family, int(ratio["d"]), int(ratio["n"])), {})
        panel.setdefault(rec.attack.label, {}).setdefault(float(ratio["ratio"]), []).append(value / rec.target.n_train)
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
    if columns and len({r.target.p_over_dn.get("ratio") for r in pub.usable() if r.target.p_over_dn}) > 1:
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
