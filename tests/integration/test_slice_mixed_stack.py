"""Targets that differ in learning rate, weight decay and loss (bce and mse, one output each) train in pieces as one
stack: the slice executor stacks them, the planner plans them as one stack, and each finished target equals training
it alone in one piece exactly (CPU, float64)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from _helpers.slicekit import TickClock, digits_sizes, digits_works
from safetensors.torch import load_file

from reconbench.bench.cells import expand
from reconbench.bench.runner import run_suite
from reconbench.bench.slice_costs import CostModel, plan_slices
from reconbench.bench.slice_executor import DeadlineExecutor
from reconbench.bench.suite import load_suite
from reconbench.targets.resumable import batch_group, resumable_reason, train_piece, train_pieces

pytestmark = pytest.mark.usefixtures("one_torch_thread")

STEPS = 1200
SUITE = f"""
[suite]
name = "mixed-stack"
description = "A binary (bce) and a regression (mse, weight decay) digits target of one shape at two learning rates."
seeds = [0]
device = "cpu"
dtype = "float64"
search_runs = 1

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
widths = [32, 32]
loss = "bce"
lr = 0.5
steps = {STEPS}
seed = 0

[targets.b]
dataset = "digits"
task = "regression"
binary_rule = "parity"
n_per_class = 5
family = "mlp"
widths = [32, 32]
loss = "mse"
lr = 0.2
weight_decay = 1e-3
steps = {STEPS}
seed = 1

[attacks.haim_binary_kkt]
config = {{ steps = 10 }}

[attacks.general_loss_wd]
config = {{ steps = 10 }}

[inits.gaussian]

[[grid]]
targets = ["a"]
attacks = ["haim_binary_kkt"]
inits = ["gaussian"]

[[grid]]
targets = ["b"]
attacks = ["general_loss_wd"]
inits = ["gaussian"]
"""


def fixed(train: float, attack: float) -> CostModel:
    return CostModel.for_device("cpu", {"train": {"fixed": train, "rate": 0.0}, "attack": {"fixed": attack, "rate": 0.0},
                                        "evaluate": {"fixed": 0.0, "rate": 0.0}})


@pytest.fixture
def suite_file(tmp_path: Path) -> Path:
    path = tmp_path / "mixed-stack.toml"
    path.write_text(SUITE)
    return path


def recipes_of(suite: Any) -> list[Any]:
    return list({c.target: c.recipe for c in expand(suite)}.values())


def test_the_slice_executor_trains_the_two_as_one_stack_and_each_equals_it_alone(suite_file, tmp_path):
    suite = load_suite(str(suite_file))
    recipes = recipes_of(suite)
    assert [r.train.loss for r in recipes] == ["bce", "mse"] and {resumable_reason(r) for r in recipes} == {None}
    assert len({batch_group(r) for r in recipes}) == 1
    states = tmp_path / "cache1" / "training"
    ex = DeadlineExecutor(30.0, fixed(1.0, 1.0), digits_sizes(suite), start=0.0, clock=TickClock(), states=states)
    report = run_suite(suite, tmp_path / "device1", cache=str(tmp_path / "cache1"), quiet=True, executor=ex)
    assert report.ran == [] and len(ex.deferred) == 2
    piece, other = ex.pieces
    assert piece.stacked == other.stacked == 2 and 0 < piece.step == other.step < STEPS
    assert not piece.finished and not other.finished
    # the next slice continues the stack from the two state files and finishes it
    cards = tmp_path / "cards"
    done = train_pieces(recipes, [cards / r.key() for r in recipes], states, seconds=1e9)
    assert all(p.finished and p.step == STEPS and p.stacked == 2 for p in done)
    for recipe in recipes:
        alone = train_piece(recipe, tmp_path / "alone" / recipe.key(), tmp_path / "alone-states", seconds=1e9)
        assert alone.finished and alone.stacked == 1
        a = load_file(str(cards / recipe.key() / "weights.safetensors"))
        b = load_file(str(tmp_path / "alone" / recipe.key() / "weights.safetensors"))
        assert a.keys() == b.keys()
        for name in a:
            assert torch.equal(a[name], b[name]), (recipe.key(), name)   # the CPU steps each with its own scalars


def test_the_planner_plans_the_two_as_one_stack(suite_file):
    """Training of 10 s of set-up per stack, 1 s per cell's attack, slices of 100 s: one stack trains once in slice 1
    (10 s, not twice that), and both cells follow in it."""
    works = digits_works(suite_file)
    assert len(works) == 2 and all(w.pieces for w in works) and works[0].group == works[1].group
    plan = plan_slices(works, fixed(10.0, 1.0), 100.0)
    assert len(plan.slices) == 1 and list(plan.training[0]) == [works[0].group]
    assert plan.training[0][works[0].group] == pytest.approx(10.0)
    assert plan.trained_in == {w.target_key: 0 for w in works}
