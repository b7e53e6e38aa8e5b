"""The seconds a deferred cell is said to have had left are those the slice decided with. In a cross-target slice
the walk chooses the cells to run together first and defers the rest before any of them runs: what was left for a
deferred cell then is the deadline less the seconds elapsed and less the estimates of the cells chosen before it,
not the deadline less the seconds elapsed alone (which said 253.5 s left beside an estimate of 78.2 s that had not
fitted)."""

from __future__ import annotations

from pathlib import Path

import pytest
from _helpers.slicekit import cheap, digits_sizes

from reconbench.bench.runner import run_suite
from reconbench.bench.slice_costs import SAFETY_FACTOR, SAFETY_SECONDS
from reconbench.bench.slice_executor import DeadlineExecutor
from reconbench.bench.suite import load_suite
from reconbench.cli.bench_slices import say_deferred

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TINY = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu" / "tiny.toml"
DEADLINE = 8.0


class StepClock:
    """Reads 0 until ``jump()``, then ``after``: the slice's only view of time."""

    def __init__(self, after: float) -> None:
        self.now, self.after = 0.0, after

    def __call__(self) -> float:
        return self.now

    def jump(self) -> None:
        self.now = self.after


def test_a_cross_target_slice_defers_with_the_seconds_its_chosen_cells_leave(tmp_path, capsys):
    suite = load_suite(str(TINY))
    # the slice's clock stands at 0: nothing has elapsed when the walk decides
    ex = DeadlineExecutor(DEADLINE, cheap(), digits_sizes(suite), start=0.0, clock=lambda: 0.0, cross_target=True)
    report = run_suite(suite, tmp_path / "out", cache=str(tmp_path / "cache"), quiet=True, executor=ex)
    # the cheap model: 1 s per phase, the margin's factor and seconds; the first cell trains its target (three
    # phases), the others find it trained (two)
    first = SAFETY_FACTOR * 3 + SAFETY_SECONDS
    rest = SAFETY_FACTOR * 2 + SAFETY_SECONDS
    assert first <= DEADLINE < first + rest   # one cell fits, a second does not fit beside it
    assert report.ran == ["digits-binary--haim_binary_kkt--gaussian--s0"] and len(ex.deferred) == 2
    for d in ex.deferred:
        assert d.note == "" and d.at == 0.0
        assert d.pending == pytest.approx(first, rel=1e-14)
        assert d.left == pytest.approx(DEADLINE - first, rel=1e-14)
        assert d.estimate == pytest.approx(rest, rel=1e-14)
        assert d.estimate > d.left   # why it was deferred: it did not fit what was left
    capsys.readouterr()
    say_deferred(ex, report, DEADLINE + 10.0)
    lines = [x for x in capsys.readouterr().out.splitlines() if "not started:" in x]
    assert len(lines) == 2
    for line in lines:
        assert (f"(estimated {rest:.1f}s, {DEADLINE - first:.1f}s left when decided at 0.0s: {DEADLINE:.1f}s less "
                f"{first:.1f}s estimated for the cells chosen to run before it)") in line, line


def test_a_cell_deferred_after_the_walk_says_the_time_then(tmp_path, capsys):
    """Without cross-target the cells run as the walk reaches them: a cell deferred after the first one ran had what
    the clock left then, nothing pending."""
    suite = load_suite(str(TINY))
    clock = StepClock(7.0)   # 0 until the first cell is recorded, then 7 s: less than the margin's seconds left
    ex = DeadlineExecutor(DEADLINE, cheap(), digits_sizes(suite), start=0.0, clock=clock)
    report = run_suite(suite, tmp_path / "out", cache=str(tmp_path / "cache"), quiet=True, executor=ex,
                       on_cell=lambda rec: clock.jump())
    assert len(report.ran) == 1 and len(ex.deferred) == 2 and not ex.stopped
    for d in ex.deferred:   # estimated from what the first cell measured, the margin's seconds at least
        assert (d.at, d.pending, d.left) == (7.0, 0.0, DEADLINE - 7.0)
        assert d.estimate >= SAFETY_SECONDS > d.left
    capsys.readouterr()
    say_deferred(ex, report, DEADLINE + 10.0)
    lines = [x for x in capsys.readouterr().out.splitlines() if "not started:" in x]
    assert len(lines) == 2
    assert all(f"(estimated {d.estimate:.1f}s, {DEADLINE - 7.0:.1f}s left when decided at 7.0s)" in x
               for d, x in zip(ex.deferred, lines, strict=True)), lines
