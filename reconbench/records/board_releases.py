"""A board's numbered releases (``RELEASES.json``, ``reconbench-board-releases/1``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from reconbench.records.record import FileFormat, Record, unchanged


@dataclass(frozen=True)
class BoardRelease(Record):
    """One release of a board: its id and number, the git commit its files are at, the sha256 of its MANIFEST.json
    (which hashes every other file of the board), how many files that lists, and when it was made."""

    id: str = ""
    number: int = 0
    commit: str | None = None
    manifest_sha256: str = ""
    files: int | None = None
    released: str | None = None
    note: str | None = None


@dataclass(frozen=True)
class BoardReleases(Record):
    """Every release of a board, oldest first (``leaderboard/releases.py``)."""

    SCHEMA = "reconbench-board-releases/1"

    format: str | None = None
    board: str | None = None
    releases: list[BoardRelease] = field(default_factory=list)


#: the door of a board's release list
RELEASES_FILE: FileFormat[BoardReleases] = FileFormat(BoardReleases, "format", {BoardReleases.SCHEMA: unchanged})
