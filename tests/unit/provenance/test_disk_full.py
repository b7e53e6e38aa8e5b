"""A full disk: every write is whole or absent, the error is one line naming the folder, and nothing left behind
reads as valid afterwards. Run on a small tmpfs mounted for the test (skipped, with the reason, where this process
may not mount one)."""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _helpers.cli import run_cli

from reconbench.provenance import DiskFullError, write_bytes_atomic

TINY = ["--dataset", "digits", "--task", "multiclass", "--num-classes", "3", "--n-per-class", "2", "--steps", "3"]


@contextlib.contextmanager
def small_disk(folder: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` mounted at ``folder`` for the block."""
    folder.mkdir(parents=True, exist_ok=True)
    try:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                              capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"cannot mount a tmpfs here ({exc})")
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip() or done.returncode}): needs root or "
                    "CAP_SYS_ADMIN")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], capture_output=True, timeout=20)


def fill(folder: Path, keep: int = 0) -> None:
    """Take every free byte of the file system of ``folder`` but ``keep``."""
    fd = os.open(folder / "filler", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    written = 0
    try:
        while True:
            written += os.write(fd, b"\0" * 4096)
    except OSError as exc:
        assert exc.errno == errno.ENOSPC
    finally:
        os.ftruncate(fd, max(0, written - keep))
        os.close(fd)


def one_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err and "internal error" not in lines[0], err[-1500:]
    return lines[0]


def test_an_atomic_write_on_a_full_disk_keeps_the_old_file_and_names_the_folder(tmp_path: Path) -> None:
    with small_disk(tmp_path / "disk", "64k") as disk:
        target = disk / "result.json"
        write_bytes_atomic(target, b"old" * 1000)
        with pytest.raises(DiskFullError) as info:
            write_bytes_atomic(target, b"x" * 200_000)
        message = str(info.value)
        assert str(disk) in message and "200,000 bytes needed" in message and "\n" not in message
        assert target.read_bytes() == b"old" * 1000
        assert sorted(p.name for p in disk.iterdir()) == ["result.json"]  # no temporary file left


def test_train_on_a_full_disk_leaves_no_card_that_reads_as_valid(tmp_path: Path, capsys: Any,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RECONBENCH_DOWNLOAD", "0")
    monkeypatch.setenv("RECONBENCH_CACHE", str(tmp_path / "cache"))
    with small_disk(tmp_path / "disk", "4m") as disk:
        out = disk / "card"
        code, _, err = run_cli(["train", *TINY, "--widths", "256", "--out", str(out), "-q"], capsys)
        assert code == 0, err
        code, _, err = run_cli(["run", "--attack", "multiclass_kkt", "--model", str(out), "--set", "steps=1",
                                "--search-runs", "1", "--protocol-set", "figures=false", "--out",
                                str(tmp_path / "r1"), "-q"], capsys)
        assert code == 0, err
        fill(disk, keep=48 * 1024)  # room for the lock and the small files, not for the weights (256 x 64 doubles)
        # retraining the same recipe into the full disk: the old card must not survive beside new weights
        code, _, err = run_cli(["train", *TINY, "--widths", "256", "--out", str(out), "-q"], capsys)
        line = one_line(err)
        assert code != 0 and "no space left on the device of" in line and str(out) in line, line
        assert not any(p.name.endswith(".tmp") for p in out.iterdir())
        code, _, err = run_cli(["run", "--attack", "multiclass_kkt", "--model", str(out), "--set", "steps=1",
                                "--search-runs", "1", "--protocol-set", "figures=false", "--out",
                                str(tmp_path / "r2"), "-q"], capsys)
        assert code != 0 and "no model card" in one_line(err)
        os.unlink(disk / "filler")
