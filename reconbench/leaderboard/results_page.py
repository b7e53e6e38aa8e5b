"""docs/results.md's table of what the published boards measured, rendered from their results.json (``python -m
reconbench.leaderboard.results_page`` prints it; ``--write`` puts it into docs/results.md between its markers;
tests/published/test_docs_numbers.py compares the page with a fresh rendering).

Per board and attack, the row (target, init) with the largest mean calibrated headline over the pooled candidates
among the non-oracle inits, with its 95% interval over seeds, the largest count its held-out null reached, and the
membership AUC with its null mean, as the board's own README states them; a board that does not yet hold every
planned cell says so after its name ("k of N cells", its README's first line).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

from reconbench.leaderboard.results_file import read_results
from reconbench.records import BoardResults, NullSummary, TableRow

BEGIN = "<!-- board-results: python -m reconbench.leaderboard.results_page --write docs/results.md -->"
END = "<!-- /board-results -->"
HEADLINE, AUC = "reconstructed (calibrated)", "membership AUC"


def _num(v: object, spec: str) -> str:
    return "n/a" if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) else format(v, spec)


def _best_rows(rows: list[TableRow]) -> list[TableRow]:
    """Per attack (in the board's order), its non-oracle row with the largest mean calibrated headline (the first
    of equal ones)."""
    by_attack: dict[str, list[TableRow]] = {}
    for r in rows:
        if not r.init_is_oracle and isinstance(r.metric(HEADLINE).mean, (int, float)):
            by_attack.setdefault(r.attack, []).append(r)
    return [max(group, key=lambda r: float(r.metric(HEADLINE).mean or 0.0)) for group in by_attack.values()]


def board_results_table(leaderboards: Path) -> str:
    """The table (between its markers) for every published board with grid rows."""
    lines = [BEGIN, "| board | attack | best target, init | calibrated headline, mean [95% interval] | null max | "
             "membership AUC (null mean) | seeds |", "|---|---|---|---|---|---|---|"]
    for results in sorted(leaderboards.glob("*/results.json")):
        board = results.parent.name
        data = BoardResults.from_dict(read_results(results.parent), results)
        partial = f" (partial: {data.header.progress})" if data.header.progress else ""
        for r in _best_rows(data.table("pool")):
            head, auc = r.metric(HEADLINE), r.metric(AUC)
            null, auc_null = head.null or NullSummary(), auc.null or NullSummary()
            lo, hi = (None, None) if head.ci95 is None else head.ci95
            lines.append(f"| [{board}](../leaderboards/{board}/){partial} | `{r.attack}` | {r.target}, {r.init} | "
                         f"{_num(head.mean, '.3g')} [{_num(lo, '.3g')}, {_num(hi, '.3g')}] of "
                         f"{_num((head.value_range or [None, None])[1], '.0f')} | {_num(null.max, '.0f')} | "
                         f"{_num(auc.mean, '.2f')} ({_num(auc_null.mean, '.2f')}) | {len(r.seeds)} |")
    return "\n".join([*lines, END])


def write_into(page: Path, table: str) -> bool:
    """Replace the block between the markers of ``page``; whether it changed."""
    text = page.read_text()
    start, stop = text.index(BEGIN), text.index(END) + len(END)
    new = text[:start] + table + text[stop:]
    if new != text:
        page.write_text(new)
    return new != text


if __name__ == "__main__":
    root = Path(__file__).resolve().parents[2]
    rendered = board_results_table(root / "leaderboards")
    if len(sys.argv) > 2 and sys.argv[1] == "--write":
        print(f"{sys.argv[2]}: {'rewritten' if write_into(Path(sys.argv[2]), rendered) else 'up to date'}")
    else:
        print(rendered)
