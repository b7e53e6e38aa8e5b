"""What the site shows of one published board, read from its ``results.json`` and cell JSONs.

Every number comes from the board's ``results.json`` (the tables, comparisons and privacy-utility rows the
leaderboard code computed) or from the cell records in ``cells/``; this module only selects and formats them for the
templates. Formatting follows the board's README (``fmt_stat``: mean [95% interval] over seeds).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reconbench.bench.runner import STATUS_OK, load_cells
from reconbench.bench.suite import ColumnSpec
from reconbench.leaderboard.board_progress import CommitShare, commit_shares, missing_cells
from reconbench.leaderboard.cost import RowCost, cost_of
from reconbench.leaderboard.manifest import RELEASES_DIR
from reconbench.leaderboard.readme import NOT_CONVERGED_MARK, OUTSIDE_MARK, WITHIN_NOISE_MARK
from reconbench.leaderboard.releases import UNRELEASED, read_releases, release_label
from reconbench.leaderboard.results_file import read_results
from reconbench.leaderboard.tables import (
    ORACLE_INIT_MARK,
    ORACLE_SELECTION_MARK,
    SELECTION_TITLES,
    SELECTIONS,
    column_value,
    fmt_stat,
)
from reconbench.records import (
    BoardHeader,
    BoardRelease,
    BoardResults,
    CellRecord,
    Column,
    ComparisonTable,
    Figure,
    MetricStat,
    SearchRun,
    TableRow,
    TargetRow,
    plain,
)
from reconbench.records import (
    PrivacyTable as PrivacyRecord,
)

CONVERGED_MARK = "✓"


@dataclass(frozen=True)
class Metric:
    """One table entry: its text (mean [interval]), the mean for sorting, and the held-out null's text."""

    text: str
    value: float | None
    null: str = ""


@dataclass(frozen=True)
class CellLink:
    cell_id: str
    label: str


@dataclass
class Row:
    """A row of a board's main table (one target x attack x init, over seeds)."""

    target: str
    attack: str
    init: str
    regime: str
    defense: str
    converged: bool | None
    init_is_oracle: bool
    vs_best: str
    cells: list[CellLink]
    metrics: list[Metric]
    #: what the row's cells cost (``leaderboard/cost.py``)
    cost: RowCost | None = None

    @property
    def regime_mark(self) -> str:
        return {True: CONVERGED_MARK, False: NOT_CONVERGED_MARK, None: ""}[self.converged]


@dataclass
class Table:
    selection: str
    title: str
    rows: list[Row]


@dataclass
class ComparisonView:
    name: str
    title: str
    axis: str
    base: str
    headers: list[str]
    rows: list[list[Any]]  # per row: attack, init, selection, then one (Metric, [CellLink]) per axis value and metric


@dataclass
class PrivacyTable:
    name: str
    title: str
    series: list[str]
    rows: list[dict[str, Any]]
    figure: str | None


@dataclass
class Board:
    name: str
    folder: Path
    description: str
    header: BoardHeader
    columns: list[Column]
    tables: list[Table]
    comparisons: list[ComparisonView]
    privacy: list[PrivacyTable]
    targets: list[TargetRow]
    figures: list[Figure]
    cells: dict[str, CellRecord]
    stored_candidates: list[str]
    filters: dict[str, list[str]] = field(default_factory=dict)
    #: the board's numbered releases, oldest first, and the id of the one it is now (``leaderboard/releases.py``)
    releases: list[BoardRelease] = field(default_factory=list)
    release: str = UNRELEASED
    #: the planned cells without a record, and those whose suite entry changed since they ran (results.json)
    not_run: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)
    #: the cells whose full candidates the board does not store but whose figure pairs it keeps
    #: (``figure_pairs/<cell>.safetensors``: a subset of matched pairs in float16, ``leaderboard/figure_pairs.py``)
    figure_pairs: list[str] = field(default_factory=list)

    @property
    def commits(self) -> list[CommitShare]:
        """The commits the board's cells ran at, with their counts where the cells came from slice packs."""
        return commit_shares(self.header)

    @property
    def missing(self) -> int:
        """How many planned cells have no result yet (not run, failed or stale)."""
        return missing_cells(self.header)

    @property
    def command(self) -> str:
        """The ``reconbench leaderboard`` words that name this board: its suite, and its folder where the folder is
        named otherwise (``paper --out leaderboards/paper-gpu``)."""
        suite = self.header.suite or self.name
        return suite if suite == self.name else f"{suite} --out leaderboards/{self.name}"

    def archived(self, release: BoardRelease) -> bool:
        """Whether an older release's README and manifest are kept under the board's ``releases/<id>/``."""
        return (self.folder / RELEASES_DIR / release.id / "README.md").is_file()

    @property
    def headline(self) -> list[tuple[str, list[Row]]]:
        """Per target, the best rows of the pooled table by the first column (all rows that tie for it) among the
        init regimes that do not read training images (an oracle start is a ceiling, not an attack's result)."""
        pool = next((t for t in self.tables if t.selection == "pool"), None)
        if pool is None or not self.columns:
            return []
        sign = 1.0 if self.columns[0].higher_is_better else -1.0
        best: dict[str, list[Row]] = {}
        for r in pool.rows:
            v = r.metrics[0].value
            if r.init_is_oracle or v is None:
                continue
            top = best[r.target] if r.target in best else None
            if top is None or sign * v > sign * (top[0].metrics[0].value or 0.0):
                best[r.target] = [r]
            elif v == top[0].metrics[0].value:
                top.append(r)
        return list(best.items())

    def cell_label(self, cell_id: str) -> str:
        seed = self.cells[cell_id].seed if cell_id in self.cells else None
        return f"s{seed}" if isinstance(seed, int) else cell_id


def _defense(rec: CellRecord | None) -> str:
    return str((rec.target.trained_from.defense if rec is not None else None) or "none")


def _metric(m: MetricStat, col: Column) -> Metric:
    null = m.null
    null_text = f"null {format(null.mean, col.format)}, max {format(null.max, col.format)}" if null else ""
    return Metric(fmt_stat(m, col.format), m.mean, null_text)


def _noise(r: TableRow) -> str:
    if r.best:
        return "best"
    return {True: WITHIN_NOISE_MARK, False: "", None: "?"}[r.within_noise_of_best]


def _links(board_cells: dict[str, CellRecord], ids: list[str]) -> list[CellLink]:
    out = []
    for cid in ids:
        seed = board_cells[cid].seed if cid in board_cells else None
        out.append(CellLink(cid, f"s{seed}" if isinstance(seed, int) else cid))
    return out


def main_table(selection: str, rows: list[TableRow], columns: list[Column], cells: dict[str, CellRecord]) -> Table:
    out = []
    for r in rows:
        first = cells[r.cells[0]] if r.cells and r.cells[0] in cells else None
        out.append(Row(
            target=r.target, attack=(r.attack if r.attack_name in (None, r.attack) else f"{r.attack} ({r.attack_name})")
            + (f" [search: {r.search}]" if r.search else "")
            + (f" {OUTSIDE_MARK}" if r.outside else ""),
            init=r.init + (f" {ORACLE_INIT_MARK}" if r.init_is_oracle else ""),
            regime=str(r.init_regime or r.init), defense=_defense(first), converged=r.converged,
            init_is_oracle=bool(r.init_is_oracle), vs_best=_noise(r), cells=_links(cells, r.cells),
            metrics=[_metric(r.metric(c.name), c) for c in columns], cost=cost_of(cells, r.cells)))
    title = SELECTION_TITLES[selection]
    return Table(selection, title, out)


def comparison(name: str, comp: ComparisonTable, columns: list[Column], cells: dict[str, CellRecord]) -> ComparisonView:
    fmt = {c.name: c.format for c in columns}
    headers = [f"{m}: {comp.axis} = {v}" for m in comp.metrics for v in comp.axis_values]
    rows = []
    for r in comp.rows or []:
        sel = r.selection + (f" {ORACLE_SELECTION_MARK}" if r.selection == "oracle" else "")
        init = r.init + (f" {ORACLE_INIT_MARK}" if r.init_is_oracle else "")
        entries = [(Metric(fmt_stat(v.stat(m), fmt[m]), v.stat(m).mean), _links(cells, v.cells))
                   for m in comp.metrics for v in r.values or []]
        rows.append([r.attack, init, sel, entries])
    return ComparisonView(name, comp.title, comp.axis, comp.base, headers, rows)


def privacy_table(name: str, table: PrivacyRecord, cells: dict[str, CellRecord]) -> PrivacyTable:
    rows_in = table.rows or []
    base_acc = {r.base: r.test_accuracy for r in rows_in if r.defense == "none"}
    rows = []
    for r in rows_in:
        acc, base = r.test_accuracy, base_acc[r.base] if r.base in base_acc else None
        strength = "" if r.defense == "none" else f"{r.strength_option} = {r.strength:g}" \
            if isinstance(r.strength, (int, float)) else f"{r.strength_option} = {r.strength}"
        eps = r.epsilon
        series = []
        for s in table.series:
            a = r.attack(s)
            series.append({"headline": Metric(fmt_stat(a.headline, ".1f"), a.headline.mean,
                                              f"null {fmt_stat(a.null or MetricStat(), '.1f')}"),
                           "pareto": bool(a.pareto), "cells": _links(cells, a.cells)})
        rows.append({"target": r.target, "defense": r.defense, "strength": strength,
                     "test_accuracy": acc, "delta": None if acc is None or base is None or r.defense == "none"
                     else acc - base, "epsilon": eps if isinstance(eps, (int, float)) else None, "series": series})
    figure = table.figure.file if table.figure else None
    return PrivacyTable(name, table.title, list(table.series), rows, figure)


def _filters(tables: list[Table], privacy: list[PrivacyTable]) -> dict[str, list[str]]:
    """The values each filter offers: from the main tables' rows, and target and defense from the privacy tables'."""
    rows = [r for t in tables for r in t.rows]
    out = {key: {str(getattr(r, key)) for r in rows} for key in ("target", "attack", "regime", "defense")}
    for p in privacy:
        for r in p.rows:
            out["target"].add(str(r["target"]))
            out["defense"].add(str(r["defense"]))
    return {k: sorted(v) for k, v in out.items() if v}


def load_board(folder: Path) -> Board:
    """A published board folder (``results.json``, ``cells/``) as the site shows it."""
    data = BoardResults.from_dict(read_results(folder), folder / "results.json")
    cells = {cid: CellRecord.from_dict(rec, f"{folder / 'cells'} (cell {cid})") for cid, rec in load_cells(folder).items()}
    columns = data.column_list
    tables = [main_table(sel, data.table(sel), columns, cells) for sel in SELECTIONS]
    tables = [t for t in tables if t.rows]
    comps = [comparison(name, c, columns, cells) for name, c in (data.comparisons or {}).items()]
    privacy = [privacy_table(name, t, cells) for name, t in (data.privacy or {}).items()]
    figures = [f for f in (data.figures or {}).values() if f.file]
    header = data.header
    stored = list(data.stored_candidates)
    return Board(name=folder.name, folder=folder, description=header.description or "", header=header,
                 columns=columns, tables=tables, comparisons=comps, privacy=privacy, targets=data.targets or [],
                 figures=figures, cells=cells, stored_candidates=stored,
                 filters=_filters(tables, privacy), releases=list(read_releases(folder).releases),
                 release=release_label(folder), not_run=list(data.not_run or []), stale=list(data.stale or []),
                 figure_pairs=kept_figure_pairs(folder, cells, stored))


def kept_figure_pairs(folder: Path, cells: dict[str, CellRecord], stored: list[str]) -> list[str]:
    """The cells of the board in ``folder`` without stored candidates whose figure pairs it keeps, in cell order."""
    from reconbench.leaderboard.figure_pairs import BOARD_FOLDER

    kept = folder / BOARD_FOLDER
    if not kept.is_dir():
        return []
    names = {p.name for p in kept.iterdir() if p.is_file()}
    return [cid for cid in cells if f"{cid}.safetensors" in names and cid not in stored]


def find_boards(root: Path) -> list[Path]:
    """The board folders under ``root`` (each holds a ``results.json``), by name."""
    return sorted(p.parent for p in root.glob("*/results.json"))


def ok(rec: CellRecord) -> bool:
    return rec.status == STATUS_OK


def settings_json(rec: CellRecord) -> str:
    """The run's settings as indented JSON: the cell's spec, target recipe, attack and init, and each search run."""
    t = rec.target
    keep = {"spec": rec.spec, "target": {"name": t.name, "recipe": plain(t.recipe), "recipe_key": t.recipe_key,
                                         "n_train": t.n_train},
            "attack": rec.attack.to_dict(), "init": rec.init.to_dict(), "protocol_overrides": rec.protocol,
            "search_runs": [SearchRun.from_dict(r).summary() for r in rec.runs or []]}
    return json.dumps(keep, indent=1, sort_keys=False, default=str)


@dataclass(frozen=True)
class SelectionNumbers:
    """One selection of a cell (pool, blind, oracle): its rule, and each board column's value with its null."""

    selection: str
    rule: str
    values: list[Metric]


def cell_numbers(rec: CellRecord, columns: list[Column]) -> list[SelectionNumbers]:
    """The board's columns for one cell, per selection, as stored in the cell record."""
    out = []
    for sel in SELECTIONS:
        if sel not in (rec.selections or {}) or not rec.selection(sel).to_dict():
            continue
        s = rec.selection(sel)
        values = []
        for c in columns:
            spec = ColumnSpec(name=c.name, source=c.source, keys=tuple(c.keys_tried) if c.source in ("summary", "target")
                              else (), higher_is_better=c.higher_is_better, fmt=c.format)
            v, key = column_value(rec, sel, spec)
            null = s.null_spread(key) if key else None
            values.append(Metric("n/a" if v is None else format(v, c.format), v,
                                 f"null {format(null.mean, c.format)}, max {format(null.max, c.format)}"
                                 if null else ""))
        out.append(SelectionNumbers(sel, str(s.rule or ""), values))
    return out
