"""What a search strategy is told about a run is read from the run's record (``SearchRun``), strictly."""

from __future__ import annotations

import math

import pytest

from reconbench.attack.search import objective
from reconbench.errors import ReconbenchError
from reconbench.records import SearchRun


def test_the_objective_reads_a_record_or_its_json_alike():
    as_json = {"run": 0, "stopped": "completed", "final_loss": 2.5, "oracle_score": 0.25}
    record = SearchRun.from_dict(as_json)
    for run in (as_json, record):
        assert objective(run, oracle=False) == 2.5 and objective(run, oracle=True) == 0.25


def test_a_failed_or_non_finite_run_tells_nothing():
    assert objective({"run": 0, "stopped": "failed", "final_loss": 1.0}, oracle=False) is None
    assert objective({"run": 0, "stopped": "completed", "final_loss": math.inf}, oracle=False) is None
    assert objective({"run": 0, "stopped": "completed"}, oracle=True) is None


def test_a_misspelt_field_is_refused():
    with pytest.raises(ReconbenchError, match="final_los"):
        objective({"run": 0, "stopped": "completed", "final_los": 1.0}, oracle=False)
