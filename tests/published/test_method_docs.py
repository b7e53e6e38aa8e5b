"""Comments and docs point only at files a reader of the repository can open, and every docs/method anchor exists.

The method notes live in docs/method/ (in our own words); code cites a section as ``docs/method/<page>.md#<anchor>``.
Anchors are the slugs GitHub derives from headings, so a renamed heading breaks the link and this test.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
METHOD = REPO / "docs" / "method"
SCANNED = (".py", ".md", ".toml")
GENERATED = ("leaderboards/", "benchmarks/results/")  # written by the tools, not by hand

#: pointers to developer notes outside the repository (the notes folder beside the checkout, its "*-spec" files,
#: "spec 5.4", "kkt spec 2.3"); the parts are joined here so that this file holds no such pointer itself
_NOTES, _SPEC_FILE = "shared" + "/docs", "-spec" + r"\.md"
OUTSIDE = re.compile(_NOTES + "|" + _SPEC_FILE + r"|\bspecs? (?:sections? )?\d|\bkkt spec\b", re.IGNORECASE)
#: work history instead of an explanation ("issue 4", "session 2", "round 1")
HISTORY = re.compile(r"\b(?:issue|session|round) \d+\b", re.IGNORECASE)
#: a reference to a method page from anywhere in the repository
METHOD_REF = re.compile(r"docs/method/([\w.-]+\.md)(?:#([\w-]+))?")
#: a relative markdown link inside a method page
MD_LINK = re.compile(r"\]\(([\w./-]*\.md)(?:#([\w-]+))?\)")


def tracked(suffixes: tuple[str, ...] = SCANNED) -> list[Path]:
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    out = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    names = [n for n in out.decode().split("\0") if n.endswith(suffixes) and not n.startswith(GENERATED)]
    here = Path(__file__).resolve()  # this file quotes the patterns it looks for
    return [REPO / n for n in names if (REPO / n).is_file() and REPO / n != here]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every anchor of a markdown page (repeated headings get -1, -2, ... as on GitHub); fenced code skipped."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    fenced = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if fenced or not m:
            continue
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def broken_refs(text: str, where: str, base: Path, pattern: re.Pattern[str]) -> list[str]:
    """References in ``text`` to pages (relative to ``base``) or anchors that do not exist."""
    bad = []
    for m in pattern.finditer(text):
        page, anchor = base / m.group(1), m.group(2)
        if not page.is_file():
            bad.append(f"{where}: {m.group(0)} (no such page)")
        elif anchor and anchor not in anchors(page):
            bad.append(f"{where}: {m.group(0)} (no heading with anchor #{anchor} in {m.group(1)})")
    return bad


def offending_lines(pattern: re.Pattern[str], files: list[Path]) -> list[str]:
    hits = []
    for path in files:
        for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if pattern.search(line):
                hits.append(f"{path.relative_to(REPO)}:{lineno}: {line.strip()[:120]}")
    return hits


def test_no_pointer_to_notes_outside_the_repository():
    hits = offending_lines(OUTSIDE, tracked())
    assert not hits, ("these lines cite notes a reader cannot open; write the fact into docs/method/ and point "
                      "there:\n" + "\n".join(hits))


def test_no_work_history_in_code_comments():
    hits = offending_lines(HISTORY, tracked((".py", ".toml")))
    assert not hits, "say what the code does and why, not when it was written:\n" + "\n".join(hits)


def test_every_docs_method_reference_names_an_existing_anchor():
    bad: list[str] = []
    for path in tracked():
        bad += broken_refs(path.read_text(encoding="utf-8"), str(path.relative_to(REPO)), REPO / "docs" / "method",
                           METHOD_REF)
    for page in sorted(METHOD.glob("*.md")):
        bad += broken_refs(page.read_text(encoding="utf-8"), str(page.relative_to(REPO)), METHOD, MD_LINK)
    assert not bad, "\n".join(bad)


def test_the_method_pages_are_cited_from_the_code():
    cited = {m.group(1) for p in tracked((".py",)) for m in METHOD_REF.finditer(p.read_text(encoding="utf-8"))}
    pages = {p.name for p in METHOD.glob("*.md")} - {"README.md"}
    assert pages and pages <= cited, f"method pages no code points to: {sorted(pages - cited)}"


# -- the checks themselves can fail -------------------------------------------------------------------------
def test_slug_follows_github_rules():
    assert slug("The 0.4 line") == "the-04-line"
    assert slug("B-vote") == "b-vote"
    assert slug("Membership, init copies and collapse") == "membership-init-copies-and-collapse"
    assert slug("Loop and defaults (E, R)") == "loop-and-defaults-e-r"


def test_the_checks_catch_what_they_should(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("# Title\n\n## A section\n\n```\n## not a heading\n```\n\n## A section\n")
    assert anchors(page) == {"title", "a-section", "a-section-1"}
    text = "see docs/method/p.md#a-section, docs/method/p.md#gone and docs/method/q.md#x"
    bad = broken_refs(text, "f.py", tmp_path, METHOD_REF)
    assert len(bad) == 2 and "#gone" in bad[0] and "no such page" in bad[1]
    notes, spec_md = "../" + "shared" + "/docs/", "-spec" + ".md"
    for line in (f"({notes}kkt-attacks{spec_md} section 5.4)", "B = 1.1 (spec 5.4)", "order (kkt spec 2.3)",
                 "ranges (spec section 6)", f"see bilevel-attack{spec_md}"):
        assert OUTSIDE.search(line), line
    for line in ("spec = RunSpec(attack=name)", "importlib.util.find_spec('lpips')", "the column spec"):
        assert not OUTSIDE.search(line), line
    assert HISTORY.search("# session 2: 4 runs (was 6)") and HISTORY.search("for issue 5")
    assert not HISTORY.search("start_new_session=True")
