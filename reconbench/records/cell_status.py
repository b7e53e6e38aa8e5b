"""What deciding whether a cell must run again reads of its record (``cells/<cell id>.json``): its format, the key
it ran under and its status, each of its type; the rest of the record is kept as it is, unread (an open record)."""

from __future__ import annotations

from dataclasses import dataclass

from reconbench.records.record import Record


@dataclass(frozen=True)
class CellStatus(Record):
    """A cell record's format stamp, cell key and status (``bench/runner.py``: ok, failed, unavailable); the other
    fields are read by :class:`~reconbench.records.cell.CellRecord`, not here."""

    OPEN = True

    format: str | None = None
    cell_key: str | None = None
    status: str | None = None
