"""User-supplied text on a board (a contributor's name, a machine line, a column name) shown as plain text.

Text that reaches the README's Markdown tables is checked where it enters (a name that is too long or holds a line
break is refused, naming the fix) and escaped where it is written, so that HTML, links, emphasis or a ``|`` that
would add a table column show as the characters they are. The site's HTML is escaped by its templates.
"""

from __future__ import annotations

from reconbench.errors import ReconbenchError

#: the longest contributor name a board takes (a name, an e-mail address or a URL)
MAX_CONTRIBUTOR = 200
#: Markdown's own characters, backslash-escaped in plain text (GitHub's Markdown allows it for any ASCII punctuation)
_MARKDOWN = "\\`*_[]()#!|~"
#: HTML's own characters, as entities
_HTML = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}


def markdown_plain(text: str, limit: int = MAX_CONTRIBUTOR) -> str:
    """``text`` as plain text inside a Markdown table cell: on one line, cut to ``limit`` characters, every Markdown
    and HTML character escaped."""
    one = " ".join(str(text).split())
    if len(one) > limit:
        one = one[: limit - 3] + "..."
    out = []
    for ch in one:
        out.append(_HTML[ch] if ch in _HTML else "\\" + ch if ch in _MARKDOWN else ch)
    return "".join(out)


def markdown_paragraph(text: str) -> str:
    """A suite's own text (its description, a comparison's title) as one line of plain text in Markdown: every
    Markdown and HTML character escaped, whitespace and line breaks folded to single spaces, never cut."""
    return markdown_plain(text, limit=len(text) + 1)


def text_problem(text: object, limit: int) -> str | None:
    """Why ``text`` cannot be a one-line name of at most ``limit`` characters (None: it can)."""
    if not isinstance(text, str):
        return f"is a {type(text).__name__}, not text"
    if any(ord(ch) < 32 or ord(ch) == 127 or ch in "\u2028\u2029\x85" for ch in text):
        return "holds a line break or another control character"
    if len(text) > limit:
        return f"is {len(text):,} characters long (at most {limit})"
    return None


def check_contributor(text: str | None, option: str = "--contributor") -> str | None:
    """A contributor's name as a submission records it, or a one-line error naming the fix."""
    if text is None:
        return None
    if (why := text_problem(text, MAX_CONTRIBUTOR)) is not None:
        raise ReconbenchError(f"{option} {why}: give one line of at most {MAX_CONTRIBUTOR} characters (a name, an "
                              "e-mail address or a URL)")
    return text
