"""The checks of `reconbench leaderboard SUITE --out BOARD --format csv|json|latex|markdown` on one board folder:
the CSV parses (csv module) to results.json's own numbers, the JSON loads to the same records, the LaTeX is
structurally sound (balanced tabulars, one cell per column in every row, escaped specials, ASCII only) and the
Markdown tables are rectangular. Used on every published board (tests/published/test_leaderboard_export.py) and on
a partial board grown from slices (tests/integration/test_partial_board_consumers.py)."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

from _helpers.cli import run_cli_redirected
from reconbench.leaderboard.results_file import read_results

REPO = Path(__file__).resolve().parents[2]


def suite_argument(board: Path) -> str:
    """What names the board's suite on the command line: its suite file where the repository holds it, else its
    suite's name (a board's folder may be named otherwise: leaderboards/paper-gpu holds suite ``paper``)."""
    header = read_results(board)["header"]
    path = REPO / str(header.get("suite_file") or "")
    return str(path) if header.get("suite_file") and path.is_file() else str(header["suite"])


def export(board: Path, fmt: str, *extra: str) -> str:
    code, out, err = run_cli_redirected(["leaderboard", suite_argument(board), "--format", fmt, "--out", str(board),
                                          *extra])
    assert code == 0, err
    return out


def _num(text: str) -> float | None:
    return None if text == "" else float(text)


def check_csv(board: Path) -> list[dict[str, str]]:
    """The CSV's rows hold exactly results.json's numbers; the rows."""
    data = read_results(board)
    rows = list(csv.DictReader(io.StringIO(export(board, "csv"))))
    expected = []
    for sel, table in data["tables"].items():
        for r in table:
            for name, m in r["metrics"].items():
                ci = m["ci95"] or [None, None]
                null = m.get("null") or {}
                expected.append(("main", sel, r["target"], r["attack"], r["init"], name,
                                 m["mean"], m["sd"], ci[0], ci[1], null.get("mean"), null.get("max"), m["n"]))
    for cname, comp in data["comparisons"].items():
        for r in comp["rows"]:
            for v in r["values"]:
                for name in comp["metrics"]:
                    m = v[name]
                    ci = m["ci95"] or [None, None]
                    expected.append((f"comparison:{cname}", r["selection"], v["target"], r["attack"], r["init"], name,
                                     m["mean"], m["sd"], ci[0], ci[1], None, None, m["n"]))
    for pname, table in data["privacy"].items():
        for r in table["rows"]:
            for series, a in r["attacks"].items():
                m = a["headline"]
                ci = m["ci95"] or [None, None]
                expected.append((f"privacy:{pname}", table["selection"], r["target"], *series.split(" / "),
                                 "reconstructed (calibrated)", m["mean"], m["sd"], ci[0], ci[1], a["null"]["mean"], None,
                                 m["n"]))
    got = [(r["table"], r["selection"], r["target"], r["attack"], r["init"], r["metric"], _num(r["mean"]),
            _num(r["sd"]), _num(r["ci95_low"]), _num(r["ci95_high"]), _num(r["null_mean"]), _num(r["null_max"]),
            int(r["n"])) for r in rows]
    assert expected and got == expected  # exact: a CSV float is Python's shortest repr, which reads back exactly
    return rows


def check_json(board: Path) -> dict:
    """The JSON's records are the CSV's, and it names the board (its folder) and its suite apart; the document."""
    doc = json.loads(export(board, "json"))
    assert doc["format"] == "reconbench-export/3" and doc["suite"] == read_results(board)["header"]["suite"]
    assert doc["board"] == board.resolve().name
    rows = list(csv.DictReader(io.StringIO(export(board, "csv"))))
    assert len(doc["rows"]) == len(rows)
    for j, c in zip(doc["rows"], rows, strict=True):
        assert (j["table"], j["metric"], j["mean"]) == (c["table"], c["metric"], _num(c["mean"]))
        assert ";".join(j["cells"]) == c["cells"]
    return doc


def _unescaped(line: str, char: str) -> int:
    return len(re.findall(r"(?<!\\)" + re.escape(char), line))


def check_latex(board: Path) -> str:
    """The LaTeX is ASCII with balanced tabulars of one cell per column; the text."""
    text = export(board, "latex", "--columns", "all")
    assert text.isascii(), "pdflatex needs ASCII (or inputenc); marks are spelled out"
    body = [line for line in text.splitlines() if not line.startswith("%")]
    begins = [i for i, line in enumerate(body) if line.startswith(r"\begin{tabular}")]
    ends = [i for i, line in enumerate(body) if line.startswith(r"\end{tabular}")]
    assert begins and len(begins) == len(ends) and all(b < e for b, e in zip(begins, ends, strict=True))
    for b, e in zip(begins, ends, strict=True):
        spec = re.match(r"\\begin\{tabular\}\{([lrc]+)\}", body[b])
        assert spec, body[b]
        cols = len(spec.group(1))
        rows = [line for line in body[b + 1:e] if line.strip() not in (r"\toprule", r"\midrule", r"\bottomrule")]
        assert rows
        for line in rows:
            assert line.rstrip().endswith("\\\\"), line
            assert _unescaped(line, "&") == cols - 1, line
            for special in ("_", "%", "#", "$"):
                assert _unescaped(line, special) == 0, (special, line)
    return text


def check_markdown(board: Path) -> str:
    """The Markdown's tables are rectangular; the text."""
    text = export(board, "markdown")
    tables = [block for block in text.split("\n\n") if block.startswith("|")]
    assert tables
    for block in tables:
        widths = {_unescaped(line, "|") for line in block.splitlines()}
        assert len(widths) == 1, block[:200]
    return text
