"""`reconbench leaderboard BOARD --format csv|json|latex|markdown` on every published board: the CSV parses (csv
module) to results.json's own numbers, the JSON loads to the same records, the LaTeX is structurally sound (balanced
tabulars, one cell per column in every row, escaped specials, ASCII only) and the Markdown tables are rectangular."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
from _helpers.cli import run_cli

from reconbench.leaderboard.results_file import read_results

REPO = Path(__file__).resolve().parents[2]
BOARDS = sorted(p.parent.name for p in (REPO / "leaderboards").glob("*/results.json"))


def _export(board: str, fmt: str, capsys: Any, *extra: str) -> str:
    code, out, err = run_cli(["leaderboard", board, "--format", fmt, "--out", str(REPO / "leaderboards" / board),
                              *extra], capsys)
    assert code == 0, err
    return out


def _num(text: str) -> float | None:
    return None if text == "" else float(text)


@pytest.mark.parametrize("board", BOARDS)
def test_csv_holds_the_numbers_of_results_json(board: str, capsys: Any) -> None:
    data = read_results(REPO / "leaderboards" / board)
    rows = list(csv.DictReader(io.StringIO(_export(board, "csv", capsys))))
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


@pytest.mark.parametrize("board", BOARDS)
def test_json_loads_to_the_csv_records(board: str, capsys: Any) -> None:
    doc = json.loads(_export(board, "json", capsys))
    assert doc["format"] == "reconbench-export/3" and doc["board"] == board
    rows = list(csv.DictReader(io.StringIO(_export(board, "csv", capsys))))
    assert len(doc["rows"]) == len(rows)
    for j, c in zip(doc["rows"], rows, strict=True):
        assert (j["table"], j["metric"], j["mean"]) == (c["table"], c["metric"], _num(c["mean"]))
        assert ";".join(j["cells"]) == c["cells"]


def _unescaped(line: str, char: str) -> int:
    return len(re.findall(r"(?<!\\)" + re.escape(char), line))


@pytest.mark.parametrize("board", BOARDS)
def test_latex_is_structurally_sound(board: str, capsys: Any) -> None:
    text = _export(board, "latex", capsys, "--columns", "all")
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


@pytest.mark.parametrize("board", BOARDS)
def test_markdown_tables_are_rectangular(board: str, capsys: Any) -> None:
    text = _export(board, "markdown", capsys)
    tables = [block for block in text.split("\n\n") if block.startswith("|")]
    assert tables
    for block in tables:
        widths = {_unescaped(line, "|") for line in block.splitlines()}
        assert len(widths) == 1, block[:200]


def test_export_refuses_bad_options(capsys: Any) -> None:
    code, _, err = run_cli(["leaderboard", "ci", "--format", "xlsx"], capsys)
    assert code == 2 and "xlsx" in err
    code, _, err = run_cli(["leaderboard", "ci", "--format", "csv", "--verify"], capsys)
    assert code == 2 and "does not combine" in err
    code, _, err = run_cli(["leaderboard", "ci", "--format", "latex", "--columns", "no such column"], capsys)
    assert code == 2 and "no column 'no such column'" in err
