"""A generated block of a markdown file: the text between two marker comments, replaced in place by a script that
renders it from committed results (the marker names the command; a test compares the block with a fresh render)."""

from __future__ import annotations

import re
from pathlib import Path


def replace_block(doc: Path, begin: str, end: str, block: str) -> None:
    """Write ``block`` (markers included) over the text from ``begin`` to ``end`` in ``doc``; one line when absent."""
    text = doc.read_text()
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.S)
    if not pattern.search(text):
        raise SystemExit(f"{doc} has no block between {begin!r} and {end!r}; add the two markers")
    doc.write_text(pattern.sub(lambda _: block, text))
