"""Training priced by the number of targets stacked (``CostTable.train_targets``), as the attack is priced by its
runs batched: the largest measured stack at most a stack's size, below the smallest that size's seconds per stack
step spread over fewer targets. The probe's trainer rows fill it (worked out here from the rows' own fields), the
file format keeps tables without it readable, and the plan prices each stack of a group at its own size."""

from __future__ import annotations

import json
from typing import Any

import pytest

from reconbench.bench.slice_costs import (
    CellWork,
    CostModel,
    costs_from_probe,
    pairs_seconds,
    plan_slices,
    read_costs,
    training_seconds,
    training_stacks,
)
from reconbench.errors import ReconbenchError
from reconbench.records.cost_table import COST_TABLE_FILE, COST_TABLE_SCHEMA, CostTable, PhaseCost

PHASES = {"train": {"fixed": 10.0, "rate": 1.0}, "attack": {"fixed": 0.0, "rate": 1.0},
          "evaluate": {"fixed": 0.0, "rate": 0.0}}
#: a stack of one: 1 s per unit of a target's work; of four: 0.5 s (twice the target-steps a second)
STACKED = {**PHASES, "train_targets": {"1": {"fixed": 10.0, "rate": 1.0}, "4": {"fixed": 10.0, "rate": 0.5}}}


@pytest.mark.parametrize(("targets", "rate"), [(1, 1.0), (2, 1.0), (3, 1.0), (4, 0.5), (6, 0.5), (0, 1.0)])
def test_a_stack_is_priced_at_the_largest_measured_size_at_most_its_own(targets, rate):
    """2 and 3 at the 1-target rate (never cheaper than measured), 6 at the 4-target rate; 0 (no stack given): the
    flat ``train`` rate."""
    table = CostTable.of(STACKED)
    assert table.phase("train", targets=targets) == PhaseCost(fixed=10.0, rate=rate)


def test_below_the_smallest_measured_stack_a_stack_step_is_not_cheaper():
    """Only a stack of four measured, 0.5 s per unit of a target: one stack step of four costs 4 x 0.5 = 2 s per unit
    of one target's step, so one target alone pays 2 s per unit, two targets 1 s each."""
    table = CostTable.of({**PHASES, "train_targets": {"4": {"fixed": 10.0, "rate": 0.5}}})
    assert table.phase("train", targets=1).rate == pytest.approx(2.0, rel=1e-14)
    assert table.phase("train", targets=2).rate == pytest.approx(1.0, rel=1e-14)


def test_the_field_is_optional_round_trips_scales_and_refuses_keys_that_are_not_counts():
    old = CostTable.of({"format": COST_TABLE_SCHEMA, **PHASES})   # a table written before the field
    assert old.train_targets == {} and "train_targets" not in old.to_dict()
    table = CostTable.of(STACKED)
    assert COST_TABLE_FILE.decode(json.loads(json.dumps(table.to_dict()))) == table
    # the unstamped form keeps it too (a known field, not a free key)
    assert CostTable.of({**STACKED}).train_targets == table.train_targets
    assert table.scaled(2.0).train_targets == {"1": PhaseCost(fixed=10.0, rate=0.5),
                                               "4": PhaseCost(fixed=10.0, rate=0.25)}
    with pytest.raises(ReconbenchError, match="train_targets: 'four' is not a number of targets"):
        CostTable.of({**PHASES, "train_targets": {"four": {"fixed": 0.0, "rate": 1.0}}})


def probe(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {"conditions": {"device": "cuda"}, "trainer": rows,
            "attack": [{"runs": 16, "m": 1000, "layers": [3072, 1000, 1000, 1], "precision": "tf32",
                        "batch": {"cuda_graph": True}, "seconds_per_step": 0.01}]}


def trainer_row(targets: int, steps_per_second: float, dtype: str = "float32", graph: bool = True,
                dataset: str = "cifar10") -> dict[str, Any]:
    """A row of a network of 6e9 FLOPs per target-step (1e9 units of the trainer's work per target-step)."""
    return {"targets": targets, "dataset": dataset, "dtype": dtype, "cuda_graph": graph,
            "flops_per_step": 6e9 * targets, "target_steps_per_second": steps_per_second}


def test_the_probe_fills_the_rates_by_stack_size_from_its_rows_of_the_training_dtype():
    """Per size the slowest graph row of the dtype (MNIST's 1-target row is slower than CIFAR-10's); eager rows and
    other dtypes left out. Seconds per unit = 1 / (target-steps a second x 1e9 units per target-step)."""
    rows = [trainer_row(1, 5000.0), trainer_row(1, 4000.0, dataset="mnist"), trainer_row(4, 8000.0),
            trainer_row(4, 9000.0, dataset="mnist"), trainer_row(2, 100.0, graph=False),
            trainer_row(8, 100.0, dtype="float64")]
    table = costs_from_probe(probe(rows), train_dtype="float32")
    assert sorted(table.train_targets) == ["1", "4"]
    assert table.train_targets["1"].rate == pytest.approx(1.0 / (4000.0 * 1e9), rel=1e-12)
    assert table.train_targets["4"].rate == pytest.approx(1.0 / (8000.0 * 1e9), rel=1e-12)
    assert table.train == table.train_targets["1"]   # the flat rate: the slowest, a stack of one
    assert table.about["from_probe"]["train"]["target_steps_per_second_by_targets"] == {"1": 4000.0, "4": 8000.0}
    # no graph captured anywhere: every row of the dtype counts
    eager = costs_from_probe(probe([trainer_row(1, 50.0, graph=False), trainer_row(2, 80.0, graph=False)]),
                             train_dtype="float32")
    assert eager.train_targets["2"].rate == pytest.approx(1.0 / (80.0 * 1e9), rel=1e-12)


def test_the_committed_h100_probe_prices_a_stack_of_four_at_its_measured_throughput():
    """benchmarks/results/gpu/probe_h100.json: float32 graph rows, 1 target (MNIST 5,253 target-steps/s, the slower)
    and 4 (CIFAR-10 8,627, the slower). A stack of four's seconds per unit of its work are the 4-row's, so four
    targets' 10^6 steps take 4 x 10^6 / 8,627 s, against 4 x 10^6 / 5,253 s at the one-target rate."""
    from pathlib import Path

    path = Path(__file__).resolve().parents[3] / "benchmarks" / "results" / "gpu" / "probe_h100.json"
    data = json.loads(path.read_text())
    rows = [r for r in data["trainer"] if r.get("dtype") == "float32" and r.get("cuda_graph") and "error" not in r]
    by = {t: min(r["target_steps_per_second"] for r in rows if r["targets"] == t) for t in (1, 4)}
    units = rows[0]["flops_per_step"] / rows[0]["targets"] / 6.0   # one target-step's units
    table = read_costs(path, train_dtype="float32", attack_dtype="float32")
    four = table.phase("train", targets=4).rate * 4 * 10**6 * units
    one = table.phase("train", targets=1).rate * 4 * 10**6 * units
    assert four == pytest.approx(4e6 / by[4], rel=1e-12) and one == pytest.approx(4e6 / by[1], rel=1e-12)
    assert table.phase("train", targets=2) == table.phase("train", targets=1)


def work(key: str, group: str = "g", train: float = 100.0, attack: float = 10.0) -> CellWork:
    return CellWork(key.upper(), key, train=train, attack=attack, evaluate=0.0, pieces=True, group=group)


def test_a_group_trains_in_one_stack_per_step_each_priced_at_its_size():
    """Four targets of one group, 100 units each. All at step 0: one stack of four, 10 + 400 x 0.5 = 210 s.
    Two of them halfway: a stack of two at step 0 (10 + 200 x 1 = 210 s) and one of two halfway (10 + 100 = 110 s),
    as the executor stacks targets at one step. Without prices by size: 10 + 400 = 410 s in one stack."""
    works = [work(k) for k in "abcd"]
    model = CostModel(prior=CostTable.of(STACKED))
    assert training_seconds(model, works) == {"g": pytest.approx(210.0)}
    half = {"c": 0.5, "d": 0.5}
    assert training_stacks(works, half) == {"g": [{"a": 100.0, "b": 100.0}, {"c": 50.0, "d": 50.0}]}
    assert training_seconds(model, works, half) == {"g": pytest.approx(320.0)}
    assert training_seconds(CostModel(prior=CostTable.of(PHASES)), works) == {"g": pytest.approx(410.0)}


def test_the_plan_counts_the_stacks_speed_up():
    """Four targets of one group, one cell each of 1.25 x 10 + 2 = 14.5 s, slices of 300 s. At the 4-target rate
    the stack trains in 210 s and the four cells follow it in slice 1 (268 s); at the flat rate the training alone
    (410 s) passes the slice: 288 s of it in slice 1 (300 - 2 - 10, after its 10 s set-up), the rest (112 s, and
    its set-up) in slice 2, then the cells."""
    works = [work(k) for k in "abcd"]
    fast = plan_slices(works, CostModel(prior=CostTable.of(STACKED)), 300.0)
    assert fast.slices == [["A", "B", "C", "D"]] and fast.seconds == pytest.approx([210.0 + 4 * 14.5])
    flat = plan_slices(works, CostModel(prior=CostTable.of(PHASES)), 300.0)
    assert flat.slices == [[], ["A", "B", "C", "D"]]
    assert [sum(t.values()) for t in flat.training] == pytest.approx([298.0, 10.0 + 112.0])


# -- the executor decides with the same price ------------------------------------------------------------------------
CIFAR, MNIST = "cifar-binary--haim_binary_kkt--gaussian--s0", "mnist-binary--haim_binary_kkt--gaussian--s0"
TRAIN_1, TRAIN_2, CARD, SETUP = 100.0, 50.0, 20.0, 10.0   # seconds per target alone, stacked by two; a card; set-up


def stack_table(units: float, pair: bool) -> CostTable:
    """One target's training 100 s alone, 50 s in a stack of two (where ``pair``), a card 20 s, a cell 3.25 s (its
    attack's 1 s fixed, the margin)."""
    sizes = {"1": PhaseCost(fixed=SETUP, rate=TRAIN_1 / units)}
    if pair:
        sizes["2"] = PhaseCost(fixed=SETUP, rate=TRAIN_2 / units)
    return CostTable(train=sizes["1"], attack=PhaseCost(fixed=1.0, rate=0.0), evaluate=PhaseCost(fixed=0.0, rate=0.0),
                     card=PhaseCost(fixed=CARD, rate=0.0), train_targets=sizes)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def executor_slice(tmp_path: Any, monkeypatch: Any, deadline: float, pair: bool) -> dict[str, Any]:
    """A cross-target slice (bare machine, no state) of the paper's CIFAR-10 and MNIST binary KKT cells, whose targets
    are one batch group: the trainer replaced by a device that trains a stack at the table's price for its size and
    makes the cards at their price (the scripted clock advances by it), the cells' joint computation recorded."""
    from collections.abc import Generator

    from _helpers.slicekit import paper_works

    from reconbench.bench import slice_executor
    from reconbench.bench.cells import expand
    from reconbench.bench.executors import CellJob, Outcome, RunContext
    from reconbench.bench.slice_costs import Slot, cell_work
    from reconbench.bench.slice_executor import DeadlineExecutor
    from reconbench.targets.resumable import Piece

    suite, _, sizes = paper_works()
    cells = [c for c in expand(suite) if c.cell_id in (CIFAR, MNIST)]
    works = [cell_work(c, sizes[c.recipe.key()], pieces=True, dtype=suite.dtype, device="cuda") for c in cells]
    assert len({w.group for w in works}) == 1 and works[0].train == pytest.approx(works[1].train, rel=1e-12)
    table = stack_table(works[0].train, pair)
    clock = Clock()
    out: dict[str, Any] = {"trained": []}

    def device(recipes: list[Any], cards: list[Any], states: Any, *, seconds: float, **_: Any) -> list[Piece]:
        need = SETUP + len(recipes) * (TRAIN_2 if len(recipes) == 2 and pair else TRAIN_1)
        ends = need <= seconds
        clock.now += need + len(recipes) * CARD if ends else seconds
        out["trained"].append((len(recipes), seconds, ends))
        steps = recipes[0].train.steps
        return [Piece(r.key(), steps if ends else steps // 2, steps, seconds, card=object() if ends else None,  # type: ignore[arg-type]
                      stacked=len(recipes)) for r in recipes]

    def run_together(self: DeadlineExecutor, jobs: list[CellJob], ctx: RunContext, targets: Any, slot: Slot,
                     works: Any, group_runs: Any = None) -> Generator[Outcome, None, None]:
        out["ran"] = [j.cell.cell_id for j in jobs]
        yield from ()

    monkeypatch.setattr(slice_executor, "train_pieces", device)
    monkeypatch.setattr(DeadlineExecutor, "_run_together", run_together)
    ctx = RunContext(suite, tmp_path / "out", 0, "cuda", suite.dtype, None, str(tmp_path / "cache"), True)
    executor = DeadlineExecutor(deadline, CostModel(prior=table), sizes, start=0.0, clock=clock, cross_target=True,
                                states=tmp_path / "states")
    assert list(executor.run([CellJob(c, c.run_spec(suite, "cuda", suite.dtype)) for c in cells], ctx)) == []
    out["plan"] = plan_slices(works, CostModel(prior=table), deadline)
    out["group"] = works[0].group
    out["works"] = works
    return out


def test_the_executor_trains_two_stacked_targets_at_the_2_target_price_as_the_plan_does(tmp_path, monkeypatch):
    """Slices of 240 s (238 s for training past the margin's 2 s). With a price for a stack of two: 10 + 2 x 50 =
    110 s and the two cards (40 s) fit, so the stack trains to its end with the time left, its cards are made, and
    both cells follow in the slice (150 + 2 x 3.25 s, and 1.25 x their figure pairs' price); the plan says the
    same. With the 1-target price only: 210 s of training would end but its cards would not fit after it (250 s >
    238 s), so both stop 40 s short (198 s) and the cells wait: the plan's slice 1 trains as long and runs no cell."""
    stacked = executor_slice(tmp_path / "stacked", monkeypatch, 240.0, pair=True)
    assert stacked["trained"] == [(2, 238.0, True)] and stacked["ran"] == [CIFAR, MNIST]
    plan = stacked["plan"]
    assert plan.slices[0] == [CIFAR, MNIST] and plan.training[0] == {stacked["group"]: pytest.approx(150.0)}
    pairs = 1.25 * (pairs_seconds(stacked["works"][0]) + pairs_seconds(stacked["works"][1]))
    assert plan.seconds[0] == pytest.approx(150.0 + 2 * 3.25 + pairs)
    alone = executor_slice(tmp_path / "alone", monkeypatch, 240.0, pair=False)
    assert alone["trained"] == [(2, pytest.approx(198.0), False)] and "ran" not in alone
    plan = alone["plan"]
    assert plan.slices[0] == [] and plan.training[0] == {alone["group"]: pytest.approx(198.0)}
    assert plan.slices[1] == [CIFAR, MNIST]


def test_the_plan_header_says_the_training_rates_by_stack_size():
    """From the probe's rows above: 4,000 and 8,000 target-steps/s, so a stack of four is 8,000 / 4,000 = 2x as fast
    per target-step; a table without prices by size says nothing of them."""
    from reconbench.cli.bench_plan import rates_lines

    table = costs_from_probe(probe([trainer_row(1, 4000.0), trainer_row(4, 8000.0)]), train_dtype="float32")
    (line,) = [x for x in rates_lines(table) if "targets stacked" in x]
    assert "stacked: 1 (4,000 target-steps/s), 4 (8,000 target-steps/s, 2.00x the 1-target rate)" in line
    assert not [x for x in rates_lines(CostTable.of(PHASES)) if "stacked" in x]
