"""An evaluation protocol a board stores once (``protocols/<ref>.json``, named by its hash in each slim entry's
``evaluation.protocol_ref``): the protocol's kept description and the metrics' directions and configurations."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from reconbench.records.evaluation import StoredMetric
from reconbench.records.record import Record


@dataclass(frozen=True)
class BoardProtocol(Record):
    """``protocols/<ref>.json`` of a board (``bench/entries.py`` writes it): the ``protocol`` an evaluation ran
    under (its kept fields, its calibration and each metric's configuration) and each metric's direction and
    headline (``metrics``)."""

    protocol: Mapping[str, Any] | None = None
    metrics: Mapping[str, StoredMetric] | None = None
