"""A run's ``result.json`` (``reconbench-result/1``, written by ``runs/result.py``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from reconbench.records.cell import SearchRun, StoredOutcome
from reconbench.records.evaluation import StoredEvaluation
from reconbench.records.model_card import TrainMetrics
from reconbench.records.parameter_ratio import ParameterRatio
from reconbench.records.record import FileFormat, Record, unchanged
from reconbench.records.recorded_spec import RecordedSpec
from reconbench.records.search_record import SearchRecord
from reconbench.targets.recipe import TargetRecipe


@dataclass(frozen=True)
class RunTarget(Record):
    """What a run records of its target: its card, recipe, training metrics."""

    card: str | None = None
    recipe: TargetRecipe | None = None
    #: a model brought by `reconbench audit` has no training recipe: what the audit recorded of it instead
    #: (family, options, task, preprocessing, data hashes; reconbench/auditing/card.py)
    audit: Mapping[str, Any] | None = None
    recipe_key: str | None = None
    card_sha256: str | None = None
    family: str | None = None
    task: str | None = None
    n_train: int | None = None
    p_over_dn: ParameterRatio | None = None
    train_metrics: TrainMetrics | None = None


@dataclass(frozen=True)
class PickedRun(Record):
    """The run a selection of a result (blind, oracle) picked, and its rule in words."""

    run: int | None = None
    rule: str | None = None


@dataclass(frozen=True)
class RunResult(Record):
    """A run's ``result.json`` (``runs/result.py`` builds it and writes every field, in this order): the pooled and
    selected evaluations, the runs, provenance."""

    SCHEMA = "reconbench-result/1"

    kind: str | None = None
    attack: str | None = None
    #: what the attack declared it reads besides the final weights (interfaces.ThreatModel.to_dict and its label)
    threat_model: Mapping[str, Any] | None = None
    init: str | None = None
    init_config: Mapping[str, Any] | None = None
    init_is_oracle: bool | None = None
    spec: Mapping[str, Any] = field(default_factory=dict)
    search: Mapping[str, Any] | None = None
    target: RunTarget = RunTarget()
    selection: Mapping[str, PickedRun] = field(default_factory=dict)
    runs: list[SearchRun] = field(default_factory=list)
    failed_runs: list[int] = field(default_factory=list)
    outcome: StoredOutcome | None = None
    evaluation: StoredEvaluation = StoredEvaluation()
    evaluation_selected: Mapping[str, StoredEvaluation] = field(default_factory=dict)
    calibration_bars: Any = None
    figures: list[str] = field(default_factory=list)
    wall_seconds: float | None = None
    provenance: Mapping[str, Any] | None = None

    @cached_property
    def recorded_spec(self) -> RecordedSpec:
        """The spec read by name."""
        return RecordedSpec.from_dict(self.spec, "result.json, its spec")

    @cached_property
    def recorded_search(self) -> SearchRecord:
        """The search read by name (an empty one when the result records none)."""
        return SearchRecord.from_dict(self.search or {}, "result.json, its search")

    def selected_run(self, name: str) -> int | None:
        """The run a selection (blind, oracle) picked; None when none finished."""
        picked = self.selection.get(name)
        return None if picked is None else picked.run


#: the door of a run's result.json
RUN_RESULT_FILE: FileFormat[RunResult] = FileFormat(RunResult, "kind", {RunResult.SCHEMA: unchanged})
