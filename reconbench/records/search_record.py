"""The search a run's candidates came from, as ``result.json`` and a cell record store it (``search``;
``attack/search.search_record`` writes it): the strategy, its options, whether it reads the training images and
what it minimised."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from reconbench.records.record import Record


@dataclass(frozen=True)
class SearchRecord(Record):
    """The strategy's name, its options, whether it is an oracle (None: the strategy is not registered) and its
    objective in words."""

    strategy: str | None = None
    config: Mapping[str, Any] | None = None
    oracle: bool | None = None
    objective: str | None = None
