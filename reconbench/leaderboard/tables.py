"""Leaderboards: tables (Markdown + JSON) and figures rendered from the cell JSONs of a results folder.

Every number in a table is computed here from the cell JSONs (copied into ``<leaderboard>/cells/``), and
``results.json`` names, for every row, the cells it aggregates. Mean, sample standard deviation and the 95%
interval of the mean (Student t) are over seeds; each summary column also carries the held-out null of its cells
(the mean over cells of each cell's mean over null draws, and the largest value any null draw reached).
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tabulate import tabulate

from reconbench import __version__, plugins
from reconbench.attack.outcome import CellOutcome, cell_outcome, failure_counts, failure_text
from reconbench.attack.search import search_record
from reconbench.bench import machine
from reconbench.bench.cells import Cell, expand
from reconbench.bench.runner import STATUS_OK, load_cell_records
from reconbench.bench.suite import ColumnSpec, Suite, display_path
from reconbench.errors import ReconbenchError
from reconbench.evaluation import reported
from reconbench.leaderboard.slice_origins import PackOrigin, cell_origins, commit_cells, packed_cells
from reconbench.provenance import git_commit
from reconbench.records import (
    BoardHeader,
    CellRecord,
    Column,
    Command,
    ComparisonRow,
    ComparisonTable,
    ComparisonValue,
    Failures,
    Invocation,
    MetricStat,
    NullSummary,
    TableRow,
    TargetRow,
    mapping,
    number,
)
from reconbench.records.board_results import Stat
from reconbench.records.rendered_with import RenderedWith
from reconbench.records.target_quantities import TARGET_QUANTITIES, target_value
from reconbench.targets.certificate import gate_value
from reconbench.targets.regime import MAX_RESIDUAL

LEADERBOARD_FORMAT = "reconbench-leaderboard/1"
SELECTIONS = ("pool", "blind", "oracle")
SELECTION_TITLES = {
    "pool": "Pooled candidates: all search runs of a cell evaluated together (as the papers evaluated)",
    "blind": "Blind selection: the one search run with the lowest final attack loss",
    "oracle": "Oracle selection ‡: the one search run with the best training-set score (reads training images)",
}
ORACLE_INIT_MARK, ORACLE_SELECTION_MARK = "†", "‡"


def default_leaderboard_dir(suite: Suite) -> Path:
    return Path("leaderboards") / suite.name


# -- reading values -------------------------------------------------------------------------------------
def column_value(rec: CellRecord, selection: str, col: ColumnSpec) -> tuple[float | None, str | None]:
    """(value, summary key used) of one column for one cell and selection."""
    sel = rec.selection(selection)
    if col.source == "attack_loss":
        return number(sel.attack_loss), "attack_loss"
    if col.source == "wall_seconds":
        return number(rec.attack_seconds), "attack_seconds"
    if col.source == "calibrated":   # the count against the bar calibrated for this selection (evaluation/bars.py)
        return (sel.calibrated_count, "calibrated") if sel.calibrated_count is not None else (None, None)
    if col.source == "target":   # a number of the cell's target, the same for every selection
        value = target_value(rec.target, col.keys[0])
        return (value, col.keys[0]) if value is not None else (None, None)
    for k in col.keys:
        if k in sel.summary:
            return sel.value(k), k
    return None, None


def direction(col: ColumnSpec, key: str | None, records: Iterable[CellRecord]) -> tuple[bool, str]:
    """higher_is_better of a column: the metric whose headline the key is (as the evaluation recorded it, else as
    the registered metric plugin declares it), else the column spec."""
    records = list(records)
    if key and col.source == "summary":
        for rec in records:
            for name, info in rec.evaluated_metrics.items():
                if (info.headline or name) == key and info.higher_is_better is not None:
                    return info.higher_is_better, f"metric {name!r} (recorded in the cells)"
        for name in plugins.names("metrics"):
            metric = plugins.metric(name)
            if metric.headline_key == key:
                return bool(metric.higher_is_better), f"metric plugin {name!r}"
        rep = reported.lookup(key)
        if rep is not None:
            return rep.higher_is_better, "declared by the evaluation or a metric"
    return col.higher_is_better, "column spec"


# -- aggregation ----------------------------------------------------------------------------------------
def value_range(key: str | None, records: Iterable[CellRecord] = ()) -> tuple[float | None, float | None]:
    """The values a summary key can take, for clipping an interval over seeds to what is possible, as the evaluation
    or the metric that reports it declares (:mod:`reconbench.evaluation.reported`): counts of training images lie in
    [0, n] (n: the largest n_train among ``records``), other counts in [0, inf), shares in [0, 1], SSIM and
    correlation scores in [-1, 1]. A key that nothing declares is unbounded."""
    if key is None:
        return (None, None)
    if key == "calibrated":   # the headline's count against its own selection's bar: a count of training images too
        key = reported.CALIBRATED_HEADLINE
    rep = reported.lookup(key)
    if rep is None:
        return (None, None)
    ns = [int(n) for r in records if isinstance(n := r.target.n_train, int)]
    return reported.bounds(rep, max(ns) if ns else None)


def fmt_stat(s: Stat | MetricStat | dict[str, Any], fmt: str) -> str:
    """``mean [lo, hi]`` (95% interval over seeds), or the mean alone for one seed."""
    if isinstance(s, dict):
        s = MetricStat.from_dict(s)
    if isinstance(s, MetricStat):
        s = Stat.from_metric(s)
    if s.mean is None:
        return "n/a"
    text = format(s.mean, fmt)
    ci = s.ci95
    if ci is not None:
        text += f" [{format(ci[0], fmt)}, {format(ci[1], fmt)}]"
    return text


def null_of(records: list[CellRecord], selection: str, key: str | None) -> NullSummary | None:
    """The held-out null of a summary key over the cells: mean of the cells' null means, the largest draw."""
    if not key:
        return None
    means, maxima = [], []
    for rec in records:
        spread = rec.selection(selection).null_spread(key)
        if spread is not None:
            means.append(float(spread.mean))  # type: ignore[arg-type]
            maxima.append(float(spread.max))  # type: ignore[arg-type]
    if not means:
        return None
    return NullSummary(mean=statistics.fmean(means), max=max(maxima), cells=len(means))


def overlaps(a: list[float] | tuple[float, float] | None, b: list[float] | tuple[float, float] | None) -> bool:
    return a is not None and b is not None and a[0] <= b[1] and b[0] <= a[1]


def mark_within_noise(rows: list[TableRow], column: dict[str, Any]) -> list[TableRow]:
    """Per target: the best row of the first column, and whether each other row's interval overlaps the best's
    (a difference within noise over seeds). Rows with one seed have no interval: ``None`` (undecided)."""
    name = column["name"]
    sign = 1.0 if column["higher_is_better"] else -1.0
    by_target: dict[str, list[int]] = {}
    for i, r in enumerate(rows):
        if r.metric(name).mean is not None:
            by_target.setdefault(r.target, []).append(i)
    marked = list(rows)
    for group in by_target.values():
        best = max(group, key=lambda i: sign * (rows[i].metric(name).mean or 0.0))
        best_ci = rows[best].metric(name).ci95
        for i in group:
            ci = rows[i].metric(name).ci95
            marked[i] = rows[i].updated(best=i == best, within_noise_of_best=None if ci is None or best_ci is None
                                        else (i == best or overlaps(ci, best_ci)))
    return marked


def _stat(records: list[CellRecord], selection: str, col: ColumnSpec) -> tuple[Stat, str | None]:
    values, key = [], None
    for rec in records:
        v, k = column_value(rec, selection, col)
        if v is not None:
            values.append(v)
            key = key or k
    bounds = TARGET_QUANTITIES[col.keys[0]].bounds if col.source == "target" else value_range(key, records)
    return Stat(values, bounds), key


def _sort_key(row: TableRow, columns: list[dict[str, Any]]) -> tuple[Any, ...]:
    key: list[Any] = []
    for col in columns:
        m = row.metric(col["name"]).mean
        key.append((m is None, 0.0 if m is None else (-m if col["higher_is_better"] else m)))
    return (*key, row.target, row.attack, row.init)


@dataclass
class Published:
    """Cells of the current suite that have a record (others are 'not run' or stale)."""

    plan: list[Cell]
    records: dict[str, CellRecord]
    not_run: list[str]
    stale: list[str]
    #: the slice pack that brought each cell merged by ``bench --unpack`` (``slice_origins``; a board has none)
    packs: dict[str, PackOrigin] = field(default_factory=dict)

    def ok(self, cell_ids: Iterable[str] | None = None) -> list[CellRecord]:
        """The cells that ran (their attack may still have failed: :meth:`usable`, :meth:`attack_failed`)."""
        ids = self.records if cell_ids is None else cell_ids
        return [self.records[c] for c in ids if c in self.records and self.records[c].status == STATUS_OK]

    def usable(self, cell_ids: Iterable[str] | None = None) -> list[CellRecord]:
        """The cells that ran and whose attack did its work (reconbench.attack.outcome): what the tables aggregate."""
        return [r for r in self.ok(cell_ids) if cell_outcome_of(r).ok]

    def attack_failed(self, cell_ids: Iterable[str] | None = None) -> list[CellRecord]:
        """The cells that ran but whose attack diverged, returned non-finite candidates or stopped early."""
        return [r for r in self.ok(cell_ids) if not cell_outcome_of(r).ok]


def cell_outcome_of(rec: CellRecord) -> CellOutcome:
    outcome = cell_outcome(rec)
    assert outcome is not None, "cell_outcome is None only for cells that did not run"
    return outcome


def failures_of(failed: list[CellRecord], total: int) -> Failures | None:
    """A row's failed attacks: their cells, counts by status and the text the tables print (None: none failed)."""
    if not failed:
        return None
    counts = failure_counts([cell_outcome_of(r) for r in failed])
    return Failures(cells=[r.cell_id for r in failed], statuses=counts, of=total, text=failure_text(counts, total))


def collect(suite: Suite, results: Path) -> Published:
    plan = expand(suite)
    found = load_cell_records(results)
    records, not_run, stale = {}, [], []
    for cell in plan:
        if cell.cell_id not in found:
            not_run.append(cell.cell_id)
            continue
        rec = found[cell.cell_id]
        if rec.cell_key != cell.key(suite, rec.dtype):
            stale.append(cell.cell_id)
        else:
            records[cell.cell_id] = rec
    return Published(plan, records, not_run, stale, packed_cells(records, results))


def resolve_columns(suite: Suite, records: list[CellRecord]) -> list[dict[str, Any]]:
    cols = []
    for col in suite.leaderboard.columns:
        key = None
        for rec in records:
            for sel in SELECTIONS:
                _, key = column_value(rec, sel, col)
                if key:
                    break
            if key:
                break
        if key is None and col.optional:
            continue
        if key is None and col.named and records:
            raise ReconbenchError(f"leaderboard column {col.name!r}: none of the {len(records)} finished cell(s) reports "
                                  f"{' or '.join(map(repr, col.keys or (col.source,)))}; name a key of the cells' "
                                  "evaluation summary (result.json's evaluation.summary) in the suite's [leaderboard] "
                                  "columns, or leave the column out")
        hib, source = direction(col, key, records)
        cols.append(
            {
                "name": col.name,
                "key": key,
                "keys_tried": list(col.keys) or [col.source],
                "source": col.source,
                "higher_is_better": hib,
                "direction_from": source,
                "format": col.fmt,
                "spec": col,
            }
        )
    return cols


def column_record(column: dict[str, Any]) -> Column:
    """A resolved column (:func:`resolve_columns`) as a board's results.json records it (without its suite spec)."""
    return Column(name=column["name"], key=column["key"], keys_tried=column["keys_tried"], source=column["source"],
                  higher_is_better=column["higher_is_better"], direction_from=column["direction_from"],
                  format=column["format"])


def search_label(search: str, config: dict[str, Any]) -> str:
    """How a table names a row's search strategy: its name, its options, and ‡ when it reads training images."""
    record = search_record(search, config)
    options = ", ".join(f"{k}={v}" for k, v in sorted(config.items()))
    return f"{search}{f' ({options})' if options else ''}{f' {ORACLE_SELECTION_MARK}' if record['oracle'] else ''}"


def main_rows(suite: Suite, pub: Published, columns: list[dict[str, Any]], selection: str) -> list[TableRow]:
    groups: dict[tuple[str, str, str], list[Cell]] = {}
    for cell in pub.plan:
        if "grid" in cell.groups:
            groups.setdefault((cell.target, cell.attack.label, cell.init.label), []).append(cell)
    rows = []
    for (target, attack, init), cells in groups.items():
        ran = pub.ok(c.cell_id for c in cells)
        if not ran:
            continue
        recs = pub.usable(c.cell_id for c in cells)
        metrics = {}
        for col in columns:
            stat, key = _stat(recs, selection, col["spec"])
            metrics[col["name"]] = MetricStat.written(
                **stat.to_dict(), key=key, null=null_of(recs, selection, key) if col["source"] == "summary" else None)
        search = {} if cells[0].attack.default_search() else {   # random search with its defaults is not named
            "search": search_label(cells[0].attack.search, cells[0].attack.search_config)}
        bars = sorted({bar for r in recs if (bar := r.selection(selection).calibrated_bar) is not None})
        ratios = [rec.target.p_over_dn.ratio for rec in recs if rec.target.p_over_dn is not None]
        rows.append(TableRow.written(
            target=target,
            attack=attack,
            attack_name=cells[0].attack.attack,
            init=init,
            init_regime=cells[0].init.regime,
            init_is_oracle=any(r.init.is_oracle for r in ran),
            selection=selection,
            oracle_selection=selection == "oracle",
            cells=[r.cell_id for r in recs],
            seeds=[r.seed for r in recs],
            attack_failed=failures_of(pub.attack_failed(c.cell_id for c in cells), len(ran)),
            metrics=metrics,
            **search,
            converged=converged(suite, ran),   # a property of the targets, whether or not the attack ran
            **({"calibration_bars": bars} if bars else {}),
            **({"p_over_dn": ratios[0]} if ratios else {}),
        ))
    rows = order_rows(add_threat_models(rows), columns)
    return mark_within_noise(rows, columns[0]) if columns else rows


def order_rows(rows: list[TableRow], columns: list[dict[str, Any]]) -> list[TableRow]:
    """Best first by the columns in turn; on boards that show threat models, grouped by threat model first (in the
    order of their labels), each group ranked the same way."""
    if any(r.threat_model is not None for r in rows):
        return sorted(rows, key=lambda r: (r.threat_model or "", *_sort_key(r, columns)))
    return sorted(rows, key=lambda r: _sort_key(r, columns))


def threat_label(attack: str) -> str | None:
    """The short name of a registered attack's threat model (None when it is not registered here)."""
    if attack not in plugins.names("attacks"):
        return None
    threat = getattr(plugins.attack(attack), "threat", None)
    return getattr(threat, "label", None)


def add_threat_models(rows: list[TableRow]) -> list[TableRow]:
    """The rows, each with its attack's threat model on boards where some attack reads the initial weights (the
    boards published before attacks declared one hold only attacks that read the final weights, with or without the
    labels, and keep their rows and README byte for byte)."""
    labels = [threat_label(r.attack_name or r.attack) for r in rows]
    if not any(label is not None and label.startswith("θ0") for label in labels):
        return [row.without("p_over_dn") for row in rows]   # p / (d n) is shown beside the threat model only
    return [row.updated(threat_model=label if label is not None else "not registered")
            for row, label in zip(rows, labels, strict=True)]


def stationarity_ratio(rec: CellRecord) -> float | None:
    return rec.target.metrics.stationarity_ratio


def learned_ratio(rec: CellRecord) -> float | None:
    """The target's learned-part ratio, the regime gate's measure (docs/regime.md); None on older cards."""
    return gate_value(rec.target.metrics.certificate_dict)


def regime_gates(suite: Suite) -> dict[str, float]:
    """The suite's regime gates that are set: ``stationarity`` (the θ ratio) and ``learned`` (the learned part)."""
    gates = {"stationarity": suite.max_stationarity_ratio, "learned": suite.max_learned_ratio}
    return {k: v for k, v in gates.items() if v is not None}


_GATE_MEASURES = {"stationarity": stationarity_ratio, "learned": learned_ratio}


def in_regime(gates: dict[str, float], rec: CellRecord) -> bool | None:
    """Whether the cell's target meets every gate (None: no gate, or a gated measure missing from its card)."""
    values = {k: _GATE_MEASURES[k](rec) for k in gates}
    if not gates or any(v is None for v in values.values()):
        return None
    return all((values[k] or 0.0) <= gate for k, gate in gates.items())


def converged(suite: Suite, recs: list[CellRecord]) -> bool | None:
    """Whether every target of the cells meets the suite's regime gates (None: no gate or a measure missing)."""
    verdicts = [in_regime(regime_gates(suite), r) for r in recs]
    if not verdicts or any(v is None for v in verdicts):
        return None
    return all(verdicts)


def target_rows(pub: Published, gate: float | None = None, learned_gate: float | None = None) -> list[TargetRow]:
    """One row per target used by a finished cell: its recipe and training evidence (from the cell JSONs); ``gate``
    and ``learned_gate`` are the suite's gates on the θ ratio and on the learned-part ratio."""
    gates = {k: v for k, v in (("stationarity", gate), ("learned", learned_gate)) if v is not None}
    rows: dict[tuple[str, Any], TargetRow] = {}
    keys_of: dict[str, set[Any]] = {}
    for rec in pub.ok():
        keys_of.setdefault(rec.target.name, set()).add(rec.target.recipe_key)
    for rec in pub.ok():
        t = rec.target
        key = (t.name, t.recipe_key)
        if key in rows:
            rows[key].cells.append(rec.cell_id)
            continue
        recipe, m = t.trained_from, t.metrics
        learned = gate_value(m.certificate_dict)
        regime = m.regime
        evidence: dict[str, Any] = {}
        if learned is not None:  # certificates recorded before the learned part existed lack it
            evidence["learned_ratio"] = learned
        if regime.theta is not None:  # certificates recorded before the regime test existed lack it (docs/regime.md)
            evidence.update(theta_residual=regime.theta.residual, margin_set_size=len(regime.theta.margin_set or []))
            if regime.regularised is not None:
                evidence["regularised_residual"] = regime.regularised.residual
        # a suite whose seeds retrain the target has one trained target per seed under one name
        label = t.name if len(keys_of[t.name]) == 1 else f"{t.name} (seed {rec.seed})"
        rows[key] = TargetRow.written(
            target=label,
            recipe_key=t.recipe_key,
            dataset=recipe.problem.dataset,
            task=recipe.problem.task,
            n_train=t.n_train,
            n_per_class=recipe.problem.n_per_class,
            num_classes=recipe.problem.num_classes,
            family=recipe.family,
            widths=recipe.widths,
            loss=m.loss_name,
            weight_decay=recipe.train.weight_decay,
            defense=recipe.defense,
            defense_config=recipe.defense_config if recipe.defense is not None else None,
            steps=m.steps_run,
            train_error=m.train_error,
            test_error=m.test_error,
            train_loss=m.train_loss,
            stationarity_ratio=None if m.certificate is None else m.certificate.ratio,
            gate=gate,
            learned_gate=learned_gate,
            converged=in_regime(gates, rec),
            train_seconds=m.train_seconds,
            cells=[rec.cell_id],
            **evidence,
            **({"margin_min": t.margin_min, "margin_max": t.margin_max}
               if t.margin_min is not None and t.margin_max is not None else {}),
        )
    return list(rows.values())


def _gate_mark(value: float | None, gate: float | None) -> str:
    """" ✓" within the gate, " ⚠ > gate" above it, nothing without a gate or a value."""
    if gate is None or value is None:
        return ""
    return " ✓" if value <= gate else f" ⚠ > {gate:g}"


def render_targets(rows: list[TargetRow]) -> str:
    def f(v: object, spec: str) -> str:
        return "n/a" if v is None else format(v, spec)

    defended = any(r.defense for r in rows)
    learned = any(r.learned_ratio is not None for r in rows)  # docs/regime.md
    residual = any(r.theta_residual is not None for r in rows)
    regularised = any(r.regularised_residual is not None for r in rows)
    margins = any(r.margin_min is not None for r in rows)

    def defense(r: TargetRow) -> list[str]:
        if not defended:
            return []
        cfg = ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in mapping(r.defense_config).items())
        return [f"{r.defense} ({cfg})" if r.defense and cfg else (r.defense or "none")]

    body = [
        [
            r.target,
            r.dataset,
            r.task,
            r.n_per_class,
            f"{r.family} {'-'.join(str(w) for w in r.widths or [])}",
            r.loss,
            f(r.weight_decay, "g"),
            *defense(r),
            r.steps,
            f(r.train_error, ".3f"),
            f(r.test_error, ".3f"),
            f(r.train_loss, ".2e"),
            f(r.stationarity_ratio, ".3g") + _gate_mark(r.stationarity_ratio, r.gate),
            *([f(r.learned_ratio, ".3g") + _gate_mark(r.learned_ratio, r.learned_gate)] if learned else []),
            *([f(r.theta_residual, ".3g") + _gate_mark(r.theta_residual, MAX_RESIDUAL)
               + ("" if r.margin_set_size is None else f" ({r.margin_set_size} on the margin)")] if residual else []),
            *([f(r.regularised_residual, ".3g") + _gate_mark(r.regularised_residual, MAX_RESIDUAL)]
              if regularised else []),
            *([f"{f(r.margin_min, '.3g')} / {f(r.margin_max, '.3g')}"] if margins else []),
            f(r.train_seconds, ".0f"),
        ]
        for r in rows
    ]
    headers = [
        "target",
        "dataset",
        "task",
        "per class",
        "model",
        "loss",
        "wd",
        *(["defense"] if defended else []),
        "steps",
        "train err",
        "test err",
        "train loss",
        "stationarity ratio ↓",
        *(["learned-part ratio ↓"] if learned else []),
        *(["θ residual (NNLS) ↓"] if residual else []),
        *(["regularised-loss residual ↓"] if regularised else []),
        *(["least / largest margin"] if margins else []),
        "train s",
    ]
    return tabulate(body, headers=headers, tablefmt="github", disable_numparse=True)


def comparison_rows(suite: Suite, pub: Published, columns: list[dict[str, Any]]) -> dict[str, ComparisonTable]:
    out = {}
    # the first two summary columns the cells have (an older cell has no calibrated headline), and the numbers of
    # the targets the suite shows (target_columns: how the target changes along the axis)
    metric_cols = ([c for c in columns if c["source"] == "summary" and c["key"]][:2] or columns[:1]) + [
        c for c in columns if c["source"] == "target" and c["key"]]
    for comp in suite.comparisons:
        group = f"comparison:{comp.name}"
        cells = [c for c in pub.plan if group in c.groups]
        rows = []
        for sel in SELECTIONS:
            keys = sorted(
                {(c.attack.label, c.init.label) for c in cells},
                key=lambda k: (list(suite.attacks).index(k[0]), list(suite.inits).index(k[1])),
            )
            for attack, init in keys:
                values = []
                for v in comp.variants:
                    ids = [c.cell_id for c in cells if c.target == v.target and c.attack.label == attack and c.init.label == init]
                    recs = pub.usable(ids)
                    stats = {}   # the point's metrics, by column name (the open part of a ComparisonValue)
                    for col in metric_cols:
                        stat, key = _stat(recs, sel, col["spec"])
                        stats[col["name"]] = {**stat.to_dict(), "key": key}
                    values.append(ComparisonValue.written(
                        axis_value=v.value, target=v.target, cells=[r.cell_id for r in recs],
                        attack_failed=failures_of(pub.attack_failed(ids), len(pub.ok(ids))), extra=stats))
                rows.append(ComparisonRow.written(
                    attack=attack, init=init, selection=sel, values=values,
                    init_is_oracle=any(r.init.is_oracle for e in values for r in pub.ok(e.cells))))
        out[comp.name] = ComparisonTable(
            title=comp.title,
            axis=comp.axis,
            base=comp.base,
            axis_values=[v.value for v in comp.variants],
            metrics=[c["name"] for c in metric_cols],
            rows=rows,
        )
    return out


# -- header ---------------------------------------------------------------------------------------------
def read_invocations(results: Path) -> list[dict[str, Any]]:
    invs = []
    for p in sorted((results / "invocations").glob("*.json")):
        try:
            invs.append(json.loads(p.read_text()))
        except (OSError, json.JSONDecodeError):
            continue
    return invs


def header_info(suite: Suite, results: Path, pub: Published, command: str) -> BoardHeader:
    invs = [Invocation.from_dict(i) for i in read_invocations(results)]
    used = {r.invocation for r in pub.records.values()} - {None}
    contributing = [i for i in invs if i.invocation in used] or invs
    machines = []
    for i in contributing:
        line = machine.one_line(dict(i.machine)) if i.machine else "unknown"
        if line not in machines:
            machines.append(line)
    origins = cell_origins(pub.records, pub.packs)
    grown = commit_cells(origins)
    # a cell from a slice pack ran at its pack's commit (its record, made without git metadata, names none)
    commits = sorted({o.commit for o in origins.values()} if grown is not None
                     else {r.git_commit for r in pub.records.values()})
    held = int(len(pub.ok()))
    extra: dict[str, Any] = {}
    if grown is not None:   # cells merged from slice packs: the commits they ran at (docs/slices.md)
        extra["cell_commits"] = grown
    if held < len(pub.plan):   # a board still growing says so at its top
        extra["progress"] = progress_text(held, len(pub.plan))
    return BoardHeader.written(
        suite=suite.name,
        description=suite.description,
        suite_file=display_path(suite.path),
        suite_sha256=suite.text_sha256,
        commands=[
            Command(invocation=i.invocation, command=i.command, status=i.status, started=i.started,
                    elapsed_seconds=i.elapsed_seconds, git_commit=i.git_commit,
                    reconbench_version=i.reconbench_version)
            for i in contributing
        ],
        machines=machines,
        wall_seconds=float(sum(i.elapsed_seconds or 0.0 for i in invs)),
        invocations=len(invs),
        cell_seconds=float(sum(r.wall_seconds or 0.0 for r in pub.records.values())),
        reconbench_versions=sorted({r.reconbench_version for r in pub.records.values()}),
        git_commits=commits,
        rendered_by=command,
        rendered_with=RenderedWith(reconbench_version=__version__, git_commit=git_commit()),
        rendered=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        attack_failed=[{"cell_id": r.cell_id, **cell_outcome_of(r).to_dict()} for r in pub.attack_failed()],
        cells={
            "planned": len(pub.plan),
            "ok": len(pub.ok()),
            "failed": sum(1 for r in pub.records.values() if r.status != STATUS_OK),
            "not_run": len(pub.not_run),
            "stale": len(pub.stale),
        },
        **extra,
    )


def progress_text(held: int, planned: int) -> str:
    """A partial board's ``header.progress``: how many of the planned cells ran (``16 of 79 cells``)."""
    return f"{held} of {planned} cells"


# -- rendering ------------------------------------------------------------------------------------------
