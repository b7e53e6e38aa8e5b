"""The reconstructions figure is the board's own: a row merged from an outside submission gives it no pick, so a
board that took one in still passes --verify without its figure being drawn again."""

from __future__ import annotations

from pathlib import Path

import pytest
from _helpers.recordkit import cell_record, selection, write_results

from reconbench.bench.cells import expand
from reconbench.bench.suite import Suite, load_suite
from reconbench.leaderboard.figures import reconstruction_picks
from reconbench.leaderboard.tables import collect, main_rows, resolve_columns

SUITE = """\
[suite]
name = "picks"
description = "made-up numbers"
seeds = [0, 1]

[targets.bin]
dataset = "digits"
task = "binary"
n_per_class = 3
widths = [8]
steps = 10

[attacks.own]
attack = "toy_identity"
[attacks.theirs]
attack = "toy_identity"

[inits.gaussian]

[[grid]]
targets = ["bin"]
attacks = ["own", "theirs"]
"""


@pytest.fixture
def suite(tmp_path: Path, toy_attack_registered: object) -> Suite:
    path = tmp_path / "picks.toml"
    path.write_text(SUITE)
    return load_suite(path)


def test_an_outside_row_gives_the_figure_no_pick(suite: Suite, tmp_path: Path) -> None:
    cells = [cell_record(c, suite, {"pool": selection({"good_count": 1.0 + c.seed,
                                                        "reconstructed_calibrated": 1.0})}) for c in expand(suite)]
    pub = collect(suite, write_results(tmp_path / "board", cells))
    columns = resolve_columns(suite, pub.ok())
    rows = main_rows(suite, pub, columns, "pool")
    both = reconstruction_picks(suite, pub, {"pool": rows}, columns)
    assert sorted(r.attack.label for r in both) == ["own", "theirs"]
    merged = [r.updated(outside=["sub-1"]) if r.attack == "theirs" else r for r in rows]   # as `add` marks them
    picks = reconstruction_picks(suite, pub, {"pool": merged}, columns)
    assert [r.attack.label for r in picks] == ["own"]
