"""An honest outside submission made "on another machine" (its own target cache: the board's targets trained again
from their recipes, with other wall-clock seconds) is accepted and the merged board verifies; a submission whose
target has other weights, or whose deterministic training metrics differ, is refused in one short line. The board
is a published tiny suite; the contributor appends an attack table to its suite file."""

from __future__ import annotations

import json
import shutil
from collections import OrderedDict
from pathlib import Path

import pytest
from _helpers.cli import run_cli
from _helpers.suitekit import TOY_SUITE

from reconbench import plugins, provenance
from reconbench.bench.runner import run_suite
from reconbench.bench.seal import sealed
from reconbench.bench.suite import load_suite
from reconbench.leaderboard import render as render_mod
from reconbench.leaderboard.accept import add_submission
from reconbench.leaderboard.render import build_leaderboard
from reconbench.leaderboard.submit import pack, submission_text
from reconbench.targets import defended

ADDITION = """
[attacks.toy_outside]
attack = "toy_identity"
config = { steps = 2 }

[[grid]]
targets = ["bin"]
attacks = ["toy_outside"]
"""
COMMIT = "0123456789abcdef0123456789abcdef01234567"
#: the longest refusal line a user should have to read
MAX_LINE = 400


@pytest.fixture(scope="module")
def two_machines(tmp_path_factory):
    """The board published from one target cache, the contributor's cells run with another (the targets trained
    again there), both at the clean commit COMMIT."""
    from conftest import ToyPlugin

    folder = tmp_path_factory.mktemp("honest")
    board_suite = folder / "toy.toml"
    board_suite.write_text(TOY_SUITE)
    theirs = folder / "toy-plus.toml"
    theirs.write_text(TOY_SUITE + ADDITION)
    host = plugins.host()
    name = host.register(ToyPlugin(), name="toy-honest-plugin")
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(provenance, "git_commit", lambda path=None: COMMIT)
            mp.setattr(render_mod, "check_publishable", lambda pub, commit: None)
            mp.setenv("RECONBENCH_CACHE", str(folder / "board-cache"))
            run_suite(load_suite(board_suite), folder / "res", only=("bin--*",), quiet=True,
                      command="reconbench bench toy")
            build_leaderboard(load_suite(board_suite), folder / "res", folder / "board", figures=False, publish=True)
            mp.setenv("RECONBENCH_CACHE", str(folder / "contributor-cache"))   # another machine: nothing cached,
            mp.setattr(defended, "_TRAINED", OrderedDict())   # nor remembered by this process
            run_suite(load_suite(theirs, strict=True), folder / "contrib", only=("*toy_outside*",), quiet=True,
                      command=f"reconbench bench {theirs} --only '*toy_outside*'")
    finally:
        host.unregister(name)
    assert (folder / "contributor-cache" / "targets").is_dir()
    return folder


def _board(folder: Path, tmp_path: Path) -> Path:
    board = tmp_path / "board"
    shutil.copytree(folder / "board", board)
    return board


def _packed(folder: Path, board: Path, tmp_path: Path, change=None) -> Path:  # type: ignore[no-untyped-def]
    sub = pack(folder / "contrib", board, contributor="someone elsewhere")
    if change is not None:
        change(sub)
        sealed(sub)
    path = tmp_path / "submission.json"
    path.write_text(submission_text(sub))
    return path


@pytest.mark.slow
def test_an_honest_submission_from_another_target_cache_is_accepted_and_verifies(two_machines, tmp_path, capsys,
                                                                                 toy_attack_registered):
    board = _board(two_machines, tmp_path)
    path = _packed(two_machines, board, tmp_path)
    sub = json.loads(path.read_text())
    (key,) = sub["cards"]
    board_card = json.loads((board / "targets" / f"{key}.json").read_text())
    # trained again elsewhere: the same weights, other seconds
    assert sub["cards"][key]["weights"]["sha256"] == board_card["weights"]["sha256"]
    assert sub["cards"][key]["metrics"]["train_seconds"] != board_card["metrics"]["train_seconds"]
    report = add_submission(path, load_suite(two_machines / "toy.toml"), board)
    assert report.refusals == [] and len(report.cells) == 2
    code, out, err = run_cli(["leaderboard", str(two_machines / "toy.toml"), "--out", str(board), "--verify"], capsys)
    assert code == 0, err


def _other_weights(sub: dict) -> None:  # type: ignore[type-arg]
    for card in sub["cards"].values():
        card["weights"]["sha256"] = "0" * 64


def _other_test_error(sub: dict) -> None:  # type: ignore[type-arg]
    for entry in sub["entries"]:
        metrics = entry["target"]["train_metrics"]
        assert isinstance(metrics, dict)   # not "card": its seconds differ from the board card's
        metrics["test_error"] = float(metrics["test_error"]) + 0.25
        sealed(entry)


@pytest.mark.slow
@pytest.mark.parametrize(("change", "says"), [(_other_weights, "weights sha256"),
                                               (_other_test_error, "train_metrics.test_error")])
def test_a_submission_on_another_target_is_refused_in_one_short_line(two_machines, tmp_path, change, says,
                                                                   toy_attack_registered):
    board = _board(two_machines, tmp_path)
    before = (board / "results.json").read_text()
    report = add_submission(_packed(two_machines, board, tmp_path, change), load_suite(two_machines / "toy.toml"),
                            board)
    assert report.refusals and all(says in r for r in report.refusals), report.refusals
    assert all(len(r) <= MAX_LINE and "\n" not in r for r in report.refusals), [len(r) for r in report.refusals]
    assert (board / "results.json").read_text() == before
