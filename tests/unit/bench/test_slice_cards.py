"""Cards in a slice plan (reconbench/bench/slice_costs.py): a target's card is made when its training ends, in that
slice, and travels beside its final state: a later slice that runs its cells restores it where the walk reaches
them (a card that did not travel is rebuilt), only where one of its cells fits after it, and runs its cells right
after it, before any other card; where the cost table prices cards, training ends in a slice only when its cards
fit after it. Plans counted by hand on a synthetic table: training 5 s of set-up plus 1 s per unit, attack 1 s per
unit, a card 0.5 s per unit of n x P (100 units: 50 s), slices of 200 s, a cell's estimate 1.25 x attack + 2 s."""

from __future__ import annotations

from dataclasses import replace

import pytest

from reconbench.bench.slice_costs import CellWork, CostModel, GroupRules, plan_slices
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


def test_a_later_slice_restores_the_card_that_travelled_and_a_cell_may_then_follow_it():
    """The card made at the end of slice 1's training travels beside the final state, so slice 2 restores it (priced
    as a training piece's set-up, 5 s) instead of rebuilding it (50 s): a cell of 1.25 x 110 + 2 = 139.5 s, which
    does not follow the 155 s of training, runs in slice 2 after the restore (144.5 s); so does a cell of
    1.25 x 120 + 2 = 152 s (157 s), which would not follow a rebuild (202 s). Without a card price a restore costs
    the same set-up."""
    plan = plan_slices([work(100.0, 110.0)], CostModel(prior=table(CARD)), 200.0)
    assert plan.slices == [[], ["c"]] and plan.seconds == pytest.approx([155.0, 144.5])
    assert plan.cards == [0, 0] and plan.card_seconds == [0.0, 0.0]
    assert plan.cards_restored == [0, 1] and plan.restored_seconds == [0.0, 5.0]
    longer = plan_slices([work(100.0, 120.0)], CostModel(prior=table(CARD)), 200.0)
    assert longer.unfit == {} and longer.seconds == pytest.approx([155.0, 157.0])
    free = plan_slices([work(100.0, 120.0)], CostModel(prior=table(None)), 200.0)
    assert free.unfit == {} and free.seconds == pytest.approx([105.0, 157.0]) and free.cards_restored == [0, 1]


def target(key: str, attack: float) -> CellWork:
    return CellWork(key.upper(), key, 100.0, attack, 0.0, pieces=True, group="g", runs=1, steps=1, card=100.0)


def test_a_card_that_did_not_travel_is_rebuilt_first_and_only_where_a_cell_follows_it():
    """A target trained before the plan (its state at its last step) whose card did not travel (a ledger written
    before cards travelled): slice 1 rebuilds the card (50 s), then its cell (139.5 s): 189.5 s, no training. A cell
    of 152 s cannot follow the rebuild (202 s) and no slice makes the card otherwise: it fits none. Where the card
    travelled (the ledger lists it), slice 1 restores it in 5 s and the 152 s cell follows (157 s)."""
    model = CostModel(prior=table(CARD))
    plan = plan_slices([target("t", 110.0)], model, 200.0, progress={"t": 1.0})
    assert plan.slices == [["T"]] and plan.seconds == pytest.approx([189.5]) and plan.training == [{}]
    assert plan.cards == [1] and plan.card_seconds == [50.0] and plan.cards_restored == [0]
    assert plan.trained_in == {}
    none = plan_slices([target("t", 120.0)], model, 200.0, progress={"t": 1.0})
    assert none.slices == [] and none.unfit == {"T": pytest.approx(202.0)}
    restored = plan_slices([target("t", 120.0)], model, 200.0, progress={"t": 1.0},
                           rules=GroupRules(travelled_cards=frozenset({"t"})))
    assert restored.slices == [["T"]] and restored.seconds == pytest.approx([157.0])
    assert restored.cards == [0] and restored.cards_restored == [1] and restored.restored_seconds == [5.0]


def test_a_card_none_of_whose_cells_fits_after_it_is_not_made_in_that_slice():
    """Two targets trained before the plan, neither card travelled, a cell of 139.5 s each: slice 1 rebuilds x's card
    (50 s), after which x's cell fits (189.5 s); y's card would leave 200 - 100 = 100 s, where y's cell does not fit,
    so slice 1 skips it (both rebuilt first, neither cell would fit: nothing would run); slice 2 rebuilds y's card
    and runs y's cell. By then x's card travelled: a slice that still had x's cells would restore it."""
    model = CostModel(prior=table(CARD))
    plan = plan_slices([target("x", 110.0), target("y", 110.0)], model, 200.0, progress={"x": 1.0, "y": 1.0})
    assert plan.slices == [["X"], ["Y"]] and plan.seconds == pytest.approx([189.5, 189.5])
    assert plan.cards == [1, 1] and plan.cards_skipped == [["y"], []]
    three = [target("x", 110.0), target("y", 110.0), replace(target("x", 20.0), cell_id="X2")]
    again = plan_slices(three, model, 200.0, progress={"x": 1.0, "y": 1.0})
    # x's second cell (27 s) does not follow x's first in slice 1 (216.5 s); slice 2 rebuilds y's card (50 s), whose
    # cell follows (189.5 s), and does not restore x's (5 s): x's second cell would not follow it (221.5 s); slice 3
    # restores it and runs that cell (32 s)
    assert again.slices == [["X"], ["Y"], ["X2"]] and again.seconds == pytest.approx([189.5, 189.5, 32.0])
    assert again.cards == [1, 1, 0] and again.cards_restored == [0, 0, 1] and again.cards_skipped[1] == ["x"]


def finished(keys: str, attack: float = 20.0, cells: int = 1) -> list[CellWork]:
    """One target per letter of ``keys``, trained before the plan: ``cells`` cells each, the first cells of all
    targets, then their second cells, and so on (as a suite's seeds interleave them)."""
    return [replace(target(k, attack), cell_id=f"{k.upper()}{i}") for i in range(cells) for k in keys]


def test_each_restored_card_is_followed_by_its_cells_in_the_same_slice():
    """30 finished targets whose cards travelled, one cell of 1.25 x 20 + 2 = 27 s each: a card restored (5 s) and
    its cell take 32 s, so a slice of 200 s runs 6 of them (192 s) and the suite takes 5 slices. Restoring every card
    whose cell fits after that card alone would spend 150 s on 30 cards and leave room for one cell."""
    keys = "abcdefghijklmnopqrstuvwxyz0123"
    plan = plan_slices(finished(keys), CostModel(prior=table(CARD)), 200.0, progress=dict.fromkeys(keys, 1.0),
                       rules=GroupRules(travelled_cards=frozenset(keys)))
    assert not plan.unfit and [len(ids) for ids in plan.slices] == [6] * 5
    assert plan.seconds == pytest.approx([192.0] * 5) and plan.cards == [0] * 5
    for ids, restored in zip(plan.slices, plan.cards_restored, strict=True):
        assert restored == len({cid[0] for cid in ids})   # each card restored is that of a cell the slice runs


def test_a_card_s_cells_follow_it_before_the_next_card():
    """Targets a, b, c, two cells each of 27 s, in the order A0 B0 C0 A1 B1 C1: a slice restores a's card and runs
    A0 and A1, then b's card, B0, B1, then c's (3 x 59 = 177 s); in 120 s, a's card and cells (59 s) and b's (118 s):
    c's card waits for slice 2, which runs it with C0 and C1."""
    model = CostModel(prior=table(CARD))
    rules = GroupRules(travelled_cards=frozenset("abc"))
    roomy = plan_slices(finished("abc", cells=2), model, 200.0, progress=dict.fromkeys("abc", 1.0), rules=rules)
    assert roomy.slices == [["A0", "A1", "B0", "B1", "C0", "C1"]] and roomy.seconds == pytest.approx([177.0])
    tight = plan_slices(finished("abc", cells=2), model, 120.0, progress=dict.fromkeys("abc", 1.0), rules=rules)
    assert tight.slices == [["A0", "A1", "B0", "B1"], ["C0", "C1"]]
    assert tight.cards_restored == [2, 1] and tight.cards_skipped == [["c"], []]
