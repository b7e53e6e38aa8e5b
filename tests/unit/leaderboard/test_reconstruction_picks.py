"""The reconstructions figure's picks when an attack's row has no usable cell: that attack has no picture, the
others keep theirs (the figure, its check and its redraw read the same picks)."""

from __future__ import annotations

from pathlib import Path

import pytest
from _helpers.recordkit import cell_record, selection, write_results

from reconbench.attack.outcome import DIVERGED
from reconbench.bench.cells import Cell, expand
from reconbench.bench.suite import Suite, load_suite
from reconbench.leaderboard.figures import reconstruction_picks
from reconbench.leaderboard.tables import collect, main_rows, resolve_columns
from reconbench.records import CellRecord, StoredOutcome

SUITE = """\
[suite]
name = "picks"
description = "made-up numbers"
seeds = [0, 1, 2]

[targets.bin]
dataset = "digits"
task = "binary"
n_per_class = 3
widths = [8]
steps = 10

[attacks.a]
attack = "toy_identity"
[attacks.b]
attack = "toy_identity"

[inits.gaussian]

[[grid]]
targets = ["bin"]
attacks = ["a", "b"]
"""

#: the pooled count each cell reconstructs, per attack and seed: attack a's best cell is its seed 1
COUNTS = {"a": [3, 5, 4], "b": [6, 7, 8]}


def _record(cell: Cell, suite: Suite) -> CellRecord:
    count = float(COUNTS[cell.attack.label][cell.seed])
    sel = {"pool": selection({"good_count": count, "reconstructed_calibrated": count / 2})}
    return cell_record(cell, suite, sel)


def _diverged(rec: CellRecord) -> CellRecord:
    return rec.updated(outcome=StoredOutcome.written(status=DIVERGED, reason="the loss went to inf",
                                                     runs={DIVERGED: 1}))


@pytest.fixture
def suite(tmp_path: Path, toy_attack_registered: object) -> Suite:
    path = tmp_path / "picks.toml"
    path.write_text(SUITE)
    return load_suite(path)


@pytest.mark.parametrize("what", ["every cell of b failed", "the board keeps no cell of b"])
def test_an_attack_without_a_usable_cell_has_no_picture(suite: Suite, tmp_path: Path, what: str) -> None:
    cells = {c.cell_id: _record(c, suite) for c in expand(suite)}
    # the tables as a board published them, every cell usable: attack b's row lists its three cells
    pub = collect(suite, write_results(tmp_path / "published", cells.values()))
    columns = resolve_columns(suite, pub.ok())
    tables = {"pool": main_rows(suite, pub, columns, "pool")}
    assert {r.attack for r in tables["pool"] if r.cells} == {"a", "b"}
    # the cells the figure reads: attack b's row has none it can use
    if what == "every cell of b failed":
        now = [_diverged(r) if r.attack.label == "b" else r for r in cells.values()]
    else:
        now = [r for r in cells.values() if r.attack.label != "b"]
    after = collect(suite, write_results(tmp_path / "now", now))
    assert not after.usable(next(r.cells for r in tables["pool"] if r.attack == "b"))

    picks = reconstruction_picks(suite, after, tables, columns)

    best_a = max(range(3), key=lambda seed: COUNTS["a"][seed])
    assert [(r.attack.label, r.seed) for r in picks] == [("a", best_a)]
