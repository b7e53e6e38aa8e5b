"""A suite's own text where it reaches a board's README as Markdown (its description, a comparison's title) and the
Markdown export's titles: shown as plain text, so HTML, links, emphasis, a `|` or a line break that would add a
heading or a table column render as the characters they are."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from reconbench.bench.suite import load_suite
from reconbench.leaderboard.plain_text import markdown_paragraph
from reconbench.leaderboard.readme import rerender_readme
from reconbench.leaderboard.results_file import read_results

REPO = Path(__file__).resolve().parents[3]
HOSTILE = "<script>alert(1)</script> [click](javascript:alert(1)) **bold** a | b\n# Heading"


def test_markdown_paragraph_escapes_every_markdown_and_html_character_and_keeps_the_text():
    out = markdown_paragraph(HOSTILE)
    assert "\n" not in out and "<" not in out and "](" not in out and "**" not in out
    assert "|" not in out.replace("\\|", "")
    # unescaped again (backslashes dropped, entities decoded) it is the text on one line
    back = out.replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", '"').replace("&amp;", "&")
    assert back.replace("\\", "") == " ".join(HOSTILE.split())


def test_a_hostile_description_and_comparison_title_reach_the_readme_as_plain_text():
    board = REPO / "leaderboards" / "ci"
    suite = load_suite("ci")
    hostile = dataclasses.replace(suite, description=HOSTILE)
    data = read_results(board)   # a comparison's title reaches the README from results.json, as the suite wrote it
    for comparison in data["comparisons"].values():
        comparison["title"] = HOSTILE
    text = rerender_readme(hostile, board, data)
    assert "<script>" not in text and "](javascript:" not in text and "\n# Heading" not in text
    assert text.count(markdown_paragraph(HOSTILE)) == 1 + len(data["comparisons"])
    assert f"## {markdown_paragraph(HOSTILE)}" in text
