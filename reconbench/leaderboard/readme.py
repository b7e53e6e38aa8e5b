"""A board's README: its tables as Markdown, the header that says how it was made, and how to read them; rendered
from a board's ``results.json`` and cells (``build_leaderboard`` in ``render.py`` writes both, ``--verify`` renders the
README again to compare)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tabulate import tabulate

from reconbench.bench.runner import STATUS_OK
from reconbench.bench.suite import Suite
from reconbench.leaderboard.board_progress import commit_shares, missing_cells
from reconbench.leaderboard.cost import COST_HEADER, cost_of
from reconbench.leaderboard.plain_text import markdown_paragraph, markdown_plain
from reconbench.leaderboard.precision_ab import ab_lines
from reconbench.leaderboard.privacy import privacy_tables, render_privacy
from reconbench.leaderboard.tables import (
    ORACLE_INIT_MARK,
    ORACLE_SELECTION_MARK,
    SELECTION_TITLES,
    SELECTIONS,
    Published,
    collect,
    fmt_stat,
    regime_gates,
    render_targets,
)
from reconbench.records import (
    BoardHeader,
    BoardResults,
    CellRecord,
    Column,
    Command,
    ComparisonRow,
    ComparisonTable,
    ComparisonValue,
    Figure,
    TableRow,
    TargetRow,
    mapping,
)

#: a target above the suite's stationarity gate; a row whose interval overlaps the best row's
NOT_CONVERGED_MARK, WITHIN_NOISE_MARK = "⚠", "≈"
#: an attack row holding cells of an outside submission (``leaderboard/accept.py``)
OUTSIDE_MARK = "(outside)"


def _label_init(row: TableRow | ComparisonRow) -> str:
    return row.init + (f" {ORACLE_INIT_MARK}" if row.init_is_oracle else "")


def _label_attack(row: TableRow) -> str:
    label = row.attack if row.attack_name in (None, row.attack) else f"{row.attack} ({row.attack_name})"
    return (label + (f" [search: {row.search}]" if row.search else "")
            + (f" {OUTSIDE_MARK}" if row.outside else ""))


def outside_section(header: BoardHeader) -> str | None:
    """The README section listing a board's outside submissions (``leaderboard add``), or None when it has none."""
    subs = header.submissions or []
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
        lines.append(f"| `{markdown_plain(s.id, 80)}` | {markdown_plain(s.contributor or '-')} | {len(s.cells)} | "
                     f"{markdown_plain(', '.join(str(c)[:12] for c in s.git_commits or []), 400)} | "
                     f"{markdown_plain(', '.join(s.reconbench_versions or []), 400)} | "
                     f"{markdown_plain('; '.join(s.machines or []), 1000)} | {markdown_plain(str(s.packed), 80)} |")
    return "\n".join(lines)


def _arrow(col: Column) -> str:
    return f"{col.name} {'↑' if col.higher_is_better else '↓'}"


def _cell(r: TableRow, col: Column) -> str:
    m = r.metric(col.name)
    failed = r.attack_failed
    if failed and not m.n:  # every cell's attack failed: that, never a number
        return str(failed.text)
    text = fmt_stat(m, col.format)
    null = m.null
    if null is not None:
        text += f" (null {format(null.mean, col.format)}, max {format(null.max, col.format)})"
    return text


def _label_target(r: TableRow) -> str:
    return r.target + (f" {NOT_CONVERGED_MARK}" if r.converged is False else "")


def _label_ratio(ratio: float | None) -> str:
    """p / (d n) as the law's axis reads it: 0.25, 4, 0.128."""
    return "" if ratio is None else f"{ratio:.3g}"


def _label_noise(r: TableRow) -> str:
    if r.best:
        return "best"
    return {True: WITHIN_NOISE_MARK, False: "", None: "?"}[r.within_noise_of_best]


def _label_seeds(r: TableRow) -> str:
    """The seeds a row aggregates, and the cells whose attack failed (left out of its numbers)."""
    failed = r.attack_failed
    return str(len(r.cells)) + (f" ({failed.text})" if failed else "")


def render_main_table(rows: list[TableRow], columns: list[Column],
                      records: Mapping[str, CellRecord] | None = None) -> str:
    """A selection's main table; with the cells' ``records``, a last column with each row's cost (``cost.py``)."""
    # the threat-model column only on boards whose rows carry it (some attack reads the initial weights)
    threat = any(r.threat_model for r in rows)
    ratio = threat and any(r.p_over_dn is not None for r in rows)
    headers = ["target", "attack"] + (["threat model"] if threat else []) + (["p / (d n)"] if ratio else []) \
        + ["init", "seeds", "vs best"] + [_arrow(c) for c in columns] + ([COST_HEADER] if records is not None else [])
    body = []
    for r in rows:
        body.append([_label_target(r), _label_attack(r)] + ([r.threat_model or ""] if threat else [])
                    + ([_label_ratio(r.p_over_dn)] if ratio else [])
                    + [_label_init(r), _label_seeds(r), _label_noise(r)] + [_cell(r, c) for c in columns]
                    + ([cost_of(records, r.cells).text()] if records is not None else []))
    return tabulate(body, headers=headers, tablefmt="github", disable_numparse=True)


def _variant_cell(v: ComparisonValue, metric: str, fmt: str) -> str:
    """One point of a comparison: the statistic over the cells whose attack ran, and those whose attack failed."""
    failed = v.attack_failed
    if not failed:
        return fmt_stat(v.stat(metric), fmt)
    return str(failed.text) if not v.stat(metric).n else f"{fmt_stat(v.stat(metric), fmt)} ({failed.text})"


def render_comparison(comp: ComparisonTable, columns: list[Column]) -> str:
    parts = []
    for metric in comp.metrics:
        col = next(c for c in columns if c.name == metric)
        of_target = col.source == "target"   # a number of the trained targets: the same under every selection
        headers = ["attack", "init", *([] if of_target else ["selection"])] + [f"{comp.axis} = {v}"
                                                                             for v in comp.axis_values]
        body = []
        for r in comp.rows or []:
            if of_target and r.selection != "pool":
                continue
            sel = r.selection + (f" {ORACLE_SELECTION_MARK}" if r.selection == "oracle" else "")
            body.append([r.attack, _label_init(r), *([] if of_target else [sel])]
                        + [_variant_cell(v, metric, col.format) for v in r.values or []])
        what = "of the attacked targets, " if of_target else ""
        parts.append(
            f"**{_arrow(col)}** ({what}mean [95% interval] over seeds)\n\n"
            + tabulate(body, headers=headers, tablefmt="github", disable_numparse=True)
        )
    return "\n\n".join(parts)


def _hours(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.2f} h"


def render_readme(suite: Suite, board: BoardResults, pub: Published, sections: list[str] | None = None) -> str:
    """README.md of a board from its ``results.json`` (``board``) and its cells (``pub``); ``sections``: more
    sections before the figures (the privacy-utility tables, the outside submissions)."""
    info, columns = board.header, board.column_list
    lines = [f"# Leaderboard: `{suite.name}`", ""]
    lines += _progress_lines(info)
    if suite.description:
        lines += [markdown_paragraph(suite.description), ""]
    lines += _header_lines(info)
    lines += _reading_lines(suite, board.stored_candidates, int(info.cells["ok"]),
                            outcomes=info.attack_failed is not None)
    lines += _targets_lines(suite, board.targets)
    lines += _table_lines(board, columns, has_grid=any("grid" in c.groups for c in pub.plan),
                          records=pub.records)
    lines += _comparison_lines(board.comparisons or {}, columns)
    lines += ab_lines(pub.records)   # a GPU board's float64 A/B pairs; nothing elsewhere
    for section in sections or []:  # e.g. the privacy-utility tables (reconbench.leaderboard.privacy)
        lines += [section, ""]
    lines += _figure_lines(board.figures or {})
    lines += _problem_cell_lines(pub)
    lines += _attack_failed_lines(info.attack_failed)
    lines += _column_lines(columns)
    return "\n".join(lines)


def _progress_lines(info: BoardHeader) -> list[str]:
    """A partial board's first line: how many of the planned cells it holds, and how it grows (nothing on a complete
    board)."""
    if not info.progress:
        return []
    rest = missing_cells(info)
    grows = ("the board grows as slices return (docs/slices.md)" if info.cell_commits
             else "the other cells have not run")
    return [f"**Partial board: {info.progress}.** {rest} planned cell(s) have no result yet (not run, failed or "
            f"stale: listed at the end): {grows}; every number below is over the cells it holds.", ""]


def _commit_text(info: BoardHeader) -> str:
    """The commits the cells ran at: each with its count of cells and of slice packs where cells came from packs."""
    shares = commit_shares(info)
    if not info.cell_commits:
        return ", ".join(f"`{s.commit}`" for s in shares)
    return "; ".join(f"`{s.commit}` {s.counts()}" for s in shares)


def _header_lines(info: BoardHeader) -> list[str]:
    """How the leaderboard was made: commands, machine, time, versions, cells."""
    commands = info.commands or []

    def status(c: Command) -> str:  # a "running" invocation that is not the last one was killed
        last = c is commands[-1]
        return "killed" if c.status == "running" and not last else str(c.status)

    cmds = "; ".join(f"`{c.command}` ({status(c)}, {_hours(c.elapsed_seconds or 0.0)})" for c in commands) or "unknown"
    return [
        f"- **Produced by:** {cmds}",
        f"- **Rendered by:** `{info.rendered_by}` at {info.rendered}",
        f"- **Machine:** {'; '.join(info.machines) or 'unknown'}",
        f"- **Wall time:** {_hours(info.wall_seconds)} over {info.invocations} invocation(s) of "
        f"`reconbench bench` (cells alone: {_hours(info.cell_seconds)})",
        f"- **reconbench:** {', '.join(info.reconbench_versions)}, "
        + (f"cells ran at commits {_commit_text(info)}" if info.cell_commits else f"git commit {_commit_text(info)}"),
        f"- **Suite file:** `{info.suite_file}` (sha256 `{str(info.suite_sha256)[:16]}`)",
        f"- **Cells:** {info.cells['ok']} ok, {info.cells['failed']} failed, "
        f"{info.cells['not_run']} not run"
        + (f", {info.cells['stale']} stale (suite edited since they ran)" if info.cells["stale"] else "")
        + f", of {info.cells['planned']} planned"
        + _attack_failed_note(info.attack_failed),
        *([f"- **Why the numbers moved since the last publication:** {info.note}"] if info.note else []),
        "",
    ]


def _attack_failed_note(failed: list[Mapping[str, Any]] | None) -> str:
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


def _targets_lines(suite: Suite, targets: list[TargetRow] | None) -> list[str]:
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


def _table_lines(board: BoardResults, columns: list[Column], has_grid: bool = True,
                 records: Mapping[str, CellRecord] | None = None) -> list[str]:
    if not has_grid:
        return ["_This suite has no main grid: all its cells belong to the comparisons and sections below._", ""]
    lines: list[str] = []
    for sel in SELECTIONS:
        rows = board.table(sel)
        lines += [f"## {SELECTION_TITLES[sel]}", ""]
        lines += [render_main_table(rows, columns, records) if rows else "_no finished cells_", ""]
        bars = sorted({b for r in rows for b in r.calibration_bars})
        if bars:   # the threshold each row's `calibrated, own bar` count was taken against (evaluation/bars.py)
            lines += ["Bars: `reconstructed (calibrated)` counts against the threshold for the evaluation's candidate "
                      "count with no selection; `calibrated, own bar` against the threshold calibrated for this "
                      "selection: " + "; ".join(bars) + ".", ""]
    return lines


def _comparison_lines(comparisons: Mapping[str, ComparisonTable], columns: list[Column]) -> list[str]:
    lines: list[str] = []
    for comp in comparisons.values():
        lines += [f"## {markdown_paragraph(comp.title)}", "", f"Target `{comp.base}` with `{comp.axis}` varied.", "",
                  render_comparison(comp, columns), ""]
    return lines


def _figure_lines(figures: Mapping[str, Figure]) -> list[str]:
    if not figures:
        return []
    lines = ["## Figures", ""]
    for f in figures.values():
        if f.file:
            lines += [f"**{f.title}.** {f.caption}", "", f"![{f.title}]({f.file})", ""]
        else:
            lines += [f"**{f.title}:** not drawn ({f.reason}).", ""]
    return lines


def _problem_cell_lines(pub: Published) -> list[str]:
    """Failed cells, and cells without a current result (not run, or stale)."""
    lines: list[str] = []
    failed = [r for r in pub.records.values() if r.status != STATUS_OK]
    if failed:
        body = [[r.cell_id, r.status, f"{mapping(r.error)['type']}: {_short(mapping(r.error)['message'])}"]
                for r in failed]
        lines += ["## Failed cells", "",
                  tabulate(body, headers=["cell", "status", "error"], tablefmt="github", disable_numparse=True), ""]
    if pub.not_run or pub.stale:
        lines += ["## Cells without a current result", ""]
        if pub.not_run:
            lines += _not_run_lines(pub)
        if pub.stale:
            lines += [f"Stale ({len(pub.stale)}, the suite changed since they ran): "
                      + ", ".join(f"`{c}`" for c in pub.stale[:40]), ""]
    return lines


#: up to this many not-run cells are listed one by one; more are grouped by target and attack
NOT_RUN_LISTED = 12


def _not_run_lines(pub: Published) -> list[str]:
    """The planned cells without a record: listed when few, else one line per target and attack with its count and
    its inits and seeds (a paper-size board not yet grown holds dozens)."""
    if len(pub.not_run) <= NOT_RUN_LISTED:
        return [f"Not run ({len(pub.not_run)}): " + ", ".join(f"`{c}`" for c in pub.not_run), ""]
    missing = set(pub.not_run)
    groups: dict[tuple[str, str], list[Any]] = {}
    for cell in pub.plan:
        if cell.cell_id in missing:
            groups.setdefault((cell.target, cell.attack.label), []).append(cell)
    lines = [f"Not run ({len(pub.not_run)} of {len(pub.plan)} planned), by target and attack:", ""]
    for (target, attack), cells in groups.items():
        inits = list(dict.fromkeys(c.init.label for c in cells))
        seeds = list(dict.fromkeys(str(c.seed) for c in cells))
        shown = ", ".join(inits[:6]) + (f" and {len(inits) - 6} more" if len(inits) > 6 else "")
        lines.append(f"- `{target}` / `{attack}`: {len(cells)} cell(s); inits {shown}; seeds {', '.join(seeds)}")
    return lines + [""]


def _attack_failed_lines(failed: list[Mapping[str, Any]] | None) -> list[str]:
    """The cells that ran but whose attack failed, each with its reason (from the header of results.json)."""
    if not failed:
        return []
    body = [[f["cell_id"], str(f["status"]).replace("_", " "), _short(f["reason"])] for f in failed]
    return ["## Failed attacks", "", "Cells that ran but whose attack did not do its work; the tables leave them out "
            "of their numbers.", "",
            tabulate(body, headers=["cell", "outcome", "reason"], tablefmt="github", disable_numparse=True), ""]


def _column_lines(columns: list[Column]) -> list[str]:
    body = [[c.name, "higher" if c.higher_is_better else "lower", c.direction_from,
             c.key or f"(none of: {', '.join(c.keys_tried)})"] for c in columns]
    return ["## Columns", "",
            tabulate(body, headers=["column", "better", "direction from", "source key"], tablefmt="github"), ""]


def _short(text: str, n: int = 200) -> str:
    text = " ".join(str(text).split()).replace("|", "\\|")
    return text if len(text) <= n else text[: n - 3] + "..."


def rerender_readme(suite: Suite, leaderboard: Path, data: dict[str, Any]) -> str:
    """README.md rendered again from results.json (``data``) and the cells of a board (raises KeyError, TypeError,
    ... on a malformed file: the caller names it)."""
    pub = collect(suite, leaderboard)
    # the privacy-utility sections are recomputed from the cells, like the README's other numbers
    sections = [render_privacy(name, table) for name, table in privacy_tables(suite, pub).items()]
    board = BoardResults.from_dict(data)
    if (outside := outside_section(board.header)) is not None:
        sections.append(outside)
    return render_readme(suite, board, pub, sections)
