"""The slice's watcher on its own: progress lines at most every 30 s of its clock (each naming the cells, the step,
the runs, the seconds per batched step and the expected end against the stop), the stop past the deadline and not at
the last step, and the rows it measures."""

from __future__ import annotations

import io

import pytest
import torch

from reconbench.attack.watch import AttackStopped, current, labelled, watching
from reconbench.bench.slice_watch import SliceWatch, precision_name


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def watch(stop_at: float = 1000.0) -> tuple[SliceWatch, Clock, io.StringIO]:
    clock, stream = Clock(), io.StringIO()
    return SliceWatch(clock, start=0.0, stop_at=stop_at, stream=stream, timer=clock), clock, stream


def test_progress_lines_come_at_most_every_30_seconds_and_say_where_the_attack_will_end():
    w, clock, stream = watch()
    with w.label(["cell-a"]):
        w.begin(16, 1000, 50_000, torch.float32, True, torch.device("cpu"))
    for step in range(100, 5001, 100):   # one check per 100 steps, 1 s apart: 50 s in all
        clock.now = step / 100
        w.at(step)
    lines = stream.getvalue().splitlines()
    assert lines[0] == "slice: cell-a: attack started (16 run(s) of 1000 candidates, 50,000 steps, tf32) at 0.0s of 1000s"
    progress = lines[1:]
    assert len(progress) == 1   # at 30 s; the next would be at 60 s
    # 3,000 steps in 30 s: 0.01 s per step, 47,000 steps left -> 470 s more, an end at 500 s, within the stop
    assert progress[0] == ("slice: cell-a: batched step 3,000 of 50,000, 16 run(s), 0.01 s per batched step, expected "
                           "end at 500s, within the stop at 1000s (30s elapsed)")


def test_the_stop_comes_at_the_first_check_past_the_deadline_but_not_at_the_last_step():
    w, clock, stream = watch(stop_at=10.0)
    with w.label(["a", "b"]):
        w.begin(6, 20, 100, torch.float64, False, torch.device("cpu"))
        clock.now = 9.0
        w.at(40)
        clock.now = 10.0
        with pytest.raises(AttackStopped) as stop:
            w.at(41)
    assert (stop.value.step, stop.value.steps) == (41, 100)
    assert "2 cells (a, b): the deadline stops the attack at batched step 41 of 100" in stream.getvalue()
    rows = w.attack_rows("b", weights=123)
    assert [(r.cell, r.runs, r.m, r.steps, r.seconds, r.precision, r.weights) for r in rows] == [
        ("b", 6, 20, 41, 10.0, "float64", 123)]
    # a computation that reaches its last step past the deadline has finished: it is not stopped
    with w.label(["c"]):
        w.begin(1, 20, 100, torch.float32, True, torch.device("cpu"))
        clock.now = 50.0
        w.at(100)
        w.end(100)
    assert w.computations[-1].ended and not w.computations[-1].stopped


def test_precision_names_and_no_watcher_outside_a_slice():
    assert precision_name(torch.float32, True) == "tf32" and precision_name(torch.float64, True) == "float64"
    assert precision_name(torch.float32, False) == "float32"
    assert current() is None
    with labelled(["x"]):   # nothing to label without a watcher
        assert current() is None
    w, _, _ = watch()
    with watching(w):
        assert current() is w
    assert current() is None
