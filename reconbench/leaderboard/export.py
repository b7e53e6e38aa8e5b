"""Exports of a published board for papers and analysis: CSV, JSON, LaTeX and Markdown.

Every number is read from the board's ``results.json`` (the tables, comparisons and privacy-utility rows the
leaderboard computed from its cells). CSV and JSON are *long*: one record per table row and metric, with the mean,
sd, seeds, the 95% interval over seeds, the held-out null (numbers at full precision) and the commit its cells ran
at (``commit``: a board grown over slices spans several, each cell's listed in ``header.cell_commits``); the JSON's
header also states how far a partial board has grown (``progress``, ``cells``, ``not_run``) and the commits its cells
ran at (``git_commits``; ``cell_commits`` with their counts and cells where the cells came from slice packs), and a
wide table's title line says the same where the board is partial or its cells came from slices
(``board_progress.py``). LaTeX (booktabs) and Markdown are *wide*, one table per board table, ready to paste: each
chosen metric as ``mean [lo, hi]`` and a null column ``mean (max)``, formatted as the board formats them. LaTeX
output is ASCII: marks are spelled out (``(oracle)`` for an init that reads training images, ``(outside)`` after
the attack of a row that holds cells of an outside submission, as README.md marks it; the long records name those
submissions in ``outside``) and special characters are escaped by ``tabulate``.

A board is named by its folder, its suite apart (``board_label``): the JSON's ``board`` is the board's name
(``releases.board_name``: its folder's, as its releases are numbered, ``paper-gpu``) and ``suite`` its suite's
(``paper``); a wide table's titles name the board, and its suite beside it where the two differ. A board in a folder
named after its suite (every CPU board) is exported as before.
"""

from __future__ import annotations

import csv
import io
import json
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tabulate import tabulate

from reconbench.errors import ReconbenchError
from reconbench.leaderboard.board_progress import cell_commits, commit_shares, progress_line, row_commits
from reconbench.leaderboard.cost import COST_HEADER, board_records, cost_of
from reconbench.leaderboard.plain_text import markdown_paragraph
from reconbench.leaderboard.readme import OUTSIDE_MARK
from reconbench.leaderboard.releases import board_name, release_label
from reconbench.leaderboard.results_file import read_results
from reconbench.leaderboard.tables import SELECTIONS, fmt_stat
from reconbench.records import BoardResults, CellRecord, ComparisonRow, MetricStat, NullSummary, TableRow

FORMATS = ("csv", "json", "latex", "markdown")
EXPORT_FORMAT = "reconbench-export/3"
#: the fields of a long record, in CSV column order; ``outside``: the outside submissions (``leaderboard add``) whose
#: cells the row holds (empty for the suite's own rows); ``device``, ``precision``, ``device_seconds``, ``cost_cells``:
#: the row's cost (``cost.py``); ``release``: the board release the numbers are from (``releases.py``);
#: ``progress``: "k of N cells" on a board that does not yet hold every planned cell (empty on a complete board);
#: ``commit``: the commit the row's cells ran at (a board from slices spans several: each cell's is the one
#: ``header.cell_commits`` lists it under; a row whose cells ran at several lists each, ';'-joined in the CSV)
FIELDS = ("table", "selection", "target", "attack", "init", "init_regime", "init_is_oracle", "axis", "axis_value",
          "defense", "strength", "test_accuracy", "metric", "key", "higher_is_better", "n", "mean", "sd", "ci95_low",
          "ci95_high", "null_mean", "null_max", "cells", "outside", "device", "precision", "device_seconds",
          "cost_cells", "release", "progress", "commit")
#: the metric of the privacy-utility tables (reconbench.leaderboard.privacy)
PRIVACY_METRIC = "reconstructed (calibrated)"


def _stat_fields(m: MetricStat) -> dict[str, Any]:
    low, high = m.ci95 or (None, None)
    return {"n": m.n, "mean": m.mean, "sd": m.sd, "ci95_low": low, "ci95_high": high}


def long_records(data: BoardResults, records: Mapping[str, CellRecord] | None = None,
                 release: str | None = None) -> list[dict[str, Any]]:
    """One record per (table row, metric) of a board's results.json; with the board's cell ``records``, each with
    its row's cost and the commits its cells ran at, and each with the board's ``release``."""
    direction = {c.name: c.higher_is_better for c in data.column_list}
    out: list[dict[str, Any]] = []
    for sel in SELECTIONS:
        for r in data.table(sel):
            for name, m in (r.metrics or {}).items():
                out.append({"table": "main", "selection": sel, "target": r.target, "attack": r.attack,
                            "init": r.init, "init_regime": r.init_regime,
                            "init_is_oracle": bool(r.init_is_oracle), "metric": name, "key": m.key,
                            "higher_is_better": direction[name] if name in direction else None, **_stat_fields(m),
                            "null_mean": m.null.mean if m.null else None,
                            "null_max": m.null.max if m.null else None, "cells": list(r.cells),
                            "outside": list(r.outside)})
    for cname, comp in (data.comparisons or {}).items():
        for cr in comp.rows or []:
            for v in cr.values or []:
                for name in comp.metrics:
                    out.append({"table": f"comparison:{cname}", "selection": cr.selection, "target": v.target,
                                "attack": cr.attack, "init": cr.init,
                                "init_is_oracle": bool(cr.init_is_oracle), "axis": comp.axis,
                                "axis_value": v.axis_value, "metric": name, "key": v.stat(name).key,
                                "higher_is_better": direction[name] if name in direction else None,
                                **_stat_fields(v.stat(name)), "cells": list(v.cells)})
    for pname, table in (data.privacy or {}).items():
        for pr in table.rows or []:
            for series, a in (pr.attacks or {}).items():
                attack, _, init = series.partition(" / ")
                out.append({"table": f"privacy:{pname}", "selection": table.selection,
                            "target": pr.target, "attack": attack, "init": init, "defense": pr.defense,
                            "strength": pr.strength, "test_accuracy": pr.test_accuracy,
                            "metric": PRIVACY_METRIC, "key": table.headline_key, "higher_is_better": False,
                            **_stat_fields(a.headline), "null_mean": a.null.mean if a.null else None,
                            "cells": list(a.cells)})
    commits = cell_commits(data.header, records or {})
    for rec in out:
        if records is not None:
            rec.update(cost_of(records, rec["cells"]).fields())
        rec["commit"] = row_commits(commits, rec["cells"]) if records is not None else None
        rec["release"] = release
        rec["progress"] = data.header.progress
    return [{**dict.fromkeys(FIELDS), **rec} for rec in out]


def _csv_value(key: str, v: object) -> object:
    """A field as CSV text: the cells (their commits, the outside submissions) joined by ';', another list or a
    mapping (an axis value) as JSON, None empty."""
    if key in ("cells", "outside", "commit"):
        return ";".join(str(c) for c in v) if isinstance(v, list) else ""
    if isinstance(v, (list, dict)):
        return json.dumps(v)
    return "" if v is None else v


def to_csv(records: Iterable[dict[str, Any]]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=FIELDS, lineterminator="\n")
    writer.writeheader()
    for rec in records:
        writer.writerow({k: _csv_value(k, v) for k, v in rec.items()})
    return buf.getvalue()


# -- wide tables ----------------------------------------------------------------------------------------------
def _null_text(null: NullSummary | None, fmt: str) -> str:
    return "" if not null else f"{format(null.mean, fmt)} ({format(null.max, fmt)})"


def _attack(r: TableRow) -> str:
    """A row's attack, marked as README.md marks a row holding cells of an outside submission."""
    return r.attack + (f" {OUTSIDE_MARK}" if r.outside else "")


def _init(r: TableRow | ComparisonRow) -> str:
    return r.init + (" (oracle)" if r.init_is_oracle else "")


def board_label(board: str | None, suite: str | None) -> str:
    """How a wide table's titles name the board: its name, and its suite beside it where they differ
    (``paper-gpu (suite paper)``); the suite's name alone for a board in a folder named after it."""
    if not board or board == suite:
        return str(suite)
    return board if suite is None else f"{board} (suite {suite})"


def wide_tables(data: BoardResults, metrics: Sequence[str], selection: str,
                records: Mapping[str, CellRecord] | None = None,
                board: str | None = None) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, headers, rows) of each table of the board: the main table of ``selection``, the comparisons, the
    privacy-utility tables; each chosen metric as ``mean [lo, hi]`` with a null column; with the cells'
    ``records``, the main table's rows end with their cost (``cost.py``). ``board``: the board's name, where its
    folder is not named after its suite (:func:`board_label`)."""
    cols = {c.name: c for c in data.column_list}
    out = []
    rows = data.table(selection)
    if rows:
        headers = ["target", "attack", "init", "seeds"]
        for m in metrics:
            headers += [m, f"{m}: null (max)"]
        headers += [COST_HEADER] if records is not None else []
        body = []
        for r in rows:
            line = [r.target, _attack(r), _init(r), str(len(r.cells))]
            for m in metrics:
                line += [fmt_stat(r.metric(m), cols[m].format), _null_text(r.metric(m).null, cols[m].format)]
            line += [cost_of(records, r.cells).text()] if records is not None else []
            body.append(line)
        out.append((f"{board_label(board, data.header.suite)}: {selection} selection; mean [95% interval] over "
                    "seeds, held-out null mean (max over draws)", headers, body))
    for comp in (data.comparisons or {}).values():
        shown = [m for m in metrics if m in comp.metrics] or comp.metrics[:1]
        headers = ["attack", "init", "selection"] + [f"{m}: {comp.axis} = {v}" for m in shown for v in comp.axis_values]
        body = [[cr.attack, _init(cr), cr.selection] + [fmt_stat(v.stat(m), cols[m].format) for m in shown
                                                        for v in cr.values or []] for cr in comp.rows or []]
        out.append((f"{comp.title}; mean [95% interval] over seeds", headers, body))
    for table in (data.privacy or {}).values():
        headers = ["target", "defense", "strength", "test acc"]
        for s in table.series:
            headers += [f"{s}: reconstructed", f"{s}: null"]
        body = []
        for pr in table.rows or []:
            line = [pr.target, pr.defense, "" if pr.strength is None else f"{pr.strength:g}",
                    "n/a" if pr.test_accuracy is None else f"{pr.test_accuracy:.3f}"]
            for s in table.series:
                a = pr.attack(s)
                line += [fmt_stat(a.headline, ".1f"), fmt_stat(a.null or MetricStat(), ".1f")]
            body.append(line)
        out.append((f"{table.title}; mean [95% interval] over seeds", headers, body))
    return out


#: the marks and letters boards use, spelled out for pdflatex (any other non-ASCII character by its Unicode name)
ASCII_SPELLING = {"θ": "theta", "λ": "lambda", "≈": "~", "−": "-", "–": "-", "—": "-", "·": "*", "↑": "(up)",
                  "↓": "(down)", "⚠": "(flagged)", "✓": "(ok)", "†": "(oracle)", "‡": "(oracle selection)",
                  "≤": "<=", "≥": ">=", "×": "x"}


def ascii_text(text: str) -> str:
    """``text`` in ASCII: known marks spelled out, any other character as its Unicode name in brackets."""
    return "".join(c if c.isascii() else ASCII_SPELLING.get(c) or f"[{unicodedata.name(c, f'U+{ord(c):04X}').lower()}]"
                   for c in text)


def to_latex(tables: list[tuple[str, list[str], list[list[str]]]], board_title: str | None = None) -> str:
    parts = [f"% {ascii_text(' '.join(board_title.split()))}"] if board_title else []
    for title, headers, body in tables:
        comment = "% " + ascii_text(" ".join(title.split()))
        parts.append(comment + "\n" + tabulate([[ascii_text(c) for c in row] for row in body],
                                               headers=[ascii_text(h) for h in headers], tablefmt="latex_booktabs",
                                               disable_numparse=True))
    return "% needs \\usepackage{booktabs}\n" + "\n\n".join(parts) + "\n"


def to_markdown(tables: list[tuple[str, list[str], list[list[str]]]], board_title: str | None = None) -> str:
    def esc(text: str) -> str:
        return text.replace("|", "\\|")

    parts = [f"_{markdown_paragraph(board_title)}_"] if board_title else []
    for title, headers, body in tables:
        parts.append(f"**{markdown_paragraph(title)}**\n\n" + tabulate([[esc(c) for c in row] for row in body],
                                                        headers=[esc(h) for h in headers], tablefmt="github",
                                                        disable_numparse=True))
    return "\n\n".join(parts) + "\n"


def choose_metrics(data: BoardResults, columns: str | None) -> list[str]:
    """The metrics of the wide tables: named (comma-separated), ``all``, or by default the board's first two."""
    names = [c.name for c in data.column_list]
    if columns is None:
        return names[:2]
    if columns.strip() == "all":
        return names
    chosen = [c.strip() for c in columns.split(",") if c.strip()]
    unknown = [c for c in chosen if c not in names]
    if unknown or not chosen:
        raise ReconbenchError(f"--columns: no column {', '.join(map(repr, unknown)) or '(empty)'} on this board; "
                              f"choose from {', '.join(map(repr, names))} or 'all'")
    return chosen


def export_board(folder: Path, fmt: str, *, columns: str | None = None, selection: str = "pool") -> str:
    """The board in ``folder`` (its results.json) as ``fmt`` (one of :data:`FORMATS`)."""
    if fmt not in FORMATS:
        raise ReconbenchError(f"--format {fmt!r}: choose one of {', '.join(FORMATS)}")
    if selection not in SELECTIONS:
        raise ReconbenchError(f"--selection {selection!r}: choose one of {', '.join(SELECTIONS)}")
    data = BoardResults.from_dict(read_results(folder))
    records, release, name = board_records(folder), release_label(folder), board_name(folder)
    if fmt == "csv":
        return to_csv(long_records(data, records, release))
    if fmt == "json":
        header = data.header
        shares = commit_shares(header)
        return json.dumps({"format": EXPORT_FORMAT, "board": name, "suite": header.suite, "release": release,
                           "suite_sha256": header.suite_sha256, "git_commits": [s.commit for s in shares],
                           "progress": header.progress, "cells": dict(header.cells or {}),
                           "not_run": list(data.not_run or []),
                           "cell_commits": [c.to_dict() for c in header.cell_commits or []] or None,
                           "fields": list(FIELDS), "rows": long_records(data, records, release)}, indent=1) + "\n"
    tables = wide_tables(data, choose_metrics(data, columns), selection, records, name)
    title = "; ".join(t for t in (f"{board_label(name, data.header.suite)}, release {release}",
                                  progress_line(data.header)) if t)
    return to_latex(tables, title) if fmt == "latex" else to_markdown(tables, title)
