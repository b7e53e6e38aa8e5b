"""A slice's deadline stops a cell's attack midway: the cell is not recorded (it stays to do), the pack records what
was measured and which cell stopped where, ``--unpack`` adds the measured rows to the ledger (once, however often the
pack is merged), and the next slice runs the cell in full, with the numbers of one uninterrupted run.

The slice's only view of time is a clock that jumps past the deadline once the watched attack reached a given
batched step, so where the attack stops is fixed (``tests/unit/bench/test_slice_watch.py`` checks the watcher's
lines and its stop on its own)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from _helpers.cli import run_cli
from _helpers.slicekit import cheap, deterministic, digits_sizes

from reconbench.bench.cells import expand
from reconbench.bench.runner import load_cells, run_suite
from reconbench.bench.slice_executor import DeadlineExecutor
from reconbench.bench.suite import load_suite
from reconbench.cli.bench_slices import SlicePacker
from reconbench.preflight import model_parameters
from reconbench.records.finished_ledger import FINISHED_LEDGER_FILE

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "benchmarks" / "gpu" / "tiny.toml"
STOP_STEP = 40   # the clock jumps once the watched computation has done this many steps: the stop is at the next check


class AttackClock:
    """Reads 0 until the ``nth`` watched computation (1-based) reached :data:`STOP_STEP` steps, then far past any
    deadline."""

    def __init__(self, nth: int) -> None:
        self.nth = nth
        self.ex: DeadlineExecutor | None = None

    def __call__(self) -> float:
        comps = self.ex.watch.computations if self.ex is not None else []
        return 1e6 if len(comps) >= self.nth and comps[-1].step >= STOP_STEP else 0.0


def stopped_slice(tmp_path: Path, *, nth: int, cross_target: bool = False) -> tuple[Any, DeadlineExecutor, Path]:
    suite = load_suite(str(TINY))
    clock = AttackClock(nth)
    ex = DeadlineExecutor(1e5, cheap(), digits_sizes(suite), start=0.0, clock=clock, cross_target=cross_target)
    clock.ex = ex
    pack = tmp_path / "pack1"
    packer = SlicePacker(pack, suite, tmp_path / "device1", ex, "cpu", None, 0.0, {})
    report = run_suite(suite, tmp_path / "device1", cache=str(tmp_path / "cache1"), quiet=True, executor=ex,
                       on_cell=packer.cell)
    packer.write(report.ran, complete=True)
    return report, ex, pack


@pytest.mark.slow
def test_a_deadline_that_cuts_an_attack_leaves_the_cell_to_do_and_brings_back_what_it_measured(tmp_path, capsys):
    suite = load_suite(str(TINY))
    report, ex, pack = stopped_slice(tmp_path, nth=2)
    first, second, third = (c.cell_id for c in expand(suite))
    # cell 1 ran whole; cell 2's attack stopped at the check after STOP_STEP; cell 3 never started
    assert report.ran == [first] and not report.failed
    manifest = json.loads((pack / "manifest.json").read_text())
    assert manifest["format"] == "reconbench-slice-pack/4"
    assert manifest["cells"] == [first] and sorted(manifest["cells_remaining"]) == sorted([second, third])
    assert manifest["stopped"] == [{"cell_id": second, "step": STOP_STEP + 1, "steps": 100,
                                    "seconds": manifest["stopped"][0]["seconds"]}]
    assert [d["cell_id"] for d in manifest["deferred"]] == [second, third]
    assert "stopped its attack at batched step 41 of 100" in ex.deferred[0].note
    assert not (tmp_path / "device1" / "cells" / f"{second}.json").exists()   # not recorded, not failed
    # a row for every phase of every cell that ran: the finished one's three, the stopped one's set-up and attack
    rows = manifest["measured"]
    assert [(r["cell"], r["phase"]) for r in rows] == [(first, "setup"), (first, "attack"), (first, "evaluation"),
                                                       (second, "setup"), (second, "attack")]
    cell = next(c for c in expand(suite) if c.cell_id == second)
    weights = model_parameters(cell.recipe.family, (1, 8, 8), 1, cell.recipe.model)
    stopped_row = rows[4]
    assert stopped_row == {"cell": second, "phase": "attack", "precision": "float64", "runs": 2, "m": 20,
                           "weights": weights, "steps": STOP_STEP + 1, "seconds": stopped_row["seconds"],
                           "device": "cpu"}
    assert rows[1]["steps"] == 100 and rows[1]["runs"] == 2
    # the lines on stderr: phases, the stop's progress line and why the attack ended
    err = capsys.readouterr().err
    assert f"slice: {first}: attack started (2 run(s) of 20 candidates, 100 steps, float64)" in err
    assert f"slice: {first}: evaluation started" in err and f"slice: {first}: done (ok)" in err
    assert f"slice: {second}: batched step {STOP_STEP + 1} of 100, 2 run(s)" in err
    assert f"slice: {second}: the deadline stops the attack at batched step {STOP_STEP + 1} of 100" in err

    # merged here: the rows go into the ledger, once however often the pack is merged
    local = tmp_path / "local"
    for _ in range(2):
        code, text, err = run_cli(["bench", str(TINY), "--unpack", str(pack), "--out", str(local)], capsys)
        assert code == 0, err
    assert f"stopped by the slice's deadline: {second} at batched step 41 of 100" in text
    ledger = FINISHED_LEDGER_FILE.read(local / "finished.json")
    assert [r.to_dict() for r in ledger.measured] == rows and list(ledger.cells) == [first]

    # the next slice, on a fresh machine given the ledger, runs the stopped cell in full and the last one
    code, text, err = run_cli(["bench", str(TINY), "--device", "cpu", "--deadline", "600", "--pack",
                               str(tmp_path / "pack2"), "--out", str(tmp_path / "device2"), "--cache",
                               str(tmp_path / "cache2"), "--finished", str(local / "finished.json"), "-q"], capsys)
    assert code == 0, err
    assert "2 cell(s) ran" in text
    code, text, err = run_cli(["bench", str(TINY), "--unpack", str(tmp_path / "pack2"), "--out", str(local)], capsys)
    assert code == 0 and "every cell of suite gpu-tiny" in text, err
    ledger = FINISHED_LEDGER_FILE.read(local / "finished.json")
    assert [r.to_dict() for r in ledger.measured][:5] == rows   # slice 1's rows kept, slice 2's appended
    assert [(r.cell, r.phase) for r in ledger.measured[5:] if r.phase == "attack"] == [(second, "attack"),
                                                                                      (third, "attack")]
    # the cells equal one uninterrupted run's
    whole = tmp_path / "whole"
    run_suite(suite, whole, cache=str(tmp_path / "cache0"), quiet=True)
    a, b = load_cells(whole), load_cells(local)
    assert sorted(a) == sorted(b)
    for cid in a:
        assert deterministic(b[cid]) == deterministic(a[cid]), cid


def test_a_stop_in_a_cross_target_computation_leaves_every_cell_of_it_to_do(tmp_path):
    """The GPU's default path: the cells' runs advance as one computation; the deadline stops it, none is recorded,
    and each of its cells has its set-up and its share of the attack measured (the batch's runs and steps)."""
    report, ex, pack = stopped_slice(tmp_path, nth=1, cross_target=True)
    assert report.ran == [] and len(ex.stopped) == 3
    manifest = json.loads((pack / "manifest.json").read_text())
    assert manifest["cells"] == [] and len(manifest["cells_remaining"]) == 3
    attack = [r for r in manifest["measured"] if r["phase"] == "attack"]
    assert [r["cell"] for r in attack] == [s["cell_id"] for s in manifest["stopped"]]
    assert {(r["runs"], r["steps"]) for r in attack} == {(6, STOP_STEP + 1)}
    assert sum(r["phase"] == "setup" for r in manifest["measured"]) == 3
