"""The suite runner: one JSON per cell, pool/blind/oracle selections, failures, resume, kill and resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from _helpers.bench_launcher import x0_digest
from _helpers.cli import run_cli
from _helpers.suitekit import toy_targets
from conftest import ToyAttack
from safetensors.torch import load_file

from reconbench import hookimpl, plugins
from reconbench.bench.cells import expand
from reconbench.bench.runner import load_cells, run_suite
from reconbench.bench.suite import SuiteError, load_suite
from reconbench.evaluation import evaluate
from reconbench.targets.cache import cache_dir
from reconbench.targets.cards import load_card

TESTS = Path(__file__).resolve().parents[1]


def suite_text(attacks: str = "", extra: str = "", seeds: str = "[0]", runs: int = 3) -> str:
    return (
        textwrap.dedent(f"""\
        [suite]
        name = "t"
        seeds = {seeds}
        search_runs = {runs}

        """)
        + toy_targets(20)
        + textwrap.dedent("""
        [inits.gaussian]
        config = { scale = 0.05 }
        """)
        + textwrap.dedent(attacks)
        + textwrap.dedent(extra)
    )


TOY = """
[attacks.toy_identity]
config = { steps = 1 }
"""
GRID = """
[[grid]]
targets = ["bin", "mc"]
attacks = "*"
"""


def make_suite(tmp_path: Path, text: str, name: str = "suite.toml"):
    path = tmp_path / name
    path.write_text(text)
    return load_suite(path)


@pytest.mark.slow
def test_cells_record_runs_and_independently_scored_selections(tmp_path, toy_attack_registered):
    suite = make_suite(tmp_path, suite_text(TOY + "\n[attacks.not_yet]\n", GRID))
    out = tmp_path / "res"
    report = run_suite(suite, out, quiet=True, command="reconbench bench t")
    cells = load_cells(out)
    assert sorted(cells) == sorted(c.cell_id for c in expand(suite)) and len(cells) == 4
    assert sorted(report.failed) == ["bin--not_yet--gaussian--s0", "mc--not_yet--gaussian--s0"]

    failed = cells["bin--not_yet--gaussian--s0"]
    assert failed["status"] == "unavailable" and failed["error"]["type"] == "UnknownNameError"
    assert "not_yet" in failed["error"]["message"] and failed["attack"]["name"] == "not_yet"

    rec = cells["bin--toy_identity--gaussian--s0"]
    assert rec["status"] == "ok" and rec["error"] is None
    work = out / rec["result_dir"]
    run_files = sorted((work / "runs").glob("run-*.json"))
    runs = [json.loads(p.read_text()) for p in run_files]
    assert len(runs) == 3 == len(rec["runs"])
    # the three shifts were drawn from the toy's declared space, and the toy's loss is its shift
    assert len({r["config"]["shift"] for r in runs}) == 3
    blind = min(runs, key=lambda r: r["final_loss"])["run"]
    oracle = min(runs, key=lambda r: r["oracle_score"])["run"]
    sel = rec["selections"]
    assert sel["blind"]["run"] == blind and not sel["blind"]["oracle"]
    assert sel["oracle"]["run"] == oracle and sel["oracle"]["oracle"]
    assert sel["blind"]["attack_loss"] == min(r["final_loss"] for r in runs)
    assert sel["pool"]["runs"] == [0, 1, 2]

    # score the selections again, from the per-run files (not the pooled file the runner used)
    card = load_card(cache_dir() / "targets" / rec["target"]["recipe_key"])
    problem = card.problem()

    def score(ids):
        t = [load_file(str(work / "runs" / f"run-{k:03d}.safetensors")) for k in ids]
        cat = {k: torch.cat([x[k] for x in t]) for k in ("candidates", "labels", "x0")}
        run_ids = torch.cat([torch.full((len(x["labels"]),), k) for k, x in zip(ids, t, strict=True)])
        return evaluate(
            problem,
            cat["candidates"],
            family="mlp",
            protocol={},
            labels=cat["labels"],
            run_ids=run_ids,
            x0=cat["x0"],
            card=card,
            quiet=True,
        )["summary"]

    assert sel["blind"]["summary"] == score([blind])
    assert sel["oracle"]["summary"] == score([oracle])
    assert sel["pool"]["summary"] == score([0, 1, 2])
    # provenance and timing
    # runs that advanced in one batch share its clock: the batch counts once, as its longest run
    batches: dict[tuple, float] = {}
    for r in runs:
        key = tuple(r["batch"]["runs"]) if r.get("batch") else (r["run"],)
        batches[key] = max(batches.get(key, 0.0), r["seconds"])
    assert rec["attack_seconds"] == pytest.approx(sum(batches.values()))
    assert rec["wall_seconds"] >= rec["attack_seconds"]
    assert rec["cpu_seconds"] > 0   # the CPU time of the process that ran the cell (it ran in this one)
    assert rec["provenance"]["reconbench_version"] and rec["machine"]["cores"] >= 1
    assert rec["target"]["train_metrics"]["train_error"] is not None
    assert (out / rec["target"]["card_file"]).exists()
    inv = json.loads((out / "invocations" / "000.json").read_text())
    assert (
        inv["status"] == "completed" and inv["command"] == "reconbench bench t" and len(inv["cells_run"]) == 4
    )
    # every file the run wrote reads strictly through its format's door
    from reconbench.records import CELL_FILE, INVOCATION_FILE, RUN_RESULT_FILE

    assert INVOCATION_FILE.read(out / "invocations" / "000.json").cells_run == inv["cells_run"]
    for path in sorted((out / "cells").glob("*.json")):
        assert CELL_FILE.read(path).cell_id == path.stem
    assert sorted(out.glob("work/*/result.json")) and all(
        RUN_RESULT_FILE.read(p).kind == "reconbench-result/1" for p in out.glob("work/*/result.json"))


@pytest.mark.slow
def test_resume_skips_finished_cells_and_reruns_changed_ones(tmp_path, toy_attack_registered):
    attacks = """
    [attacks.a]
    attack = "toy_identity"
    config = { steps = 1 }
    [attacks.b]
    attack = "toy_identity"
    config = { steps = 2 }
    """
    suite = make_suite(tmp_path, suite_text(attacks, GRID, runs=1))
    out = tmp_path / "res"
    run_suite(suite, out, quiet=True)
    files = sorted((out / "cells").glob("*.json"))
    before = {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in files}
    with pytest.raises(SuiteError, match="--resume"):
        run_suite(suite, out, quiet=True)
    report = run_suite(suite, out, resume=True, quiet=True)
    assert report.ran == [] and len(report.skipped) == 4
    assert {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in files} == before

    changed = make_suite(
        tmp_path, suite_text(attacks.replace("steps = 2", "steps = 3"), GRID, runs=1), "s2.toml"
    )
    report = run_suite(changed, out, resume=True, quiet=True)
    assert sorted(report.ran) == ["bin--b--gaussian--s0", "mc--b--gaussian--s0"] == sorted(report.stale)
    for name, (mtime, data) in before.items():
        p = out / "cells" / name
        assert ((p.stat().st_mtime_ns, p.read_bytes()) == (mtime, data)) == ("--a--" in name)


def test_a_failing_target_is_recorded_and_the_suite_goes_on(tmp_path, toy_attack_registered):
    extra = """
    [targets.needs-data]
    dataset = "mnist_test"
    task = "binary"
    n_per_class = 2
    widths = [8]
    steps = 5
    """ + GRID.replace('["bin", "mc"]', '["needs-data", "bin"]')
    suite = make_suite(tmp_path, suite_text(TOY, extra, runs=1))
    out = tmp_path / "res"
    empty = tmp_path / "no-data"
    empty.mkdir()
    report = run_suite(suite, out, data_root=str(empty), quiet=True)
    cells = load_cells(out)
    bad = cells["needs-data--toy_identity--gaussian--s0"]
    assert bad["status"] == "failed" and bad["error"]["type"] == "DataError"
    assert cells["bin--toy_identity--gaussian--s0"]["status"] == "ok"
    assert report.failed == ["needs-data--toy_identity--gaussian--s0"]

    with pytest.raises(SuiteError, match="needs-data--toy_identity--gaussian--s0 failed"):
        run_suite(suite, tmp_path / "strict", data_root=str(empty), quiet=True, strict=True)
    assert list(load_cells(tmp_path / "strict")) == ["needs-data--toy_identity--gaussian--s0"]


@dataclass(frozen=True)
class InterruptingToy(ToyAttack):
    name: str = "toy_interrupting"
    calls: list = None  # type: ignore[assignment]

    def run(self, target, x0, labels, config, *, generator, progress=None):  # type: ignore[no-untyped-def]
        self.calls.append(1)
        if len(self.calls) == 3:
            raise KeyboardInterrupt
        return super().run(target, x0, labels, config, generator=generator, progress=progress)


@pytest.mark.slow
def test_keyboard_interrupt_keeps_finished_cells(tmp_path):
    calls: list = []

    class Plugin:
        @hookimpl
        def register_attacks(self, register):  # type: ignore[no-untyped-def]
            register(InterruptingToy(calls=calls))

    host = plugins.host()
    name = host.register(Plugin(), name="interrupting-toy")
    try:
        attacks = "\n[attacks.toy_interrupting]\nconfig = { steps = 1 }\n"
        suite = make_suite(tmp_path, suite_text(attacks, GRID, seeds="[0, 1]", runs=1))
        out = tmp_path / "res"
        with pytest.raises(KeyboardInterrupt):
            run_suite(suite, out, quiet=True)
        done = load_cells(out)
        assert sorted(done) == ["bin--toy_interrupting--gaussian--s0", "bin--toy_interrupting--gaussian--s1"]
        assert all(r["status"] == "ok" for r in done.values())
        assert json.loads((out / "invocations" / "000.json").read_text())["status"] == "interrupted"
        mtimes = {k: (out / "cells" / f"{k}.json").stat().st_mtime_ns for k in done}
        report = run_suite(suite, out, resume=True, quiet=True)
        assert sorted(report.skipped) == sorted(done) and len(report.ran) == 2
        assert {k: (out / "cells" / f"{k}.json").stat().st_mtime_ns for k in done} == mtimes
        assert len(calls) == 5  # 2 finished + 1 interrupted + 2 on resume: nothing finished ran twice
    finally:
        host.unregister(name)


@pytest.mark.slow
def test_kill_mid_suite_then_resume_recomputes_nothing(tmp_path):
    """SIGKILL the runner (a separate process) once its first cell is written; resume; compare."""
    attacks = "\n[attacks.toy_logged]\nconfig = { steps = 1 }\n"
    suite_file = tmp_path / "suite.toml"
    suite_file.write_text(suite_text(attacks, GRID, seeds="[0, 1, 2]", runs=2))
    out, log = tmp_path / "res", tmp_path / "attack-runs.log"
    env = {
        **os.environ,
        "RECONBENCH_TEST_LOG": str(log),
        "RECONBENCH_TEST_SLEEP": "0.4",
        "RECONBENCH_CACHE": str(tmp_path / "cache"),
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": str(TESTS.parent),
    }
    cmd = [
        sys.executable,
        str(TESTS / "_helpers" / "bench_launcher.py"),
        "bench",
        str(suite_file),
        "--out",
        str(out),
        "-q",
    ]
    proc = subprocess.Popen(
        cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
    )
    deadline = time.monotonic() + 120
    while not list((out / "cells").glob("*.json")) if (out / "cells").exists() else True:
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:] if proc.stderr else ""
        assert time.monotonic() < deadline, "no cell finished in 120 s"
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()

    finished = {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in (out / "cells").glob("*.json")}
    assert 1 <= len(finished) < 6, "the kill came too late to test anything"
    for _, data in finished.values():
        assert json.loads(data)["status"] == "ok"  # complete, parseable records only
    calls_before = log.read_text().splitlines()

    # the starting candidates of every search run of every finished cell
    finished_x0 = set()
    for name in finished:
        rec = json.loads(finished[name][1])
        model = load_card(out.parent / "cache" / "targets" / rec["target"]["recipe_key"]).load_model()
        for f in (out / "work" / name[:-5] / "runs").glob("run-*.safetensors"):
            finished_x0.add(x0_digest(load_file(str(f))["x0"], model))
    assert finished_x0 <= set(calls_before)  # the digests identify runs

    done = subprocess.run(cmd + ["--resume"], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    calls_after = log.read_text().splitlines()[len(calls_before) :]
    assert not finished_x0 & set(calls_after), "a finished cell was recomputed"
    assert {
        p.name: (p.stat().st_mtime_ns, p.read_bytes())
        for p in (out / "cells").glob("*.json")
        if p.name in finished
    } == finished
    cells = load_cells(out)
    assert len(cells) == 6 and all(r["status"] == "ok" for r in cells.values())
    # at most the run in progress at the kill is done twice: 6 cells x 2 runs, plus at most one
    assert 12 <= len(calls_before) + len(calls_after) <= 13
    invs = sorted((out / "invocations").glob("*.json"))
    assert [json.loads(p.read_text())["status"] for p in invs] == ["running", "completed"]



def test_cli_list_only_and_strict(tmp_path, capsys, toy_attack_registered):
    path = tmp_path / "s.toml"
    path.write_text(suite_text(TOY + "\n[attacks.not_yet]\n", GRID, runs=1))
    out = tmp_path / "res"
    code, text, _ = run_cli(["bench", str(path), "--out", str(out), "--list"], capsys)
    assert code == 0 and text.count("--gaussian--s0") == 4 and "| -" in text
    code, text, err = run_cli(["bench", str(path), "--out", str(out), "--only", "mc--toy*", "-q"], capsys)
    assert code == 0, err
    assert "1 cell(s) ran, 0 failed" in text and list(load_cells(out)) == ["mc--toy_identity--gaussian--s0"]
    code, text, _ = run_cli(["bench", str(path), "--out", str(out), "--list"], capsys)
    assert text.count("| ok") == 1
    code, _, err = run_cli(["bench", str(path), "--out", str(tmp_path / "s2"), "--strict", "-q"], capsys)
    assert code == 2 and "unknown attack 'not_yet'" in err and "Traceback" not in err
    code, _, err = run_cli(["bench", str(path), "--out", str(out), "--only", "zzz*"], capsys)
    assert code == 2 and "matches no cell" in err
