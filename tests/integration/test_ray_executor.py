"""Cells as Ray tasks on a local two-worker Ray instance: the same cell JSONs as the serial runner, a worker killed
mid-cell loses only that cell (resume completes it from its finished search runs), and Ctrl-C cancels the rest."""

from __future__ import annotations

import json
import logging
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from _helpers.cellkit import comparable
from _helpers.guards import default_sigint

from reconbench.bench.cells import expand
from reconbench.bench.executors import RunContext
from reconbench.bench.ray_executor import RayExecutor
from reconbench.bench.runner import cell_path, load_cells, run_suite
from reconbench.bench.suite import SuiteError, load_suite
from reconbench.cli import main
from reconbench.errors import UnknownNameError
from reconbench.runs.execute import PAUSE_ENV, PAUSE_MARK

ray = pytest.importorskip("ray")


def test_executor_options_are_checked_before_anything_runs(tmp_path, capsys):
    running = ray.is_initialized()   # a module fixture's instance, when a test using it ran first
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "ci", "--out", str(tmp_path / "res"), "--address", "auto"])
    assert exit_info.value.code == 2 and "--address needs --executor ray" in capsys.readouterr().err
    ctx = RunContext(load_suite("ci"), tmp_path, 0, "cuda:1", "float64", None, None, True)
    with pytest.raises(SuiteError, match="pass --device cuda"):
        RayExecutor().check(ctx)
    assert ray.is_initialized() == running and not (tmp_path / "res").exists()   # the checks started no Ray


def test_errors_cross_process_boundaries_intact():
    """A target's error travels from its Ray task to the cells' records by pickling."""
    err = pickle.loads(pickle.dumps(UnknownNameError("attack", "hiam", ["haim", "other"])))
    assert isinstance(err, UnknownNameError) and err.name == "hiam" and "Did you mean: haim" in str(err)


@pytest.fixture(scope="module")
def two_workers() -> Iterator[None]:
    """A local Ray instance with two CPU slots: at most two cells run at once, in two worker processes."""
    if ray.is_initialized():   # another test's instance, left by a test that ran before in another order
        ray.shutdown()
    ray.init(address="local", num_cpus=2, include_dashboard=False, object_store_memory=128 * 2**20,
             logging_level=logging.WARNING)
    yield
    ray.shutdown()


@pytest.fixture
def one_thread() -> Iterator[None]:
    """Ray's workers run a 1-CPU cell with one torch thread; the serial reference must use as many."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.mark.slow
def test_ci_suite_on_two_ray_workers_matches_the_serial_run(tmp_path, two_workers, one_thread):
    suite = load_suite("ci")
    serial = run_suite(suite, tmp_path / "serial", cache=str(tmp_path / "cache-serial"), quiet=True)
    remote = run_suite(suite, tmp_path / "ray", cache=str(tmp_path / "cache-ray"), quiet=True, executor=RayExecutor())
    assert not serial.failed and not remote.failed and not remote.lost
    assert sorted(remote.ran) == sorted(serial.ran) == sorted(c.cell_id for c in expand(suite))

    a, b = load_cells(tmp_path / "serial"), load_cells(tmp_path / "ray")
    assert sorted(a) == sorted(b)
    for cid in a:
        assert comparable(b[cid]) == comparable(a[cid]), cid  # numbers, keys, cell_key, target info, layout refs
    same_files = {p.relative_to(tmp_path / "serial") for p in (tmp_path / "serial").rglob("*") if p.is_file()}
    ray_files = {p.relative_to(tmp_path / "ray") for p in (tmp_path / "ray").rglob("*") if p.is_file()}
    assert same_files == ray_files  # the same folder layout, file for file

    # each target was trained once, by one task: every cell of a recipe carries that one task's timing
    by_recipe: dict[str, set[float]] = {}
    for rec in b.values():
        by_recipe.setdefault(rec["target"]["recipe_key"], set()).add(rec["target"]["load_or_train_seconds"])
    assert all(len(times) == 1 for times in by_recipe.values())
    assert sorted(by_recipe) == sorted({c.recipe.key() for c in expand(suite)})
    assert all(not rec["target"]["reused"] for rec in b.values())
    inv = json.loads((tmp_path / "ray" / "invocations" / "000.json").read_text())
    assert inv["status"] == "completed" and inv["executor"]["name"] == "ray"


SLOW_SUITE = """\
[suite]
name = "ray-kill"
seeds = [0, 1]
search_runs = 3

[targets.bin]
dataset = "digits"
task = "binary"
binary_rule = "parity"
n_per_class = 5
widths = [32, 32]
steps = 300

[attacks.haim_binary_kkt]
config = { steps = 1500 }

[inits.gaussian]
[inits.uniform]

[[grid]]
targets = ["bin"]
attacks = ["haim_binary_kkt"]
"""


def running_cells() -> dict[int, str]:
    """Ray worker processes running a cell task, by pid (Ray titles them ``ray::<task name>``)."""
    found = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            title = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        if title.startswith("ray::cell "):
            found[int(proc.name)] = title[len("ray::cell ") :].split()[0]
    return found


def in_background(fn: Any) -> threading.Thread:
    t = threading.Thread(target=fn, daemon=True)
    t.start()
    return t


def snapshot(folder: Path, pattern: str) -> dict[str, tuple[int, bytes]]:
    return {str(p.relative_to(folder)): (p.stat().st_mtime_ns, p.read_bytes()) for p in folder.glob(pattern)}


def kill_a_worker_mid_cell(out: Path, killed: dict[str, Any], after: float = 1.0) -> None:
    """SIGKILL the first worker seen running its cell for ``after`` seconds; note the cell and the search runs it had
    finished then (the batched engine may finish all of a cell's runs at once, so there may be none)."""
    first_seen: dict[tuple[int, str], float] = {}
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        for pid, cid in running_cells().items():
            seen = first_seen.setdefault((pid, cid), time.monotonic())
            if time.monotonic() - seen > after and not cell_path(out, cid).exists():
                killed.update(cell=cid, runs=snapshot(out / "work" / cid, "runs/*"))
                os.kill(pid, signal.SIGKILL)
                return
        time.sleep(0.02)


@pytest.mark.slow
def test_a_worker_killed_mid_cell_loses_only_that_cell_and_resume_completes_it(tmp_path, two_workers, one_thread):
    path = tmp_path / "suite.toml"
    path.write_text(SLOW_SUITE)
    suite = load_suite(path)
    out, cache = tmp_path / "res", str(tmp_path / "cache")
    killed: dict[str, Any] = {}
    killer = in_background(lambda: kill_a_worker_mid_cell(out, killed))
    report = run_suite(suite, out, cache=cache, quiet=True, executor=RayExecutor(max_retries=0))
    killer.join()
    assert killed, "no cell was caught running"
    cid = killed["cell"]
    assert report.lost == [cid] and not cell_path(out, cid).exists()
    finished = snapshot(out, "cells/*.json")
    assert len(finished) == 3 and all(json.loads(d)["status"] == "ok" for _, d in finished.values())
    assert json.loads((out / "invocations" / "000.json").read_text())["status"] == "incomplete"

    resumed = run_suite(suite, out, cache=cache, quiet=True, resume=True, executor=RayExecutor(max_retries=0))
    assert resumed.ran == [cid] and sorted(resumed.skipped) == sorted(Path(k).stem for k in finished)
    assert snapshot(out, "cells/*.json").items() >= finished.items()  # no finished cell rewritten
    assert snapshot(out / "work" / cid, "runs/*").items() >= killed["runs"].items()  # nor its finished runs
    cells = load_cells(out)
    assert len(cells) == 4 and all(r["status"] == "ok" for r in cells.values())
    assert json.loads((out / "invocations" / "001.json").read_text())["status"] == "completed"

    # the killed and resumed cell has the numbers of an uninterrupted serial run, bit for bit when none of its search
    # runs had finished (resumed runs are a smaller batch of the batched engine: the same to rounding only, see
    # docs/kkt_attacks.md)
    alone = run_suite(suite, tmp_path / "alone", cache=cache, quiet=True, only=[cid])
    assert alone.ran == [cid]
    if not killed["runs"]:
        assert comparable(cells[cid]) | {"invocation": 0} == comparable(load_cells(tmp_path / "alone")[cid])


@pytest.fixture
def pausing_workers(tmp_path: Path) -> Iterator[Path]:
    """Two Ray workers in which the first search run to finish announces itself in the returned folder and waits
    there to be killed (reconbench.runs.execute.pause_after_first_run); the plain instance is back afterwards."""
    signals = tmp_path / "signals"
    signals.mkdir()
    plain_before = ray.is_initialized()   # the module's two_workers instance, when a test before this one made it
    if plain_before:
        ray.shutdown()
    ray.init(address="local", num_cpus=2, include_dashboard=False, object_store_memory=128 * 2**20,
             logging_level=logging.WARNING, runtime_env={"env_vars": {PAUSE_ENV: str(signals)}})
    yield signals
    ray.shutdown()
    if plain_before:   # as it was found, whatever order the tests run in
        ray.init(address="local", num_cpus=2, include_dashboard=False, object_store_memory=128 * 2**20,
                 logging_level=logging.WARNING)


def kill_at_the_first_finished_run(signals: Path, out: Path, killed: dict[str, Any]) -> None:
    """SIGKILL the worker whose cell announced its first finished search run (it waits for this), and note the cell
    and the runs it had written then."""
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        try:
            mark = json.loads((signals / PAUSE_MARK).read_text())
        except (OSError, ValueError):  # not there yet, or being written
            time.sleep(0.02)
            continue
        cid = Path(mark["record"]).parents[1].name  # work/<cell>/runs/run-NNN.json
        killed.update(cell=cid, runs=snapshot(out / "work" / cid, "runs/*"))
        os.kill(int(mark["pid"]), signal.SIGKILL)
        return


@pytest.mark.slow
def test_ray_retries_a_cell_whose_worker_died_from_its_finished_search_runs(tmp_path, pausing_workers):
    """The worker is killed where its cell has written its first finished search run (the cell waits there), so
    the retry has a finished run to resume from, whatever the load of the machine."""
    path = tmp_path / "suite.toml"
    path.write_text(SLOW_SUITE.replace("seeds = [0, 1]", "seeds = [0]"))
    suite = load_suite(path)
    out = tmp_path / "res"
    killed: dict[str, Any] = {}
    killer = in_background(lambda: kill_at_the_first_finished_run(pausing_workers, out, killed))
    report = run_suite(suite, out, cache=str(tmp_path / "cache"), quiet=True, executor=RayExecutor(max_retries=1))
    killer.join()
    assert killed, "no cell announced a finished search run"
    assert killed["runs"], "the killed cell had written no finished run"
    assert not report.lost and not report.failed and len(report.ran) == 2
    assert all(r["status"] == "ok" for r in load_cells(out).values())
    assert snapshot(out / "work" / killed["cell"], "runs/*").items() >= killed["runs"].items()  # the retry resumed


def processes_named(prefix: str) -> set[int]:
    found = set()
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and (proc / "cmdline").read_bytes().split(b"\0")[0].endswith(prefix.encode()):
                found.add(int(proc.name))
        except OSError:
            continue
    return found


@pytest.mark.slow
def test_ctrl_c_stops_the_cells_and_the_local_ray_instance(tmp_path):
    """`reconbench bench --executor ray` in a terminal: Ctrl-C (SIGINT to its process group) after the first cell."""
    path = tmp_path / "suite.toml"
    path.write_text(SLOW_SUITE)
    out = tmp_path / "res"
    cmd = [sys.executable, "-m", "reconbench", "bench", str(path), "--executor", "ray", "--out", str(out),
           "--cache", str(tmp_path / "cache"), "-q"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    ray_servers_before = processes_named("gcs_server")
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                            preexec_fn=default_sigint)
    deadline = time.monotonic() + 240
    while not list(out.glob("cells/*.json")):
        assert proc.poll() is None, proc.communicate()[1].decode()[-2000:]
        assert time.monotonic() < deadline, "no cell finished in 240 s"
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err.decode()[-2000:]
    assert json.loads((out / "invocations" / "000.json").read_text())["status"] == "interrupted"
    deadline = time.monotonic() + 30
    while (running_cells() or processes_named("gcs_server") - ray_servers_before) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not running_cells(), "cell tasks still run after Ctrl-C"
    assert not processes_named("gcs_server") - ray_servers_before, "the local Ray instance outlived the run"
    done = load_cells(out)
    assert 1 <= len(done) < 4 and all(r["status"] == "ok" for r in done.values())
