"""A board that grows over slices: the publish rule on each cell's origin (its pack's commit or its own), the
commits the header lists, the "k of N cells" line, and a not-run list that stays short for the paper's 79 cells."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest

from reconbench.bench.cells import expand
from reconbench.bench.suite import load_suite
from reconbench.leaderboard.readme import NOT_RUN_LISTED, _not_run_lines, _progress_lines
from reconbench.leaderboard.slice_origins import CellOrigin, PackOrigin, cell_origins, commit_cells, publish_problems
from reconbench.leaderboard.tables import Published, progress_text
from reconbench.records import BoardHeader, CellRecord, CommitCells

A, B, HERE = "a" * 40, "b" * 40, "c" * 40


def record(cid: str, commit: str | None) -> CellRecord:
    return CellRecord.from_dict({"cell_id": cid, "provenance": {"git_commit": commit}})


def pack(commit: str, sha: str) -> PackOrigin:
    return PackOrigin(file=f"{sha}.json", commit=commit, manifest_sha256=sha * 8, device="cuda")


def test_cells_from_clean_packs_at_several_commits_publish_beside_cells_run_here():
    records = {"x": record("x", None), "y": record("y", None), "z": record("z", HERE)}
    origins = {"x": CellOrigin(A, pack(A, "1")), "y": CellOrigin(B, pack(B, "2")), "z": CellOrigin(HERE, None)}
    assert publish_problems(records, origins, HERE) == []
    assert publish_problems(records, origins, HERE + "-dirty") == ["this checkout is dirty"]
    grown = commit_cells(origins)
    assert grown == [CommitCells(A, 1, ["1" * 8], ["x"]), CommitCells(B, 1, ["2" * 8], ["y"]),
                     CommitCells(HERE, 1, [], ["z"])]
    assert commit_cells({"z": origins["z"]}) is None   # no pack: the header stays as it was


@pytest.mark.parametrize("commit", ["None", A + "-dirty"])
def test_a_pack_at_a_dirty_or_unknown_commit_is_refused(commit):
    records = {"x": record("x", None)}
    (problem,) = publish_problems(records, {"x": CellOrigin(commit, pack(commit, "1"))}, HERE)
    assert problem.startswith("slice packs ran at a dirty or unknown commit") and commit in problem


def test_a_record_that_contradicts_its_pack_and_direct_cells_elsewhere_are_refused():
    records = {"x": record("x", B), "z": record("z", A)}
    origins = {"x": CellOrigin(A, pack(A, "1")), "z": CellOrigin(A, None)}
    problems = publish_problems(records, origins, HERE)
    assert problems == ["cells whose record names another commit than their pack's (x): remove them and merge their "
                        "packs again",
                        f"cells ran at {A[:12]}, this checkout is {HERE[:12]}"]


def test_a_cell_evaluated_at_a_merge_counts_at_its_records_commit_and_must_be_clean():
    """A cell whose search runs came back in groups is evaluated at the merge that brings its last group: it was
    scored at the merging checkout's commit, which its record names (not the last pack's, ``A``), and publishes
    beside cells of other commits; a merge from a dirty tree is refused with its own fix."""
    merged_at = replace(pack(A, "1"), evaluated=True)
    records = {"g": record("g", B), "z": record("z", HERE)}
    origins = cell_origins(records, {"g": merged_at})
    assert origins["g"] == CellOrigin(B, merged_at) and origins["z"] == CellOrigin(HERE, None)
    assert publish_problems(records, origins, HERE) == []
    assert commit_cells(origins) == [CommitCells(B, 1, ["1" * 8], ["g"]), CommitCells(HERE, 1, [], ["z"])]
    dirty = {"g": record("g", B + "-dirty")}
    (problem,) = publish_problems(dirty, cell_origins(dirty, {"g": merged_at}), HERE)
    assert problem.startswith("cells evaluated at a merge from a dirty or unknown tree") and "--unpack" in problem


def test_the_paper_boards_not_run_list_is_one_line_per_target_and_attack():
    suite = load_suite("paper")
    plan = expand(suite)
    assert len(plan) > 60
    pub = Published(plan, {}, [c.cell_id for c in plan], [])
    lines = [line for line in _not_run_lines(pub) if line]
    pairs = Counter((c.target, c.attack.label) for c in plan)
    assert lines[0] == f"Not run ({len(plan)} of {len(plan)} planned), by target and attack:"
    assert len(lines) == 1 + len(pairs) < 30
    counted = {}
    for line in lines[1:]:
        head, rest = line.split(": ", 1)
        target, attack = (part.strip("`- ") for part in head.split(" / "))
        counted[(target, attack)] = int(rest.split(" cell(s)")[0])
    assert counted == dict(pairs)
    few = Published(plan, {}, [c.cell_id for c in plan[:NOT_RUN_LISTED]], [])
    assert _not_run_lines(few)[0].count("`") == 2 * NOT_RUN_LISTED


def test_only_a_partial_board_says_k_of_n_at_its_top():
    cells = {"planned": 79, "ok": 16, "failed": 0, "not_run": 63, "stale": 0}
    partial = BoardHeader(cells=cells, progress=progress_text(16, 79), cell_commits=[CommitCells(A, 16, ["1"])])
    (line, _) = _progress_lines(partial)
    assert line.startswith("**Partial board: 16 of 79 cells.** 63 planned cell(s)")
    assert "grows as slices return" in line
    assert _progress_lines(BoardHeader(cells={**cells, "ok": 79, "not_run": 0})) == []


@pytest.mark.parametrize(("device", "says"), [("cuda", "stayed on the cuda machine that ran it"),
                                              ("cpu", "redraw with --rerun-missing")])
def test_a_figure_without_a_cells_candidates_says_where_they_are(tmp_path, device, says):
    """A GPU slice's cell whose candidates did not travel: the figure's reason names the machine they stayed on,
    not a CPU re-run (a paper cell's would take hours here); a CPU cell's keeps the redraw advice."""
    from reconbench.leaderboard.figures import FigureData

    rec = CellRecord.from_dict({"cell_id": "x", "provenance": {"git_commit": None, "device": device}})
    with pytest.raises(FileNotFoundError, match=says):
        FigureData(tmp_path, None).pooled(rec)
