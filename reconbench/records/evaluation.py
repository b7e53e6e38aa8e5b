"""A run's evaluation block (``evaluation`` of a cell record and of a run's ``result.json``; each entry of
``evaluation_selected``), as ``evaluation/evaluate.py`` writes it or a board's slim entry stores it: the protocol
(or the name it is stored under), the summary, the per-image rows, the candidates' counts, each metric's result, and
the held-out null with its spread over draws. A selection's held-out null and its count against the calibrated bar
(``evaluation/bars.py``) are records of this module too."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from reconbench.records.headline_numbers import HeadlineNumbers
from reconbench.records.record import Record, number
from reconbench.records.recorded_protocol import RecordedProtocol

_EMPTY: Mapping[str, Any] = {}


@dataclass(frozen=True)
class Spread(Record):
    """A summary number over the held-out null's draws: its mean, standard deviation, least and largest value."""

    mean: float | None = None
    std: float | None = None
    min: float | None = None
    max: float | None = None
    draws: int | None = None


@dataclass(frozen=True)
class HeldOutNull(Record):
    """The held-out null of an evaluation (``evaluation/null.py``) or of a selection (the runner keeps its
    availability, draws, threshold and spread): per summary key, its spread over the draws (a board's slim entry
    stores a spread as the list ``[mean, max]``, :data:`~reconbench.bench.entries.SPREAD_FIELDS`)."""

    kind: str | None = None
    available: bool | None = None
    reason: str | None = None
    draws: int | None = None
    threshold: float | None = None
    summary: Mapping[str, Any] | None = None
    spread: Mapping[str, Spread | list[float | None]] | None = None
    per_draw: list[Any] | None = None

    def spread_of(self, key: str) -> Spread | None:
        """The spread of a summary key as an object (None: not recorded, or stored in the slim list form)."""
        s = (self.spread or _EMPTY).get(key)
        return s if isinstance(s, Spread) else None

    def max_of(self, key: str) -> float | None:
        """The largest draw of a summary key (None: not recorded, or not a number)."""
        s = self.spread_of(key)
        return None if s is None else number(s.max)


@dataclass(frozen=True)
class Calibrated(Record):
    """A selection's count against the bar calibrated for it (``evaluation/bars.py``): count, threshold, the bar in
    words and the bars' format."""

    count: float | None = None
    threshold: float | None = None
    bar: str | None = None
    format: str | None = None


@dataclass(frozen=True)
class Candidates(Record):
    """The candidates an evaluation scored: how many, how many valid, the non-finite and constant ones, the runs."""

    total: int | None = None
    valid: int | None = None
    nonfinite: int | None = None
    constant: int | None = None
    nonfinite_ids: list[int] | None = None
    constant_ids: list[int] | None = None
    runs: list[int] | None = None


@dataclass(frozen=True)
class StoredMetric(Record):
    """One metric's result in an evaluation: its direction, headline key, availability, summary and details."""

    higher_is_better: bool | None = None
    headline: str | None = None
    available: bool | None = None
    reason: str | None = None
    summary: Mapping[str, Any] | None = None
    details: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class StoredEvaluation(Record):
    """An evaluation of pooled (or selected) candidates: protocol, summary, per-image rows (a list of objects; in a
    board's slim entry the compact ``{"columns", "rows", "decisions", ...}`` form), candidates, metrics, figures,
    held-out null."""

    #: the name of the protocol a slim entry stores once per board (``protocols/<ref>.json``)
    protocol_ref: str | None = None
    protocol: Mapping[str, Any] | None = None
    summary: Mapping[str, Any] | None = None
    per_image: list[Any] | Mapping[str, Any] | None = None
    candidates: Candidates | None = None
    metrics: Mapping[str, StoredMetric] | None = None
    figures: Mapping[str, Any] | None = None
    seconds: float | None = None
    null: HeldOutNull | None = None

    @property
    def numbers(self) -> Mapping[str, Any]:
        """The summary (empty when absent)."""
        return self.summary or _EMPTY

    def value(self, key: str) -> float | None:
        """A summary number (None: absent, not a number, or NaN)."""
        return number(self.numbers.get(key))

    @cached_property
    def headline(self) -> HeadlineNumbers:
        """The summary's numbers read by name (the training-set size, the calibrated headline and its bar)."""
        return HeadlineNumbers.from_dict(self.numbers, "an evaluation's summary")

    @cached_property
    def recorded_protocol(self) -> RecordedProtocol:
        """The protocol as recorded (an empty one when the evaluation stores only its name: a slim entry)."""
        return RecordedProtocol.from_dict(self.protocol or _EMPTY, "an evaluation's protocol")

    @property
    def calibration(self) -> Mapping[str, Any]:
        """The protocol's calibration as recorded (empty when absent)."""
        return self.recorded_protocol.calibrated.to_dict()

    @property
    def held_out(self) -> HeldOutNull:
        """The held-out null (an empty one when absent)."""
        return self.null if self.null is not None else HeldOutNull()

    @property
    def rows(self) -> list[Any]:
        """The per-image rows as stored in a full record (empty for a slim entry's compact form)."""
        return self.per_image if isinstance(self.per_image, list) else []
