"""Provenance recorded with every result: versions, git commit, config hash, device, dtype, timing."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
import time
from pathlib import Path
from typing import Any

import torch

from reconbench import __version__


def config_hash(config: Any) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:16]


def git_commit(path: Path | None = None) -> str | None:
    """The commit of the source tree reconbench runs from, if it is a git checkout (else None)."""
    where = path or Path(__file__).resolve().parent
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=where, capture_output=True, text=True, timeout=5)
        if out.returncode != 0:
            return None
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=where,
                               capture_output=True, text=True, timeout=5).stdout.strip()
        return out.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


def provenance(config: Any, device: str, dtype: str, seed: int | None = None) -> dict[str, Any]:
    return {
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
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


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


def write_json(path: Path, data: Any) -> None:
    """Write JSON atomically (a crash never leaves a half-written result)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=_default, allow_nan=True))
    os.replace(tmp, path)


def _default(o: Any) -> Any:
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
