"""leaderboards/README.md's index table is rendered from the boards (reconbench/leaderboard/index_table.py): the
committed block is current, a row names what the board's results.json says (its commit; a board from slices: its
cells' commits with their counts and "partial, k of N cells"), the notes file and the folders must name the same
boards, and writing the block leaves the rest of the README as it is."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from reconbench.errors import ReconbenchError
from reconbench.leaderboard.index_table import (
    BEGIN,
    END,
    NOTES_NAME,
    BoardNote,
    add_board,
    current_block,
    drop_note,
    index_table,
    main,
    read_notes,
    write_into,
)

REPO = Path(__file__).resolve().parents[3]
LEADERBOARDS = REPO / "leaderboards"


def test_the_committed_index_is_the_rendering_of_the_boards(capsys):
    assert current_block(LEADERBOARDS / "README.md") == index_table(LEADERBOARDS)
    assert main(["--check"]) == 0
    # one row per board folder, each linking its folder
    rows = [ln for ln in current_block(LEADERBOARDS / "README.md").splitlines() if ln.startswith("| [`")]
    boards = sorted(p.parent.name for p in LEADERBOARDS.glob("*/results.json"))
    assert sorted(r.split("`")[1] for r in rows) == boards
    assert all(f"({r.split('`')[1]}/)" in r for r in rows)


def _lb(tmp_path: Path, boards: dict[str, str], notes: str) -> Path:
    """A leaderboards folder holding, for each name, a copy of the named committed board's results.json."""
    lb = tmp_path / "leaderboards"
    for name, source in boards.items():
        (lb / name).mkdir(parents=True)
        shutil.copyfile(LEADERBOARDS / source / "results.json", lb / name / "results.json")
    (lb / NOTES_NAME).write_text(notes)
    return lb


def test_a_row_names_the_commit_the_board_was_published_from(tmp_path):
    lb = _lb(tmp_path, {"ci": "ci", "cpu-mini": "cpu-mini"},
             '# comment\n[cpu-mini]\npublished = "figure drawn later"\n\n[ci]\nstatus = "stale"\nnote = "why"\n')
    commits = {b: json.loads((lb / b / "results.json").read_text())["header"]["git_commits"] for b in ("ci", "cpu-mini")}
    rows = index_table(lb).splitlines()
    assert rows[0] == BEGIN and rows[-1] == END
    # in the notes' order, not the folders'
    assert rows[3] == f"| [`cpu-mini`](cpu-mini/) | commit `{commits['cpu-mini'][0][:7]}` (figure drawn later) | current |"
    assert rows[4] == f"| [`ci`](ci/) | commit `{commits['ci'][0][:7]}` | stale (why) |"


def test_a_partial_board_from_slices_names_its_cells_commits_and_k_of_n(tmp_path):
    lb = _lb(tmp_path, {"paper-gpu": "ci"}, '[paper-gpu]\nnote = "first publication"\n')
    path = lb / "paper-gpu" / "results.json"
    data = json.loads(path.read_text())
    data["header"].update(progress="2 of 79 cells", cell_commits=[
        {"commit": "a" * 40, "cells": 1, "packs": ["f" * 64]}, {"commit": "b" * 40, "cells": 1, "packs": ["e" * 64]}])
    data["header"]["rendered_with"]["git_commit"] = "c" * 40
    path.write_text(json.dumps(data))
    block = index_table(lb)
    row = next(ln for ln in block.splitlines() if ln.startswith("| [`paper-gpu`]"))
    assert row == ("| [`paper-gpu`](paper-gpu/) | cells at `aaaaaaa` (1 cell(s), 1 slice pack(s)), `bbbbbbb` (1 cell(s), "
                   "1 slice pack(s)); rendered at `ccccccc` | partial, 2 of 79 cells; current (first publication) |")
    assert "A board from slices (`paper-gpu`)" in block   # the README's "one clean commit" qualified


def test_a_folder_without_an_entry_or_an_entry_without_a_folder_is_refused_in_one_line(tmp_path):
    lb = _lb(tmp_path, {"ci": "ci", "new": "ci"}, "[ci]\n")
    with pytest.raises(ReconbenchError) as unlisted:
        index_table(lb)
    assert "does not list the board(s) new" in str(unlisted.value) and "\n" not in str(unlisted.value)
    (lb / NOTES_NAME).write_text("[ci]\n[new]\n[gone]\n")
    with pytest.raises(ReconbenchError) as gone:
        index_table(lb)
    assert "lists gone, with no board folder" in str(gone.value) and "\n" not in str(gone.value)
    (lb / NOTES_NAME).write_text('[ci]\ncolour = "red"\n')
    with pytest.raises(ReconbenchError, match=r"\[ci\] may hold only text fields"):
        read_notes(lb)


def test_adding_a_board_appends_its_entry_and_keeps_the_comments(tmp_path):
    lb = _lb(tmp_path, {"ci": "ci", "paper-gpu": "ci"}, "# the boards\n[ci]\n")
    assert add_board(lb, "paper-gpu", BoardNote(note='first "publication"'))
    assert not add_board(lb, "paper-gpu", BoardNote(note="again"))   # once
    assert (lb / NOTES_NAME).read_text().startswith("# the boards\n[ci]\n")
    assert read_notes(lb) == {"ci": BoardNote(), "paper-gpu": BoardNote(note='first "publication"')}
    assert "| current (first \"publication\") |" in index_table(lb)


def test_write_replaces_only_the_block_and_check_fails_on_a_stale_one(tmp_path, capsys):
    lb = _lb(tmp_path, {"ci": "ci"}, "[ci]\n")
    before, after = "# Boards\n\nintro line\n\n", "\n\n## Hand-written\n\ntext | with | pipes\n"
    readme = lb / "README.md"
    readme.write_text(f"{before}{BEGIN}\n| old | row |\n{END}{after}")
    assert main(["--leaderboards", str(lb), "--check"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "differs from the boards" in err[0] and "--write" in err[0]
    assert write_into(readme, index_table(lb)) and not write_into(readme, index_table(lb))
    text = readme.read_text()
    assert text.startswith(before + BEGIN) and text.endswith(END + after)
    assert main(["--leaderboards", str(lb), "--check"]) == 0
    readme.write_text("no markers\n")
    assert main(["--leaderboards", str(lb), "--check"]) == 1
    assert "has no index block" in capsys.readouterr().err


def test_a_note_is_dropped_from_its_board_only(tmp_path):
    notes = '# c\n[ci]\nnote = "first publication"\n\n[paper-gpu]\nstatus = "current"\nnote = "first publication"\n'
    lb = _lb(tmp_path, {"ci": "ci", "paper-gpu": "ci"}, notes)
    assert drop_note(lb, "paper-gpu", "first publication")
    assert not drop_note(lb, "paper-gpu", "first publication")   # once
    assert (lb / NOTES_NAME).read_text() == notes.replace('current"\nnote = "first publication"\n', 'current"\n')
    assert read_notes(lb)["ci"] == BoardNote(note="first publication")


def test_a_note_that_cannot_be_dropped_as_text_is_refused_in_one_line(tmp_path):
    """An entry written as an inline table has no `[board]` line to edit: a one-line error naming the file and the
    fix, the file as it was (it was a StopIteration)."""
    notes = '"paper-gpu" = { note = "first publication" }\n[ci]\n'
    lb = _lb(tmp_path, {"ci": "ci"}, notes)
    (lb / "paper-gpu").mkdir()
    with pytest.raises(ReconbenchError, match=r"is not a `\[paper-gpu\]` table on its own line.*drop it by hand") as err:
        drop_note(lb, "paper-gpu", "first publication")
    assert "\n" not in str(err.value) and (lb / NOTES_NAME).read_text() == notes


def test_a_note_under_a_spaced_header_and_beside_a_multi_line_value_is_dropped(tmp_path):
    notes = '[ci]\n\n[ "paper-gpu" ]  # the GPU board\npublished = """drawn\nlater"""\nnote = "first publication"\n'
    lb = _lb(tmp_path, {"ci": "ci", "paper-gpu": "ci"}, notes)
    assert drop_note(lb, "paper-gpu", "first publication")
    assert read_notes(lb)["paper-gpu"] == BoardNote(published="drawn\nlater")


def test_a_write_that_dies_half_way_leaves_the_readme_whole(tmp_path, monkeypatch):
    """The index block and the notes are written through a temporary file: a write that stops half way (a full disk)
    leaves the old file, never a prefix of the new one."""
    lb = _lb(tmp_path, {"ci": "ci"}, "[ci]\n")
    readme = lb / "README.md"
    old = f"intro\n{BEGIN}\n| old | row |\n{END}\nhand-written\n"
    readme.write_text(old)

    def half(self: Path, data: str, *args: object, **kwargs: object) -> int:
        with open(self, "w") as fh:
            fh.write(data[:len(data) // 2])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Path, "write_text", half)
    try:
        write_into(readme, index_table(lb))
    except OSError:
        pass
    assert readme.read_text() in (old, old.replace(f"{BEGIN}\n| old | row |\n{END}", index_table(lb)))


def test_a_missing_readme_is_one_line_not_a_traceback(tmp_path, capsys):
    lb = _lb(tmp_path, {"ci": "ci"}, "[ci]\n")
    for mode in ("--check", "--write"):
        assert main(["--leaderboards", str(lb), mode]) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "README.md cannot be read" in err[0] and "restore it with git" in err[0]


def test_an_added_note_of_any_text_reads_back(tmp_path):
    """A note with a newline, a tab, quotes and a backslash is written as a valid TOML string (it left a notes file
    that no longer parsed)."""
    lb = _lb(tmp_path, {"ci": "ci", "paper-gpu": "ci"}, "[ci]\n")
    note = 'first\npublication\t"quoted" \\ end\x7f'
    assert add_board(lb, "paper-gpu", BoardNote(note=note, published="é"))
    assert read_notes(lb)["paper-gpu"] == BoardNote(note=note, published="é")
