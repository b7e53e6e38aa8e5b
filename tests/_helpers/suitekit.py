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
