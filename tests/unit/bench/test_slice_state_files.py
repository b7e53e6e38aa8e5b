"""The pack files a slice's training states take, counted before its groups of search runs (docs/slices.md, "In
the pack"): a state's files from an upper bound of its bytes, the files runs take filled as the packer fills them,
and the plan's groups of the paper board's CIFAR-10 binary cell beside a final state that travels again (its card
rebuilt) or not (its card restored), and beside a training the slice continues."""

from __future__ import annotations

import math
from pathlib import Path

from _helpers.slicekit import paper_works

from reconbench.bench.cells import expand, select
from reconbench.bench.slice_costs import (
    STATE_HEADER_BYTES,
    CellWork,
    CostModel,
    GroupRules,
    cell_work,
    plan_slices,
    read_costs,
    state_bytes,
    states_due,
)
from reconbench.bench.slice_pack import MAX_FILE_BYTES, run_files_taken, run_tensor_bytes
from reconbench.cli.bench_cmd import costs_dtypes

ROOT = Path(__file__).resolve().parents[3]

CIFAR_RUN = run_tensor_bytes(1000, 3072, 4, starts=False)   # one 16 MiB file each (12.3 MB of candidates)


def test_a_paper_state_is_one_file_by_hand():
    """MNIST binary (784-1000-1000-1, n = 500): the layers past the first, the n x w_1 coefficients and
    pre-activations, in float64, and the header's room: under 16 MiB, one file."""
    suite, _, sizes = paper_works()
    cell = next(c for c in expand(suite) if c.target == "mnist-binary")
    size = sizes[cell.recipe.key()]
    assert size.parameters is not None
    w1 = int(cell.recipe.widths[0])
    by_hand = 8 * (size.parameters - 784 * w1 + 2 * size.n_train * w1) + STATE_HEADER_BYTES
    assert state_bytes(cell.recipe, size) == by_hand < MAX_FILE_BYTES
    assert cell_work(cell, size, pieces=True).state_files == 1
    assert cell_work(cell, size, pieces=False).state_files == 0


def test_the_files_runs_take_and_the_states_beside_them():
    assert [run_files_taken([CIFAR_RUN] * k) for k in range(5)] == [0, 1, 2, 3, 4]
    small = [1000, 1000]
    assert run_files_taken([small] * 100) == math.ceil(100 * 2000 / (MAX_FILE_BYTES - 64 * 1024)) == 1
    rules = GroupRules(run_files=4)
    assert rules.states_fit(1, [CIFAR_RUN] * 3) and not rules.states_fit(2, [CIFAR_RUN] * 3)
    assert GroupRules().states_fit(10, [CIFAR_RUN] * 10)   # no pack: no limit
    assert states_due({"a": 1, "b": 2}, ["a", "b", "a", "c"]) == 3


def cifar_groups(travelled: bool, extra: tuple[str, ...] = ()) -> tuple[list[list[int]], list[list[str]]]:
    """The runs of each slice's group of the 16-run CIFAR-10 binary cell (its target trained before the plan), in
    410 s slices with 4 pack files for runs, at twice the committed probe's step; and each slice's training."""
    suite, _, sizes = paper_works()
    table = read_costs(ROOT / "benchmarks" / "results" / "gpu" / "probe_h100.json",
                       **costs_dtypes(suite, None)).scaled(2.0, evaluation=False)
    cells = select(expand(suite), ["cifar-binary--haim_binary_kkt--gaussian--*", *extra])
    works = [cell_work(c, sizes[c.recipe.key()], pieces=True, dtype=suite.dtype, device="cuda") for c in cells]
    key = next(c.recipe.key() for c in cells if c.target == "cifar-binary")
    rules = GroupRules(run_files=4, travelled_cards=frozenset({key} if travelled else ()))
    plan = plan_slices(works, CostModel(prior=table), 410.0, {key: 1.0}, rules)
    return [[len(g.runs) for g in groups] for groups in plan.groups], [sorted(t) for t in plan.training]


def test_a_restored_card_leaves_every_file_to_runs_and_a_rebuilt_one_takes_one():
    """A card restored from the card that travelled packs no state: 4 runs a slice. A card rebuilt from the final
    state (a ledger from before cards travelled) writes it again with the card beside it, and it travels: slice 1's
    group is 3 runs, and the cell takes a fifth slice for its last run."""
    assert cifar_groups(True) == ([[4]] * 4, [[]] * 4)
    assert cifar_groups(False) == ([[3], [4], [4], [4], [1]], [[]] * 5)


def test_a_training_the_slice_continues_keeps_a_file_for_its_state():
    """With MNIST binary's training beside the groups (slices 1 and 2 train it, the second to its end, and its final
    state travels while its cells remain), those slices' groups are a run smaller; slice 1 one more where the
    CIFAR-10 card is rebuilt."""
    mnist = ("mnist-binary--haim_binary_kkt--gaussian--*",)
    restored, training = cifar_groups(True, mnist)
    assert [len(t) for t in training[:3]] == [1, 1, 0]
    assert [sum(g) for g in restored[:4]] == [3, 3, 4, 4]
    rebuilt, _ = cifar_groups(False, mnist)
    assert [sum(g) for g in rebuilt[:4]] == [2, 3, 4, 4]


def test_a_second_stack_trains_only_where_its_state_finds_a_file_beside_the_runs_taken():
    """One pack file a run; a cell of 4 runs (3 a slice) and two targets of two batch groups, each state a file.
    Slice 1 keeps a file for the first group's state, so its group of runs is what the rest holds; that training
    ends and its cell runs; the second group would need a second file, which the runs took: it trains in slice 2,
    where the last runs take the files its state leaves."""
    model = CostModel.for_device("cpu", {p: {"fixed": 1.0, "rate": 0.0} for p in ("train", "attack", "evaluate")})
    one_file = MAX_FILE_BYTES - 64 * 1024 - 100
    works = [
        CellWork("g", "t0", train=0.0, attack=1.0, evaluate=1.0, runs=4, steps=10, split=True, run_bytes=(one_file,)),
        CellWork("ca", "a", train=1.0, attack=1.0, evaluate=1.0, pieces=True, group="ga", runs=1, steps=10,
                 state_files=1),
        CellWork("cb", "b", train=1.0, attack=1.0, evaluate=1.0, pieces=True, group="gb", runs=1, steps=10,
                 state_files=1),
    ]
    for files, first in ((3, 2), (4, 3)):
        plan = plan_slices(works, model, 100.0, rules=GroupRules(run_files=files, runs_per_slice=3))
        assert [[g.runs for g in gs] for gs in plan.groups] == [[tuple(range(first))], [tuple(range(first, 4))]]
        assert plan.training == [{"ga": 1.0}, {"gb": 1.0}] and plan.trained_in == {"a": 0, "b": 1}
        assert plan.slices == [["ca"], ["cb"]]
    # without a pack nothing bounds them: both train in slice 1, beside one group of runs_per_slice runs (a cell
    # runs one group a slice, as the executor takes it out of the walk once its group ran)
    plan = plan_slices(works, model, 100.0, rules=GroupRules(runs_per_slice=3))
    assert plan.trained_in == {"a": 0, "b": 0} and [[len(g.runs) for g in gs] for gs in plan.groups] == [[3], [1]]
