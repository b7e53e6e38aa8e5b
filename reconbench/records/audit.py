"""An audit's JSON record (``<out>/audit.json``, ``reconbench-audit/1``; ``reconbench/auditing/run.py``): what was
audited, the model's errors, its regime, each attack's numbers beside their held-out null, and the headline the
report (``report.html``) is rendered from."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from reconbench.records.cell import StoredOutcome
from reconbench.records.record import FileFormat, Record, unchanged


@dataclass(frozen=True)
class AuditInputs(Record):
    """The audited weights, architecture, data files and preprocessing (paths as given, with their sha256)."""

    weights: str
    weights_sha256: str
    family: str
    model_spec: Mapping[str, Any]
    train: str
    held_out: str
    model_set: Mapping[str, Any]
    task: str
    binary_rule: str | None
    preprocess: Mapping[str, Any]
    loss: str | None
    train_sha256: str
    held_out_sha256: str
    n_train: int
    class_counts: list[int]
    image_shape: list[int]
    held_out_images: int
    decoys: int
    held_out_pool: int
    init_weights: str | None


@dataclass(frozen=True)
class AuditModel(Record):
    """The audited network: its parameter count, loss on the training set, and errors on training and held-out."""

    param_count: int
    train_loss: float
    loss: str
    train_error: float
    held_out_error: float
    held_out_scored: int


@dataclass(frozen=True)
class AuditRegime(Record):
    """The certificate at the training images and the learned-part gate (``unavailable`` without θ0)."""

    stationarity_ratio: float | None
    residual_at_train: float | None
    residual_at_random: float | None
    method: str | None
    seconds: float
    theta0_available: bool
    learned_ratio: float | None
    gate: float
    gate_verdict: str
    #: why the gate is unavailable (only then)
    gate_reason: str | None = None
    #: the learned part's share of θ (only with θ0)
    learned_share_of_theta: float | None = None


@dataclass(frozen=True)
class AuditNumber(Record):
    """One number of an attack beside its held-out null: the mean, standard deviation and largest over the draws."""

    value: float | None
    null_mean: float | None
    null_sd: float | None
    null_max: float | None


@dataclass(frozen=True)
class AuditAttack(Record):
    """One attack the audit ran: its run spec, where its result and figure are, its outcome and numbers."""

    attack: str
    config: Mapping[str, Any]
    search_runs: int
    seed: int
    result: str
    figure: str | None
    outcome: StoredOutcome
    n_train: int | None
    calibrated_threshold: float | None
    calibration: int | None
    null_draws: int | None
    null_available: bool
    null_reason: str | None
    numbers: Mapping[str, AuditNumber]
    wall_seconds: float | None
    membership_non_members: int


@dataclass(frozen=True)
class RefusedAttack(Record):
    """An attack that cannot handle the model, with its one-line reason."""

    attack: str
    reason: str


@dataclass(frozen=True)
class AuditHeadline(Record):
    """The largest calibrated count over the attacks, with its attack and null; or why there is none."""

    available: bool
    reason: str | None = None
    attack: str | None = None
    reconstructed: float | None = None
    n_train: int | None = None
    null_mean: float | None = None
    null_max: float | None = None
    threshold: float | None = None
    membership_auc: float | None = None
    membership_auc_null_mean: float | None = None


@dataclass(frozen=True)
class AuditProvenance(Record):
    """Where the audit ran (``reconbench.provenance``): the report names the version and commit; the rest is kept."""

    OPEN = True

    reconbench_version: str | None = None
    git_commit: str | None = None


@dataclass(frozen=True)
class AuditRecord(Record):
    """An audit's ``audit.json``."""

    SCHEMA = "reconbench-audit/1"

    kind: str
    command: str
    inputs: AuditInputs
    model: AuditModel
    regime: AuditRegime
    attacks: list[AuditAttack]
    refused: list[RefusedAttack]
    headline: AuditHeadline
    seconds: float
    provenance: AuditProvenance


#: the door of an audit's JSON record
AUDIT_FILE: FileFormat[AuditRecord] = FileFormat(
    AuditRecord, "kind", {AuditRecord.SCHEMA: unchanged},
    fix="run `reconbench audit` again with this version of reconbench",
    remedy="the file was edited by hand or written by another version: restore it, or run the `reconbench audit` "
           "command it records again")
