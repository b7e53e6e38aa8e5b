"""Outside submissions: the external example attack of CONTRIBUTING.md run on part of the `ci` suite, packed with
`leaderboard submit` and merged into a ci board with `leaderboard add`; refusals of a changed suite, a tampered
number, a dirty checkout and an edited file; the merged cells kept when the board is published again (dropped, with
the reason, when the suite file changed) and marked in its exports."""

from __future__ import annotations

import base64
import csv
import importlib.util
import io
import json
import shutil
import sys
from pathlib import Path

import pytest
from _helpers.cli import run_cli

from reconbench import plugins, provenance
from reconbench.bench.entries import ENTRY_SCHEMA
from reconbench.bench.runner import run_suite
from reconbench.bench.seal import sealed
from reconbench.bench.suite import find_suite, load_suite
from reconbench.leaderboard import render as render_mod
from reconbench.leaderboard.accept import add_submission
from reconbench.leaderboard.manifest import write_manifest
from reconbench.leaderboard.render import build_leaderboard
from reconbench.leaderboard.results_file import read_results
from reconbench.leaderboard.slim import slim_board
from reconbench.leaderboard.submit import SUBMISSION_FORMAT, pack, submission_text

EXAMPLE = (Path(__file__).resolve().parents[2] / "examples" / "reconbench-naive-attack" / "src"
           / "reconbench_naive_attack.py")
#: the contributor's tables, appended to the ci suite file: the example attack on one of the board's targets
ADDITION = """
# -- an outside submission: the example attack of CONTRIBUTING.md ---------------------------------------------------
[attacks.naive_margin]
config = { steps = 40 }
search_runs = 2

[[grid]]
targets = ["digits-binary"]
attacks = ["naive_margin"]
inits = ["gaussian"]
"""
#: the part of the ci suite the board is rendered from (the rest of its cells are 'not run')
BOARD_CELLS = "digits-binary--haim_binary_kkt--gaussian--*"
NAIVE_CELLS = ("digits-binary--naive_margin--gaussian--s0", "digits-binary--naive_margin--gaussian--s1")
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _load_example():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("reconbench_naive_attack", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A ci board rendered from two cells of the suite, and the contributor's run of the example attack with the ci
    suite file and ADDITION appended (clean commit COMMIT); the example plugin registered only while it runs."""
    folder = tmp_path_factory.mktemp("submit")
    ci = load_suite("ci")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RECONBENCH_CACHE", str(folder / "cache"))
        mp.setenv("RECONBENCH_DOWNLOAD", "0")
        mp.setattr(provenance, "git_commit", lambda path=None: COMMIT)
        run_suite(ci, folder / "res", only=(BOARD_CELLS,), quiet=True, command="reconbench bench ci")
        build_leaderboard(ci, folder / "res", folder / "board", command="test", figures=False)
        suite_file = folder / "ci-plus-naive.toml"
        suite_file.write_text(find_suite("ci").read_text() + ADDITION)
        host = plugins.host()
        name = host.register(_load_example(), name="example-naive-submit")
        try:
            run_suite(load_suite(suite_file, strict=True), folder / "contrib", only=("*naive_margin*",), quiet=True,
                      command=f"reconbench bench {suite_file} --only '*naive_margin*'")
        finally:
            host.unregister(name)
    return folder


def board_copy(runs: Path, tmp_path: Path) -> Path:
    board = tmp_path / "ci"
    shutil.copytree(runs / "board", board)
    return board


def packed(runs: Path, board: Path, tmp_path: Path, change=None) -> Path:  # type: ignore[no-untyped-def]
    sub = pack(runs / "contrib", board, contributor="example")
    if change is not None:
        change(sub)
    path = tmp_path / "submission.json"
    path.write_text(submission_text(sub))
    return path


@pytest.mark.parametrize("slim", [False, True], ids=["full-board", "slim-board"])
def test_the_example_attack_is_submitted_and_merged_into_a_ci_board(runs, tmp_path, capsys, slim):
    board = board_copy(runs, tmp_path)
    if slim:  # the board as published: slim entries, candidates of a sample of cells
        slim_board(load_suite("ci"), board)
    before = json.loads((board / "results.json").read_text())
    out = tmp_path / "naive.json"
    code, text, err = run_cli(["leaderboard", "submit", str(runs / "contrib"), "--board", str(board), "--out",
                               str(out), "--contributor", "example"], capsys)
    assert code == 0, err
    sub = json.loads(out.read_text())
    assert sub["format"] == SUBMISSION_FORMAT and sub["suite_addition"] == ADDITION
    assert sorted(e["cell_id"] for e in sub["entries"]) == list(NAIVE_CELLS)
    assert {e["entry"]["schema"] for e in sub["entries"]} == {ENTRY_SCHEMA}
    assert set(sub["candidates"]) == set(NAIVE_CELLS)
    code, text, err = run_cli(["leaderboard", "add", str(out), "--board", str(board)], capsys)
    assert code == 0, err
    assert "2 cell(s), 2 re-scored" in text
    data = json.loads((board / "results.json").read_text())
    (record,) = data["header"]["submissions"]
    assert record["cells"] == list(NAIVE_CELLS) and record["contributor"] == "example"
    assert (board / "submissions" / f"{record['id']}.toml").read_text() == ADDITION
    pool = {r["attack"]: r for r in data["tables"]["pool"]}
    assert set(pool) == {"haim_binary_kkt", "naive_margin"}
    assert pool["naive_margin"]["outside"] == [record["id"]] and "outside" not in pool["haim_binary_kkt"]
    assert sorted(pool["naive_margin"]["cells"]) == list(NAIVE_CELLS)
    # the merged row's numbers are the submitted entries' own (the mean over the two seeds)
    first = data["columns"][0]
    values = []
    for e in sub["entries"]:
        summary = e["selections"]["pool"]["summary"]
        values.append(float(summary[pool["naive_margin"]["metrics"][first["name"]]["key"]]))
    assert pool["naive_margin"]["metrics"][first["name"]]["values"] == pytest.approx(values)
    assert data["header"]["cells"]["ok"] == before["header"]["cells"]["ok"] + 2
    readme = (board / "README.md").read_text()
    assert "## Outside submissions" in readme and "naive_margin (outside)" in readme
    assert all((board / "cells" / f"{c}.json").exists() for c in NAIVE_CELLS)
    # the merged board passes --verify: tables, README (rendered with the submission's tables) and re-scoring
    code, text, err = run_cli(["leaderboard", "ci", "--out", str(board), "--verify"], capsys)
    assert code == 0, err + text
    # the same submission again: its cells are on the board now
    code, text, err = run_cli(["leaderboard", "add", str(out), "--board", str(board)], capsys)
    assert code == 2 and "already took in this submission" in err


def test_a_run_of_another_suite_version_is_refused(runs, tmp_path, capsys):
    board = board_copy(runs, tmp_path)
    data = json.loads((board / "results.json").read_text())
    data["header"]["suite_sha256"] = "f" * 64     # the board was rendered from another version of ci.toml
    (board / "results.json").write_text(json.dumps(data))
    write_manifest(board)  # the manifest made to agree: the suite check must refuse on its own
    code, _, err = run_cli(["leaderboard", "submit", str(runs / "contrib"), "--board", str(board), "--out",
                            str(tmp_path / "s.json")], capsys)
    assert code == 2 and "does not begin with the suite file" in err and "append your tables" in err
    # a submission packed against the right board, added to the other one
    good = board_copy(runs, tmp_path / "good")
    path = packed(runs, good, tmp_path)
    report = add_submission(path, load_suite("ci"), board)
    assert len(report.refusals) == 1 and "another version of the ci suite file" in report.refusals[0]
    assert not (board / "submissions").exists()


def _tamper(sub: dict, reseal: bool) -> None:  # type: ignore[type-arg]
    entry = sub["entries"][0]
    summary = entry["selections"]["pool"]["summary"]
    summary["top_k_mean_ssim"] = float(summary["top_k_mean_ssim"]) + 0.05
    if reseal:  # a careful tamperer recomputes both seals: re-scoring still finds the number
        sealed(entry)
        sealed(sub)


@pytest.mark.parametrize("reseal", [False, True])
def test_a_tampered_number_is_refused_and_nothing_is_merged(runs, tmp_path, reseal):
    board = board_copy(runs, tmp_path)
    before = (board / "results.json").read_text()
    path = packed(runs, board, tmp_path, lambda s: _tamper(s, reseal))
    report = add_submission(path, load_suite("ci"), board)
    assert report.refusals
    if reseal:
        assert any(f"{NAIVE_CELLS[0]} [pool] top_k_mean_ssim" in r and "re-scored" in r for r in report.refusals)
        assert any(r.startswith(f"{NAIVE_CELLS[0]}: summary top_k_mean_ssim") for r in report.refusals)
    else:
        assert report.refusals == ["the submission file was edited after it was packed (its record_sha256 does not "
                                   "match); pack it again with `reconbench leaderboard submit`"]
    assert (board / "results.json").read_text() == before
    assert not any((board / "cells" / f"{c}.json").exists() for c in NAIVE_CELLS)


def test_cells_from_a_dirty_checkout_are_refused(runs, tmp_path):
    board = board_copy(runs, tmp_path)

    def dirty(sub: dict) -> None:  # type: ignore[type-arg]
        for entry in sub["entries"]:
            entry["provenance"]["git_commit"] = COMMIT + "-dirty"
            sealed(entry)
        sealed(sub)

    report = add_submission(packed(runs, board, tmp_path, dirty), load_suite("ci"), board)
    assert len(report.refusals) == 2
    assert all("a dirty checkout" in r and "commit your changes" in r for r in report.refusals)
    assert {r.split(":")[0] for r in report.refusals} == {f"cell {c}" for c in NAIVE_CELLS}


def test_candidates_that_are_not_safetensors_and_an_unknown_target_are_refused(runs, tmp_path):
    board = board_copy(runs, tmp_path)

    def broken(sub: dict) -> None:  # type: ignore[type-arg]
        sub["candidates"][NAIVE_CELLS[0]] = base64.b64encode(b"not a tensor file").decode()
        sealed(sub)

    report = add_submission(packed(runs, board, tmp_path, broken), load_suite("ci"), board)
    assert report.refusals == [f"cell {NAIVE_CELLS[0]}: its candidates are not base64 safetensors "
                               "(SafetensorError); pack it again"]
    key = json.loads((board / "cells" / "digits-binary--haim_binary_kkt--gaussian--s0.json").read_text())[
        "target"]["recipe_key"]
    (board / "targets" / f"{key}.json").unlink()
    write_manifest(board)  # the manifest made to agree: the target check must refuse on its own
    report = add_submission(packed(runs, board, tmp_path), load_suite("ci"), board)
    assert any(f"the board has no target with recipe hash {key}" in r for r in report.refusals)


def test_a_target_trained_to_other_numbers_than_the_boards_card_is_refused(runs, tmp_path):
    board = board_copy(runs, tmp_path)
    card_key = json.loads((board / "cells" / "digits-binary--haim_binary_kkt--gaussian--s0.json").read_text())[
        "target"]["recipe_key"]
    card = json.loads((board / "targets" / f"{card_key}.json").read_text())
    board_error = card["metrics"]["test_error"]

    def elsewhere(sub: dict) -> None:  # type: ignore[type-arg]
        entry = next(e for e in sub["entries"] if e["cell_id"] == NAIVE_CELLS[0])
        metrics = {k: v for k, v in card["metrics"].items() if k != "margins"}
        entry["target"]["train_metrics"] = {**metrics, "test_error": board_error + 0.125}
        sealed(entry)
        sealed(sub)

    report = add_submission(packed(runs, board, tmp_path, elsewhere), load_suite("ci"), board)
    assert len(report.refusals) == 1
    assert f"cell {NAIVE_CELLS[0]}: target train_metrics.test_error is {board_error + 0.125!r}" in report.refusals[0]
    assert "the cell's target is not the board's" in report.refusals[0]


def _merged_board(runs: Path, tmp_path: Path) -> tuple[Path, str]:
    """A published-form copy of the board with the example submission taken in; the submission's id."""
    board = board_copy(runs, tmp_path)
    slim_board(load_suite("ci"), board)
    report = add_submission(packed(runs, board, tmp_path), load_suite("ci"), board)
    assert report.refusals == [] and report.cells == list(NAIVE_CELLS)
    return board, report.submission


def test_outside_cells_survive_republication_and_exports_mark_them(runs, tmp_path, capsys, monkeypatch):
    board, sid = _merged_board(runs, tmp_path)
    stored = sorted((board / "candidates").iterdir())
    monkeypatch.setattr(render_mod, "check_publishable", lambda pub, commit: None)
    data = build_leaderboard(load_suite("ci"), runs / "res", board, command="test", figures=False, publish=True)
    assert data["dropped_submissions"] == []
    assert [s["id"] for s in read_results(board)["header"]["submissions"]] == [sid]
    assert all((board / "cells" / f"{c}.json").exists() for c in NAIVE_CELLS)
    assert (board / "submissions" / f"{sid}.toml").read_text() == ADDITION
    assert sorted((board / "candidates").iterdir()) == stored   # the outside sample's candidates are kept too
    pool = {r["attack"]: r for r in read_results(board)["tables"]["pool"]}
    assert pool["naive_margin"]["outside"] == [sid] and sorted(pool["naive_margin"]["cells"]) == list(NAIVE_CELLS)
    assert "naive_margin (outside)" in (board / "README.md").read_text()
    code, text, err = run_cli(["leaderboard", "ci", "--out", str(board), "--verify"], capsys)
    assert code == 0, err + text
    # the exports carry the mark README.md shows: the marked attack (wide tables), the submission's id (long records)
    code, md, err = run_cli(["leaderboard", "ci", "--out", str(board), "--format", "markdown"], capsys)
    assert code == 0, err
    marked = [line for line in md.splitlines() if "naive_margin" in line]
    assert marked and all("naive_margin (outside)" in line for line in marked)
    assert not any("haim_binary_kkt (outside)" in line for line in md.splitlines())
    code, csv_text, err = run_cli(["leaderboard", "ci", "--out", str(board), "--format", "csv"], capsys)
    rows = list(csv.DictReader(io.StringIO(csv_text)))
    assert {r["outside"] for r in rows if r["attack"] == "naive_margin"} == {sid}
    assert {r["outside"] for r in rows if r["attack"] != "naive_margin"} == {""}
    code, latex, err = run_cli(["leaderboard", "ci", "--out", str(board), "--format", "latex"], capsys)
    assert code == 0 and "naive\\_margin (outside)" in latex, err


def test_republication_with_another_suite_file_drops_the_submission_and_says_why(runs, tmp_path, capsys,
                                                                                monkeypatch):
    board, sid = _merged_board(runs, tmp_path)
    changed = tmp_path / "ci.toml"   # the suite file edited since the submission ran with it
    changed.write_text(find_suite("ci").read_text() + "\n# a changed suite file\n")
    monkeypatch.setattr(render_mod, "check_publishable", lambda pub, commit: None)
    data = build_leaderboard(load_suite(changed), runs / "res", board, command="test", figures=False, publish=True)
    assert len(data["dropped_submissions"]) == 1
    assert data["dropped_submissions"][0].startswith(f"outside submission {sid} (2 cell(s)) dropped: the suite file "
                                                     "changed")
    assert not any((board / "cells" / f"{c}.json").exists() for c in NAIVE_CELLS)
    assert not (board / "submissions").exists() or not list((board / "submissions").iterdir())
    assert "submissions" not in read_results(board)["header"]
    assert "(outside)" not in (board / "README.md").read_text()
