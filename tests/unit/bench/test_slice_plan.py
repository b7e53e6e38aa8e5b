"""`--plan` with training in pieces (reconbench/bench/slice_costs.py): a target's training is resumable work that the
slices share, its cells are units that must finish inside one slice. The plans are checked against counts worked
out by hand from synthetic cost tables, and the probe's JSON against the cost table it must give."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from _helpers.slicekit import paper_works

from reconbench.bench.cells import expand, select
from reconbench.bench.slice_costs import (
    PRIORS,
    SAFETY_FACTOR,
    SAFETY_SECONDS,
    CellWork,
    CostModel,
    GroupRules,
    break_even_speed,
    cell_work,
    costs_from_probe,
    fits_in,
    group_share,
    pairs_seconds,
    plan_slices,
    read_costs,
    training_seconds,
)
from reconbench.errors import ReconbenchError
from reconbench.records.cost_table import PROBE_SCHEMA, CostTable, PhaseCost

#: the paper board's four KKT targets, one cell of 16 search runs each (in the suite's order)
KKT_CELLS = ["cifar-binary--haim_binary_kkt--gaussian--s0", "mnist-binary--haim_binary_kkt--gaussian--s0",
             "cifar-multiclass--multiclass_kkt--gaussian--s0", "cifar-regression-wd--general_loss_wd--gaussian--s0"]


def paper_piece_works(ids: list[str] | None = None) -> list[CellWork]:
    """paper.toml's cells as a slice with ``--pack`` sees them: its constant-lr MLP targets train in pieces."""
    suite, _, sizes = paper_works()
    cells = expand(suite) if ids is None else [c for c in expand(suite) if c.cell_id in ids]
    return [cell_work(c, sizes[c.recipe.key()], pieces=True) for c in cells]


def fixed_table(train: float, attack: float, evaluate: float) -> dict[str, dict[str, float]]:
    return {"train": {"fixed": train, "rate": 0.0}, "attack": {"fixed": attack, "rate": 0.0},
            "evaluate": {"fixed": evaluate, "rate": 0.0}}


def test_the_kkt_targets_train_in_pieces_and_three_of_them_share_a_stack():
    works = {w.cell_id: w for w in paper_piece_works(KKT_CELLS)}
    assert all(w.pieces for w in works.values())
    cifar, mnist, multiclass, regression = (works[c] for c in KKT_CELLS)
    # CIFAR-10 and MNIST binary and CIFAR-10 regression: one shape past the input (1000-1000-1, n = 500), one output
    # (bce, bce and mse; weight decay 0, 0 and 7.5e-4: each target's own): one stack; 10-class CIFAR-10 (ce) apart
    assert cifar.group == mnist.group == regression.group != multiclass.group
    # the resumable trainer's arithmetic: the layers past the first, plus n w_1 / 3; the input dimension drops out
    _, _, sizes = paper_works()
    p = sizes[cifar.target_key].parameters
    assert p is not None
    past_first = p - 3072 * 1000   # the same for MNIST: its first layer is 784 x 1000
    assert cifar.train == pytest.approx(10**6 * 500 * (past_first + 500 * 1000 / 3), rel=1e-12)
    assert mnist.train == pytest.approx(cifar.train, rel=1e-12)
    # the cell's own estimate holds no training: the slices share it
    assert cifar.units("train", True) == 0.0 and cifar.attack == 16 * 50_000 * 1000 * p


def four_targets(attack: tuple[float, float, float, float]) -> list[CellWork]:
    """The paper board's KKT selection in miniature: targets a and b train as one stack (group g1, like CIFAR-10 and
    MNIST binary), c and d alone (g2, g3), each 100 units of training; one cell each with the given attack units."""
    groups = {"a": "g1", "b": "g1", "c": "g2", "d": "g3"}
    return [CellWork(t.upper(), t, train=100.0, attack=units, evaluate=0.0, pieces=True, group=groups[t])
            for t, units in zip("abcd", attack, strict=True)]


#: one second per unit of training and of attack, a training piece's set-up of 10 s, nothing else
UNIT_TABLE = {"train": {"fixed": 10.0, "rate": 1.0}, "attack": {"fixed": 0.0, "rate": 1.0},
              "evaluate": {"fixed": 0.0, "rate": 0.0}}


def test_four_targets_fit_three_slices_only_when_resumable_training_carries_no_safety_factor():
    """Slices of 346 s; cells a, c, d estimate at 1.25 x 120 + 2 = 152 s, b at 1.25 x 40 + 2 = 52 s; training is
    what it takes (no factor: an overrun is not lost, the state goes on), its set-up of 10 s paid in every slice a
    group trains in, and again for each card a slice restores from the card that travelled beside a final state of
    an earlier slice.

    slice 1: g1 trains 10 + 200 = 210; a (362) does not fit, b does (262); g2 gets 346 - 262 - 2 - 10 = 72 of its
             100 after its set-up (344);
    slice 2: a's card 10, a's cell 152 (162); g2 its set-up and last 28 (200): c is ready, its cell (352) does not
             fit; g3 trains 10 + 100 (310), d's cell (462) does not fit either;
    slice 3: c's and d's cards 20, their cells 2 x 152 (324).
    Priced as before (the cells' factor on training too, the set-up once, cards free: g1 1.25 x 210 = 262.5, g2
    and g3 137.5), the same cells need 1.25 x 430 + 3 x 152 + 52 = 1,045.5 s, more than three slices' 3 x 344:
    four."""
    works = four_targets((120.0, 40.0, 120.0, 120.0))
    model = CostModel.for_device("cuda", UNIT_TABLE)
    assert [model.estimate(w, False) for w in works] == [152.0, 52.0, 152.0, 152.0]
    plan = plan_slices(works, model, 346.0)
    assert plan.slices == [["B"], ["A"], ["C", "D"]] and plan.unfit == {}
    assert plan.seconds == pytest.approx([210 + 52 + 82, 10 + 152 + 38 + 110, 20 + 2 * 152])
    assert plan.training == [pytest.approx({"g1": 210.0, "g2": 82.0}), pytest.approx({"g2": 38.0, "g3": 110.0}),
                             {}]
    assert plan.cards == [0, 0, 0] and plan.cards_restored == [0, 1, 2] and plan.restored_seconds == [0, 10, 20]
    assert plan.cards_skipped == [[], [], []]
    assert plan.trained_in == {"a": 0, "b": 0, "c": 1, "d": 1} and plan.finished_in("ABCD") == 2
    old_work = SAFETY_FACTOR * (210 + 110 + 110) + 3 * 152 + 52
    assert old_work == 1045.5 and math.ceil(old_work / (346 - SAFETY_SECONDS)) == 4


def test_break_even_speed_of_one_target_and_its_cell_is_the_closed_form():
    """One target (T units of training, one stack) and its cell (A attack units, E evaluation units), every fixed
    second 0: at speed s a slice of B seconds holds T/s of training and then the cell's 1.25 (A + E)/s + 2 when
    T/s + 1.25 (A + E)/s + 2 <= B, so the least speed for one slice is (T + 1.25 (A + E)) / (B - 2)."""
    t_units, a_units, e_units, budget = 300.0, 160.0, 40.0, 202.0
    work = CellWork("X", "x", train=t_units, attack=a_units, evaluate=e_units, pieces=True, group="g")
    table = CostTable.of({"train": {"fixed": 0.0, "rate": 1.0}, "attack": {"fixed": 0.0, "rate": 1.0},
                          "evaluate": {"fixed": 0.0, "rate": 1.0}, "peak_fraction": 0.4})
    closed = (t_units + SAFETY_FACTOR * (a_units + e_units)) / (budget - SAFETY_SECONDS)
    assert closed == pytest.approx(2.75)
    speed = break_even_speed([work], table, budget, 1)
    assert speed == pytest.approx(closed, rel=1e-5)
    assert speed is not None and not fits_in([work], table.scaled(speed * (1 - 1e-4)), budget, 1)
    assert table.scaled(speed).peak_fraction == pytest.approx(0.4 * closed, rel=1e-5)
    # two slices: the training fills the first slice's B - 2 s and goes on in the second, where the cell follows
    # it: T/s - (B - 2) + 1.25 (A + E)/s + 2 <= B, i.e. s >= (T + 1.25 (A + E)) / (2 (B - 2)), as long as the cell
    # alone fits a slice (s >= 1.25 (A + E) / (B - 2), here the smaller bound)
    two = break_even_speed([work], table, budget, 2)
    assert two == pytest.approx(closed / 2, rel=1e-5) and closed / 2 > SAFETY_FACTOR * 200.0 / 200.0
    # fixed seconds alone past the budget: no speed fits
    slow = CostTable.of({**UNIT_TABLE, "evaluate": {"fixed": 500.0, "rate": 0.0}})
    assert break_even_speed([work], slow, budget, 3) is None


def test_the_plan_before_training_in_pieces_trained_each_target_in_one_slice():
    """The paper's four KKT cells counted the old way (a target's whole training inside its first cell's slice): a
    200 s training plus a 104 s cell is 1.25 x 304 + 2 = 382 s, so one target per slice, four slices."""
    suite, _, sizes = paper_works()
    cells = [c for c in expand(suite) if c.cell_id in KKT_CELLS]
    whole = [cell_work(c, sizes[c.recipe.key()]) for c in cells]
    plan = plan_slices(whole, CostModel.for_device("cuda", fixed_table(200.0, 100.0, 4.0)), 470.0)
    assert [len(s) for s in plan.slices] == [1, 1, 1, 1]


def test_training_longer_than_a_slice_spreads_over_slices_and_progress_shortens_it():
    """One target whose training needs 1000 s (resumable: no safety factor), one cell of 1.25 x 50 + 2 = 64.5 s
    (and 1.25 x its figure pairs' price: a slice that packs it takes them), slices of 400 s: training fills 398,
    398, then 204 s and the cell in the third. Half the steps done already (a travelling state): 500 s left, 398
    then 102 and the cell in the second."""
    suite, _, sizes = paper_works()
    (cell,) = [c for c in expand(suite) if c.cell_id == KKT_CELLS[2]]
    work = cell_work(cell, sizes[cell.recipe.key()], pieces=True)
    rate = 1000.0 / work.train
    table = {"train": {"fixed": 0.0, "rate": rate}, "attack": {"fixed": 50.0, "rate": 0.0},
             "evaluate": {"fixed": 0.0, "rate": 0.0}}
    plan = plan_slices([work], CostModel.for_device("cuda", table), 400.0)
    assert [len(s) for s in plan.slices] == [0, 0, 1]
    assert [sum(t.values()) for t in plan.training] == pytest.approx([398.0, 398.0, 204.0])
    assert 1.0 < pairs_seconds(work) < 2.0   # a 16-run CIFAR-10 cell's: about 1.5 s
    assert plan.seconds[-1] == pytest.approx(204.0 + 64.5 + 1.25 * pairs_seconds(work))
    half = plan_slices([work], CostModel.for_device("cuda", table), 400.0, progress={work.target_key: 0.5})
    assert [len(s) for s in half.slices] == [0, 1]
    assert [sum(t.values()) for t in half.training] == pytest.approx([398.0, 102.0])


def test_every_paper_cell_is_planned_once_and_no_slice_passes_its_budget() -> None:
    """Invariants on the whole suite with rates (no hand count): each cell once, each slice within the budget, a
    target's training summed over the slices equals its group's need, and no cell runs before its target is trained."""
    works = paper_piece_works()
    table = {"train": {"fixed": 10.0, "rate": 1e-13}, "attack": {"fixed": 5.0, "rate": 1e-14},
             "evaluate": {"fixed": 10.0, "rate": 1e-9}}
    model = CostModel.for_device("cuda", table)
    plan = plan_slices(works, model, 470.0)
    planned = [c for s in plan.slices for c in s]
    # a cell longer than a slice runs its search runs in groups: every run once, the cell in no slice whole
    runs: dict[str, list[int]] = {}
    for planned_groups in plan.groups:
        for pg in planned_groups:
            runs.setdefault(pg.cell_id, []).extend(pg.runs)
    by_id = {w.cell_id: w for w in works}
    assert all(sorted(r) == list(range(by_id[c].runs)) for c, r in runs.items()) and not set(runs) & set(planned)
    assert sorted(planned + list(runs) + list(plan.unfit)) == sorted(w.cell_id for w in works)
    assert len(planned) == len(set(planned))
    assert all(s <= 470.0 + 1e-9 for s in plan.seconds)
    where = {c: i for i, ids in enumerate(plan.slices) for c in ids}
    where.update({g.cell_id: i for i, groups in enumerate(plan.groups) for g in groups})
    for cid, i in where.items():
        w = by_id[cid]
        if w.pieces:
            assert plan.trained_in[w.target_key] <= i
    # each group's training over all slices is what it needs, plus its set-up again in every further slice it
    # trains in (the plan completes every cell that fits)
    need = training_seconds(model, [w for w in works if w.cell_id not in plan.unfit])
    totals: dict[str, float] = {}
    pieces: dict[str, int] = {}
    for t in plan.training:
        for g, sec in t.items():
            totals[g] = totals.setdefault(g, 0.0) + sec
            pieces[g] = pieces.setdefault(g, 0) + 1
    assert need and totals.keys() == need.keys()
    for g, sec in need.items():
        assert totals[g] == pytest.approx(sec + table["train"]["fixed"] * (pieces[g] - 1), rel=1e-9)


def test_the_cuda_prior_plans_no_paper_kkt_cell_its_attack_alone_is_too_long():
    """On the built-in pessimistic table a cell's 16 runs of 50,000 steps (about 6,500 s) fit no slice even though
    training no longer has to, and split into groups the CIFAR-10 cells' single runs (about 410 s each, 512 s with
    the margin) still pass a slice: only MNIST's (a quarter of the first layer) run, in groups of as many runs as a
    slice holds after the training (a group is written, not evaluated: its price holds no evaluation). The probe's
    numbers are what lets a plan schedule the paper's cells."""
    works = paper_piece_works(KKT_CELLS)
    model = CostModel.for_device("cuda")
    plan = plan_slices(works, model, 470.0)
    assert not any(plan.slices) and sorted(plan.unfit) == sorted(c for c in KKT_CELLS if not c.startswith("mnist"))
    rate = PRIORS["cuda"].attack.rate
    assert min(plan.unfit.values()) > SAFETY_FACTOR * rate * min(w.attack for w in works)
    for cid in plan.unfit:   # not even one of its runs fits
        w = next(w for w in works if w.cell_id == cid)
        assert model.estimate(group_share(w, 1), False) > 470.0
    mnist = [g for groups in plan.groups for g in groups]
    assert len({g.cell_id for g in mnist}) == 1
    assert [r for g in mnist for r in g.runs] == list(range(16))   # every run once, in order
    (cid,) = {g.cell_id for g in mnist}
    w = next(w for w in works if w.cell_id == cid)
    k = len(mnist[1].runs)   # a slice after the training: as many runs as fit, and one more would not
    assert model.estimate(group_share(w, k), False) <= 470.0 < model.estimate(group_share(w, k + 1), False)


def probe_rows() -> dict[str, Any]:
    """A probe's JSON (benchmarks/gpu/probe.py's fields) with round numbers."""
    return {"conditions": {"device": "cuda"},
            "trainer": [{"targets": 1, "dtype": "float64", "cuda_graph": True, "flops_per_step": 6e9,
                         "target_steps_per_second": 100.0},
                        {"targets": 4, "dtype": "float64", "cuda_graph": True, "flops_per_step": 24e9,
                         "target_steps_per_second": 200.0},
                        {"targets": 1, "dtype": "float64", "cuda_graph": False, "flops_per_step": 6e9,
                         "target_steps_per_second": 10.0},
                        {"targets": 1, "dtype": "float32", "cuda_graph": True, "flops_per_step": 6e9,
                         "target_steps_per_second": 1000.0}],
            "attack": [{"runs": 16, "m": 1000, "layers": [3072, 1000, 1000, 1], "precision": "tf32",
                        "batch": {"cuda_graph": True}, "seconds_per_step": 0.01},
                       {"runs": 8, "m": 1000, "layers": [3072, 1000, 1000, 1], "precision": "tf32",
                        "batch": {"cuda_graph": True}, "seconds_per_step": 0.009},
                       {"runs": 16, "m": 1000, "layers": [3072, 1000, 1000, 1], "precision": "float64",
                        "batch": {"cuda_graph": True}, "seconds_per_step": 0.1},
                       {"params": [16, "float32", True], "error": "out of memory"}]}


def test_a_cost_table_from_the_probe_by_hand(tmp_path):
    """train: the slowest graph row of float64, one target: 1/100 s per step over 6e9 / 6 = 1e9 units -> 1e-11 s per
    unit (the 4-target stack's 1/200 s over 1e9 per target is faster, the eager row is left out: slices capture).
    attack: 16 runs of TF32 with the graph, 0.01 s per step over 16 x 1000 x 4,073,000 units."""
    table = costs_from_probe(probe_rows())
    assert table.train.rate == pytest.approx(1e-11)
    assert table.attack.rate == pytest.approx(0.01 / (16 * 1000 * (3072 * 1000 + 1000 * 1000 + 1000)))
    assert table.evaluate == PRIORS["cuda"].evaluate
    assert costs_from_probe(probe_rows(), attack_precision="float64").attack.rate == pytest.approx(
        0.1 / (16 * 1000 * 4_073_000))
    assert costs_from_probe(probe_rows(), train_dtype="float32").train.rate == pytest.approx(1e-12)
    path = tmp_path / "probe.json"
    path.write_text(json.dumps(probe_rows()))
    # --costs takes the probe's file as it is: float32 attacks read its TF32 rows
    assert read_costs(path, attack_dtype="float32").attack.rate == pytest.approx(table.attack.rate)
    assert read_costs(path, attack_dtype="float64").attack.rate == pytest.approx(0.1 / (16 * 1000 * 4_073_000))
    # the probe's JSON stamped by today's probe reads the same; a stamp from elsewhere is refused in one line
    path.write_text(json.dumps({"format": PROBE_SCHEMA, **probe_rows()}))
    assert read_costs(path, attack_dtype="float32").attack.rate == pytest.approx(table.attack.rate)
    path.write_text(json.dumps({**probe_rows(), "trainer": [{**probe_rows()["trainer"][0], "flops_per_stp": 1}]}))
    with pytest.raises(ReconbenchError, match=r"unknown key \$\.trainer\[0\]\.flops_per_stp; rename it to "
                                              r"'flops_per_step'"):
        read_costs(path)
    # a precision the probe's budget did not reach is priced as a slower one it measured (pessimistic)
    no_f32 = {**probe_rows(), "trainer": [r for r in probe_rows()["trainer"] if r["dtype"] == "float64"]}
    assert costs_from_probe(no_f32, train_dtype="float32").train.rate == pytest.approx(1e-11)
    no_tf32 = {**probe_rows(), "attack": [r for r in probe_rows()["attack"] if r.get("precision") != "tf32"]}
    assert costs_from_probe(no_tf32).attack.rate == pytest.approx(0.1 / (16 * 1000 * 4_073_000))
    empty = {**probe_rows(), "attack": [probe_rows()["attack"][-1]]}
    with pytest.raises(ReconbenchError, match="no attack row of precision tf32"):
        costs_from_probe(empty)


def test_the_probe_derived_table_plans_the_four_kkt_targets():
    """With the table of a probe of round numbers (a paper target's 10^6 steps in 200 s, a TF32 attack
    step of 16 runs in 6 ms: 300 s of 16 runs on CIFAR-10), the four targets and their 16-run cells need a count of slices no
    smaller than their work divided by a slice: the plan reaches it or one more (first fit wastes at most a cell)."""
    works = paper_piece_works(KKT_CELLS)
    cifar = next(w for w in works if w.cell_id == KKT_CELLS[0])
    rows = probe_rows()
    rows["trainer"] = [{"targets": 1, "dtype": "float64", "cuda_graph": True, "flops_per_step": 6 * cifar.train / 1e6,
                        "target_steps_per_second": 1e6 / 200.0}]
    rows["attack"][0]["seconds_per_step"] = 0.006
    # a card made or rebuilt in 15 s (the probe does not time cards; the built-in price, 65 s at paper size, would
    # keep these 404 s cells out of 470 s slices altogether)
    model = CostModel.for_device("cuda", costs_from_probe(rows).updated(card=PhaseCost(fixed=15.0, rate=0.0)))
    plan = plan_slices(works, model, 470.0)
    assert plan.unfit == {} and plan.finished_in(KKT_CELLS) == len(plan.slices) - 1
    work = sum(plan.seconds)
    assert math.ceil(work / (470.0 - SAFETY_SECONDS)) <= len(plan.slices) <= math.ceil(work / (470.0 - SAFETY_SECONDS)) + 1
    assert all(s <= 470.0 + 1e-9 for s in plan.seconds)


def test_select_of_the_kkt_cells_matches_the_readme_patterns():
    """benchmarks/gpu/README.md plans and runs the four KKT targets' first cells with these --only patterns."""
    suite, _, _ = paper_works()
    patterns = ["cifar-binary--haim_binary_kkt--gaussian--*", "mnist-binary--haim_binary_kkt--gaussian--*",
                "cifar-multiclass--multiclass_kkt--gaussian--*", "cifar-regression-wd--general_loss_wd--gaussian--*"]
    assert [c.cell_id for c in select(expand(suite), patterns)] == KKT_CELLS
    # and the float64 A/B subset: the same targets, init and seed, in TF32 and in float64
    ab = [c for c in select(expand(suite), ["*-ab-*"])]
    assert len(ab) == 4 and {c.run_spec(suite).dtype for c in ab} == {"float32", "float64"}
    assert {(c.target, c.init.label, c.seed, c.attack.search_runs) for c in ab} == {
        ("cifar-binary", "gaussian", 0, 4), ("mnist-binary", "gaussian", 0, 4)}


TINY_PIECES = Path(__file__).resolve().parents[3] / "benchmarks" / "gpu" / "tiny-pieces.toml"


def test_plan_command_counts_the_stack_once_and_says_when_each_target_is_done(tmp_path, capsys, no_work):
    """`--plan` on CI's two-slice suite (two digits targets of one shape, trained in pieces as one stack), by hand:
    the stack's training is its set-up of 14 s (no units priced), a cell 1.25 x (3 + 1) + 2 = 7 s, slices of
    35 - 10 = 25 s. Slice 1 trains the stack (14), runs digits-a's cell (21); digits-b's (28) waits for slice 2. No
    speed puts both in one slice: the fixed seconds alone pass it."""
    from _helpers.cli import run_cli

    costs = tmp_path / "costs.json"
    costs.write_text(json.dumps(fixed_table(14.0, 3.0, 1.0)))
    code, text, err = run_cli(["bench", str(TINY_PIECES), "--plan", "--deadline", "35", "--costs", str(costs), "--out",
                               str(tmp_path / "res")], capsys)
    assert code == 0, err
    assert "digits-a + digits-b 14s" in text
    assert "target digits-a: trained in pieces by slice 1, its 1 cell(s) done by slice 1" in text
    assert "target digits-b: trained in pieces by slice 1, its 1 cell(s) done by slice 2" in text
    assert "2 cell(s) in 2 slice(s), 0 that fit none" in text
    assert "break-even: no speed fits these cells in 1 slice(s) of 25s" in text


def test_plan_command_prints_the_break_even_of_one_slice_fewer_by_the_closed_form(tmp_path, capsys, no_work):
    """Rates chosen so that at the table's speed the stack trains in 20 s and each cell's attack takes 8 s, every
    fixed second 0; slices of 25 s. The plan: slice 1 trains (20), a cell (1.25 x 8 + 2 = 12) does not fit after it;
    slice 2 runs both (24). One slice holds everything when 20/s + 2 (1.25 x 8/s + 2) <= 25, i.e. s >= 40 / 21;
    the table stands for 40% of peak, so 76.2% of it. One search run of 100 steps (of the cell's 2) takes 4 s at
    the table's speed: 30 s leaves 7.5x as much, so a device 4 / 30 of the table's speed suffices."""
    from _helpers.cli import run_cli
    from _helpers.slicekit import digits_works

    works = digits_works(TINY_PIECES)
    train = sum(w.train for w in works)
    (attack,) = {w.attack for w in works}
    (run,) = {(w.runs, w.steps) for w in works}
    table = {"train": {"fixed": 0.0, "rate": 20.0 / train}, "attack": {"fixed": 0.0, "rate": 8.0 / attack},
             "evaluate": {"fixed": 0.0, "rate": 0.0}, "peak_fraction": 0.4}
    costs = tmp_path / "costs.json"
    costs.write_text(json.dumps(table))
    code, text, err = run_cli(["bench", str(TINY_PIECES), "--plan", "--deadline", "35", "--costs", str(costs), "--out",
                               str(tmp_path / "res")], capsys)
    assert code == 0, err
    assert "2 cell(s) in 2 slice(s)" in text
    speed = (20.0 + 2 * SAFETY_FACTOR * 8.0) / (25.0 - 2 * SAFETY_SECONDS)
    assert f"{speed:.3f}" == "1.905"
    assert f"break-even for all 2 cell(s) in 1 slice(s): a device {speed:.3f}x the table's speed" in text
    assert f"{0.4 * speed:.1%} of peak" in text
    per_run = 8.0 / run[0]   # seconds of one search run of run[1] steps
    assert f"30s asks for at most {30.0 / run[1] * 1e3:.3f} ms per step" in text
    assert f"a device {per_run / 30.0:.3f}x the table's ({0.4 * per_run / 30.0:.1%} of peak)" in text


def split_work(**kw: Any) -> CellWork:
    """A cell of 8 random-search runs whose attack costs 10 s a run on :data:`TEN_A_RUN`, nothing else."""
    base = {"cell_id": "c", "target_key": "t", "train": 0.0, "attack": 8 * 100.0, "evaluate": 0.0, "runs": 8,
            "steps": 100, "split": True, "run_bytes": (12_288_000, 8000, 8000)}
    return CellWork(**{**base, **kw})


TEN_A_RUN = {"train": {"fixed": 0.0, "rate": 0.0}, "attack": {"fixed": 0.0, "rate": 0.1},
             "evaluate": {"fixed": 0.0, "rate": 0.0}}


@pytest.mark.parametrize(("rules", "chunk", "groups"), [
    # k runs cost 1.25 x 10 k + 2 s: 7 fit 100 s (89.5), 8 do not (102): 7, then the last one
    (GroupRules(), 0, [(0, 1, 2, 3, 4, 5, 6), (7,)]),
    # whole chunks of max_batch 2: 6, then 2
    (GroupRules(), 2, [(0, 1, 2, 3, 4, 5), (6, 7)]),
    # 3 files hold 3 runs of one 11.7 MiB tensor each
    (GroupRules(run_files=3), 0, [(0, 1, 2), (3, 4, 5), (6, 7)]),
    # runs merged already are not planned again
    (GroupRules(runs_done={"c": frozenset({0, 1, 2})}), 0, [(3, 4, 5, 6, 7)]),
    (GroupRules(runs_per_slice=3), 0, [(0, 1, 2), (3, 4, 5), (6, 7)]),
])
def test_a_cell_longer_than_a_slice_is_planned_in_groups_counted_by_hand(rules, chunk, groups):
    plan = plan_slices([split_work(chunk=chunk)], CostModel.for_device("cuda", TEN_A_RUN), 100.0, rules=rules)
    assert [tuple(g.runs) for gs in plan.groups for g in gs] == groups
    assert [len(gs) for gs in plan.groups] == [1] * len(groups) and not any(plan.slices) and not plan.unfit
    assert plan.seconds == [pytest.approx(1.25 * 10 * len(g) + 2) for g in groups]
    assert [g.bytes for gs in plan.groups for g in gs] == [len(g) * (12_288_000 + 16_000) for g in groups]
    assert plan.finished_in(["c"]) == len(groups) - 1


def test_a_cell_that_fits_whole_runs_whole_whatever_the_pack_holds():
    """Evaluated on the device, a whole cell's runs do not travel: one pack file does not split it."""
    plan = plan_slices([split_work(attack=8 * 50.0)], CostModel.for_device("cuda", TEN_A_RUN), 100.0,
                       rules=GroupRules(run_files=1))
    assert plan.slices == [["c"]] and plan.groups == [[]]


def test_a_cell_no_group_of_fits_fits_no_slice():
    """One run passes the slice (1.25 x 90 + 2 > 100), or the pack holds none of its runs: unfit."""
    model = CostModel.for_device("cuda", TEN_A_RUN)
    assert list(plan_slices([split_work(attack=8 * 900.0)], model, 100.0).unfit) == ["c"]
    assert list(plan_slices([split_work(run_bytes=(17_000_000, 8000, 8000))], model, 100.0,
                            rules=GroupRules(run_files=6)).unfit) == ["c"]
