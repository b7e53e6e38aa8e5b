"""What a slim board entry (``bench/entries.py``) reads besides the cell record: the evaluation protocol a board
stores once (``protocols/<ref>.json``, named by its hash in each entry's ``evaluation.protocol_ref``) and a search
run in the entry's slim form (the protocol a cell's evaluation records is
:class:`~reconbench.records.recorded_protocol.RecordedProtocol`)."""

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


@dataclass(frozen=True)
class SlimRun(Record):
    """A search run as a slim entry stores it: its configuration as its differences from run ``config_from``'s,
    and ``init_overrides`` as the text ``"init_config"`` when they are its init configuration (the other fields of
    a :class:`~reconbench.records.cell.SearchRun` are kept as they are)."""

    OPEN = True

    config: Mapping[str, Any] | None = None
    config_from: int | None = None
    init_config: Mapping[str, Any] | None = None
    init_overrides: Mapping[str, Any] | str | None = None
