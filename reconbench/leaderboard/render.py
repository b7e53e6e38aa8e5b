"""The leaderboard's README: its tables as Markdown, the header that says how it was made, and the whole build
(collect the cells, render, draw the figures, sample candidates for the re-scoring test)."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

from tabulate import tabulate

from reconbench.bench.runner import STATUS_OK
from reconbench.bench.suite import Suite
from reconbench.errors import ReconbenchError
from reconbench.leaderboard import outside
from reconbench.leaderboard.board_cards import write_board_card
from reconbench.leaderboard.figures import draw_all
from reconbench.leaderboard.privacy import privacy_section
from reconbench.leaderboard.results_file import write_results
from reconbench.leaderboard.slim import compact_figures, sample_size, store_sample, write_entry
from reconbench.leaderboard.tables import (
    LEADERBOARD_FORMAT,
    ORACLE_INIT_MARK,
    ORACLE_SELECTION_MARK,
    SELECTION_TITLES,
    SELECTIONS,
    Published,
    collect,
    comparison_rows,
    fmt_stat,
    header_info,
    main_rows,
    regime_gates,
    render_targets,
    resolve_columns,
    target_rows,
)
from reconbench.provenance import git_commit, write_json

#: a target above the suite's stationarity gate; a row whose interval overlaps the best row's
NOT_CONVERGED_MARK, WITHIN_NOISE_MARK = "⚠", "≈"
#: an attack row holding cells of an outside submission (``leaderboard/accept.py``)
OUTSIDE_MARK = "(outside)"


def _label_init(row: dict[str, Any]) -> str:
    return row["init"] + (f" {ORACLE_INIT_MARK}" if row.get("init_is_oracle") else "")


def _label_attack(row: dict[str, Any]) -> str:
    label = row["attack"] if row["attack"] == row.get("attack_name", row["attack"]) else f"{row['attack']} ({row['attack_name']})"
    return (label + (f" [search: {row['search']}]" if row.get("search") else "")
            + (f" {OUTSIDE_MARK}" if row.get("outside") else ""))


def outside_section(header: dict[str, Any]) -> str | None:
    """The README section listing a board's outside submissions (``leaderboard add``), or None when it has none."""
    subs = header.get("submissions") or []
    if not subs:
        return None
    lines = ["## Outside submissions", "",
             f"Rows marked {OUTSIDE_MARK} hold cells submitted from outside (`reconbench leaderboard add`, "
             "docs/leaderboard-entries.md): run elsewhere with the board's suite file and the submission's tables "
             "appended (`submissions/<id>.toml`), from a clean commit; their candidates were re-scored with the "
             "standard evaluation to the submitted numbers before they were merged.", "",
             "| submission | contributor | cells | commit | reconbench | machine | packed |",
             "|---|---|---|---|---|---|---|"]
    for s in subs:
        lines.append(f"| `{s['id']}` | {s.get('contributor') or '-'} | {len(s['cells'])} | "
                     f"{', '.join(str(c)[:12] for c in s.get('git_commits') or [])} | "
                     f"{', '.join(s.get('reconbench_versions') or [])} | {'; '.join(s.get('machines') or [])} | "
                     f"{s.get('packed')} |")
    return "\n".join(lines)


def _arrow(col: dict[str, Any]) -> str:
    return f"{col['name']} {'↑' if col['higher_is_better'] else '↓'}"


def _cell(r: dict[str, Any], col: dict[str, Any]) -> str:
    m = r["metrics"][col["name"]]
    failed = r.get("attack_failed")
    if failed and not m.get("n"):  # every cell's attack failed: that, never a number
        return str(failed["text"])
    text = fmt_stat(m, col["format"])
    null = m.get("null")
    if null is not None:
        text += f" (null {format(null['mean'], col['format'])}, max {format(null['max'], col['format'])})"
    return text


def _label_target(r: dict[str, Any]) -> str:
    return r["target"] + (f" {NOT_CONVERGED_MARK}" if r.get("converged") is False else "")


def _label_noise(r: dict[str, Any]) -> str:
    if r.get("best"):
        return "best"
    return {True: WITHIN_NOISE_MARK, False: "", None: "?"}[r.get("within_noise_of_best")]


def _label_seeds(r: dict[str, Any]) -> str:
    """The seeds a row aggregates, and the cells whose attack failed (left out of its numbers)."""
    failed = r.get("attack_failed")
    return str(len(r["cells"])) + (f" ({failed['text']})" if failed else "")


def render_main_table(rows: list[dict[str, Any]], columns: list[dict[str, Any]]) -> str:
    headers = ["target", "attack", "init", "seeds", "vs best"] + [_arrow(c) for c in columns]
    body = []
    for r in rows:
        body.append([_label_target(r), _label_attack(r), _label_init(r), _label_seeds(r), _label_noise(r)]
                    + [_cell(r, c) for c in columns])
    return tabulate(body, headers=headers, tablefmt="github", disable_numparse=True)


def _variant_cell(v: dict[str, Any], metric: str, fmt: str) -> str:
    """One point of a comparison: the statistic over the cells whose attack ran, and those whose attack failed."""
    failed = v.get("attack_failed")
    if not failed:
        return fmt_stat(v[metric], fmt)
    return str(failed["text"]) if not v[metric]["n"] else f"{fmt_stat(v[metric], fmt)} ({failed['text']})"


def render_comparison(comp: dict[str, Any], columns: list[dict[str, Any]]) -> str:
    parts = []
    for metric in comp["metrics"]:
        col = next(c for c in columns if c["name"] == metric)
        headers = ["attack", "init", "selection"] + [f"{comp['axis']} = {v}" for v in comp["axis_values"]]
        body = []
        for r in comp["rows"]:
            sel = r["selection"] + (f" {ORACLE_SELECTION_MARK}" if r["selection"] == "oracle" else "")
            body.append([r["attack"], _label_init(r), sel] + [_variant_cell(v, metric, col["format"])
                                                               for v in r["values"]])
        parts.append(
            f"**{_arrow(col)}** (mean [95% interval] over seeds)\n\n"
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
    sections: list[str] | None = None,
) -> str:
    lines = [f"# Leaderboard: `{suite.name}`", ""]
    if suite.description:
        lines += [suite.description, ""]
    lines += _header_lines(info)
    lines += _reading_lines(suite, stored, int(info["cells"]["ok"]), outcomes="attack_failed" in info)
    lines += _targets_lines(suite, targets)
    lines += _table_lines(tables, columns, has_grid=any("grid" in c.groups for c in pub.plan))
    lines += _comparison_lines(comparisons, columns)
    for section in sections or []:  # e.g. the privacy-utility tables (reconbench.leaderboard.privacy)
        lines += [section, ""]
    lines += _figure_lines(figures)
    lines += _problem_cell_lines(pub)
    lines += _attack_failed_lines(info.get("attack_failed"))
    lines += _column_lines(columns)
    return "\n".join(lines)


def _header_lines(info: dict[str, Any]) -> list[str]:
    """How the leaderboard was made: commands, machine, time, versions, cells."""

    def status(c: dict[str, Any]) -> str:  # a "running" invocation that is not the last one was killed
        last = c is info["commands"][-1]
        return "killed" if c["status"] == "running" and not last else str(c["status"])

    cmds = (
        "; ".join(f"`{c['command']}` ({status(c)}, {_hours(c['elapsed_seconds'] or 0.0)})" for c in info["commands"])
        or "unknown"
    )
    return [
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
        + f", of {info['cells']['planned']} planned"
        + _attack_failed_note(info.get("attack_failed")),
        *([f"- **Why the numbers moved since the last publication:** {info['note']}"] if info.get("note") else []),
        "",
    ]


def _attack_failed_note(failed: list[dict[str, Any]] | None) -> str:
    """Of the cells that ran, those whose attack failed (see "Failed attacks" below)."""
    if not failed:
        return ""
    counts = Counter(str(f["status"]).replace("_", " ") for f in failed)
    return (f"; the attack failed in {len(failed)} of the ok cells (" + ", ".join(f"{s} {c}" for s, c in
                                                                           sorted(counts.items())) + ")")


def _headline_lines(cells: int) -> list[str]:
    """The headline and what its 5% per evaluation means over this board's ``cells``; the failed-attack outcome."""
    return [
        "**Headline.** `reconstructed (calibrated)` counts training images whose reconstruction correlates with "
        "them better than random held-out images (never trained on) did in any of 19 calibration draws with the "
        "same candidate count and labels; a draw of such images passes it (counts at least one image) with "
        "probability at most 5% per evaluation (docs/calibration.md). That is a rate, not an impossibility: over "
        f"the {cells} cells of this board, up to about {0.05 * cells:.1f} (0.05 x cells, per selection) may count "
        "an image by chance alone where the attack recovers nothing, so read a count of 1 against its null. "
        "`papers' protocol` is the papers' count (SSIM > 0.4), which random images often "
        "pass. **(null x, max y)** after a number is the held-out null of that column: the mean over null draws "
        "(5 per cell) and the largest any draw reached. `weight_rows` and `init_only` are baselines, not attacks: "
        "first-layer weight rows as images, and the starting candidates unchanged.",
        "",
        "**Failed attacks.** A cell whose attack did not do its work (every search run diverged to a non-finite "
        "loss, returned non-finite candidates, or stopped before half of its planned steps; "
        "`reconbench/attack/outcome.py`) is not a result: it is left out of every mean and interval, and the "
        "tables say so, e.g. `diverged 2/2` (2 of the row's 2 cells that ran) in place of the numbers, or beside "
        "`seeds` when only some cells failed. It says the attack failed, not that the target resisted it.",
        "",
    ]


#: the same paragraph as boards rendered before attack outcomes were recorded print it (their results.json header
#: has no ``attack_failed``): kept so that ``--verify`` still reproduces those READMEs until they are re-published
_PUBLISHED_HEADLINE = [
    "**Headline.** `reconstructed (calibrated)` counts training images whose reconstruction correlates with "
    "them better than random held-out images (never trained on) did in any of 19 calibration draws with the "
    "same candidate count and labels; a draw of such images passes it with probability at most 5% "
    "(docs/calibration.md). `papers' protocol` is the papers' count (SSIM > 0.4), which random images often "
    "pass. **(null x, max y)** after a number is the held-out null of that column: the mean over null draws "
    "(5 per cell) and the largest any draw reached. `weight_rows` and `init_only` are baselines, not attacks: "
    "first-layer weight rows as images, and the starting candidates unchanged.",
    "",
]


def _reading_lines(suite: Suite, stored: list[str], cells: int, outcomes: bool) -> list[str]:
    """How to read the tables: sources, intervals, nulls, failed attacks, marks (``cells``: the cells that ran;
    ``outcomes``: the board records attack outcomes)."""
    gates = regime_gates(suite)
    lines = [
        "Every number below is computed from the cell JSONs in [`cells/`](cells/); `results.json` lists, for each "
        "row, the cells it aggregates. Values are the mean over seeds with its 95% interval in brackets (Student "
        "t, clipped to the values the metric can take, e.g. 0..n for counts; one seed: the value alone). "
        "Rows are sorted by the first column, in its direction (↑ higher is "
        "better, ↓ lower is better).",
        "",
        *(_headline_lines(cells) if outcomes else _PUBLISHED_HEADLINE),
        f"`vs best`: `best` is the best row of its target in the first column; {WITHIN_NOISE_MARK} marks a row "
        "whose interval overlaps the best row's (the difference is within noise over seeds); `?` means one seed "
        "(no interval, undecided). "
        f"{ORACLE_INIT_MARK} marks an *oracle* init regime (it reads training images); "
        f"{ORACLE_SELECTION_MARK} marks oracle selection of the search run. `wall s` is the attack time of the "
        "cell (all search runs).",
        "",
    ]
    if gates:
        lines += [f"{NOT_CONVERGED_MARK} after a target: " + _gates_text(gates) + ": the KKT attacks' premise does "
                  "not hold there (see the targets table and [docs/regime.md](../../docs/regime.md)).", ""]
    if stored:
        lines += [
            f"The pooled candidates of {len(stored)} cell(s) are stored in [`candidates/`](candidates/); a test "
            "re-scores them with the standard evaluation function and checks the stored numbers.",
            "",
        ]
    return lines


def _gates_text(gates: dict[str, float]) -> str:
    """What a ⚠ on a target means under the suite's gates."""
    parts = {"stationarity": "its stationarity ratio (θ) is above {:g}",
             "learned": "its learned-part ratio (θ − d·θ0) is above {:g}"}
    return " or ".join(parts[k].format(v) for k, v in gates.items())


def _targets_lines(suite: Suite, targets: list[dict[str, Any]] | None) -> list[str]:
    if not targets:
        return []
    gates = regime_gates(suite)
    return [
        "## Targets",
        "",
        "The trained targets behind the tables (from the cells' records of their model cards). The stationarity "
        "ratio is the residual of the KKT stationarity fit at the training images divided by that at random "
        "inputs: far below 1 means the weights sit near a KKT point, which the KKT attacks rely on. The learned-part "
        "ratio is the same fit for what training added to the initial weights, θ − d·θ0 (the regime gate of "
        "[docs/regime.md](../../docs/regime.md))"
        + (f"; the suite's gates: {_gates_text(gates).replace('its ', '')} is flagged "
           f"({NOT_CONVERGED_MARK}; ✓ within)." if gates else "."),
        "",
        render_targets(targets),
        "",
    ]


def _table_lines(tables: dict[str, list[dict[str, Any]]], columns: list[dict[str, Any]], has_grid: bool = True) -> list[str]:
    if not has_grid:
        return ["_This suite has no main grid: all its cells belong to the comparisons and sections below._", ""]
    lines: list[str] = []
    for sel in SELECTIONS:
        rows = tables[sel]
        lines += [f"## {SELECTION_TITLES[sel]}", ""]
        lines += [render_main_table(rows, columns) if rows else "_no finished cells_", ""]
        bars = sorted({b for r in rows for b in r.get("calibration_bars", [])})
        if bars:   # the threshold each row's `calibrated, own bar` count was taken against (evaluation/bars.py)
            lines += ["Bars: `reconstructed (calibrated)` counts against the threshold for the evaluation's candidate "
                      "count with no selection; `calibrated, own bar` against the threshold calibrated for this "
                      "selection: " + "; ".join(bars) + ".", ""]
    return lines


def _comparison_lines(comparisons: dict[str, Any], columns: list[dict[str, Any]]) -> list[str]:
    lines: list[str] = []
    for comp in comparisons.values():
        lines += [f"## {comp['title']}", "", f"Target `{comp['base']}` with `{comp['axis']}` varied.", "",
                  render_comparison(comp, columns), ""]
    return lines


def _figure_lines(figures: dict[str, Any]) -> list[str]:
    if not figures:
        return []
    lines = ["## Figures", ""]
    for f in figures.values():
        if f.get("file"):
            lines += [f"**{f['title']}.** {f['caption']}", "", f"![{f['title']}]({f['file']})", ""]
        else:
            lines += [f"**{f['title']}:** not drawn ({f['reason']}).", ""]
    return lines


def _problem_cell_lines(pub: Published) -> list[str]:
    """Failed cells, and cells without a current result (not run, or stale)."""
    lines: list[str] = []
    failed = [r for r in pub.records.values() if r["status"] != STATUS_OK]
    if failed:
        body = [[r["cell_id"], r["status"], f"{r['error']['type']}: {_short(r['error']['message'])}"] for r in failed]
        lines += ["## Failed cells", "",
                  tabulate(body, headers=["cell", "status", "error"], tablefmt="github", disable_numparse=True), ""]
    if pub.not_run or pub.stale:
        lines += ["## Cells without a current result", ""]
        if pub.not_run:
            lines += [f"Not run ({len(pub.not_run)}): " + ", ".join(f"`{c}`" for c in pub.not_run[:40])
                      + (" ..." if len(pub.not_run) > 40 else ""), ""]
        if pub.stale:
            lines += [f"Stale ({len(pub.stale)}, the suite changed since they ran): "
                      + ", ".join(f"`{c}`" for c in pub.stale[:40]), ""]
    return lines


def _attack_failed_lines(failed: list[dict[str, Any]] | None) -> list[str]:
    """The cells that ran but whose attack failed, each with its reason (from the header of results.json)."""
    if not failed:
        return []
    body = [[f["cell_id"], str(f["status"]).replace("_", " "), _short(f["reason"])] for f in failed]
    return ["## Failed attacks", "", "Cells that ran but whose attack did not do its work; the tables leave them out "
            "of their numbers.", "",
            tabulate(body, headers=["cell", "outcome", "reason"], tablefmt="github", disable_numparse=True), ""]


def _column_lines(columns: list[dict[str, Any]]) -> list[str]:
    body = [[c["name"], "higher" if c["higher_is_better"] else "lower", c["direction_from"],
             c["key"] or f"(none of: {', '.join(c['keys_tried'])})"] for c in columns]
    return ["## Columns", "",
            tabulate(body, headers=["column", "better", "direction from", "source key"], tablefmt="github"), ""]


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


def check_publishable(pub: Published, tree_commit: str | None) -> None:
    """A published leaderboard comes from one clean commit: its cells ran there and it is rendered there."""
    commits = sorted({str((r.get("provenance") or {}).get("git_commit")) for r in pub.records.values()})
    problems = []
    if tree_commit is None or tree_commit.endswith("-dirty"):
        problems.append(f"this checkout is {'not a git checkout' if tree_commit is None else 'dirty'}")
    dirty = [c for c in commits if c.endswith("-dirty") or c == "None"]
    if dirty:
        problems.append(f"cells ran from a dirty or unknown tree ({', '.join(dirty)})")
    if len(commits) > 1:
        problems.append(f"cells ran at {len(commits)} commits ({', '.join(c[:12] for c in commits)})")
    elif commits and tree_commit and commits[0] != tree_commit:
        problems.append(f"cells ran at {commits[0][:12]}, this checkout is {tree_commit[:12]}")
    if problems:
        raise ReconbenchError("refusing to publish: " + "; ".join(problems) + ". Commit, re-run `reconbench bench "
                              "SUITE` from the clean checkout (--resume keeps nothing from another commit only if "
                              "you remove its results), then publish from the same commit")


def build_leaderboard(
    suite: Suite,
    results: Path,
    out: Path,
    *,
    command: str = "",
    data_root: str | None = None,
    figures: bool | None = None,
    publish: bool = False,
    note: str | None = None,
) -> dict[str, Any]:
    """Render ``out``/README.md, results.json, cells/, targets/, candidates/ and figures/ from ``results``; the outside
    submissions ``out`` took in are kept when they still fit (``leaderboard/outside.py``; the returned results name
    those dropped in ``dropped_submissions``, one line each).

    ``note``: why the numbers moved since the board's last publication (kept in the header and shown in the README).

    ``publish``: refuse unless every cell ran at the current commit of a clean checkout (``check_publishable``).
    """
    if not (results / "cells").is_dir():
        raise ReconbenchError(
            f"{results} holds no cell results; run `reconbench bench {suite.name}` first (or pass --results FOLDER)"
        )
    pub = collect(suite, results)
    if publish:
        check_publishable(pub, git_commit())
    ok = pub.ok()
    columns = resolve_columns(suite, ok)
    tables = {sel: main_rows(suite, pub, columns, sel) for sel in SELECTIONS}
    comparisons = comparison_rows(suite, pub, columns)
    targets = target_rows(pub, suite.max_stationarity_ratio, suite.max_learned_ratio)
    info = header_info(suite, results, pub, command)
    if note:
        info["note"] = " ".join(note.split())

    out.mkdir(parents=True, exist_ok=True)
    kept_outside = outside.snapshot(out)   # outside submissions the board took in: put back below when they fit
    for sub in ("cells", "targets", "candidates", "figures", "protocols"):
        shutil.rmtree(out / sub, ignore_errors=True)
        (out / sub).mkdir()
    for cid, rec in pub.records.items():
        key = rec["target"].get("recipe_key")
        src = results / "targets" / f"{key}.json"
        if key and src.exists() and not (out / "targets" / src.name).exists():
            if publish:  # a published board keeps compact model cards (leaderboard/board_cards.py)
                write_board_card(out / "targets" / src.name, json.loads(src.read_text()))
            else:
                shutil.copyfile(src, out / "targets" / src.name)
        if publish:  # a published board keeps slim entries (bench/entries.py)
            write_entry(out / "cells" / f"{cid}.json", json.loads((results / "cells" / f"{cid}.json").read_text()),
                        suite, out)
        else:
            shutil.copyfile(results / "cells" / f"{cid}.json", out / "cells" / f"{cid}.json")
    stored: list[str] = []
    k = suite.leaderboard.store_candidates
    if publish:  # the re-scoring sample, in the attack's precision (leaderboard/slim.py)
        files = {r["cell_id"]: src for r in ok
                 if (src := results / r.get("result_dir", f"work/{r['cell_id']}") / "candidates.safetensors").exists()}
        stored = store_sample(files, pub.records, out / "candidates", sample_size(suite), suite.leaderboard.sample_cells)
    for cid in [] if publish else sample_for_candidates([r["cell_id"] for r in ok], k):
        if k is not None and len(stored) >= k:
            break
        src = results / pub.records[cid].get("result_dir", f"work/{cid}") / "candidates.safetensors"
        if src.exists() and (k is None or src.stat().st_size <= MAX_SAMPLED_CANDIDATE_BYTES):
            shutil.copyfile(src, out / "candidates" / f"{cid}.safetensors")
            stored.append(cid)
    stored.sort()

    figure_info: dict[str, Any] = {}
    if suite.leaderboard.figures if figures is None else figures:

        figure_info = draw_all(suite, pub, tables, columns, results, out, data_root=data_root)

    privacy, sections = privacy_section(suite, pub, out, suite.leaderboard.figures if figures is None else figures)
    if publish:
        compact_figures(out)
    plain_columns = [{k: v for k, v in c.items() if k != "spec"} for c in columns]
    data = {
        "format": LEADERBOARD_FORMAT,
        "header": info,
        "columns": plain_columns,
        "targets": targets,
        "tables": tables,
        "comparisons": comparisons,
        "privacy": privacy,
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
    if publish:  # compact: a published board is read by tools, and kept small (docs/leaderboard-entries.md)
        write_results(out, data)
    else:
        write_json(out / "results.json", data)
    (out / "README.md").write_text(render_readme(suite, info, tables, columns, comparisons, pub, figure_info, stored, targets,
                                                    sections))
    merged, dropped = outside.restore(kept_outside, suite, out)
    return {**(merged or data), "dropped_submissions": dropped}
