"""The privacy-utility leaderboard: per defense and strength, the defended target's test accuracy, each attack's
headline with its null, and a figure with the Pareto front per attack.

Rows come from the suite's ``[privacy.*]`` axes (:class:`reconbench.bench.suite.PrivacyAxis`); every number is read
from the cell JSONs (the attack's evaluation) and from the model cards recorded in them (the target's accuracy and
the defense's own records, e.g. DP-SGD's epsilon). A defender wants high accuracy and a low headline: a point is
on the Pareto front of an attack when no other point of the same base target has at least its accuracy and at
most its headline, one of them strictly.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

from tabulate import tabulate

from reconbench.bench.suite import PrivacyAxis, Suite
from reconbench.evaluation.reported import CALIBRATED_HEADLINE
from reconbench.leaderboard.plain_text import markdown_paragraph
from reconbench.leaderboard.tables import Published, Stat, failures_of, fmt_stat, null_of, value_range
from reconbench.records import (
    CellRecord,
    Figure,
    MetricStat,
    PrivacyAttack,
    PrivacyRow,
    PrivacyTable,
    TrainMetrics,
    mapping,
)

#: the evaluation summary key shown as each attack's headline: the calibrated count (docs/calibration.md), which
#: random held-out images pass with probability at most 5%; the papers' SSIM count is not a privacy measure
HEADLINE_KEY = CALIBRATED_HEADLINE
# The null (held-out images as candidates): the cells' own held-out null of the headline when the evaluation
# recorded one (reconbench.leaderboard.tables.null_of), else the headline of the axis' null cells
# (`null_attack` / `null_init`: 0 attack steps from held-out images on the undefended target).
#: the search-run selection the table reads (all runs pooled, as the papers evaluated)
SELECTION = "pool"
FRONT_MARK = "◆"
#: what a row says where no cell's attack did its work (reconbench.attack.outcome): not a defended target
ATTACK_FAILED = "attack failed"


def _summary_value(rec: CellRecord, key: str) -> float | None:
    v = rec.selection(SELECTION).raw(key)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _target_info(pub: Published, target: str) -> dict[str, Any]:
    """Utility and defense records of a target: the accuracies are the mean over its distinct trained models (one per
    seed where each seed retrains it, `seed_targets`); steps and defense records are those of the first cell record."""
    first: dict[str, Any] | None = None
    accuracies: dict[str, dict[str, list[float]]] = {}   # recipe key -> accuracy name -> value (one model each)
    for rec in pub.records.values():
        t = rec.target
        if t.name != target or not t.has_metrics:
            continue
        m = t.metrics
        before = TrainMetrics.from_dict(mapping(m.before_defense))
        errors = {"test_accuracy": m.test_error, "train_accuracy": m.train_error,
                  "test_accuracy_before_release": before.test_error}
        if first is None:
            first = {"steps_run": m.steps_run, "defense_records": m.defense_records}
        accuracies.setdefault(t.recipe_key or rec.cell_id, {k: [] if e is None else [1.0 - float(e)]
                                                             for k, e in errors.items()})
    if first is None:
        return {"test_accuracy": None, "train_accuracy": None, "test_accuracy_before_release": None, "steps_run": None,
                "defense_records": {}}
    means = {}
    for name in ("test_accuracy", "train_accuracy", "test_accuracy_before_release"):
        values = [v for model in accuracies.values() for v in model[name]]
        means[name] = sum(values) / len(values) if values else None
    return {**means, **first}


def pareto_front(points: list[tuple[float, float]]) -> list[bool]:
    """For (accuracy, headline) pairs: True where no other pair has accuracy >= and headline <=, one strictly."""
    out = []
    for i, (a, h) in enumerate(points):
        dominated = any(a2 >= a and h2 <= h and (a2 > a or h2 < h) for j, (a2, h2) in enumerate(points) if j != i)
        out.append(not dominated)
    return out


def axis_rows(suite: Suite, pub: Published, axis: PrivacyAxis) -> PrivacyTable:
    group = f"privacy:{axis.name}"
    series = [f"{a} / {i}" for a in axis.attacks for i in axis.inits]
    points: list[tuple[dict[str, Any], dict[str, PrivacyAttack]]] = []   # a row's fields, and its attack series
    for p in axis.points:
        fields: dict[str, Any] = {
            "base": p.base,
            "defense": p.defense or "none",
            "defense_name": next((d.defense for d in axis.defenses if d.label == p.defense), None),
            "strength_option": next((d.strength for d in axis.defenses if d.label == p.defense), None),
            "strength": p.strength,
            "target": p.target,
            **_target_info(pub, p.target),
        }
        attacks: dict[str, PrivacyAttack] = {}
        for attack in axis.attacks:
            for init in axis.inits:
                ids = [c.cell_id for c in pub.plan if group in c.groups and c.target == p.target
                       and c.attack.label == attack and c.init.label == init]
                recs = pub.usable(ids)   # a cell whose attack failed is no evidence of privacy: left out, shown
                head = [v for v in (_summary_value(r, HEADLINE_KEY) for r in recs) if v is not None]
                # the cells' own held-out null, when evaluated (it does not depend on whether the attack ran)
                recorded = null_of(pub.ok(ids), SELECTION, HEADLINE_KEY)
                null = [] if recorded is None or recorded.mean is None else [recorded.mean]
                attacks[f"{attack} / {init}"] = PrivacyAttack.written(
                    headline=MetricStat.written(**Stat(head, value_range(HEADLINE_KEY, recs)).to_dict()),
                    null=MetricStat.written(**Stat(null, value_range(HEADLINE_KEY, pub.ok(ids))).to_dict()),
                    cells=[r.cell_id for r in recs], pareto=False,
                    attack_failed=failures_of(pub.attack_failed(ids), len(pub.ok(ids))))
        points.append((fields, attacks))
    if axis.null_attack:  # the null cells' headline (held-out images, 0 steps) where the cells record none
        recorded_any = any((attacks[s].null or MetricStat()).n for _, attacks in points for s in series)
        for base in dict.fromkeys(f["base"] for f, _ in points):
            ids = [c.cell_id for c in pub.plan if group in c.groups and c.target == base
                   and c.attack.label == axis.null_attack and c.init.label == axis.null_init]
            null_recs = pub.usable(ids)
            null_stat = Stat([v for v in (_summary_value(r, HEADLINE_KEY) for r in null_recs) if v is not None],
                             value_range(HEADLINE_KEY, null_recs))
            for f, attacks in points:
                if f["base"] == base and not recorded_any:
                    for s in series:
                        attacks[s] = attacks[s].updated(null=MetricStat.written(**null_stat.to_dict(), cells=ids))
    for s in series:  # the Pareto front per base target and attack
        for base in dict.fromkeys(f["base"] for f, _ in points):
            pts = [(f, attacks) for f, attacks in points if f["base"] == base and f["test_accuracy"] is not None
                   and attacks[s].headline.mean is not None]
            flags = pareto_front([(f["test_accuracy"], attacks[s].headline.mean or 0.0) for f, attacks in pts])
            for (_, attacks), flag in zip(pts, flags, strict=True):
                attacks[s] = attacks[s].updated(pareto=flag)
    rows = [PrivacyRow.written(**f, attacks=attacks) for f, attacks in points]
    return PrivacyTable.written(title=axis.title, headline_key=HEADLINE_KEY, selection=SELECTION, series=series,
                                rows=rows)


def privacy_tables(suite: Suite, pub: Published) -> dict[str, PrivacyTable]:
    return {axis.name: axis_rows(suite, pub, axis) for axis in suite.privacy}


def _fmt(v: object, spec: str) -> str:
    return "n/a" if v is None else format(v, spec)


def _strength(r: PrivacyRow) -> str:
    if r.defense == "none":
        return "—"
    return f"{r.strength_option} = {r.strength:g}" if isinstance(r.strength, float) else \
        f"{r.strength_option} = {r.strength}"


def _privacy_cost(r: PrivacyRow) -> str:
    rec = r.defense_records
    if "epsilon" in rec:
        return f"ε = {_fmt(rec['epsilon'], '.3g')} (δ = {rec.get('delta', 'n/a'):g})" if rec.get("epsilon") is not None \
            else "ε = ∞"
    return ""


def _attack_cell(a: PrivacyAttack) -> str:
    """An attack's headline over the cells where it ran (null in parentheses); "attack failed" where it ran in none."""
    failed = a.attack_failed
    null = fmt_stat(a.null or MetricStat(), ".1f")
    if failed and not a.headline.n:
        return f"{ATTACK_FAILED}, {failed.text} ({null})"
    text = f"{fmt_stat(a.headline, '.1f')} ({null})"
    text += f"; {failed.text}" if failed else ""
    return text + (f" {FRONT_MARK}" if a.pareto else "")


def render_privacy(name: str, table: PrivacyTable) -> str:
    rows = table.rows or []
    base_acc = {r.base: r.test_accuracy for r in rows if r.defense == "none"}
    headers = ["target", "defense", "strength", "test acc ↑", "Δ acc", "guarantee"]
    headers += [f"{s}: {table.headline_key} ↓ (null)" for s in table.series]
    body = []
    for r in rows:
        acc, b = r.test_accuracy, base_acc[r.base] if r.base in base_acc else None
        label = r.defense if r.defense_name in (None, r.defense) else f"{r.defense} ({r.defense_name})"
        delta = "" if acc is None or b is None or r.defense == "none" else f"{acc - b:+.3f}"
        cells = [r.base, label, _strength(r), _fmt(acc, ".3f"), delta, _privacy_cost(r)]
        for s in table.series:
            cells.append(_attack_cell(r.attack(s)))
        body.append(cells)
    return (
        f"## {markdown_paragraph(table.title)}\n\n"
        f"Per defense and strength: the defended target's test accuracy (Δ against the undefended target), the "
        f"defense's own guarantee where it has one, and each attack's `{table.headline_key}` "
        f"({table.selection} selection; mean and [95% interval] over seeds, clipped to 0..n) with, in parentheses, "
        f"the same score for the null "
        f"(held-out images as candidates: the cells' recorded null, else the suite's null cells; "
        f"n/a where neither exists). {FRONT_MARK}: on the attack's "
        "Pareto front (no other point of the same target is at least as accurate and at most as reconstructable, "
        f"one strictly). `{ATTACK_FAILED}, diverged 2/2`: the attack did not do its work on that target (e.g. "
        "every search run of both cells diverged), which says nothing about the defense; such a point is on no "
        f"front and left out of the figure. Figure: [`figures/privacy-{name}.png`](figures/privacy-{name}.png) "
        "(bars: one standard deviation over seeds).\n\n"
        + tabulate(body, headers=headers, tablefmt="github", disable_numparse=True)
    )


def draw_privacy(name: str, table: PrivacyTable, out: Path) -> Figure:
    """One panel per attack: headline against test accuracy (error bars: one standard deviation over seeds; with
    two seeds the table's 95% interval would cover most of the axis), a marker per defense, the Pareto front."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = table.series
    rows = [r for r in table.rows or [] if r.test_accuracy is not None]
    if not rows or not series:
        return Figure.written(title=table.title, reason="no finished cells")
    fig, axes = plt.subplots(1, len(series), figsize=(5.2 * len(series), 4.2), squeeze=False)
    labels = list(dict.fromkeys(r.defense for r in rows))
    colors = {lab: plt.get_cmap("tab10")(i % 10) for i, lab in enumerate(labels)}
    for ax, s in zip(axes[0], series, strict=True):
        for base in dict.fromkeys(r.base for r in rows):
            pts = [r for r in rows if r.base == base and r.attack(s).headline.mean is not None]
            tags: dict[tuple[float, float], list[str]] = {}  # one label per point: strengths that coincide share it
            for r in pts:
                a = r.attack(s).headline
                x, y = float(r.test_accuracy or 0.0), float(a.mean or 0.0)   # both set: the rows and points kept
                marker = "*" if r.defense == "none" else "o"
                ax.errorbar(x, y, yerr=a.sd or 0.0, fmt=marker, color=colors[r.defense],
                            markersize=11 if marker == "*" else 6, label=r.defense, capsize=2)
                if r.strength is not None:
                    tags.setdefault((x, y), []).append(
                        f"{r.strength:g}" if isinstance(r.strength, (int, float)) else str(r.strength))
            for (x, y), texts in tags.items():
                ax.annotate(", ".join(texts), (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
            front = sorted((float(r.test_accuracy or 0.0), float(r.attack(s).headline.mean or 0.0)) for r in pts
                           if r.attack(s).pareto)
            if front:
                ax.step([p[0] for p in front], [p[1] for p in front], where="post", color="black", lw=1, alpha=0.6)
        nulls = [m for r in rows if (m := (r.attack(s).null or MetricStat()).mean) is not None]
        if nulls:
            ax.axhline(max(nulls), color="grey", ls="--", lw=1, label="null (largest)")
        ax.set_xlabel("test accuracy of the defended target")
        ax.set_ylabel(f"{table.headline_key} ({table.selection})")
        ax.set_title(s, fontsize=9)
        handles, labs = ax.get_legend_handles_labels()
        uniq = dict(zip(labs, handles, strict=True))
        ax.legend(uniq.values(), uniq.keys(), fontsize=7, loc="best")
    fig.suptitle("\n".join(textwrap.wrap(table.title, 45 * len(series))), fontsize=10)
    fig.tight_layout()
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"privacy-{name}.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Figure.written(title=table.title, file=f"figures/{path.name}")


def privacy_section(suite: Suite, pub: Published, out: Path,
                    figures: bool) -> tuple[dict[str, PrivacyTable], list[str]]:
    """The leaderboard's privacy-utility tables and their Markdown sections; draws the figures."""
    tables = privacy_tables(suite, pub)
    sections = []
    for name, table in tables.items():
        if figures:
            table = tables[name] = table.updated(figure=draw_privacy(name, table, out / "figures"))
        sections.append(render_privacy(name, table))
    return tables, sections
