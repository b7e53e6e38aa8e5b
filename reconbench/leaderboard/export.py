"""Exports of a published board for papers and analysis: CSV, JSON, LaTeX and Markdown.

Every number is read from the board's ``results.json`` (the tables, comparisons and privacy-utility rows the
leaderboard computed from its cells). CSV and JSON are *long*: one record per table row and metric, with the mean,
sd, seeds, the 95% interval over seeds and the held-out null (numbers at full precision). LaTeX (booktabs) and
Markdown are *wide*, one table per board table, ready to paste: each chosen metric as ``mean [lo, hi]`` and a
null column ``mean (max)``, formatted as the board formats them. LaTeX output is ASCII: marks are spelled out
(``(oracle)`` for an init that reads training images, ``(outside)`` after the attack of a row that holds cells of an
outside submission, as README.md marks it; the long records name those submissions in ``outside``) and special
characters are escaped by ``tabulate``.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from tabulate import tabulate

from reconbench.errors import ReconbenchError
from reconbench.leaderboard.render import OUTSIDE_MARK
from reconbench.leaderboard.results_file import read_results
from reconbench.leaderboard.tables import SELECTIONS, fmt_stat

FORMATS = ("csv", "json", "latex", "markdown")
EXPORT_FORMAT = "reconbench-export/2"
#: the fields of a long record, in CSV column order; ``outside``: the outside submissions (``leaderboard add``) whose
#: cells the row holds (empty for the suite's own rows)
FIELDS = ("table", "selection", "target", "attack", "init", "init_regime", "init_is_oracle", "axis", "axis_value",
          "defense", "strength", "test_accuracy", "metric", "key", "higher_is_better", "n", "mean", "sd", "ci95_low",
          "ci95_high", "null_mean", "null_max", "cells", "outside")
#: the metric of the privacy-utility tables (reconbench.leaderboard.privacy)
PRIVACY_METRIC = "reconstructed (calibrated)"


def _stat_fields(m: dict[str, Any]) -> dict[str, Any]:
    ci = m.get("ci95") or [None, None]
    return {"n": m.get("n"), "mean": m.get("mean"), "sd": m.get("sd"), "ci95_low": ci[0], "ci95_high": ci[1]}


def long_records(data: dict[str, Any]) -> list[dict[str, Any]]:
    """One record per (table row, metric) of a board's results.json."""
    direction = {c["name"]: c["higher_is_better"] for c in data["columns"]}
    out: list[dict[str, Any]] = []
    for sel in SELECTIONS:
        for r in (data.get("tables") or {}).get(sel) or []:
            for name, m in r["metrics"].items():
                null = m.get("null") or {}
                out.append({"table": "main", "selection": sel, "target": r["target"], "attack": r["attack"],
                            "init": r["init"], "init_regime": r.get("init_regime"),
                            "init_is_oracle": bool(r.get("init_is_oracle")), "metric": name, "key": m.get("key"),
                            "higher_is_better": direction.get(name), **_stat_fields(m),
                            "null_mean": null.get("mean"), "null_max": null.get("max"), "cells": list(r["cells"]),
                            "outside": list(r.get("outside") or [])})
    for cname, comp in (data.get("comparisons") or {}).items():
        for r in comp["rows"]:
            for v in r["values"]:
                for name in comp["metrics"]:
                    out.append({"table": f"comparison:{cname}", "selection": r["selection"], "target": v["target"],
                                "attack": r["attack"], "init": r["init"],
                                "init_is_oracle": bool(r.get("init_is_oracle")), "axis": comp["axis"],
                                "axis_value": v["axis_value"], "metric": name, "key": v[name].get("key"),
                                "higher_is_better": direction.get(name), **_stat_fields(v[name]),
                                "cells": list(v["cells"])})
    for pname, table in (data.get("privacy") or {}).items():
        for r in table["rows"]:
            for series, a in r["attacks"].items():
                attack, _, init = series.partition(" / ")
                out.append({"table": f"privacy:{pname}", "selection": table.get("selection", "pool"),
                            "target": r["target"], "attack": attack, "init": init, "defense": r["defense"],
                            "strength": r.get("strength"), "test_accuracy": r.get("test_accuracy"),
                            "metric": PRIVACY_METRIC, "key": table.get("headline_key"), "higher_is_better": False,
                            **_stat_fields(a["headline"]), "null_mean": (a.get("null") or {}).get("mean"),
                            "cells": list(a.get("cells") or [])})
    return [{f: rec.get(f) for f in FIELDS} for rec in out]


def _csv_value(key: str, v: Any) -> Any:
    """A field as CSV text: the cells joined by ';', a list or mapping (an axis value) as JSON, None empty."""
    if key in ("cells", "outside"):
        return ";".join(v or [])
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
def _null_text(null: dict[str, Any] | None, fmt: str) -> str:
    return "" if not null else f"{format(null['mean'], fmt)} ({format(null['max'], fmt)})"


def _attack(r: dict[str, Any]) -> str:
    """A row's attack, marked as README.md marks a row holding cells of an outside submission."""
    return r["attack"] + (f" {OUTSIDE_MARK}" if r.get("outside") else "")


def _init(r: dict[str, Any]) -> str:
    return r["init"] + (" (oracle)" if r.get("init_is_oracle") else "")


def wide_tables(data: dict[str, Any], metrics: Sequence[str], selection: str) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, headers, rows) of each table of the board: the main table of ``selection``, the comparisons, the
    privacy-utility tables; each chosen metric as ``mean [lo, hi]`` with a null column."""
    cols = {c["name"]: c for c in data["columns"]}
    out = []
    rows = (data.get("tables") or {}).get(selection) or []
    if rows:
        headers = ["target", "attack", "init", "seeds"]
        for m in metrics:
            headers += [m, f"{m}: null (max)"]
        body = []
        for r in rows:
            line = [r["target"], _attack(r), _init(r), str(len(r["cells"]))]
            for m in metrics:
                line += [fmt_stat(r["metrics"][m], cols[m]["format"]),
                         _null_text(r["metrics"][m].get("null"), cols[m]["format"])]
            body.append(line)
        out.append((f"{data['header']['suite']}: {selection} selection; mean [95% interval] over seeds, held-out "
                    "null mean (max over draws)", headers, body))
    for comp in (data.get("comparisons") or {}).values():
        shown = [m for m in metrics if m in comp["metrics"]] or comp["metrics"][:1]
        headers = ["attack", "init", "selection"] + [f"{m}: {comp['axis']} = {v}" for m in shown
                                                      for v in comp["axis_values"]]
        body = [[r["attack"], _init(r), r["selection"]] + [fmt_stat(v[m], cols[m]["format"]) for m in shown
                                                           for v in r["values"]] for r in comp["rows"]]
        out.append((f"{comp['title']}; mean [95% interval] over seeds", headers, body))
    for table in (data.get("privacy") or {}).values():
        headers = ["target", "defense", "strength", "test acc"]
        for s in table["series"]:
            headers += [f"{s}: reconstructed", f"{s}: null"]
        body = []
        for r in table["rows"]:
            line = [r["target"], r["defense"], "" if r.get("strength") is None else f"{r['strength']:g}",
                    "n/a" if r.get("test_accuracy") is None else f"{r['test_accuracy']:.3f}"]
            for s in table["series"]:
                a = r["attacks"][s]
                line += [fmt_stat(a["headline"], ".1f"), fmt_stat(a["null"], ".1f")]
            body.append(line)
        out.append((f"{table['title']}; mean [95% interval] over seeds", headers, body))
    return out


def to_latex(tables: list[tuple[str, list[str], list[list[str]]]]) -> str:
    parts = []
    for title, headers, body in tables:
        comment = "% " + " ".join(title.split())
        parts.append(comment + "\n" + tabulate(body, headers=headers, tablefmt="latex_booktabs", disable_numparse=True))
    return "% needs \\usepackage{booktabs}\n" + "\n\n".join(parts) + "\n"


def to_markdown(tables: list[tuple[str, list[str], list[list[str]]]]) -> str:
    def esc(text: str) -> str:
        return text.replace("|", "\\|")

    parts = []
    for title, headers, body in tables:
        parts.append(f"**{esc(title)}**\n\n" + tabulate([[esc(c) for c in row] for row in body],
                                                        headers=[esc(h) for h in headers], tablefmt="github",
                                                        disable_numparse=True))
    return "\n\n".join(parts) + "\n"


def choose_metrics(data: dict[str, Any], columns: str | None) -> list[str]:
    """The metrics of the wide tables: named (comma-separated), ``all``, or by default the board's first two."""
    names = [c["name"] for c in data["columns"]]
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
    data = read_results(folder)
    if fmt == "csv":
        return to_csv(long_records(data))
    if fmt == "json":
        header = data["header"]
        return json.dumps({"format": EXPORT_FORMAT, "board": header["suite"], "suite_sha256": header["suite_sha256"],
                           "git_commits": header["git_commits"], "fields": list(FIELDS),
                           "rows": long_records(data)}, indent=1) + "\n"
    tables = wide_tables(data, choose_metrics(data, columns), selection)
    return to_latex(tables) if fmt == "latex" else to_markdown(tables)
