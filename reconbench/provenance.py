"""Provenance recorded with every result: versions, git commit, config hash, device, dtype, timing."""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import filelock
import torch

from reconbench import __version__
from reconbench.errors import ReconbenchError
from reconbench.indented_json import dumps_indented
from reconbench.precision import run_precision


def config_hash(config: object) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:16]


#: tracked folders that reconbench writes and no computation reads: edits there do not make a checkout dirty
OUTPUT_DIRS = ("leaderboards",)


def git_commit(path: Path | None = None) -> str | None:
    """The commit of the source tree reconbench runs from, if it is a git checkout (else None), with ``-dirty``
    when its code differs from that commit.

    Read once per process and folder: the code a process runs is what it imported at its start, so the first
    reading is the honest record of every result it writes (a suite writes hundreds, each of which would otherwise
    cost two git processes). A new process reads again; :func:`read_git_commit` reads now.
    """
    return _git_commit_once((path or Path(__file__).resolve().parent).resolve())


@functools.cache
def _git_commit_once(where: Path) -> str | None:
    return read_git_commit(where)


def read_git_commit(path: Path | None = None) -> str | None:
    """:func:`git_commit` read from git now (two git processes), not the process's first reading."""
    where = path or Path(__file__).resolve().parent
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=where, capture_output=True, text=True, timeout=5)
        if out.returncode != 0:
            return None
        # Published leaderboards are outputs, not code: publishing one (which rewrites leaderboards/) while a suite
        # runs in the same checkout must not stamp that suite's cells "-dirty".
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ":/",
                                f":(top,exclude){OUTPUT_DIRS[0]}"], cwd=where,
                               capture_output=True, text=True, timeout=5).stdout.strip()
        return out.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


def provenance(config: dict[str, Any], device: str, dtype: str, seed: int | None = None) -> dict[str, Any]:
    from reconbench import blas

    out: dict[str, Any] = {
        "reconbench_version": __version__,
        "git_commit": git_commit(),
        "config_hash": config_hash(config),
        "seed": seed,
        "device": device,
        "device_name": torch.cuda.get_device_name() if device.startswith("cuda") and torch.cuda.is_available()
        else platform.processor() or platform.machine(),
        "dtype": dtype,
        "torch_version": torch.__version__,
        "python_version": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "blas": blas.summary(),
        "blas_line": blas.provenance_line(blas.summary()),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    precision = run_precision(config, device, dtype)   # an attack run's: its products and its loss's sums
    if precision is not None:
        out["precision"] = precision.to_dict()
    return out


def portable_path(path: str | os.PathLike[str]) -> str:
    """A path as it may be written into a result: relative to the working folder when inside it, ``~/...`` when
    under the home folder, else as given. Results are shared and committed; the absolute paths of the machine that
    wrote them mean nothing elsewhere (and leak its layout)."""
    p = Path(path).expanduser().absolute()
    for base, shown in ((Path.cwd(), ""), (Path.home(), "~")):
        try:
            rel = p.relative_to(base)
        except ValueError:
            continue
        return str(Path(shown) / rel) if shown else str(rel)
    return str(path)


def write_json(path: Path, data: object) -> None:
    """Write JSON atomically (a crash never leaves a half-written result): the text of ``json.dumps(data, indent=1,
    default=json_default, allow_nan=True)``, written by :func:`~reconbench.indented_json.dumps_indented`."""
    text = dumps_indented(data, 1, json_default)
    write_text_atomic(path, text)


def read_json(path: Path, *, missing: str, damaged: str, error: type[ReconbenchError] = ReconbenchError) -> Any:
    """A JSON file's value, or a one-line ``error`` naming the file and the fix: ``missing`` when the file does not
    exist, ``damaged`` when it cannot be read as JSON."""
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise error(f"{path} is missing: {missing}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise error(f"{path} is not valid JSON ({exc}); {damaged}") from None


class DiskFullError(ReconbenchError):
    """A write that found no space left (or the quota used up) on the device of its folder."""


#: the errors of a file system with no room left: no space on the device, the disk quota used up
DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


def disk_full_error(folder: Path, need: int | None = None) -> DiskFullError:
    """The one-line error of a full disk: the folder, the space the write needed and what is left there."""
    try:
        free = f", {shutil.disk_usage(folder).free:,} bytes free" if folder.exists() else ""
    except OSError:
        free = ""
    needed = f" ({need:,} bytes needed{free})" if need is not None else f" ({free.lstrip(', ')})" if free else ""
    return DiskFullError(f"no space left on the device of {folder}{needed}; free some space there or pass another "
                         "folder, then run the same command again (nothing half-written was kept)")


#: flush every atomic write to the disk, new files included (``RECONBENCH_FSYNC=1``; see :func:`write_bytes_atomic`)
_FSYNC_ALWAYS = os.environ.get("RECONBENCH_FSYNC", "0").strip() not in ("", "0")


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write through a temporary file unique to this writer in the same folder, then renamed over ``path``: readers
    see the old or the new file, never a half-written one, two writers never share a temporary file, and a full disk
    leaves the old file (or none) and a one-line error naming the folder.

    Durability: the atomic rename is what keeps a killed or crashed process from leaving a half-written file. The
    data is flushed to the disk (fsync of the file, then of its folder) only where a power loss could otherwise
    destroy something that existed: when the rename replaces an existing file (without the flush, a file system
    may commit the rename before the data and leave an empty file where a good one was), or everywhere with
    ``RECONBENCH_FSYNC=1``. A new file is not flushed: a power loss before the system writes it back loses at most
    that new file (a resumed run treats an unreadable record as not done and writes it again), and a suite writes
    hundreds of records, each flush costing a disk round trip.
    """
    path = Path(path)
    durable = _FSYNC_ALWAYS or path.exists()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        if exc.errno in DISK_FULL:
            raise disk_full_error(path.parent, len(data)) from None
        raise
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            if durable:
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError) and exc.errno in DISK_FULL:
            raise disk_full_error(path.parent, len(data)) from None
        raise
    if durable:
        _sync_folder(path.parent)


def _sync_folder(folder: Path) -> None:
    """Flush a folder's entries (the rename) to the disk where the system allows it (not on Windows)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_text_atomic(path: Path, text: str) -> None:
    """:func:`write_bytes_atomic` of ``text`` in UTF-8."""
    write_bytes_atomic(path, text.encode("utf-8"))


def save_tensors_atomic(tensors: dict[str, torch.Tensor], path: Path) -> None:
    """A safetensors file written by :func:`write_bytes_atomic` (safetensors' own ``save_file`` writes in place)."""
    from safetensors.torch import save

    write_bytes_atomic(path, save({k: v.contiguous() for k, v in tensors.items()}))


LOCK_FILE = ".reconbench.lock"


@contextlib.contextmanager
def folder_lock(folder: Path, what: str = "results", timeout: float = 0.0) -> Iterator[None]:
    """Hold the lock of an output folder while writing it: a second writer waits ``timeout`` seconds, then refuses
    with a message naming the process that holds it. The lock is released when the process ends, even on kill -9."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ReconbenchError(f"cannot create the {what} folder {folder} ({exc.strerror}); pass a writable --out") from exc
    lock = filelock.FileLock(str(folder / LOCK_FILE))
    info = folder / (LOCK_FILE + ".json")
    try:
        lock.acquire(timeout=timeout)
    except filelock.Timeout:
        holder = ""
        try:
            h = json.loads(info.read_text())
            holder = f" (pid {h.get('pid')} on {h.get('host')}, since {h.get('since')}: {h.get('command')})"
        except (OSError, ValueError):
            pass
        raise ReconbenchError(f"{folder} is being written by another reconbench process{holder}; wait for it to "
                              "finish, or pass another --out") from None
    except OSError as exc:
        raise ReconbenchError(f"cannot lock the {what} folder {folder} ({exc.strerror}); pass a writable --out") from exc
    try:
        write_json(info, {"pid": os.getpid(), "host": platform.node(), "command": " ".join(sys.argv),
                          "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
        yield
    finally:
        info.unlink(missing_ok=True)
        lock.release()


def check_writable(folder: Path, option: str) -> None:
    """Refuse an output folder that cannot be created or written, before any work is done."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".write-test.", dir=folder)
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        raise ReconbenchError(f"{option} {folder}: cannot write there ({exc.strerror or exc}); pass a writable "
                              "folder") from exc


def json_default(o: object) -> Any:
    import numpy as np

    if isinstance(o, (np.integer, np.floating, np.bool_)):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, torch.Tensor):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    if isinstance(o, torch.dtype):
        return str(o).replace("torch.", "")
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")
