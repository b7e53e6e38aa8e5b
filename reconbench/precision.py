"""The precision a run used, as one small record: how the target was trained, how the attack multiplied, and in
which dtype the losses were summed.

A target's card records the training half (``metrics["precision"]``, written by the trainer, and copied into each
cell's record with the card's metrics); a run's provenance records the attack half and the evaluation's dtype (the
scores are computed in float64 from the candidates, whatever the attack's precision). TF32 is an opt-in of CUDA
float32 attacks only (``tf32 = true`` in the attack's options): their matrix products then round their inputs to 10
mantissa bits, while sums (the loss) stay in float32.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from reconbench.errors import ReconbenchError

FLOAT_DTYPES = ("float64", "float32")
#: the dtype the evaluation scores candidates in (reconbench.evaluation.context converts them to float64)
EVALUATION_DTYPE = "float64"
MATMUL_PRECISIONS = ("float64", "float32", "tf32")


@dataclass(frozen=True)
class PrecisionPolicy:
    """Which arithmetic produced a result. A field is None where the record does not cover that part (a target's
    card holds no attack; a run's provenance leaves training to the target's card). A field absent in a stored
    record reads as its default here."""

    training_dtype: str | None = None
    attack_matmul: str | None = None
    loss_accumulation_dtype: str = field(kw_only=True)
    evaluation_dtype: str | None = None   # an attack run's: the scores' dtype (None: not recorded, as on cards)

    def __post_init__(self) -> None:
        for name, value, allowed in (("training_dtype", self.training_dtype, FLOAT_DTYPES),
                                     ("attack_matmul", self.attack_matmul, MATMUL_PRECISIONS),
                                     ("evaluation_dtype", self.evaluation_dtype, FLOAT_DTYPES),
                                     ("loss_accumulation_dtype", self.loss_accumulation_dtype, FLOAT_DTYPES)):
            if value is not None and value not in allowed:
                raise ReconbenchError(f"precision record: {name} = {value!r} is not one of {', '.join(allowed)}; "
                                      "fix the record or re-run")
        if self.training_dtype is None and self.attack_matmul is None:
            raise ReconbenchError("precision record: neither training_dtype nor attack_matmul is set; a record "
                                  "describes a training run, an attack, or both")

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if out["evaluation_dtype"] is None:   # a training record (a card) stays as it was
            del out["evaluation_dtype"]
        return out

    @classmethod
    def from_dict(cls, data: object) -> PrecisionPolicy:
        if not isinstance(data, dict):
            raise ReconbenchError(f"precision record: expected an object, got {type(data).__name__}; fix the record "
                                  "or re-run")
        known = {"training_dtype", "attack_matmul", "loss_accumulation_dtype", "evaluation_dtype"}
        extra = set(data) - known
        if extra or "loss_accumulation_dtype" not in data:
            what = f"unknown field {sorted(extra)[0]!r}" if extra else "no loss_accumulation_dtype"
            raise ReconbenchError(f"precision record: {what}; its fields are {', '.join(sorted(known))}")
        return cls(**{str(k): v for k, v in data.items()})


def training_precision(dtype: str) -> PrecisionPolicy:
    """Full-batch GD in ``dtype``: products and the loss's sum both in that dtype (no TF32 in training)."""
    return PrecisionPolicy(training_dtype=dtype, attack_matmul=None, loss_accumulation_dtype=dtype)


def attack_precision(dtype: str, tf32: bool, device: str) -> PrecisionPolicy:
    """An attack in ``dtype`` on ``device``; ``tf32`` (asked for) takes effect on CUDA in float32 only, as
    :func:`reconbench.attack.kkt.batched.matmul_precision` applies it. The loss sums in ``dtype`` either way."""
    matmul = "tf32" if tf32 and dtype == "float32" and device.startswith("cuda") else dtype
    return PrecisionPolicy(training_dtype=None, attack_matmul=matmul, loss_accumulation_dtype=dtype,
                           evaluation_dtype=EVALUATION_DTYPE)


def run_precision(spec: dict[str, Any], device: str, dtype: str) -> PrecisionPolicy | None:
    """The attack half of a run spec's precision (a spec as ``RunSpec.to_dict`` writes it), None for a record that
    is no attack run."""
    if not isinstance(spec, dict) or "attack_config" not in spec or dtype not in FLOAT_DTYPES:
        return None
    config = spec["attack_config"] or {}
    return attack_precision(dtype, bool(config.get("tf32", False)) if isinstance(config, dict) else False, device)
