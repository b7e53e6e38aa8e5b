"""The suite's defense axis: parsing, error messages, cells; and the Pareto front of the privacy table."""

from __future__ import annotations

import itertools
import random

import pytest

from reconbench.bench.cells import expand
from reconbench.bench.suite import SuiteError, load_suite
from reconbench.leaderboard.privacy import pareto_front

BASE = """\
[targets.bin]
dataset = "digits"
task = "binary"
n_per_class = 3
widths = [8]
steps = 10

[attacks.haim_binary_kkt]
[inits.gaussian]
"""


def suite(tmp_path, text):
    p = tmp_path / "s.toml"
    p.write_text(BASE + text)
    return load_suite(p)


def test_defense_axis_expands_into_defended_targets_and_cells(tmp_path):
    s = suite(tmp_path, """
[defenses.dp]
defense = "dp_sgd"
config = { max_grad_norm = 0.5 }
values = [1.0, 4.0]
[defenses.int8_quantise]
[privacy.p]
targets = ["bin"]
attacks = ["haim_binary_kkt"]
seeds = [0, 1]
""")
    axis = s.privacy[0]
    assert [(p.defense, p.strength) for p in axis.points] == [(None, None), ("dp", 1.0), ("dp", 4.0), ("int8_quantise", 8)]
    dp4 = s.targets["bin@dp=4"].recipe
    assert dp4.defense == "dp_sgd" and dp4.defense_config == {"max_grad_norm": 0.5, "noise_multiplier": 4.0}
    assert s.targets["bin"].recipe.defense is None
    cells = expand(s)
    assert len(cells) == 4 * 2 and all(c.groups == ("privacy:p",) for c in cells)
    assert len({c.recipe.key() for c in cells}) == 4  # each defended target is its own recipe (and cache entry)


def test_a_target_may_name_a_defense_directly(tmp_path):
    s = suite(tmp_path, """
[targets.bin-noisy]
dataset = "digits"
task = "binary"
n_per_class = 3
widths = [8]
defense = "weight_noise"
defense_config = { relative_std = 0.2 }
[[grid]]
targets = ["bin-noisy"]
attacks = ["haim_binary_kkt"]
""")
    assert s.targets["bin-noisy"].recipe.defense_config == {"relative_std": 0.2}


@pytest.mark.parametrize("text, message", [
    ("[defenses.dp]\ndefense = \"dp_sgd\"\nvalues = [1.0]\nstrenght = \"x\"\n", "unknown key 'strenght'"),
    ("[defenses.dp]\ndefense = \"dp_sgd\"\nvalues = [\"high\"]\n", "noise_multiplier"),
    ("[defenses.dp]\ndefense = \"dp_sgd\"\nstrength = \"noise\"\nvalues = [1.0]\n", "unknown option 'noise'"),
    ("[defenses.x]\ndefense = \"dp_sgd\"\nvalues = [1.0]\n[privacy.p]\ntargets = [\"bin\"]\nattacks = [\"haim_binary_kkt\"]\n"
     "defenses = [\"y\"]\n", "no defense 'y'"),
    ("[privacy.p]\ntargets = [\"bin\"]\nattacks = [\"haim_binary_kkt\"]\n", "needs defenses"),
])
def test_bad_defense_axes_name_the_key_and_line(tmp_path, text, message):
    with pytest.raises(SuiteError, match=message) as info:
        suite(tmp_path, text)
    assert "s.toml:" in str(info.value)


def test_pareto_front_against_brute_force():
    rng = random.Random(0)
    for _ in range(50):
        pts = [(rng.choice([0.5, 0.6, 0.7, 0.8]), rng.choice([0.0, 1.0, 2.0, 3.0])) for _ in range(rng.randint(1, 7))]
        front = pareto_front(pts)
        for i, (a, h) in enumerate(pts):
            better = [(a2, h2) for j, (a2, h2) in enumerate(pts) if j != i and a2 >= a and h2 <= h and (a2, h2) != (a, h)]
            assert front[i] == (not better)
    assert pareto_front([(0.9, 5.0), (0.6, 1.0), (0.5, 2.0), (0.9, 5.0)]) == [True, True, False, True]
    assert all(pareto_front([p]) == [True] for p in itertools.product([0.1], [2.0]))


def test_null_cells_run_on_the_undefended_target_only(tmp_path):
    s = suite(tmp_path, """
[attacks.null]
attack = "haim_binary_kkt"
config = { steps = 0 }
[inits.partition]
[defenses.weight_noise]
values = [0.1]
[privacy.p]
targets = ["bin"]
attacks = ["haim_binary_kkt"]
inits = ["gaussian"]
null_attack = "null"
null_init = "partition"
seeds = [0, 1]
""")
    null = [c for c in expand(s) if c.attack.label == "null"]
    assert sorted(c.cell_id for c in null) == ["bin--null--partition--s0", "bin--null--partition--s1"]
    with pytest.raises(SuiteError, match="give both"):
        suite(tmp_path, '[defenses.weight_noise]\n[privacy.p]\ntargets = ["bin"]\nattacks = ["haim_binary_kkt"]\n'
                        'null_attack = "haim_binary_kkt"\n')
