"""Locating, downloading and verifying data files, and reading the pickle-based CIFAR batches safely."""

from __future__ import annotations

import hashlib
import io
import os
import pickle
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from reconbench.errors import DataError

DATA_ENV = "RECONBENCH_DATA"
DOWNLOAD_ENV = "RECONBENCH_DOWNLOAD"  # set to 0 to never try the network


def data_root(explicit: str | os.PathLike[str] | None = None) -> Path:
    """``--data-root`` if given, else ``$RECONBENCH_DATA``, else ``~/.cache/reconbench/data``."""
    if explicit:
        return Path(explicit).expanduser()
    env = os.environ.get(DATA_ENV)
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "reconbench" / "data"


def file_digest(path: Path, algorithm: str = "md5") -> str:
    h = hashlib.new(algorithm)
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def ensure_file(root: Path, relpath: str, url: str | None, md5: str | None, what: str) -> Path:
    """Return ``root/relpath``; download it (checksum-verified) when missing and the network allows.

    Offline, raise a :class:`DataError` that names the file and where to put it.
    """
    path = root / relpath
    if path.exists():
        return path
    allow = os.environ.get(DOWNLOAD_ENV, "1").strip() not in {"0", "false", "no"}
    reason = "downloads are disabled (RECONBENCH_DOWNLOAD=0)" if not allow else "no download URL is known"
    if allow and url:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(path.suffix + ".part")
            with urllib.request.urlopen(url, timeout=30) as resp, open(tmp, "wb") as out:  # noqa: S310 (https URLs)
                while chunk := resp.read(1 << 20):
                    out.write(chunk)
            if md5 and file_digest(tmp) != md5:
                tmp.unlink(missing_ok=True)
                raise DataError(f"downloaded {url} but its md5 does not match {md5}; the mirror may be corrupt")
            tmp.rename(path)
            return path
        except (urllib.error.URLError, OSError, TimeoutError) as exc:
            reason = f"the download from {url} failed ({exc})"
    raise DataError(
        f"{what}: file {path} is missing and {reason}. Place the official file at {path} "
        f"(or point --data-root / ${DATA_ENV} at the folder that holds {relpath})."
    )


class _ArrayOnlyUnpickler(pickle.Unpickler):
    """Unpickler that only builds plain containers and numpy arrays: CIFAR batches need nothing else.

    Refusing every other global means a crafted batch file cannot execute code.
    """

    _ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
        ("numpy", "ndarray"), ("numpy", "dtype"), ("numpy.core.multiarray", "scalar"),
        ("numpy._core.multiarray", "scalar"), ("_codecs", "encode"),
    }

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in self._ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refusing to load {module}.{name} from a data file")


def load_cifar_batch(path: Path) -> dict[Any, Any]:
    """Read one CIFAR python batch (a pickle) with the array-only unpickler."""
    try:
        raw = path.read_bytes()
        return _ArrayOnlyUnpickler(io.BytesIO(raw), encoding="bytes").load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError) as exc:
        raise DataError(f"{path} is not a valid CIFAR python batch ({type(exc).__name__}: {exc}); "
                        "re-download or replace the file") from exc
