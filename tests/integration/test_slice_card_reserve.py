"""Training in pieces ends inside the seconds it was given, the cards made at its end included. A stack priced at
a slower rate than it steps at (two targets at the one-target rate) was given all the time left, as if it could not
end there; it ended, and its cards (a stationarity certificate each) ran past the slice's stop. Here a tick clock is
the slice's only view of time and each card costs the seconds the table prices it at, so a stack that ends early
must leave them room, or stop before its last window and leave the end to the next slice."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import ParamSpec, TypeVar

import pytest
from _helpers.slicekit import TickClock, digits_sizes

from reconbench.bench.runner import run_suite
from reconbench.bench.slice_costs import SAFETY_SECONDS, CostModel
from reconbench.bench.slice_executor import DeadlineExecutor
from reconbench.bench.suite import load_suite
from reconbench.records.cost_table import CostTable, PhaseCost
from reconbench.targets import resumable

pytestmark = pytest.mark.usefixtures("one_torch_thread")

P = ParamSpec("P")
R = TypeVar("R")
STEPS = 1200
#: the seconds the table prices one target's card at, and the seconds each card takes on the tick clock
CARD = 15.0
SUITE = f"""
[suite]
name = "card-reserve"
description = "Two digits targets of one shape, trained in pieces as one stack."
seeds = [0]
device = "cpu"
dtype = "float64"
search_runs = 2

[protocol]
figures = false

[leaderboard]
store_candidates = 1
sample_images = 4

[targets.a]
dataset = "digits"
task = "binary"
binary_rule = "parity"
n_per_class = 5
family = "mlp"
widths = [16]
loss = "bce"
lr = 0.5
steps = {STEPS}
seed = 0

[targets.b]
dataset = "digits"
task = "binary"
binary_rule = "parity"
n_per_class = 5
family = "mlp"
widths = [16]
loss = "bce"
lr = 0.5
steps = {STEPS}
seed = 1

[attacks.haim_binary_kkt]
config = {{ steps = 20 }}

[inits.gaussian]

[[grid]]
targets = ["a", "b"]
attacks = ["haim_binary_kkt"]
inits = ["gaussian"]
"""


def slow_priced() -> CostModel:
    """Training priced far slower than the tick clock lets it step (it cannot end in any deadline here, by the
    price), each card at ``CARD`` seconds, the rest at a second."""
    one = PhaseCost(fixed=1.0, rate=0.0)
    return CostModel(prior=CostTable(train=PhaseCost(fixed=1.0, rate=1.0), attack=one, evaluate=one,
                                     card=PhaseCost(fixed=CARD, rate=0.0)))


def taking(seconds: float, clock: TickClock, ends: list[float], make: Callable[P, R]) -> Callable[P, R]:
    """``make`` (a card's making) taking ``seconds`` of ``clock``; the clock's reading when each ends goes to
    ``ends``."""

    def timed(*args: P.args, **kwargs: P.kwargs) -> R:
        clock.now += seconds
        made = make(*args, **kwargs)
        ends.append(clock.now)
        return made

    return timed


def run_slice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, deadline: float) -> tuple[DeadlineExecutor, list[float]]:
    """A slice of the two targets with ``deadline``; each card takes ``CARD`` seconds of the clock. The executor and
    the clock's reading at the end of each card."""
    path = tmp_path / "card-reserve.toml"
    path.write_text(SUITE)
    suite = load_suite(str(path))
    clock = TickClock()
    ends: list[float] = []
    monkeypatch.setattr(resumable, "_finish", taking(CARD, clock, ends, resumable._finish))
    ex = DeadlineExecutor(deadline, slow_priced(), digits_sizes(suite), start=0.0, clock=clock,
                          states=tmp_path / "cache" / "training")
    run_suite(suite, tmp_path / "out", cache=str(tmp_path / "cache"), quiet=True, executor=ex)
    return ex, ends


def test_a_stack_faster_than_its_price_stops_before_its_last_window_when_its_cards_would_pass_the_deadline(
        tmp_path, monkeypatch):
    """The ticks of the whole training (about three a window of 100 steps) fit the deadline; with its two cards they
    do not: the stack stops one window short, unfinished, and no card passes the deadline."""
    ex, ends = run_slice(tmp_path, monkeypatch, 60.0)
    assert len(ex.pieces) == 2 and {p.stacked for p in ex.pieces} == {2}
    assert all(e <= ex.deadline for e in ends), ends
    assert ends == [] and all(not p.finished for p in ex.pieces)
    # it stopped at the window that would have ended the training, not earlier: the time was not spent idle
    assert {p.step for p in ex.pieces} == {STEPS - resumable.LOSS_EVERY}


def test_a_stack_whose_cards_fit_ends_and_makes_them_inside_the_deadline(tmp_path, monkeypatch):
    ex, ends = run_slice(tmp_path, monkeypatch, 200.0)
    assert all(p.finished and p.step == STEPS for p in ex.pieces[:2])
    assert len(ends) == 2 and ends[-1] <= ex.deadline - SAFETY_SECONDS
