"""The numbers docs/defenses.md states about the privacy-utility board, read from the published board's results.json
(computed by reconbench.leaderboard from the cells; nothing is recomputed here): the undefended targets' test
accuracy over the seeds' models, the data prior's calibrated count with its null, and the board's own privacy table.

    python benchmarks/defenses_board.py                                  # print the block
    python benchmarks/defenses_board.py --write-docs docs/defenses.md    # fill the block in the docs

--board names another rendered board folder (e.g. runs/leaderboards/defenses-cpu). The block in docs/defenses.md
sits between DOC_BEGIN and DOC_END; tests/published/test_defenses_docs.py compares it with this script's output, so the docs
change with the board: re-run the second command after publishing the board.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from reconbench.docs_block import replace_block
from reconbench.leaderboard.privacy import render_privacy
from reconbench.leaderboard.results_file import read_results
from reconbench.records.board_results import BoardResults

REPO = Path(__file__).resolve().parents[1]
BOARD = REPO / "leaderboards" / "defenses-cpu"
#: the privacy axis of the suite the docs describe (a board of another suite version has another axis)
AXIS = "mnist"
DOC_BEGIN = "<!-- defenses-board: python benchmarks/defenses_board.py --write-docs docs/defenses.md -->"
DOC_END = "<!-- /defenses-board -->"
PLACEHOLDER = ("_Not published yet: the numbers appear here once `leaderboards/defenses-cpu` carries the MNIST "
               "privacy axis (`[privacy.mnist]` of the suite)._")
CALIBRATED = "reconstructed (calibrated)"


def stat(m: dict[str, Any] | None, fmt: str) -> str:
    """A metric as the board states it: mean [95% interval] (null mean, max); n/a without a value."""
    if not m or m.get("mean") is None:
        return "n/a"
    text = format(m["mean"], fmt)
    if m.get("ci95"):
        text += f" [{format(m['ci95'][0], fmt)}, {format(m['ci95'][1], fmt)}]"
    if m.get("null"):
        text += f" (held-out null {format(m['null']['mean'], fmt)}, max {format(m['null']['max'], fmt)})"
    return text


def undefended_accuracy(data: dict[str, Any], base: str) -> str:
    """The undefended target's test accuracy over its models (one per seed), from the board's targets table."""
    accs = [1.0 - float(t["test_error"]) for t in data.get("targets") or []
            if t["target"].split(" ")[0] == base and t.get("test_error") is not None and not t.get("defense")]
    if not accs:
        return f"The board records no test accuracy of `{base}`."
    return (f"Utility: the undefended target's test accuracy is {min(accs):.3f}-{max(accs):.3f} over its "
            f"{len(accs)} trained models (one per seed; mean {sum(accs) / len(accs):.3f}, chance 0.5); each row's "
            "below is the mean over its seeds' models.")


def data_prior(data: dict[str, Any]) -> str:
    """The data prior baseline row of the pooled table: candidates without member information."""
    rows = [r for r in (data.get("tables") or {}).get("pool") or [] if r.get("attack_name") == "data_prior"]
    if not rows:
        return "The board has no `data_prior` row."
    r = rows[0]
    return (f"The data prior alone (`data_prior`: class prototypes and blurred averages of held-out images, no member "
            f"information) scores {stat(r['metrics'].get(CALIBRATED), '.1f')} on the undefended target over "
            f"{len(r['seeds'])} seeds.")


def block_body(board: Path) -> str:
    """The generated text: the utility and data-prior sentences and the board's privacy table (without its heading
    and legend, which the docs give in their own words)."""
    raw = read_results(board)
    results = BoardResults.from_dict(raw, board / "results.json")
    table = (results.privacy or {}).get(AXIS)
    if table is None:
        return PLACEHOLDER
    base = next((r.base for r in table.rows or [] if r.defense == "none"), "")
    lines = [ln for ln in render_privacy(AXIS, table).splitlines() if ln.startswith("|")]
    return "\n\n".join([undefended_accuracy(raw, base), data_prior(raw), "\n".join(lines)])


def doc_block(board: Path) -> str:
    """What sits between the markers of docs/defenses.md: the generated text, or the placeholder before the board."""
    body = block_body(board) if (board / "results.json").exists() else PLACEHOLDER
    return f"{DOC_BEGIN}\n{body}\n{DOC_END}"


def write_docs(doc: Path, board: Path) -> None:
    replace_block(doc, DOC_BEGIN, DOC_END, doc_block(board))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--board", type=Path, default=BOARD, help="a rendered board folder (default: the published one)")
    ap.add_argument("--write-docs", type=Path, help="fill the block of this markdown file")
    args = ap.parse_args()
    if not (args.board / "results.json").exists():
        raise SystemExit(f"{args.board} holds no results.json; render the board first (reconbench leaderboard "
                         "defenses-cpu), or name it with --board")
    if args.write_docs:
        write_docs(args.write_docs, args.board)
    else:
        print(doc_block(args.board))


if __name__ == "__main__":
    main()
