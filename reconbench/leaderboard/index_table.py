"""The index table of leaderboards/README.md, rendered from the boards: one row per published board, in the order of
leaderboards/index-notes.toml, naming the commit it was published from (a board from slices: the commits its cells
ran at, with their counts, and the commit that rendered it) and its status; a board that does not hold every planned
cell says "partial, k of N cells" (``board_progress``). What a board's results.json cannot say (its status at the
newest commit and why, e.g. "first publication") is the notes file's.

``python -m reconbench.leaderboard.index_table`` prints the block; ``--write`` puts it into leaderboards/README.md
between its markers, ``--check`` fails (one line) when the README's block differs from a fresh rendering;
tests/unit/leaderboard/test_index_table.py runs the check on the committed README.

The notes file is also the list of published boards: every board folder must have an entry and every entry a folder
(a board that disappears fails the rendering and tests/unit/leaderboard/test_board_manifest.py).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import tomllib

from reconbench.errors import ReconbenchError
from reconbench.leaderboard.board_progress import commit_shares
from reconbench.leaderboard.results_file import read_results
from reconbench.provenance import write_text_atomic
from reconbench.records import BoardHeader

NOTES_NAME = "index-notes.toml"
README_NAME = "README.md"
WRITE_COMMAND = "python -m reconbench.leaderboard.index_table --write"
BEGIN = f"<!-- board-index: {WRITE_COMMAND} (rows from each board's results.json and {NOTES_NAME}) -->"
END = "<!-- /board-index -->"
#: a commit as the index shows it
SHORT = 7


@dataclass(frozen=True)
class BoardNote:
    """What the index says of a board beyond its results.json."""

    #: its status at the newest commit
    status: str = "current"
    #: why, after the status in brackets (e.g. "first publication")
    note: str = ""
    #: after the commit it was published from, in brackets (e.g. "reconstructions figure drawn at `8a26504`")
    published: str = ""

    def status_text(self) -> str:
        return f"{self.status} ({self.note})" if self.note else self.status


def read_notes(leaderboards: Path) -> dict[str, BoardNote]:
    """The boards the index lists, in its order, with their notes; a one-line error naming the file and the fix."""
    path = leaderboards / NOTES_NAME
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ReconbenchError(f"{path} is missing: it lists the published boards and their notes; restore it with "
                              "git") from None
    except tomllib.TOMLDecodeError as exc:
        raise ReconbenchError(f"{path} is not valid TOML ({exc}); fix it by hand") from None
    notes = {}
    fields = set(BoardNote.__dataclass_fields__)
    for board, entry in data.items():
        if not isinstance(entry, dict) or set(entry) - fields or not all(isinstance(v, str) for v in entry.values()):
            raise ReconbenchError(f"{path}: [{board}] may hold only text fields {', '.join(sorted(fields))}; fix it "
                                  "by hand")
        notes[board] = BoardNote(**entry)
    return notes


def board_folders(leaderboards: Path) -> list[str]:
    """The published boards: the folders of ``leaderboards`` that hold a results.json."""
    return sorted(p.parent.name for p in leaderboards.glob("*/results.json"))


def _code(commit: str) -> str:
    return f"`{commit[:SHORT]}`"


def published_from(header: BoardHeader) -> str:
    """The index's "last published from": the commit of a board run in one folder; for a board from slices, the
    commits its cells ran at with their counts, and the commit that rendered it."""
    if header.cell_commits:
        cells = ", ".join(" ".join(t for t in (_code(s.commit), s.counts()) if t) for s in commit_shares(header))
        rendered = header.rendered_commit
        return f"cells at {cells}" + (f"; rendered at {_code(rendered)}" if rendered else "")
    commits = [s.commit for s in commit_shares(header) if s.commit not in ("", "None")]
    if not commits:
        return "no commit recorded"
    return ("commit " if len(commits) == 1 else "commits ") + ", ".join(_code(c) for c in commits)


def index_row(board: str, header: BoardHeader, note: BoardNote) -> str:
    published = published_from(header) + (f" ({note.published})" if note.published else "")
    status = (f"partial, {header.progress}; " if header.progress else "") + note.status_text()
    return f"| [`{board}`]({board}/) | {published} | {status} |"


def index_table(leaderboards: Path) -> str:
    """The block (with its markers) for every board of ``leaderboards``; refused in one line when a folder has no
    entry in the notes or an entry no folder."""
    notes = read_notes(leaderboards)
    folders = board_folders(leaderboards)
    unlisted = [b for b in folders if b not in notes]
    if unlisted:
        raise ReconbenchError(f"{leaderboards / NOTES_NAME} does not list the board(s) {', '.join(unlisted)}: add a "
                              f"`[{unlisted[0]}]` table for each (benchmarks/gpu/after_occasion.py adds the one it "
                              "publishes), then run " + WRITE_COMMAND)
    gone = [b for b in notes if b not in folders]
    if gone:
        raise ReconbenchError(f"{leaderboards / NOTES_NAME} lists {', '.join(gone)}, with no board folder (no "
                              "results.json): a published board disappeared; restore it from git, or remove its "
                              "entry on purpose")
    lines = [BEGIN, "| board | last published from | status at the newest commit |", "|---|---|---|"]
    sliced = []
    for board, note in notes.items():
        header = BoardHeader.from_dict(read_results(leaderboards / board)["header"])
        lines.append(index_row(board, header, note))
        if header.cell_commits:
            sliced.append(f"`{board}`")
    if sliced:
        lines += ["", f"A board from slices ({', '.join(sliced)}) is published from one clean commit, but its cells "
                  "ran at the commits of the slices that brought them, each named with its count of cells "
                  '([docs/slices.md](../docs/slices.md), "Publishing a board that grows over slices").']
    return "\n".join([*lines, END])


def add_board(leaderboards: Path, board: str, note: BoardNote) -> bool:
    """Append ``board``'s entry to the notes file unless it has one; whether it was added. Appended as text (a TOML
    writer would drop the file's comments)."""
    if board in read_notes(leaderboards):
        return False
    fields = {"status": note.status, "note": note.note, "published": note.published}
    body = "".join(f"{k} = {_toml_string(v)}\n" for k, v in fields.items() if v)
    path = leaderboards / NOTES_NAME
    text = path.read_text()
    write_text_atomic(path, text + ("" if text.endswith("\n") or not text else "\n") + f"\n[{board}]\n{body}")
    read_notes(leaderboards)   # what was written reads back
    return True


def drop_note(leaderboards: Path, board: str, note: str) -> bool:
    """Remove ``note`` from ``board``'s entry where it is its note (e.g. "first publication" once the board is
    published again); whether it did. Edited as text, the rest of the file as it was."""
    if read_notes(leaderboards).get(board, BoardNote()).note != note:
        return False
    path = leaderboards / NOTES_NAME
    lines = path.read_text().splitlines(keepends=True)
    header = re.compile(rf'^\s*\[\s*(?:{re.escape(board)}|"{re.escape(board)}")\s*\]\s*(?:#.*)?$')
    start = next((i for i, ln in enumerate(lines) if header.match(ln)), None)
    if start is None:
        raise ReconbenchError(f"{path}: the entry of {board} is not a `[{board}]` table on its own line, so its note "
                              f"{note!r} cannot be dropped; drop it by hand")
    end = next((i for i in range(start + 1, len(lines)) if lines[i].lstrip().startswith("[")), len(lines))
    kept = [ln for ln in lines[start + 1:end] if not re.match(r"\s*note\s*=", ln)]
    write_text_atomic(path, "".join(lines[:start + 1] + kept + lines[end:]))
    if read_notes(leaderboards)[board].note:
        raise ReconbenchError(f"{path}: the note of {board} is still there after dropping its `note =` line; drop it "
                              "by hand")
    return True


def _toml_string(value: str) -> str:
    """``value`` as a TOML basic string: a JSON string is one (the same escapes; TOML also escapes DEL)."""
    return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")


def current_block(readme: Path) -> str:
    """The block between the markers of ``readme`` (markers included); a one-line error when they, or the file, are
    missing."""
    text = _read_readme(readme)
    if BEGIN not in text or END not in text:
        raise ReconbenchError(f"{readme} has no index block (the lines {BEGIN} and {END}); put them back where the "
                              f"table goes, then run {WRITE_COMMAND}")
    return text[text.index(BEGIN):text.index(END) + len(END)]


def _read_readme(readme: Path) -> str:
    try:
        return readme.read_text()
    except OSError as exc:
        raise ReconbenchError(f"{readme} cannot be read ({exc.strerror or exc}): it holds the index between the lines "
                              f"{BEGIN} and {END}; restore it with git") from None


def write_into(readme: Path, block: str) -> bool:
    """Replace the block between the markers of ``readme``; whether it changed."""
    text = _read_readme(readme)
    old = current_block(readme)
    new = text.replace(old, block, 1)
    if new != text:
        write_text_atomic(readme, new)
    return new != text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reconbench.leaderboard.index_table", description=__doc__.split(
        "\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--leaderboards", type=Path, default=Path(__file__).resolve().parents[2] / "leaderboards",
                        help="the folder of the published boards (default: this checkout's leaderboards/)")
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--write", action="store_true", help=f"rewrite the block in LEADERBOARDS/{README_NAME}")
    what.add_argument("--check", action="store_true", help=f"fail when LEADERBOARDS/{README_NAME}'s block is stale")
    args = parser.parse_args(argv)
    readme = args.leaderboards / README_NAME
    try:
        block = index_table(args.leaderboards)
        if args.write:
            print(f"{readme}: {'rewritten' if write_into(readme, block) else 'up to date'}")
        elif args.check:
            if current_block(readme) != block:
                print(f"error: {readme}'s index table differs from the boards: run {WRITE_COMMAND}", file=sys.stderr)
                return 1
            print(f"{readme}: index up to date ({len(board_folders(args.leaderboards))} boards)")
        else:
            print(block)
    except ReconbenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
