"""The numbers of an evaluation's summary read by name (``evaluation.summary`` of a run's ``result.json``;
``evaluation/evaluate.py`` writes it): the training-set size and the calibrated headline with its bar. An open
record: the other numbers of the summary (each metric's, declared by the metrics) are kept as written (``extra``)."""

from __future__ import annotations

from dataclasses import dataclass

from reconbench.records.record import Record


@dataclass(frozen=True)
class HeadlineNumbers(Record):
    """The training-set size, the calibrated headline (how many training images a candidate matched above the
    bar) and the bar; why LPIPS was not computed, where it was not."""

    OPEN = True

    n_train: int | None = None
    reconstructed_calibrated: float | None = None
    calibrated_threshold: float | None = None
    lpips_mean_unavailable_reason: str | None = None
