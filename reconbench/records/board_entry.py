"""A board entry's own metadata (``entry`` of a slim cell record a board stores, ``reconbench-board-entry/1``).

A board entry is a cell record (:mod:`reconbench.records.cell`, read through its door ``CELL_FILE``) with this
object added; ``bench/entries.py`` makes it from the full record and expands it back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

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
    #: the seal the full record carried when it did not hold (``make_entry`` keeps it, for ``--verify`` to name)
    full_record_seal: str | None = None
    record_sha256: str | None = None


@dataclass(frozen=True)
class RowDecision(Record):
    """A thresholded decision a slim entry names once instead of storing it per image: the score column it
    thresholds and the threshold (None: no image has a score, so no decision is true)."""

    score: str = ""
    threshold: float | None = None


@dataclass(frozen=True)
class CompactRows(Record):
    """A slim entry's per-image rows as columns (``evaluation.per_image``): the stored columns, one list of values
    per image, the decisions re-derived from them, the significant digits kept, and the columns equal to another
    (or to the row's position, ``"#"``)."""

    columns: list[str] = field(default_factory=list)
    rows: list[list[Any]] = field(default_factory=list)
    decisions: Mapping[str, RowDecision] = field(default_factory=dict)
    digits: int | None = None
    same: Mapping[str, str] = field(default_factory=dict)

    def stored(self) -> list[dict[str, Any]]:
        """The rows as objects with the columns stored (no decisions): a column equal to another is filled from it,
        one equal to the row's position (``"#"``) with the position."""
        rows = [dict(zip(self.columns, values, strict=True)) for values in self.rows]
        for k, other in self.same.items():
            for i, r in enumerate(rows):
                r[k] = i if other == POSITION else r.get(other)
        return rows


#: the alias of a per-image column that is the row's position (``CompactRows.same``)
POSITION = "#"
