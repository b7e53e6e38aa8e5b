"""A command run in its own process ends without Python's teardown (cli._leave): the exit handlers still run, the
output is flushed, the status is the command's; a running non-daemon thread keeps the normal exit."""

from __future__ import annotations

import subprocess
import sys
import threading
import types

import pytest

from reconbench import cli


class Exited(Exception):
    def __init__(self, status: int) -> None:
        self.status = status


@pytest.fixture
def fake_exit(monkeypatch):
    """os._exit raises instead, and the exit handlers are counted, not run (this process's own must not run)."""
    def exit_now(status: int) -> None:
        raise Exited(status)

    handlers: list[str] = []
    monkeypatch.setattr(cli.os, "_exit", exit_now)
    monkeypatch.setattr(cli, "atexit", types.SimpleNamespace(_run_exitfuncs=lambda: handlers.append("ran")))
    return handlers


@pytest.mark.parametrize(("code", "status"), [(None, 0), (0, 0), (2, 2), ("a message", 1)])
def test_leave_runs_exit_handlers_and_keeps_the_status(fake_exit, code, status, capsys):
    with pytest.raises(Exited) as exc:
        cli._leave(code)
    assert exc.value.status == status and fake_exit == ["ran"]
    assert ("a message" in capsys.readouterr().err) == (code == "a message")


def test_a_running_thread_keeps_the_normal_exit(fake_exit):
    release = threading.Event()
    worker = threading.Thread(target=release.wait)
    worker.start()
    try:
        with pytest.raises(SystemExit) as exc:
            cli._leave(3)
        assert exc.value.code == 3
    finally:
        release.set()
        worker.join()


def test_a_whole_process_prints_everything_and_exits_with_its_status():
    listed = subprocess.run([sys.executable, "-m", "reconbench", "list", "attacks"], capture_output=True, text=True)
    assert listed.returncode == 0 and "runkel_bilevel" in listed.stdout and "weight_rows" in listed.stdout
    refused = subprocess.run([sys.executable, "-m", "reconbench", "run", "--no-such-option"], capture_output=True,
                             text=True)
    assert refused.returncode == 2 and refused.stderr.startswith("error: No such option")


def test_a_whole_process_runs_its_exit_handlers():
    probe = ("import atexit, sys; from reconbench import cli; atexit.register(print, 'handler ran'); "
             "sys.argv = ['reconbench', 'list', 'attacks']; cli.main()")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.rstrip().endswith("handler ran")
