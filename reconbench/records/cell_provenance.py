"""Where and how a cell ran, as it records it (``provenance`` of a cell record; ``bench/runner.py`` writes it): the
commit and version, the device, and the precision policy of its attack and scores (``reconbench/precision.py``).
Open records: the other keys (host, library versions, ...) are kept as written (``extra``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from reconbench.precision import PrecisionPolicy
from reconbench.records.record import Record


@dataclass(frozen=True)
class CellProvenance(Record):
    """The commit and version a cell ran at, its device and precision policy."""

    OPEN = True

    git_commit: str | None = None
    reconbench_version: str | None = None
    device: str | None = None
    precision: Mapping[str, Any] | None = None

    @property
    def policy(self) -> PrecisionPolicy | None:
        """The precision policy it recorded (``reconbench.precision`` decodes and checks it), None where it records
        none (cells written before the policy was recorded)."""
        return None if self.precision is None else PrecisionPolicy.from_dict(dict(self.precision))
