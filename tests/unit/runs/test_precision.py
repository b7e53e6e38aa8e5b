"""The precision record (reconbench/precision.py): what it accepts, and where runs and targets write it."""

from __future__ import annotations

import pytest

from reconbench.errors import ReconbenchError
from reconbench.precision import PrecisionPolicy, attack_precision, training_precision
from reconbench.provenance import provenance
from reconbench.runs import RunSpec


def test_tf32_is_recorded_only_where_it_takes_effect():
    """TF32 applies to CUDA float32 products only (matmul_precision's rule); the loss sums in the run's dtype."""
    assert attack_precision("float32", True, "cuda:0").attack_matmul == "tf32"
    assert attack_precision("float32", True, "cpu").attack_matmul == "float32"
    assert attack_precision("float64", True, "cuda").attack_matmul == "float64"
    assert attack_precision("float32", True, "cuda").loss_accumulation_dtype == "float32"
    assert training_precision("float64").to_dict() == {"training_dtype": "float64", "attack_matmul": None,
                                                       "loss_accumulation_dtype": "float64"}


def test_a_record_round_trips_and_refuses_unknown_values():
    record = attack_precision("float32", True, "cuda")
    assert PrecisionPolicy.from_dict(record.to_dict()) == record
    with pytest.raises(ReconbenchError, match="attack_matmul = 'bf16' is not one of float64, float32, tf32"):
        PrecisionPolicy(training_dtype=None, attack_matmul="bf16", loss_accumulation_dtype="float32")
    with pytest.raises(ReconbenchError, match="unknown field 'matmul'"):
        PrecisionPolicy.from_dict({"matmul": "tf32", "loss_accumulation_dtype": "float32"})
    with pytest.raises(ReconbenchError, match="neither training_dtype nor attack_matmul"):
        PrecisionPolicy(training_dtype=None, attack_matmul=None, loss_accumulation_dtype="float64")


def test_an_attack_runs_provenance_holds_its_precision():
    spec = RunSpec(attack="haim_binary_kkt", attack_config={"tf32": True}, dtype="float32", device="cuda")
    assert provenance(spec.to_dict(), "cuda", "float32")["precision"] == {
        "training_dtype": None, "attack_matmul": "tf32", "loss_accumulation_dtype": "float32",
        "evaluation_dtype": "float64"}
    plain = RunSpec(attack="haim_binary_kkt")
    assert provenance(plain.to_dict(), "cpu", "float64")["precision"]["attack_matmul"] == "float64"
    assert "precision" not in provenance({"suite": "x"}, "cpu", "float64")   # no attack run: no attack record
