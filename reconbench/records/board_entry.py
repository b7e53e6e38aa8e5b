"""A board entry's own metadata (``entry`` of a slim cell record a board stores, ``reconbench-board-entry/1``).

A board entry is a cell record (:mod:`reconbench.records.cell`, read through its door ``CELL_FILE``) with this
object added; ``bench/entries.py`` makes it from the full record and expands it back.
"""

from __future__ import annotations

from dataclasses import dataclass

from reconbench.records.record import Record


@dataclass(frozen=True)
class EntryInfo(Record):
    """A slim board entry's own metadata (``bench/entries.py``): its schema, the digest of the full record it was
    made from, the digits of its per-image rows (and, once expanded, its seal)."""

    SCHEMA = "reconbench-board-entry/1"
    #: the entry schemas this reconbench reads
    READS = (SCHEMA,)

    schema: str | None = None
    full_record_sha256: str | None = None
    row_digits: int | None = None
    record_sha256: str | None = None
