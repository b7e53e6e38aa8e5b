"""Suite targets: a target that names no order keeps file order (what every published suite meant); order and
order_seed select a seeded permutation; an order_seed without order is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconbench.bench.suite import SuiteError, load_suite

SUITE = """
[suite]
name = "order"
[targets.t]
dataset = "digits"
task = "binary"
n_per_class = 2
{extra}
[attacks.weight_rows]
[inits.gaussian]
[[grid]]
targets = ["t"]
attacks = ["weight_rows"]
"""


def load(tmp_path: Path, extra: str):
    path = tmp_path / "s.toml"
    path.write_text(SUITE.format(extra=extra))
    return load_suite(path).targets["t"].recipe.problem


def test_a_suite_target_without_order_is_file_order(tmp_path):
    spec = load(tmp_path, "")
    assert spec.order == "file" and "order" not in spec.to_dict()


def test_a_suite_target_can_shuffle(tmp_path):
    spec = load(tmp_path, 'order = "shuffled"\norder_seed = 4')
    assert (spec.order, spec.order_seed) == ("shuffled", 4)


def test_order_seed_without_order_is_refused(tmp_path):
    with pytest.raises(SuiteError, match="order_seed needs order"):
        load(tmp_path, "order_seed = 4")
