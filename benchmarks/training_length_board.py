"""The training-length board read along its axis: per series (task and width) and number of training steps, the θ
regime residual, the least margin and the attack's calibrated count with its held-out null and the membership AUC
with its null, each the mean over seeds with its 95% interval, as the board's results.json holds them (computed by
reconbench.leaderboard from the cells; nothing is recomputed here).

    python benchmarks/training_length_board.py                       # the markdown table of the published board
    python benchmarks/training_length_board.py --figure docs/img/training-length.png
    python benchmarks/training_length_board.py --write-docs docs/regime.md   # fill the table block in the docs

--board names another rendered board folder (e.g. runs/leaderboards/training-length). The block in docs/regime.md
sits between the markers in DOC_BEGIN / DOC_END; tests/published/test_training_length_docs.py compares it with this script's
table once the board is published.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reconbench.docs_block import replace_block
from reconbench.leaderboard.results_file import read_results

REPO = Path(__file__).resolve().parents[1]
BOARD = REPO / "leaderboards" / "training-length"
DOC_BEGIN = "<!-- training-length-table: python benchmarks/training_length_board.py --write-docs docs/regime.md -->"
DOC_END = "<!-- /training-length-table -->"
PLACEHOLDER = "_The board is not published yet: the table appears here once `leaderboards/training-length` exists._"

RESIDUAL, MARGIN, MARGIN_SET = "θ residual (NNLS)", "least training margin", "margin set size"
CALIBRATED, AUC = "reconstructed (calibrated)", "membership AUC"


@dataclass(frozen=True)
class Point:
    """One row of the board's pooled table: a target (one task, width and length) over its seeds."""

    series: str
    steps: int
    seeds: int
    metrics: dict[str, Any]

    def stat(self, name: str, fmt: str) -> str:
        m = self.metrics.get(name) or {}
        if m.get("mean") is None:
            return "n/a"
        text = format(m["mean"], fmt)
        if m.get("ci95"):
            text += f" [{format(m['ci95'][0], fmt)}, {format(m['ci95'][1], fmt)}]"
        null = m.get("null")
        if null:
            text += f" (null {format(null['mean'], fmt)}, max {format(null['max'], fmt)})"
        return text


def points(board: Path) -> list[Point]:
    """The pooled rows of the board, with the series (``binary-w100``) and the length read from its comparisons."""
    raw = json.loads((board / "results.json").read_text())
    # a published (compact) board stores the values only: read it in the full form; a hand-made table as it is
    data = read_results(board) if "format" in raw else raw
    length: dict[str, tuple[str, int]] = {}
    for comp in (data.get("comparisons") or {}).values():
        for row in comp["rows"]:
            for v in row["values"]:
                length[v["target"]] = (comp["base"].rsplit("-", 1)[0], int(v["axis_value"]))
    out = []
    for row in data["tables"]["pool"]:
        name = row["target"].split(" ")[0]   # a flagged target carries " ⚠" after its name
        if name in length:
            series, steps = length[name]
            out.append(Point(series, steps, len(row["seeds"]), row["metrics"]))
    return sorted(out, key=lambda p: (p.series, p.steps))


def table(board: Path) -> str:
    rows = ["| series | steps | seeds | θ residual (NNLS) | on the margin | least margin | calibrated count (held-out "
            "null) | membership AUC (null) |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for p in points(board):
        rows.append(f"| {p.series} | {p.steps:,} | {p.seeds} | {p.stat(RESIDUAL, '.3f')} | {p.stat(MARGIN_SET, '.1f')} "
                    f"| {p.stat(MARGIN, '.3g')} | {p.stat(CALIBRATED, '.1f')} | {p.stat(AUC, '.2f')} |")
    return "\n".join(rows)


def figure(board: Path, out: Path) -> None:
    """θ residual and calibrated count against the number of steps (log scale), one line per series, with the
    95% intervals over seeds as bars and the held-out null's mean as a dotted line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pts = points(board)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for series in sorted({p.series for p in pts}):
        mine = [p for p in pts if p.series == series]
        for ax, name in zip(axes, (RESIDUAL, CALIBRATED), strict=True):
            ms = [p.metrics.get(name) or {} for p in mine]
            xs = [p.steps for p, m in zip(mine, ms, strict=True) if m.get("mean") is not None]
            ys = [m["mean"] for m in ms if m.get("mean") is not None]
            err = [[y - (m.get("ci95") or [y, y])[0] for y, m in zip(ys, ms, strict=False)],
                   [(m.get("ci95") or [y, y])[1] - y for y, m in zip(ys, ms, strict=False)]]
            line = ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, label=series)
            nulls = [(p.steps, m["null"]["mean"]) for p, m in zip(mine, ms, strict=True) if m.get("null")]
            if nulls:
                ax.plot(*zip(*nulls, strict=True), ":", color=line[0].get_color())
    axes[0].set(xscale="log", xlabel="training steps", ylabel="θ residual (NNLS), 0 = KKT point", ylim=(0, 1.02))
    axes[1].set(xscale="log", xlabel="training steps", ylabel="images reconstructed (calibrated headline)")
    axes[1].legend(fontsize=8, title="dotted: held-out null", title_fontsize=8)
    fig.suptitle("training-length board: mean over seeds, 95% interval")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)


def doc_block(board: Path) -> str:
    """What sits between the markers of docs/regime.md: the table, or the placeholder before publication."""
    body = table(board) if (board / "results.json").exists() else PLACEHOLDER
    return f"{DOC_BEGIN}\n{body}\n{DOC_END}"


def write_docs(doc: Path, board: Path) -> None:
    replace_block(doc, DOC_BEGIN, DOC_END, doc_block(board))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--board", type=Path, default=BOARD, help="a rendered board folder (default: the published one)")
    ap.add_argument("--figure", type=Path, help="write the figure here (PNG)")
    ap.add_argument("--write-docs", type=Path, help="fill the table block of this markdown file")
    args = ap.parse_args()
    if not (args.board / "results.json").exists():
        raise SystemExit(f"{args.board} holds no results.json; render the board first (reconbench leaderboard "
                         "training-length), or name it with --board")
    if args.figure:
        figure(args.board, args.figure)
    if args.write_docs:
        write_docs(args.write_docs, args.board)
    if not (args.figure or args.write_docs):
        print(table(args.board))


if __name__ == "__main__":
    main()
