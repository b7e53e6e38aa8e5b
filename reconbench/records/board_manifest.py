"""A board's ``MANIFEST.json`` (``reconbench-board-manifest/1``; ``leaderboard/manifest.py`` writes it): every file
of the board with its sha256 and size."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from reconbench.records.record import FileFormat, Record, unchanged


@dataclass(frozen=True)
class ManifestEntry(Record):
    """One file of the board: its sha256 and its size in bytes."""

    sha256: str = ""
    bytes: int = 0


@dataclass(frozen=True)
class BoardManifest(Record):
    """The manifest: its format stamp and the board's files (path relative to the board -> entry)."""

    SCHEMA = "reconbench-board-manifest/1"

    format: str | None = None
    files: Mapping[str, ManifestEntry] = field(default_factory=dict)


#: the door of a board's MANIFEST.json
BOARD_MANIFEST_FILE: FileFormat[BoardManifest] = FileFormat(
    BoardManifest, "format", {BoardManifest.SCHEMA: unchanged},
    fix="restore it from the board's published version, or render the board again with --publish or --slim")
