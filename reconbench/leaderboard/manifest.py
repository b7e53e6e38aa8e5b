"""A published board's manifest: every file of the board with its sha256 and size, in ``MANIFEST.json``.

The writers of a board (``--publish``, ``--slim``, ``leaderboard add``) write it last; ``leaderboard --verify``
checks it first, so that a file that re-scoring or re-rendering cannot re-derive (a figure, a model card's metrics,
a protocol, a stored candidates file, a cell field under a recomputed seal) cannot change unnoticed. It lists every
regular file under the board except itself, the folder's lock files (``provenance.folder_lock``) and the board's
releases (``RELEASES.json`` and ``releases/``, ``releases.py``), which name manifests.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reconbench.errors import ReconbenchError
from reconbench.provenance import LOCK_FILE, write_text_atomic
from reconbench.records.board_manifest import BOARD_MANIFEST_FILE, BoardManifest

MANIFEST_NAME = "MANIFEST.json"
MANIFEST_FORMAT = BoardManifest.SCHEMA
#: a board's release list and the archived manifests and READMEs of its earlier releases (``releases.py``): they
#: name manifests by their sha256, so no manifest lists them
RELEASES_NAME, RELEASES_DIR = "RELEASES.json", "releases"
#: files of a board folder that are not part of the board: the manifest itself, the writers' lock, the releases
UNLISTED = frozenset({MANIFEST_NAME, LOCK_FILE, LOCK_FILE + ".json", RELEASES_NAME})


@dataclass(frozen=True)
class Listed:
    """One file of a board as the manifest records it."""

    sha256: str
    bytes: int


def _digest(path: Path) -> Listed:
    data = path.read_bytes()
    return Listed(hashlib.sha256(data).hexdigest(), len(data))


def board_files(board: Path) -> dict[str, Listed]:
    """Every file of ``board`` (POSIX paths relative to it, sorted) with its sha256 and size; a link or anything
    that is not a regular file is refused (a board holds plain files only)."""
    out: dict[str, Listed] = {}
    for path in sorted(board.rglob("*")):
        rel = path.relative_to(board).as_posix()
        if rel in UNLISTED or rel == RELEASES_DIR or rel.startswith(RELEASES_DIR + "/"):
            continue
        if path.is_symlink() or not (path.is_file() or path.is_dir()):
            raise ReconbenchError(f"{path} is not a plain file; a board holds plain files only, remove it")
        if path.is_file():
            out[rel] = _digest(path)
    return out


def manifest_text(files: dict[str, Listed]) -> str:
    """The manifest's text: one line per file (diffs of a re-published board stay readable)."""
    lines = [f" {json.dumps(rel)}: {json.dumps({'sha256': f.sha256, 'bytes': f.bytes})}" for rel, f in files.items()]
    return f'{{"format": "{MANIFEST_FORMAT}", "files": {{\n' + ",\n".join(lines) + "\n}}\n"


def write_manifest(board: Path) -> int:
    """Write ``board``/MANIFEST.json listing the board's files as they are now; how many it lists."""
    files = board_files(board)
    write_text_atomic(board / MANIFEST_NAME, manifest_text(files))
    return len(files)


def read_manifest(board: Path) -> dict[str, Listed]:
    """The files a board's manifest lists, or a one-line error naming the manifest and the fix."""
    path = board / MANIFEST_NAME
    fix = (f"restore it from the board's published version (git checkout -- {path}), or, for a board you publish, "
           "render it again with --publish or write it with --slim")
    if not path.is_file():
        raise ReconbenchError(f"{path} is missing: the board's files cannot be checked; {fix}")
    try:
        raw: Any = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ReconbenchError(f"{path} is damaged ({type(exc).__name__}: {exc}); {fix}") from None
    manifest = BOARD_MANIFEST_FILE.decode(raw, path)   # its format and every entry's fields, strictly
    return {rel: Listed(f.sha256, f.bytes) for rel, f in manifest.files.items()}


def check_manifest(board: Path) -> list[str]:
    """Every file of ``board`` that is missing, added or changed against its manifest, one line each with the fix
    (empty: the board holds exactly the files it was published with)."""
    listed = read_manifest(board)
    now = board_files(board)
    fix = "restore the board's published files (git checkout / git clean), or publish it again"
    problems = []
    for rel in sorted(listed.keys() - now.keys()):
        problems.append(f"{board / rel} is missing (listed in {MANIFEST_NAME}); {fix}")
    for rel in sorted(now.keys() - listed.keys()):
        problems.append(f"{board / rel} is not a file of the board ({MANIFEST_NAME} does not list it); remove it, "
                        "or publish the board again")
    for rel in sorted(listed.keys() & now.keys()):
        if listed[rel] != now[rel]:
            problems.append(f"{board / rel} was changed (sha256 {now[rel].sha256[:16]}, {MANIFEST_NAME} records "
                            f"{listed[rel].sha256[:16]}); {fix}")
    return problems
