"""The pack's training states take files that a slice's groups of search runs then cannot: a slice that trains a
target in pieces (and does not finish it) while a cell's runs run in groups sizes the group to the pack files left
after that state, so every run it computes travels (none is left out of the pack to be run again), and the plan
(``plan_slices``) takes the same decision as the executor."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _helpers.slicekit import TickClock, cheap, digits_sizes
from safetensors.torch import load_file

from reconbench.bench import slice_pack
from reconbench.bench.cells import expand
from reconbench.bench.runner import run_suite
from reconbench.bench.slice_costs import GroupRules, cell_work, plan_slices
from reconbench.bench.slice_executor import DeadlineExecutor
from reconbench.bench.suite import load_suite
from reconbench.cli.bench_slices import SlicePacker

pytestmark = pytest.mark.usefixtures("one_torch_thread")

STEPS = 5000
SUITE = f"""
[suite]
name = "state-room"
description = "A target trained whole whose cell's runs go in groups, and one trained in pieces."
seeds = [0]
device = "cpu"
dtype = "float64"
search_runs = 3

[protocol]
figures = false

[leaderboard]
store_candidates = 1
sample_images = 4

[targets.whole]
dataset = "digits"
task = "binary"
binary_rule = "parity"
n_per_class = 5
family = "mlp"
widths = [32, 32]
loss = "bce"
lr = 0.5
schedule = "inverse_loss"
steps = 300
seed = 0

[targets.pieced]
dataset = "digits"
task = "binary"
binary_rule = "parity"
n_per_class = 5
family = "mlp"
widths = [32, 32]
loss = "bce"
lr = 0.5
steps = {STEPS}
seed = 1

[attacks.haim_binary_kkt]
config = {{ steps = 30 }}

[inits.gaussian]

[[grid]]
targets = ["whole"]
attacks = ["haim_binary_kkt"]
inits = ["gaussian"]

[[grid]]
targets = ["pieced"]
attacks = ["haim_binary_kkt"]
inits = ["gaussian"]
"""


@pytest.fixture
def suite(tmp_path: Path) -> Any:
    path = tmp_path / "state-room.toml"
    path.write_text(SUITE)
    return load_suite(str(path))


def one_run_a_file(suite: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Pack files that hold one run of the grouped cell each (its tensors at their travel size, header room)."""
    (cell,) = [c for c in expand(suite) if c.target == "whole"]
    work = cell_work(cell, digits_sizes(suite)[cell.recipe.key()], dtype="float64")
    monkeypatch.setattr(slice_pack, "MAX_FILE_BYTES", sum(work.run_bytes) + 64 * 1024)


@pytest.mark.slow
def test_a_training_state_takes_its_file_before_the_runs_and_no_computed_run_is_left_out(suite, tmp_path,
                                                                                         monkeypatch):
    one_run_a_file(suite, monkeypatch)
    max_files = 4   # manifest, records, and two files for runs before the state is counted
    run_files = max_files - 2
    ex = DeadlineExecutor(60.0, cheap(), digits_sizes(suite), start=0.0, clock=TickClock(),
                          states=tmp_path / "cache" / "training", runs_per_slice=2, run_files=run_files)
    packer = SlicePacker(tmp_path / "pack", suite, tmp_path / "device", ex, "cpu", None, 0.0, {}, max_files=max_files)
    report = run_suite(suite, tmp_path / "device", cache=str(tmp_path / "cache"), quiet=True, executor=ex,
                       on_cell=packer.cell)
    manifest = packer.write(report.ran, complete=True)
    # the pieced target's training did not finish: its state travels, a file of its own
    (piece,) = ex.pieces
    assert not piece.finished and 0 < piece.step < STEPS
    assert [t.recipe_key for t in manifest.training] == [piece.recipe_key] and not manifest.training_left_out
    # the group took the one file the state left: every run computed travels, none is left out
    computed = sorted(p.name for p in (tmp_path / "device" / "work").glob("*/runs/run-*.safetensors"))
    assert [g.runs for g in manifest.groups] == [[0]] and computed == ["run-000.safetensors"]
    assert not manifest.groups_left_out
    runs = [f.name for f in manifest.files if f.name.startswith("runs-")]
    assert len(runs) == 1 and len(manifest.files) + 1 <= max_files
    assert {k.split("/")[1] for k in load_file(str(tmp_path / "pack" / runs[0]))} == {"000"}

    # the plan takes the same decision from the same rules: a group of one run beside the state
    sizes = digits_sizes(suite)
    works = [cell_work(c, sizes[c.recipe.key()], pieces=True, dtype="float64") for c in expand(suite)]
    plan = plan_slices(works, cheap(), 60.0, rules=GroupRules(run_files=run_files, runs_per_slice=2))
    assert [[len(g.runs) for g in groups] for groups in plan.groups][:1] == [[1]]
    assert plan.training[0]   # beside the target's training


def test_a_state_file_estimate_holds_the_state_written(suite, tmp_path):
    """The pack files a target's state is counted for (``CellWork.state_files``) hold the state its training writes:
    its bytes at most the estimate's (so the room counted for it is never short)."""
    from reconbench.bench.slice_costs import state_bytes
    from reconbench.targets.resumable import train_pieces

    sizes = digits_sizes(suite)
    (cell,) = [c for c in expand(suite) if c.target == "pieced"]
    (piece,) = train_pieces([cell.recipe], [tmp_path / "card"], tmp_path / "states", seconds=1e-9)
    assert piece.state is not None
    written = piece.state.stat().st_size
    estimate = state_bytes(cell.recipe, sizes[cell.recipe.key()])
    assert written <= estimate, (written, estimate)
    assert cell_work(cell, sizes[cell.recipe.key()], pieces=True).state_files == 1
    assert cell_work(cell, sizes[cell.recipe.key()]).state_files == 0   # trained whole: no state travels
