"""TOML snippets shared by the suite, runner and leaderboard tests."""

from __future__ import annotations


def toy_targets(steps: int) -> str:
    """Two tiny `digits` targets, `bin` (binary) and `mc` (3 classes), trained for ``steps`` steps."""
    return f"""\
[targets.bin]
dataset = "digits"
task = "binary"
n_per_class = 3
widths = [8]
steps = {steps}

[targets.mc]
dataset = "digits"
task = "multiclass"
num_classes = 3
n_per_class = 2
widths = [8]
steps = {steps}
"""


#: the toy suite of the end-to-end leaderboard tests: two tiny targets, the identity attack, two seeds
TOY_SUITE = """\
[suite]
name = "toy"
seeds = [0, 1]
search_runs = 2

""" + toy_targets(20) + """
[attacks.toy_identity]
config = { steps = 1 }

[inits.gaussian]
config = { scale = 0.05 }

[leaderboard]
store_candidates = 3

[[grid]]
targets = ["bin", "mc"]
attacks = ["toy_identity"]
"""
