"""Cards in a slice plan (reconbench/bench/slice_costs.py): a target's card is made when its training ends, in that
slice, and rebuilt from its final state in each later slice that runs its cells; where the cost table prices cards,
training ends in a slice only when its cards fit after it. Plans counted by hand on a synthetic table: training
5 s of set-up plus 1 s per unit, attack 1 s per unit, a card 0.5 s per unit of n x P (100 units: 50 s), slices of
200 s, a cell's estimate 1.25 x attack + 2 s."""

from __future__ import annotations

import pytest

from reconbench.bench.slice_costs import CellWork, CostModel, plan_slices
from reconbench.records.cost_table import CostTable, PhaseCost

ZERO = PhaseCost(fixed=0.0, rate=0.0)


def table(card: PhaseCost | None) -> CostTable:
    return CostTable(train=PhaseCost(fixed=5.0, rate=1.0), attack=PhaseCost(fixed=0.0, rate=1.0), evaluate=ZERO,
                     card=card)


def work(train: float, attack: float) -> CellWork:
    return CellWork("c", "t", train, attack, 0.0, pieces=True, group="g", runs=1, steps=1, card=100.0)


CARD = PhaseCost(fixed=0.0, rate=0.5)


def test_training_and_its_card_end_in_the_slice_when_both_fit():
    """100 units: 5 + 100 + 50 = 155 s, then the cell (1.25 x 20 + 2 = 27 s): 182 s in one slice."""
    plan = plan_slices([work(100.0, 20.0)], CostModel(prior=table(CARD)), 200.0)
    assert plan.slices == [["c"]] and plan.seconds == pytest.approx([182.0])
    assert plan.training == [{"g": pytest.approx(155.0)}] and plan.training_cards == [{"g": 50.0}]


def test_training_stops_short_when_its_card_would_not_fit_after_it():
    """150 units: 150 + 50 passes the 193 s training may take (200 - 2 - 5), so slice 1 trains 143 s and leaves 7;
    slice 2 trains them, makes the card and runs the cell: 5 + 7 + 50 + 27 = 89 s. Without a card price the training
    ends in slice 1 (155 s) and the cell follows there (182 s)."""
    plan = plan_slices([work(150.0, 20.0)], CostModel(prior=table(CARD)), 200.0)
    assert plan.slices == [[], ["c"]] and plan.seconds == pytest.approx([148.0, 89.0])
    assert plan.training_cards == [{}, {"g": 50.0}]
    free = plan_slices([work(150.0, 20.0)], CostModel(prior=table(None)), 200.0)
    assert free.slices == [["c"]] and free.seconds == pytest.approx([182.0])


def test_a_later_slice_rebuilds_the_card_first_and_a_cell_that_cannot_follow_a_rebuild_fits_none():
    """A cell of 1.25 x 110 + 2 = 139.5 s does not follow the 155 s of training; slice 2 rebuilds the card (50 s) and
    runs it: 189.5 s. A cell of 1.25 x 120 + 2 = 152 s with the rebuild (202 s) fits no slice of 200 s, so its target
    is not trained at all; without a card price the rebuild costs the training's set-up (5 s) and it fits."""
    plan = plan_slices([work(100.0, 110.0)], CostModel(prior=table(CARD)), 200.0)
    assert plan.slices == [[], ["c"]] and plan.cards == [0, 1] and plan.card_seconds == [0.0, 50.0]
    assert plan.seconds == pytest.approx([155.0, 189.5])
    none = plan_slices([work(100.0, 120.0)], CostModel(prior=table(CARD)), 200.0)
    assert none.slices == [] and none.unfit == {"c": pytest.approx(202.0)}
    free = plan_slices([work(100.0, 120.0)], CostModel(prior=table(None)), 200.0)
    assert free.unfit == {} and free.seconds == pytest.approx([105.0, 157.0])
