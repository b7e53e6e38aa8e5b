"""Two writers on one output folder: atomic JSON writes from two threads, and the folder lock that makes a second
`reconbench` writer refuse (before any work) instead of mixing results."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import pytest

from reconbench.cli import main


def test_two_writers_of_one_json_never_collide(tmp_path):
    """Each writer renames its own temporary file: no FileNotFoundError, and the file is always whole."""
    from reconbench.provenance import write_json

    target = tmp_path / "cells" / "cell.json"
    errors: list[BaseException] = []

    def writer(tag: str) -> None:
        try:
            for i in range(400):
                write_json(target, {"writer": tag, "i": i, "pad": "x" * 2000})
        except BaseException as exc:  # noqa: BLE001 (reported by the test)
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(tag,)) for tag in ("a", "b")]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        assert json.loads(target.read_text())["writer"] in "ab" if target.exists() else True  # never partial
    for t in threads:
        t.join()
    assert not errors, repr(errors[0])
    assert json.loads(target.read_text())["i"] == 399
    assert not list(target.parent.glob("*.tmp"))  # no temporary file left behind


HOLDER = """
import sys, time
from pathlib import Path
from reconbench.provenance import folder_lock
with folder_lock(Path(sys.argv[1])):
    print("held", flush=True)
    time.sleep(60)
"""


COMMANDS = [
    ["bench", "ci", "-q"],
    ["run", "--attack", "multiclass_kkt", "--n-per-class", "2", "--widths", "8", "--steps", "5", "-q"],
    ["leaderboard", "ci", "--no-figures"],
]


def test_second_writer_refuses_clearly_and_the_lock_dies_with_its_holder(tmp_path, capsys, monkeypatch):
    """Another process holds the folder (as a running `bench` / `run` / `leaderboard` would): each command refuses
    in one line naming that process and writes nothing; once the holder is killed (-9) the folder is free."""
    folder = tmp_path / "out"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RECONBENCH_CACHE", str(tmp_path / "cache"))
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(folder)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        before = sorted(p.name for p in folder.iterdir())
        for command in COMMANDS:
            with pytest.raises(SystemExit) as exc:
                main([*command, "--out", str(folder)])
            err = capsys.readouterr().err
            assert exc.value.code == 2, err
            assert [ln for ln in err.splitlines() if ln.strip()] == [err.strip()]
            assert "being written by another reconbench process" in err and f"pid {holder.pid}" in err
            assert sorted(p.name for p in folder.iterdir()) == before  # nothing written beside the other writer
    finally:
        holder.kill()  # as kill -9: no clean-up code runs
        holder.wait()
    from reconbench.provenance import folder_lock

    t0 = time.monotonic()
    with folder_lock(folder):
        pass
    assert time.monotonic() - t0 < 5
