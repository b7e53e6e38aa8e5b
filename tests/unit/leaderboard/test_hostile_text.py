"""User-supplied text that reaches a board's README (a submission's contributor and machine lines) renders as plain
text: HTML, links, emphasis, ``|`` and line breaks neither add markup nor table columns; text that is too long or
holds a line break is refused where it enters."""

from __future__ import annotations

import re
from typing import Any

import pytest

from reconbench.errors import ReconbenchError
from reconbench.leaderboard.plain_text import MAX_CONTRIBUTOR, check_contributor, markdown_plain, text_problem
from reconbench.leaderboard.readme import outside_section
from reconbench.records import BoardHeader

HOSTILE = [
    "<script>alert(1)</script>",
    "[click me](javascript:alert(1))",
    "<a href='javascript:alert(1)'>me</a>",
    "a | b | c",
    "**bold** _em_ `code` ~~gone~~",
    "name\n# a heading\n| x | y |",
    "&lt;already escaped&gt; & more",
    "back\\slash\\|pipe",
    "x" * 1_000_000,
]

#: an unescaped Markdown table separator: a | not preceded by an odd number of backslashes
CELL_SPLIT = re.compile(r"(?<!\\)(?:\\\\)*\|")


def _unescape(text: str) -> str:
    """Plain text back from the escaped form (the inverse a Markdown renderer applies)."""
    text = re.sub(r"\\(.)", r"\1", text)
    for entity, ch in (("&lt;", "<"), ("&gt;", ">"), ("&quot;", '"'), ("&amp;", "&")):
        text = text.replace(entity, ch)
    return text


def _section(contributor: str, machine: str = "cpu") -> str:
    header = BoardHeader.from_dict({"submissions": [{"id": "abc123", "contributor": contributor, "cells": ["c1"],
                                                     "git_commits": ["0" * 40], "reconbench_versions": ["0.1"],
                                                     "machines": [machine], "packed": "2026-01-01T00:00:00Z"}]})
    text = outside_section(header)
    assert text is not None
    return text


@pytest.mark.parametrize("text", HOSTILE, ids=lambda t: t[:20])
def test_contributor_and_machine_text_render_as_plain_text_in_one_table_row(text: str) -> None:
    section = _section(text, machine=text)
    lines = section.splitlines()
    rows = [ln for ln in lines if ln.startswith("|")]
    assert len(rows) == 3, section[:500]  # header, rule, the one submission: no line break got through
    header_cells = len(CELL_SPLIT.split(rows[0]))
    assert all(len(CELL_SPLIT.split(r)) == header_cells for r in rows), rows[2][:300]
    row = rows[2]
    assert "<" not in row and ">" not in row  # no HTML element can open
    assert not re.search(r"(?<!\\)\]\(", row) and not re.search(r"(?<!\\)\[", row)  # no link can form
    cells = [c.strip() for c in CELL_SPLIT.split(row)]
    shown = _unescape(cells[2])
    expect = " ".join(text.split())
    assert shown == expect if len(expect) <= MAX_CONTRIBUTOR else shown == expect[:MAX_CONTRIBUTOR - 3] + "..."


@pytest.mark.parametrize("text", ["plain name", "Jane Doe <jane@example.org>", "https://example.org/~me"])
def test_plain_text_survives_the_round_trip(text: str) -> None:
    assert _unescape(markdown_plain(text)) == text


@pytest.mark.parametrize("text,why", [("a\nb", "line break"), ("a\rb", "line break"), ("x" * 1_000_000, "characters"),
                                      ("a\x00b", "control")])
def test_a_contributor_with_a_line_break_or_a_megabyte_is_refused(text: str, why: str) -> None:
    with pytest.raises(ReconbenchError, match="--contributor") as info:
        check_contributor(text)
    assert why in str(info.value) and len(str(info.value)) < 300 and "\n" not in str(info.value)
    assert text_problem("Jane Doe", MAX_CONTRIBUTOR) is None


def test_submit_refuses_the_contributor_before_reading_anything(tmp_path: Any, capsys: Any) -> None:
    from _helpers.cli import run_cli

    (tmp_path / "run").mkdir()
    (tmp_path / "board").mkdir()
    code, _, err = run_cli(["leaderboard", "submit", str(tmp_path / "run"), "--board", str(tmp_path / "board"),
                            "--out", str(tmp_path / "s.json"), "--contributor", "me\n# heading"], capsys)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code != 0 and len(lines) == 1 and "--contributor" in lines[0] and "line break" in lines[0]
    assert not (tmp_path / "s.json").exists()
