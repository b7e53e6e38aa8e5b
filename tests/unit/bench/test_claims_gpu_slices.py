"""claims-gpu in slices (docs/slices.md, "claims-gpu in slices"): which of its targets the resumable trainer takes
(float32, the closed-form loop, a state that travels between slices); that the doc's steps (``--only`` selections
of one seed each) take every cell once, each from one data set; and that the training states a step leaves to the
next fit beside the wheels, its data and the working tree in what a device call carries."""

from __future__ import annotations

import fnmatch
import re
import shlex
from collections import defaultdict
from pathlib import Path

import pytest
from _helpers.travel import CARRY, DATA, HEADER, LEDGER, READS, WHEELS, state_bytes, tree_bytes

from reconbench.bench.cells import expand
from reconbench.bench.suite import load_suite
from reconbench.targets.recipe import TargetRecipe
from reconbench.targets.resumable import batch_group, resumable_reason

REPO = Path(__file__).resolve().parents[3]
SUITE = load_suite("claims-gpu")
CELLS = expand(SUITE)
STEPS_BLOCK = re.compile(r"<!-- claims-gpu steps -->\n```\n(.*?)```", re.S)
#: the targets the resumable trainer cannot take, and why (each trains whole inside its cells)
NOT_RESUMABLE = {
    "cifar-cnn-wd": "an early stop",   # and family conv: it keeps its stop at the gate, which shortens it
    "mnist-regression-wd@loss=l25": "loss 'l25'",
    "mnist-regression-wd@loss=huber": "loss 'huber'",
}


def _targets() -> dict[str, TargetRecipe]:
    """Each planned target's recipe by its cell-id prefix and seed (``mnist-binary@weight_decay=0.002 s3``)."""
    return {f"{c.cell_id.split('--')[0]} s{c.seed}": c.recipe for c in CELLS}


def test_every_target_but_the_listed_trains_in_pieces_in_float32_by_the_closed_form_loop():
    not_resumable: dict[str, set[str]] = defaultdict(set)
    for name, recipe in _targets().items():
        reason = resumable_reason(recipe)
        if reason is None:
            assert recipe.train.dtype == "float32" and recipe.train.float32_trainer == "closed_form", name
            assert recipe.train.schedule == "constant" and not recipe.train.certify_every, name
        else:
            not_resumable[name.split(" ")[0].split("@model")[0]].add(reason)
    assert set(not_resumable) == set(NOT_RESUMABLE)
    for prefix, reasons in not_resumable.items():
        assert all(NOT_RESUMABLE[prefix] in r for r in reasons), (prefix, reasons)


def test_a_state_of_the_suites_networks_is_a_few_megabytes():
    """784-1000-1000-1 at n = 100 (a CPU slice's pack held it as 4,812,824 bytes) and Runkel et al.'s
    3072-6144-1 with biases at n = 100: the input dimension does not enter the state."""
    targets = _targets()
    assert state_bytes(targets["mnist-binary s0"]) == 4 * (2 * 1000 * 100 + 1000 * 1000 + 1000)
    assert state_bytes(targets["cifar-binary s0"]) == state_bytes(targets["mnist-binary s0"])
    assert state_bytes(targets["cifar-mlp1-wd s0"]) == 4 * (2 * 6144 * 100 + 6144 + 6144 + 1)
    assert max(state_bytes(r) for r in targets.values()) < 5.2e6



def _steps() -> list[tuple[str, str, list[str]]]:
    """docs/slices.md's steps: name, the data folder it carries, its --only patterns (K for the seed)."""
    block = STEPS_BLOCK.search((REPO / "docs" / "slices.md").read_text())
    assert block, "docs/slices.md has no claims-gpu steps block"
    steps = []
    for line in block.group(1).splitlines():
        name, folder, *rest = shlex.split(line)
        assert rest[::2] == ["--only"] * (len(rest) // 2), line
        steps.append((name, folder, rest[1::2]))
    return steps


@pytest.mark.parametrize("seed", SUITE.seeds)
def test_each_seeds_steps_take_its_cells_once_each_from_one_data_set(seed):
    cells = [c for c in CELLS if c.seed == seed]
    taken: dict[str, str] = {}
    for name, folder, patterns in _steps():
        mine = [c for c in cells if any(fnmatch.fnmatchcase(c.cell_id, p.replace("sK", f"s{seed}"))
                                        for p in patterns)]
        assert mine, name
        for c in mine:
            assert c.cell_id not in taken, (c.cell_id, taken.get(c.cell_id), name)
            taken[c.cell_id] = name
            assert c.recipe.problem.dataset == READS[folder], (name, c.cell_id)
    assert set(taken) == {c.cell_id for c in cells}


def test_the_states_a_step_leaves_travel_within_the_carry():
    """Per step: the two largest training stacks of one seed's cells (a finished stack whose cells wait, and the
    stack training when the deadline falls), beside the working tree as it is, the wheels, the ledger and the step's
    data. The whole suite's group of 40, or one seed's 5, would not."""
    tree = tree_bytes()
    if tree is None:
        pytest.skip("not a git checkout: the working tree's size is unknown")
    for name, folder, patterns in _steps():
        room = CARRY - tree - WHEELS - LEDGER - DATA[folder]
        for seed in SUITE.seeds:
            stacks: dict[str, dict[str, TargetRecipe]] = defaultdict(dict)
            for c in CELLS:
                if (c.seed == seed and resumable_reason(c.recipe) is None
                        and any(fnmatch.fnmatchcase(c.cell_id, p.replace("sK", f"s{seed}")) for p in patterns)):
                    stacks[batch_group(c.recipe)][c.recipe.key()] = c.recipe
            sizes = sorted((sum(state_bytes(r) + HEADER for r in s.values()) for s in stacks.values()), reverse=True)
            assert max(len(s) for s in stacks.values()) <= 2, (name, seed)
            assert sum(sizes[:2]) <= room, (name, seed, sizes[:2], room)
    group: dict[str, set[str]] = defaultdict(set)
    for c in CELLS:
        if resumable_reason(c.recipe) is None:
            group[batch_group(c.recipe)].add(c.recipe.key())
    largest = max(group.values(), key=len)
    assert len(largest) == 5 * len(SUITE.seeds)
    whole = sum(state_bytes(r) + HEADER for r in {c.recipe.key(): c.recipe for c in CELLS}.values()
                if r.key() in largest)
    assert whole > CARRY   # without the steps, the suite's largest stack would not even fit an empty call
