"""Leaderboards: tables (Markdown + JSON) and figures rendered from the cell JSONs of a results folder.

Every number in a table is computed here from the cell JSONs (copied into ``<leaderboard>/cells/``), and
``results.json`` names, for every row, the cells it aggregates. Mean and sample standard deviation are over
seeds.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import statistics
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tabulate import tabulate

from .. import __version__, plugins
from ..errors import ReconbenchError
from ..provenance import git_commit, write_json
from . import machine
from .cells import Cell, expand
from .runner import STATUS_OK, load_cells
from .suite import ColumnSpec, Suite, display_path

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
def _number(v: Any) -> float | None:
    if isinstance(v, dict):
        v = v.get("value")
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, (int, float)) and not math.isnan(float(v)):
        return float(v)
    return None


def column_value(rec: dict[str, Any], selection: str, col: ColumnSpec) -> tuple[float | None, str | None]:
    """(value, summary key used) of one column for one cell and selection."""
    sel = (rec.get("selections") or {}).get(selection) or {}
    if col.source == "attack_loss":
        return _number(sel.get("attack_loss")), "attack_loss"
    if col.source == "wall_seconds":
        return _number(rec.get("attack_seconds")), "attack_seconds"
    summary = sel.get("summary") or {}
    for k in col.keys:
        if k in summary:
            return _number(summary[k]), k
    return None, None


def direction(col: ColumnSpec, key: str | None, records: Iterable[dict[str, Any]]) -> tuple[bool, str]:
    """higher_is_better of a column: the metric whose headline the key is (as the evaluation recorded it, else as
    the registered metric plugin declares it), else the column spec."""
    records = list(records)
    if key and col.source == "summary":
        for rec in records:
            for name, info in ((rec.get("evaluation") or {}).get("metrics") or {}).items():
                if isinstance(info, dict) and info.get("headline", name) == key and "higher_is_better" in info:
                    return bool(info["higher_is_better"]), f"metric {name!r} (recorded in the cells)"
        for name in plugins.names("metrics"):
            metric = plugins.get("metrics", name)
            if getattr(metric, "headline", name) == key:
                return bool(metric.higher_is_better), f"metric plugin {name!r}"
    return col.higher_is_better, "column spec"


# -- aggregation ----------------------------------------------------------------------------------------
@dataclass
class Stat:
    values: list[float]

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> float | None:
        return statistics.fmean(self.values) if self.values else None

    @property
    def sd(self) -> float | None:
        return statistics.stdev(self.values) if len(self.values) > 1 else None

    def to_dict(self) -> dict[str, Any]:
        return {"mean": self.mean, "sd": self.sd, "n": self.n, "values": self.values}


def fmt_stat(s: Stat, fmt: str) -> str:
    if s.mean is None:
        return "n/a"
    text = format(s.mean, fmt)
    if s.sd is not None:
        text += f" ± {format(s.sd, fmt)}"
    return text


def _stat(records: list[dict[str, Any]], selection: str, col: ColumnSpec) -> tuple[Stat, str | None]:
    values, key = [], None
    for rec in records:
        v, k = column_value(rec, selection, col)
        if v is not None:
            values.append(v)
            key = key or k
    return Stat(values), key


def _sort_key(row: dict[str, Any], columns: list[dict[str, Any]]) -> tuple[Any, ...]:
    key: list[Any] = []
    for col in columns:
        m = row["metrics"][col["name"]]["mean"]
        key.append((m is None, 0.0 if m is None else (-m if col["higher_is_better"] else m)))
    return (*key, row["target"], row["attack"], row["init"])


@dataclass
class Published:
    """Cells of the current suite that have a record (others are 'not run' or stale)."""

    plan: list[Cell]
    records: dict[str, dict[str, Any]]
    not_run: list[str]
    stale: list[str]

    def ok(self, cell_ids: Iterable[str] | None = None) -> list[dict[str, Any]]:
        ids = self.records if cell_ids is None else cell_ids
        return [self.records[c] for c in ids if c in self.records and self.records[c]["status"] == STATUS_OK]


def collect(suite: Suite, results: Path) -> Published:
    plan = expand(suite)
    found = load_cells(results)
    records, not_run, stale = {}, [], []
    for cell in plan:
        rec = found.get(cell.cell_id)
        if rec is None:
            not_run.append(cell.cell_id)
        elif rec.get("cell_key") != cell.key(suite, rec.get("spec", {}).get("dtype")):
            stale.append(cell.cell_id)
        else:
            records[cell.cell_id] = rec
    return Published(plan, records, not_run, stale)


def resolve_columns(suite: Suite, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
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


def main_rows(suite: Suite, pub: Published, columns: list[dict[str, Any]], selection: str) -> list[dict[str, Any]]:
    groups: dict[tuple[str, str, str], list[Cell]] = {}
    for cell in pub.plan:
        if "grid" in cell.groups:
            groups.setdefault((cell.target, cell.attack.label, cell.init.label), []).append(cell)
    rows = []
    for (target, attack, init), cells in groups.items():
        recs = pub.ok(c.cell_id for c in cells)
        if not recs:
            continue
        oracle_init = any(r["init"].get("is_oracle") for r in recs)
        row: dict[str, Any] = {
            "target": target,
            "attack": attack,
            "attack_name": cells[0].attack.attack,
            "init": init,
            "init_regime": cells[0].init.regime,
            "init_is_oracle": oracle_init,
            "selection": selection,
            "oracle_selection": selection == "oracle",
            "cells": [r["cell_id"] for r in recs],
            "seeds": [r["seed"] for r in recs],
            "metrics": {},
        }
        for col in columns:
            stat, key = _stat(recs, selection, col["spec"])
            row["metrics"][col["name"]] = {**stat.to_dict(), "key": key}
        rows.append(row)
    return sorted(rows, key=lambda r: _sort_key(r, columns))


def target_rows(pub: Published) -> list[dict[str, Any]]:
    """One row per target used by a finished cell: its recipe and training evidence (from the cell JSONs)."""
    rows: dict[str, dict[str, Any]] = {}
    for rec in pub.ok():
        t = rec["target"]
        if t["name"] in rows:
            rows[t["name"]]["cells"].append(rec["cell_id"])
            continue
        recipe, m = t.get("recipe") or {}, t.get("train_metrics") or {}
        problem, train = recipe.get("problem", {}), recipe.get("train", {})
        rows[t["name"]] = {
            "target": t["name"],
            "recipe_key": t.get("recipe_key"),
            "dataset": problem.get("dataset"),
            "task": problem.get("task"),
            "n_train": t.get("n_train"),
            "n_per_class": problem.get("n_per_class"),
            "num_classes": problem.get("num_classes"),
            "family": recipe.get("family"),
            "widths": (recipe.get("model") or {}).get("widths"),
            "loss": m.get("loss_name"),
            "weight_decay": train.get("weight_decay"),
            "steps": m.get("steps_run"),
            "train_error": m.get("train_error"),
            "test_error": m.get("test_error"),
            "train_loss": m.get("train_loss"),
            "stationarity_ratio": (m.get("certificate") or {}).get("ratio"),
            "train_seconds": m.get("train_seconds"),
            "cells": [rec["cell_id"]],
        }
    return list(rows.values())


def render_targets(rows: list[dict[str, Any]]) -> str:
    def f(v: Any, spec: str) -> str:
        return "n/a" if v is None else format(v, spec)

    body = [
        [
            r["target"],
            r["dataset"],
            r["task"],
            r["n_per_class"],
            f"{r['family']} {'-'.join(str(w) for w in r['widths'] or [])}",
            r["loss"],
            f(r["weight_decay"], "g"),
            r["steps"],
            f(r["train_error"], ".3f"),
            f(r["test_error"], ".3f"),
            f(r["train_loss"], ".2e"),
            f(r["stationarity_ratio"], ".3g"),
            f(r["train_seconds"], ".0f"),
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
        "steps",
        "train err",
        "test err",
        "train loss",
        "stationarity ratio ↓",
        "train s",
    ]
    return tabulate(body, headers=headers, tablefmt="github", disable_numparse=True)


def comparison_rows(suite: Suite, pub: Published, columns: list[dict[str, Any]]) -> dict[str, Any]:
    out = {}
    metric_cols = [c for c in columns if c["source"] == "summary"][:2] or columns[:1]
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
                row: dict[str, Any] = {"attack": attack, "init": init, "selection": sel, "values": []}
                for v in comp.variants:
                    ids = [c.cell_id for c in cells if c.target == v.target and c.attack.label == attack and c.init.label == init]
                    recs = pub.ok(ids)
                    entry: dict[str, Any] = {
                        "axis_value": v.value,
                        "target": v.target,
                        "cells": [r["cell_id"] for r in recs],
                    }
                    for col in metric_cols:
                        stat, key = _stat(recs, sel, col["spec"])
                        entry[col["name"]] = {**stat.to_dict(), "key": key}
                    row["values"].append(entry)
                row["init_is_oracle"] = any(r["init"].get("is_oracle") for e in row["values"] for r in pub.ok(e["cells"]))
                rows.append(row)
        out[comp.name] = {
            "title": comp.title,
            "axis": comp.axis,
            "base": comp.base,
            "axis_values": [v.value for v in comp.variants],
            "metrics": [c["name"] for c in metric_cols],
            "rows": rows,
        }
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


def header_info(suite: Suite, results: Path, pub: Published, command: str) -> dict[str, Any]:
    invs = read_invocations(results)
    used = {r.get("invocation") for r in pub.records.values()} - {None}
    contributing = [i for i in invs if i.get("invocation") in used] or invs
    machines = []
    for i in contributing:
        line = machine.one_line(i["machine"]) if i.get("machine") else "unknown"
        if line not in machines:
            machines.append(line)
    commits = sorted({str(r.get("provenance", {}).get("git_commit")) for r in pub.records.values()})
    return {
        "suite": suite.name,
        "description": suite.description,
        "suite_file": display_path(suite.path),
        "suite_sha256": suite.text_sha256,
        "commands": [
            {
                "invocation": i.get("invocation"),
                "command": i.get("command"),
                "status": i.get("status"),
                "started": i.get("started"),
                "elapsed_seconds": i.get("elapsed_seconds"),
                "git_commit": i.get("git_commit"),
                "reconbench_version": i.get("reconbench_version"),
            }
            for i in contributing
        ],
        "machines": machines,
        "wall_seconds": float(sum(i.get("elapsed_seconds") or 0.0 for i in invs)),
        "invocations": len(invs),
        "cell_seconds": float(sum(r.get("wall_seconds") or 0.0 for r in pub.records.values())),
        "reconbench_versions": sorted({str(r.get("provenance", {}).get("reconbench_version")) for r in pub.records.values()}),
        "git_commits": commits,
        "rendered_by": command,
        "rendered_with": {"reconbench_version": __version__, "git_commit": git_commit()},
        "rendered": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "cells": {
            "planned": len(pub.plan),
            "ok": len(pub.ok()),
            "failed": sum(1 for r in pub.records.values() if r["status"] != STATUS_OK),
            "not_run": len(pub.not_run),
            "stale": len(pub.stale),
        },
    }


# -- rendering ------------------------------------------------------------------------------------------
def _label_init(row: dict[str, Any]) -> str:
    return row["init"] + (f" {ORACLE_INIT_MARK}" if row.get("init_is_oracle") else "")


def _label_attack(row: dict[str, Any]) -> str:
    return row["attack"] if row["attack"] == row.get("attack_name", row["attack"]) else f"{row['attack']} ({row['attack_name']})"


def _arrow(col: dict[str, Any]) -> str:
    return f"{col['name']} {'↑' if col['higher_is_better'] else '↓'}"


def render_main_table(rows: list[dict[str, Any]], columns: list[dict[str, Any]]) -> str:
    headers = ["target", "attack", "init", "seeds"] + [_arrow(c) for c in columns]
    body = []
    for r in rows:
        body.append(
            [r["target"], _label_attack(r), _label_init(r), len(r["cells"])]
            + [fmt_stat(Stat(r["metrics"][c["name"]]["values"]), c["format"]) for c in columns]
        )
    return tabulate(body, headers=headers, tablefmt="github", disable_numparse=True)


def render_comparison(comp: dict[str, Any], columns: list[dict[str, Any]]) -> str:
    parts = []
    for metric in comp["metrics"]:
        col = next(c for c in columns if c["name"] == metric)
        headers = ["attack", "init", "selection"] + [f"{comp['axis']} = {v}" for v in comp["axis_values"]]
        body = []
        for r in comp["rows"]:
            sel = r["selection"] + (f" {ORACLE_SELECTION_MARK}" if r["selection"] == "oracle" else "")
            body.append(
                [r["attack"], _label_init(r), sel] + [fmt_stat(Stat(v[metric]["values"]), col["format"]) for v in r["values"]]
            )
        parts.append(
            f"**{_arrow(col)}** (mean ± sd over seeds)\n\n"
            + tabulate(body, headers=headers, tablefmt="github", disable_numparse=True)
        )
    return "\n\n".join(parts)


def _hours(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.2f} h"


def render_readme(
    suite: Suite,
    info: dict[str, Any],
    tables: dict[str, list[dict[str, Any]]],
    columns: list[dict[str, Any]],
    comparisons: dict[str, Any],
    pub: Published,
    figures: dict[str, Any],
    stored: list[str],
    targets: list[dict[str, Any]] | None = None,
) -> str:
    lines = [f"# Leaderboard: `{suite.name}`", ""]
    if suite.description:
        lines += [suite.description, ""]

    def status(c: dict[str, Any]) -> str:  # a "running" invocation that is not the last one was killed
        last = c is info["commands"][-1]
        return "killed" if c["status"] == "running" and not last else str(c["status"])

    cmds = (
        "; ".join(f"`{c['command']}` ({status(c)}, {_hours(c['elapsed_seconds'] or 0.0)})" for c in info["commands"]) or "unknown"
    )
    lines += [
        f"- **Produced by:** {cmds}",
        f"- **Rendered by:** `{info['rendered_by']}` at {info['rendered']}",
        f"- **Machine:** {'; '.join(info['machines']) or 'unknown'}",
        f"- **Wall time:** {_hours(info['wall_seconds'])} over {info['invocations']} invocation(s) of "
        f"`reconbench bench` (cells alone: {_hours(info['cell_seconds'])})",
        f"- **reconbench:** {', '.join(info['reconbench_versions'])}, git commit "
        f"{', '.join(f'`{c}`' for c in info['git_commits'])}",
        f"- **Suite file:** `{info['suite_file']}` (sha256 `{info['suite_sha256'][:16]}`)",
        f"- **Cells:** {info['cells']['ok']} ok, {info['cells']['failed']} failed, "
        f"{info['cells']['not_run']} not run"
        + (f", {info['cells']['stale']} stale (suite edited since they ran)" if info["cells"]["stale"] else "")
        + f", of {info['cells']['planned']} planned",
        "",
        "Every number below is computed from the cell JSONs in [`cells/`](cells/); `results.json` lists, "
        "for each row, "
        "the cells it aggregates. Values are the mean ± sample standard deviation over seeds (one value: "
        "one seed). "
        f"Rows are sorted by the first column, in its direction (↑ higher is better, ↓ lower is better). "
        f"{ORACLE_INIT_MARK} marks an *oracle* init regime (it reads training images); "
        f"{ORACLE_SELECTION_MARK} marks "
        "oracle selection of the search run. `wall s` is the attack time of the cell (all search runs).",
        "",
    ]
    if stored:
        lines += [
            f"The pooled candidates of {len(stored)} cell(s) are stored in [`candidates/`](candidates/); a "
            f"test "
            "re-scores them with the standard evaluation function and checks the stored numbers.",
            "",
        ]
    if targets:
        lines += [
            "## Targets",
            "",
            "The trained targets behind the tables (from the cells' records of their model cards). The "
            "stationarity ratio is the residual of the KKT stationarity fit at the training images divided "
            "by that at random inputs: far below 1 means the weights sit near a KKT point, which the KKT "
            "attacks rely on.",
            "",
            render_targets(targets),
            "",
        ]
    for sel in SELECTIONS:
        rows = tables[sel]
        lines += [f"## {SELECTION_TITLES[sel]}", ""]
        lines += [render_main_table(rows, columns) if rows else "_no finished cells_", ""]
    for comp in comparisons.values():
        lines += [
            f"## {comp['title']}",
            "",
            f"Target `{comp['base']}` with `{comp['axis']}` varied.",
            "",
            render_comparison(comp, columns),
            "",
        ]
    if figures:
        lines += ["## Figures", ""]
        for f in figures.values():
            if f.get("file"):
                lines += [f"**{f['title']}.** {f['caption']}", "", f"![{f['title']}]({f['file']})", ""]
            else:
                lines += [f"**{f['title']}:** not drawn ({f['reason']}).", ""]
    failed = [r for r in pub.records.values() if r["status"] != STATUS_OK]
    if failed:
        lines += ["## Failed cells", ""]
        body = [[r["cell_id"], r["status"], f"{r['error']['type']}: {_short(r['error']['message'])}"] for r in failed]
        lines += [
            tabulate(body, headers=["cell", "status", "error"], tablefmt="github", disable_numparse=True),
            "",
        ]
    if pub.not_run or pub.stale:
        lines += ["## Cells without a current result", ""]
        if pub.not_run:
            lines += [
                f"Not run ({len(pub.not_run)}): "
                + ", ".join(f"`{c}`" for c in pub.not_run[:40])
                + (" ..." if len(pub.not_run) > 40 else ""),
                "",
            ]
        if pub.stale:
            lines += [
                f"Stale ({len(pub.stale)}, the suite changed since they ran): " + ", ".join(f"`{c}`" for c in pub.stale[:40]),
                "",
            ]
    lines += ["## Columns", ""]
    body = [
        [
            c["name"],
            "higher" if c["higher_is_better"] else "lower",
            c["direction_from"],
            c["key"] or f"(none of: {', '.join(c['keys_tried'])})",
        ]
        for c in columns
    ]
    lines += [
        tabulate(body, headers=["column", "better", "direction from", "source key"], tablefmt="github"),
        "",
    ]
    return "\n".join(lines)


def _short(text: str, n: int = 200) -> str:
    text = " ".join(str(text).split()).replace("|", "\\|")
    return text if len(text) <= n else text[: n - 3] + "..."


#: a sampled cell whose candidates file is larger is skipped for the next one (keeps published folders small)
MAX_SAMPLED_CANDIDATE_BYTES = 1 << 20


def sample_for_candidates(ok_ids: list[str], k: int | None) -> list[str]:
    """All ids (k None), or every id in a deterministic order (the hash of the id) to draw a sample of k from."""
    if k is None:
        return sorted(ok_ids)
    return sorted(ok_ids, key=lambda c: hashlib.sha256(c.encode()).hexdigest())


def build_leaderboard(
    suite: Suite,
    results: Path,
    out: Path,
    *,
    command: str = "",
    data_root: str | None = None,
    figures: bool | None = None,
) -> dict[str, Any]:
    """Render ``out``/README.md, results.json, cells/, targets/, candidates/ and figures/ from ``results``."""
    if not (results / "cells").is_dir():
        raise ReconbenchError(
            f"{results} holds no cell results; run `reconbench bench {suite.name}` first (or pass --results FOLDER)"
        )
    pub = collect(suite, results)
    ok = pub.ok()
    columns = resolve_columns(suite, ok)
    tables = {sel: main_rows(suite, pub, columns, sel) for sel in SELECTIONS}
    comparisons = comparison_rows(suite, pub, columns)
    targets = target_rows(pub)
    info = header_info(suite, results, pub, command)

    out.mkdir(parents=True, exist_ok=True)
    for sub in ("cells", "targets", "candidates", "figures"):
        shutil.rmtree(out / sub, ignore_errors=True)
        (out / sub).mkdir()
    for cid, rec in pub.records.items():
        shutil.copyfile(results / "cells" / f"{cid}.json", out / "cells" / f"{cid}.json")
        key = rec["target"].get("recipe_key")
        src = results / "targets" / f"{key}.json"
        if key and src.exists() and not (out / "targets" / src.name).exists():
            shutil.copyfile(src, out / "targets" / src.name)
    stored: list[str] = []
    k = suite.leaderboard.store_candidates
    for cid in sample_for_candidates([r["cell_id"] for r in ok], k):
        if k is not None and len(stored) >= k:
            break
        src = results / pub.records[cid].get("result_dir", f"work/{cid}") / "candidates.safetensors"
        if src.exists() and (k is None or src.stat().st_size <= MAX_SAMPLED_CANDIDATE_BYTES):
            shutil.copyfile(src, out / "candidates" / f"{cid}.safetensors")
            stored.append(cid)
    stored.sort()

    figure_info: dict[str, Any] = {}
    if suite.leaderboard.figures if figures is None else figures:
        from .figures import draw_all

        figure_info = draw_all(suite, pub, tables, columns, results, out, data_root=data_root)

    plain_columns = [{k: v for k, v in c.items() if k != "spec"} for c in columns]
    data = {
        "format": LEADERBOARD_FORMAT,
        "header": info,
        "columns": plain_columns,
        "targets": targets,
        "tables": tables,
        "comparisons": comparisons,
        "figures": figure_info,
        "stored_candidates": stored,
        "failures": [
            {"cell_id": r["cell_id"], "status": r["status"], "error": r["error"]}
            for r in pub.records.values()
            if r["status"] != STATUS_OK
        ],
        "not_run": pub.not_run,
        "stale": pub.stale,
    }
    write_json(out / "results.json", data)
    (out / "README.md").write_text(render_readme(suite, info, tables, columns, comparisons, pub, figure_info, stored, targets))
    return data
