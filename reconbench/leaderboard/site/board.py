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
from reconbench.leaderboard.render import NOT_CONVERGED_MARK, OUTSIDE_MARK, WITHIN_NOISE_MARK
from reconbench.leaderboard.results_file import read_results
from reconbench.leaderboard.tables import (
    ORACLE_INIT_MARK,
    ORACLE_SELECTION_MARK,
    SELECTION_TITLES,
    SELECTIONS,
    column_value,
    fmt_stat,
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

    @property
    def regime_mark(self) -> str:
        return {True: CONVERGED_MARK, False: NOT_CONVERGED_MARK, None: ""}[self.converged]


@dataclass
class Table:
    selection: str
    title: str
    rows: list[Row]


@dataclass
class Comparison:
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
    header: dict[str, Any]
    columns: list[dict[str, Any]]
    tables: list[Table]
    comparisons: list[Comparison]
    privacy: list[PrivacyTable]
    targets: list[dict[str, Any]]
    figures: list[dict[str, Any]]
    cells: dict[str, dict[str, Any]]
    stored_candidates: list[str]
    filters: dict[str, list[str]] = field(default_factory=dict)

    @property
    def headline(self) -> list[tuple[str, list[Row]]]:
        """Per target, the best rows of the pooled table by the first column (all rows that tie for it) among the
        init regimes that do not read training images (an oracle start is a ceiling, not an attack's result)."""
        pool = next((t for t in self.tables if t.selection == "pool"), None)
        if pool is None or not self.columns:
            return []
        sign = 1.0 if self.columns[0]["higher_is_better"] else -1.0
        best: dict[str, list[Row]] = {}
        for r in pool.rows:
            v = r.metrics[0].value
            if r.init_is_oracle or v is None:
                continue
            top = best.get(r.target)
            if top is None or sign * v > sign * (top[0].metrics[0].value or 0.0):
                best[r.target] = [r]
            elif v == top[0].metrics[0].value:
                top.append(r)
        return list(best.items())

    def cell_label(self, cell_id: str) -> str:
        rec = self.cells.get(cell_id) or {}
        return f"s{rec['seed']}" if isinstance(rec.get("seed"), int) else cell_id


def _defense(rec: dict[str, Any] | None) -> str:
    recipe = ((rec or {}).get("target") or {}).get("recipe") or {}
    return str(recipe.get("defense") or "none")


def _metric(m: dict[str, Any], col: dict[str, Any]) -> Metric:
    null = m.get("null")
    null_text = f"null {format(null['mean'], col['format'])}, max {format(null['max'], col['format'])}" if null else ""
    return Metric(fmt_stat(m, col["format"]), m.get("mean"), null_text)


def _noise(r: dict[str, Any]) -> str:
    if r.get("best"):
        return "best"
    return {True: WITHIN_NOISE_MARK, False: "", None: "?"}[r.get("within_noise_of_best")]


def _links(board_cells: dict[str, dict[str, Any]], ids: list[str]) -> list[CellLink]:
    out = []
    for cid in ids:
        seed = (board_cells.get(cid) or {}).get("seed")
        out.append(CellLink(cid, f"s{seed}" if isinstance(seed, int) else cid))
    return out


def main_table(selection: str, rows: list[dict[str, Any]], columns: list[dict[str, Any]],
               cells: dict[str, dict[str, Any]]) -> Table:
    out = []
    for r in rows:
        first = cells.get(r["cells"][0]) if r["cells"] else None
        out.append(Row(
            target=r["target"], attack=(r["attack"] if r["attack"] == r.get("attack_name", r["attack"])
                                        else f"{r['attack']} ({r['attack_name']})")
            + (f" [search: {r['search']}]" if r.get("search") else "")
            + (f" {OUTSIDE_MARK}" if r.get("outside") else ""),
            init=r["init"] + (f" {ORACLE_INIT_MARK}" if r.get("init_is_oracle") else ""),
            regime=str(r.get("init_regime") or r["init"]), defense=_defense(first), converged=r.get("converged"),
            init_is_oracle=bool(r.get("init_is_oracle")), vs_best=_noise(r), cells=_links(cells, r["cells"]),
            metrics=[_metric(r["metrics"][c["name"]], c) for c in columns]))
    title = SELECTION_TITLES[selection]
    return Table(selection, title, out)


def comparison(name: str, comp: dict[str, Any], columns: list[dict[str, Any]],
               cells: dict[str, dict[str, Any]]) -> Comparison:
    fmt = {c["name"]: c["format"] for c in columns}
    headers = [f"{m}: {comp['axis']} = {v}" for m in comp["metrics"] for v in comp["axis_values"]]
    rows = []
    for r in comp["rows"]:
        sel = r["selection"] + (f" {ORACLE_SELECTION_MARK}" if r["selection"] == "oracle" else "")
        init = r["init"] + (f" {ORACLE_INIT_MARK}" if r.get("init_is_oracle") else "")
        entries = [(Metric(fmt_stat(v[m], fmt[m]), v[m].get("mean")), _links(cells, v["cells"]))
                   for m in comp["metrics"] for v in r["values"]]
        rows.append([r["attack"], init, sel, entries])
    return Comparison(name, comp["title"], comp["axis"], comp["base"], headers, rows)


def privacy_table(name: str, table: dict[str, Any], cells: dict[str, dict[str, Any]]) -> PrivacyTable:
    base_acc = {r["base"]: r["test_accuracy"] for r in table["rows"] if r["defense"] == "none"}
    rows = []
    for r in table["rows"]:
        acc, base = r.get("test_accuracy"), base_acc.get(r["base"])
        strength = "" if r["defense"] == "none" else f"{r['strength_option']} = {r['strength']:g}" \
            if isinstance(r["strength"], (int, float)) else f"{r['strength_option']} = {r['strength']}"
        eps = (r.get("defense_records") or {}).get("epsilon", "")
        series = []
        for s in table["series"]:
            a = r["attacks"][s]
            series.append({"headline": Metric(fmt_stat(a["headline"], ".1f"), a["headline"].get("mean"),
                                              f"null {fmt_stat(a['null'], '.1f')}"),
                           "pareto": bool(a.get("pareto")), "cells": _links(cells, a.get("cells") or [])})
        rows.append({"target": r["target"], "defense": r["defense"], "strength": strength,
                     "test_accuracy": acc, "delta": None if acc is None or base is None or r["defense"] == "none"
                     else acc - base, "epsilon": eps if isinstance(eps, (int, float)) else None, "series": series})
    figure = (table.get("figure") or {}).get("file")
    return PrivacyTable(name, table["title"], list(table["series"]), rows, figure)


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
    data = read_results(folder)
    cells = load_cells(folder)
    columns = data["columns"]
    tables = [main_table(sel, data["tables"].get(sel) or [], columns, cells) for sel in SELECTIONS]
    tables = [t for t in tables if t.rows]
    comps = [comparison(name, c, columns, cells) for name, c in (data.get("comparisons") or {}).items()]
    privacy = [privacy_table(name, t, cells) for name, t in (data.get("privacy") or {}).items()]
    figures = [dict(f, name=name) for name, f in (data.get("figures") or {}).items() if f.get("file")]
    header = data["header"]
    return Board(name=folder.name, folder=folder, description=header.get("description") or "", header=header,
                 columns=columns, tables=tables, comparisons=comps, privacy=privacy, targets=data.get("targets") or [],
                 figures=figures, cells=cells, stored_candidates=list(data.get("stored_candidates") or []),
                 filters=_filters(tables, privacy))


def find_boards(root: Path) -> list[Path]:
    """The board folders under ``root`` (each holds a ``results.json``), by name."""
    return sorted(p.parent for p in root.glob("*/results.json"))


def ok(rec: dict[str, Any]) -> bool:
    return rec.get("status") == STATUS_OK


def settings_json(rec: dict[str, Any]) -> str:
    """The run's settings as indented JSON: the cell's spec, target recipe, attack and init, and each search run."""
    keep = {"spec": rec.get("spec"), "target": {k: (rec.get("target") or {}).get(k) for k in ("name", "recipe",
            "recipe_key", "n_train")}, "attack": rec.get("attack"), "init": rec.get("init"),
            "protocol_overrides": rec.get("protocol"),
            "search_runs": [{k: r.get(k) for k in ("run", "config", "final_loss", "steps", "stopped", "seconds")}
                            for r in rec.get("runs") or []]}
    return json.dumps(keep, indent=1, sort_keys=False, default=str)


@dataclass(frozen=True)
class SelectionNumbers:
    """One selection of a cell (pool, blind, oracle): its rule, and each board column's value with its null."""

    selection: str
    rule: str
    values: list[Metric]


def cell_numbers(rec: dict[str, Any], columns: list[dict[str, Any]]) -> list[SelectionNumbers]:
    """The board's columns for one cell, per selection, as stored in the cell record."""
    out = []
    for sel in SELECTIONS:
        s = (rec.get("selections") or {}).get(sel)
        if not s:
            continue
        spread = (s.get("null") or {}).get("spread") or {}
        values = []
        for c in columns:
            spec = ColumnSpec(name=c["name"], source=c["source"], keys=tuple(c["keys_tried"]) if c["source"] == "summary"
                              else (), higher_is_better=c["higher_is_better"], fmt=c["format"])
            v, key = column_value(rec, sel, spec)
            null = spread.get(key) if key else None
            values.append(Metric("n/a" if v is None else format(v, c["format"]), v,
                                 f"null {format(null['mean'], c['format'])}, max {format(null['max'], c['format'])}"
                                 if null else ""))
        out.append(SelectionNumbers(sel, str(s.get("rule") or ""), values))
    return out
