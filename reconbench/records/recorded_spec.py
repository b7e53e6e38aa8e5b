"""What a run was asked to do, as a run's ``result.json`` and a cell record store it (``spec``;
``runs/spec.RunSpec.to_dict`` writes it): attack, init, seed, candidates, search, dtype, device and the protocol
options. An open record: a key a later version adds is kept as written (``extra``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from reconbench.records.record import Record


@dataclass(frozen=True)
class RecordedSpec(Record):
    """A run's spec as recorded (every field optional: absent reads as None or empty)."""

    OPEN = True

    attack: str | None = None
    attack_config: Mapping[str, Any] = field(default_factory=dict)
    init: str | None = None
    init_config: Mapping[str, Any] = field(default_factory=dict)
    seed: int | None = None
    candidates: int | None = None
    search_runs: int | None = None
    dtype: str | None = None
    device: str | None = None
    #: the evaluation protocol's options the run was made with (none: the defaults)
    protocol: Mapping[str, Any] | None = None
    search: str | None = None
    search_config: Mapping[str, Any] = field(default_factory=dict)

    @property
    def protocol_options(self) -> dict[str, Any]:
        """The protocol options (empty: the defaults)."""
        return dict(self.protocol or {})
