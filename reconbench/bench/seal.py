"""A cell record's seal: the sha256 of its canonical JSON, written when the runner saves the record.

``leaderboard --verify`` re-derives every scored number from the stored candidates, but some numbers a board shows
cannot be re-derived anywhere else (the attack's wall time, the target's training metrics when its weights are not
published). The seal binds them to the record as the run wrote it: a field edited by hand afterwards, and the board
rendered again, no longer matches the seal, and verification fails naming the cell. A seal has no secret: it detects
edits and damage, not a forger who recomputes it; what a forger could change that matters (the scored numbers) is
re-derived from the candidates and the model card by re-scoring.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from reconbench.provenance import json_default

#: the field of a cell record that holds its seal
SEAL_FIELD = "record_sha256"


def canonical(record: dict[str, Any]) -> str:
    """The record without its seal, as JSON with sorted keys and no spaces (as written, then read back)."""
    body = {k: v for k, v in record.items() if k != SEAL_FIELD}
    text = json.dumps(body, default=json_default, allow_nan=True)
    return json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"), allow_nan=True)


def seal(record: dict[str, Any]) -> str:
    """sha256 of :func:`canonical`."""
    return hashlib.sha256(canonical(record).encode()).hexdigest()


def sealed(record: dict[str, Any]) -> dict[str, Any]:
    """The record with its seal set (in place; returned for chaining)."""
    record[SEAL_FIELD] = seal(record)
    return record


def seal_problem(record: dict[str, Any]) -> str | None:
    """Why the record's seal does not hold, or None (it holds, or the record was written before seals)."""
    recorded = record.get(SEAL_FIELD)
    if recorded is None:
        return None
    if recorded != seal(record):
        return (f"its {SEAL_FIELD} does not match its content (a field was edited after the run wrote it); restore "
                "the cell file or run the cell again")
    return None
