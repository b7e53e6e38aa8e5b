"""``--verify --rerun`` on the BLAS path a target and a cell were produced on: a child process asked for the other
path really trains there (its card records it), and where a board's card does not record its path a weights
mismatch on the first path is followed by a training on the other (the trainer stands in; nothing trains twice)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _helpers.suitekit import TOY_SUITE

from reconbench import fast_blas, plugins
from reconbench.bench.suite import load_suite
from reconbench.data import ProblemSpec
from reconbench.leaderboard import render as render_mod
from reconbench.leaderboard.render import build_leaderboard
from reconbench.leaderboard.rerun import rerun_checked
from reconbench.leaderboard.rerun_paths import Trained, other_path, train_here, train_on_path
from reconbench.targets.cards import load_card
from reconbench.targets.recipe import TargetRecipe, TrainSpec

RECIPE = TargetRecipe(problem=ProblemSpec(task="binary", n_per_class=3), model={"widths": [8]},
                      train=TrainSpec(lr=0.05, steps=10))
#: one target, one attack, one seed: the smallest board with a cell to re-run
SUITE = TOY_SUITE.replace("seeds = [0, 1]", "seeds = [0]").replace('targets = ["bin", "mc"]', 'targets = ["bin"]')


def test_a_child_on_the_other_path_trains_there(tmp_path, monkeypatch):
    here = fast_blas.current_path()
    there = other_path(here)
    if there == fast_blas.FAST and (why := fast_blas.unsupported_reason()) is not None:
        pytest.skip(f"the fast BLAS path is not available on this machine: {why}")
    monkeypatch.setenv("RECONBENCH_CACHE", str(tmp_path / "home-cache"))   # where the shim is compiled
    got = train_on_path("cpu", None, 1)(RECIPE.to_dict(), there, tmp_path / "staged")
    assert got.note is None and got.path == there
    card = load_card(tmp_path / "staged" / "targets" / RECIPE.key())
    assert card.record.training_path == there   # the child process itself recorded the path it ran on
    assert card.record.weights is not None and card.record.weights.sha256 == got.sha256
    train_here(RECIPE.to_dict(), tmp_path / "here", None, "cpu")
    here_card = load_card(tmp_path / "here" / "targets" / RECIPE.key())
    assert here_card.record.training_path == here
    if fast_blas.cpu_vendor() == "AuthenticAMD" and card.record.training_machine.blas == "mkl":
        # MKL picks another kernel branch with the shim preloaded: the child really ran with it
        assert card.record.training_machine.branch != here_card.record.training_machine.branch


@pytest.fixture(scope="module")
def board(tmp_path_factory):
    """The smallest toy board, run in its own target cache and published."""
    from conftest import ToyPlugin

    folder = tmp_path_factory.mktemp("paths")
    path = folder / "toy.toml"
    path.write_text(SUITE)
    host = plugins.host()
    name = host.register(ToyPlugin(), name="toy-paths-plugin")
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("RECONBENCH_CACHE", str(folder / "cache"))
            mp.setattr(render_mod, "check_publishable", lambda pub, commit: None)
            from reconbench.bench.runner import run_suite

            run_suite(load_suite(path), folder / "res", quiet=True, command="reconbench bench toy")
            build_leaderboard(load_suite(path), folder / "res", folder / "lb", figures=False, publish=True)
    finally:
        host.unregister(name)
    return path, folder / "lb"


class FirstPathDiffers:
    """A trainer whose first training answers weights other than the card's (without training), and whose second
    trains for real in this process, whatever path it is asked for."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __call__(self, recipe, path: str, staged: Path) -> Trained:
        self.calls.append(path)
        staged.mkdir(parents=True, exist_ok=True)
        if len(self.calls) == 1:
            return Trained(path, "0" * 64, staged)
        out = train_here(recipe, staged, None, "cpu")
        return Trained(path, out["weights_sha256"], staged)


def _card_file(lb: Path) -> Path:
    cards = sorted((lb / "targets").glob("*.json"))
    assert len(cards) == 1
    return cards[0]


def test_a_card_without_its_path_is_trained_again_on_the_other_path(board, toy_attack_registered):
    path, lb = board
    card = _card_file(lb)
    data = json.loads(card.read_text())
    assert data["training_machine"]["fast_path"] is fast_blas.active()   # a new board's card records its path
    card.write_text(json.dumps({k: v for k, v in data.items() if k != "training_machine"}))   # as published ones
    try:
        trainer = FirstPathDiffers()
        cells = sorted(p.stem for p in (lb / "cells").glob("*.json"))
        report = rerun_checked(load_suite(path), lb, cells, trainer=trainer)
    finally:
        card.write_text(json.dumps(data))
    here = fast_blas.current_path()
    assert trainer.calls == [here, other_path(here)]
    assert report.problems == []
    assert report.lines == [f"target {card.stem} reproduced on the {other_path(here)} path (on the {here} path its "
                            f"weights were {'0' * 16}); the card does not record its path"]


def test_a_card_with_its_path_is_trained_there_once(board, toy_attack_registered):
    path, lb = board
    trainer = FirstPathDiffers()
    cells = sorted(p.stem for p in (lb / "cells").glob("*.json"))
    report = rerun_checked(load_suite(path), lb, cells, trainer=trainer)
    assert trainer.calls == [fast_blas.current_path()]
    assert len(report.problems) == 1 and "0" * 16 in report.problems[0]   # the stand-in's weights are reported
