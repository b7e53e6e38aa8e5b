"""Paths built from names read out of files (a board's results.json, its cells, a submission, a suite) stay inside the
folder they belong to.

A board is data that anyone can send: a figure path ``../../PAYLOAD.txt`` or a cell id ``../../../X`` must not make
``reconbench site`` (or any other reader or writer) reach a file outside the folder the user named. Every such path
is resolved (links followed) and checked against its root before it is read or written.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath, PureWindowsPath

from reconbench.errors import ReconbenchError

#: the longest file name most file systems take (bytes)
MAX_NAME_BYTES = 255


class UnsafePathError(ReconbenchError):
    """A name or relative path read from a file that would leave the folder it belongs to."""


def check_name(name: str, what: str, *, source: str | Path = "", suffix: str = "") -> str:
    """``name`` if it is one plain file name (no folder separator, not ``.`` or ``..``, no control character,
    short enough with ``suffix``); else a one-line error naming ``what`` and the file it came from."""
    where = f" in {source}" if source else ""
    text = str(name)
    problem = ""
    if not text:
        problem = "is empty"
    elif "/" in text or "\\" in text:
        problem = "holds a folder separator"
    elif text in (".", ".."):
        problem = "names a folder, not a file"
    elif any(ord(ch) < 32 or ord(ch) == 127 for ch in text):
        problem = "holds a control character"
    elif len((text + suffix).encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
        problem = f"is longer than a file name may be ({MAX_NAME_BYTES} bytes)"
    if problem:
        raise UnsafePathError(f"{what} {_short(text)!r}{where} {problem}: it must be one plain file name; restore the "
                              "file from its source (a published board, the run that wrote it)")
    return text


def inside(root: Path, relative: str | Path, what: str, *, source: str | Path = "") -> Path:
    """``root / relative`` when it resolves (links followed) to a path inside ``root``; else a one-line error."""
    where = f" in {source}" if source else ""
    text = str(relative)
    posix = PurePosixPath(text.replace("\\", "/"))
    if (not text or "\x00" in text or posix.is_absolute() or PureWindowsPath(text).drive or text.startswith("~")
            or ".." in posix.parts):
        raise UnsafePathError(f"{what} {_short(text)!r}{where} leaves {root}: paths read from a file must be relative "
                              "and stay inside their folder; restore the file from its source")
    path = Path(root) / posix
    base = Path(os.path.realpath(root))
    real = Path(os.path.realpath(path))
    if real != base and not real.is_relative_to(base):
        raise UnsafePathError(f"{what} {_short(text)!r}{where} leads outside {root} (through a link, to {real}); "
                              "replace the link by the file itself")
    return path


def member(folder: Path, name: str, suffix: str, what: str, *, source: str | Path = "") -> Path:
    """``folder / (name + suffix)`` for a ``name`` read from a file (a cell id, a recipe key, a protocol hash)."""
    return inside(folder, check_name(name, what, source=source, suffix=suffix) + suffix, what, source=source)


def _short(text: str, n: int = 80) -> str:
    return text if len(text) <= n else text[: n - 3] + "..."
