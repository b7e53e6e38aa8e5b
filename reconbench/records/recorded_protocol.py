"""The evaluation protocol as an evaluation records it (``evaluation.protocol`` of a run's ``result.json`` and of a
full cell record; ``evaluation/protocol.py`` writes it): the parts read by name, the calibration and each metric's
options. Open records: the protocol's other parameters are kept as written (``extra``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from reconbench.records.record import Record


@dataclass(frozen=True)
class ProtocolCalibration(Record):
    """The calibration of the headline: the score it thresholds and the held-out draws the bar is the best of."""

    OPEN = True

    score: str | None = None
    calibration_draws: int | None = None


@dataclass(frozen=True)
class ProtocolMetric(Record):
    """One metric of the protocol: its options as the evaluation resolved them."""

    OPEN = True

    config: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class RecordedProtocol(Record):
    """The recorded protocol (``evaluation.protocol`` of a run or cell): the images' top k, the good-reconstruction
    threshold, its calibration and its metrics (name -> options); the other fields are kept as they are."""

    OPEN = True

    top_k: int | None = None
    good_threshold: float | None = None
    calibration: ProtocolCalibration | None = None
    metrics: Mapping[str, ProtocolMetric] | None = None

    @property
    def calibrated(self) -> ProtocolCalibration:
        """The calibration (an empty one when the protocol records none)."""
        return self.calibration if self.calibration is not None else ProtocolCalibration.written()

    def metric_configs(self) -> dict[str, Mapping[str, Any]]:
        """Each metric's options (empty where not recorded)."""
        return {name: m.config or {} for name, m in (self.metrics or {}).items()}
