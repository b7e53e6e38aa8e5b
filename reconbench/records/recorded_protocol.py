"""The protocol a stored evaluation records (``protocol`` of an evaluation block, as
``evaluation/protocol.py:ResolvedProtocol.to_dict`` writes it, or a board's ``protocols/<ref>.json``), as re-scoring
reads it: the metrics it computed and each one's configuration. Its other keys (matching options, their wording,
calibration, library versions) grow with the releases and are kept as read."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from reconbench.records.record import Record


@dataclass(frozen=True)
class RecordedMetric(Record):
    """One metric as a stored protocol records it: its configuration (None: recorded before metric options were);
    its description, direction and headline key are kept as read."""

    OPEN = True

    config: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class RecordedProtocol(Record):
    """A stored evaluation's protocol: the metrics it computed, by name (None: recorded before metrics were)."""

    OPEN = True

    metrics: Mapping[str, RecordedMetric] | None = None
