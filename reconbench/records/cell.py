"""A cell record (``cells/<cell id>.json``, ``reconbench-bench-cell/1``), as the runner writes it or a board stores it
(a slim entry): the cell's target, attack, init, search runs, selections and pooled evaluation."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from reconbench.records.board_entry import EntryInfo
from reconbench.records.cell_provenance import CellProvenance
from reconbench.records.evaluation import Calibrated, HeldOutNull, Spread, StoredEvaluation, StoredMetric
from reconbench.records.model_card import TrainMetrics
from reconbench.records.parameter_ratio import ParameterRatio
from reconbench.records.record import FileFormat, Record, number, unchanged
from reconbench.records.recorded_spec import RecordedSpec
from reconbench.targets.recipe import TargetRecipe

_EMPTY: Mapping[str, Any] = {}


@dataclass(frozen=True)
class Selection(Record):
    """One selection of a cell's search runs (pool, blind, oracle): its rule, loss, summary, held-out null and the
    count against its calibrated bar."""

    run: int | None = None
    runs: list[int] | None = None
    rule: str | None = None
    oracle: bool = False
    attack_loss: float | None = None
    config: Mapping[str, Any] | None = None
    note: str | None = None
    summary: Mapping[str, Any] = field(default_factory=dict)
    null: HeldOutNull | None = None
    calibrated: Calibrated | None = None
    same_as: Mapping[str, str] | None = None

    def value(self, key: str) -> float | None:
        """A summary number (None: absent, not a number, or NaN)."""
        return number(self.summary.get(key))

    def raw(self, key: str) -> Any:
        """A summary value as stored, ``{"value": x}`` unwrapped (None: absent)."""
        v = self.summary.get(key)
        return v.get("value") if isinstance(v, Mapping) else v

    def null_spread(self, key: str) -> Spread | None:
        """The held-out null's spread of a summary key (mean, max, ...) over its draws (None: not recorded)."""
        return None if self.null is None else self.null.spread_of(key)

    @property
    def held_out(self) -> HeldOutNull:
        """The held-out null (an empty one when not recorded)."""
        return self.null if self.null is not None else HeldOutNull()

    @property
    def calibrated_count(self) -> float | None:
        return None if self.calibrated is None else number(self.calibrated.count)

    @property
    def calibrated_bar(self) -> str | None:
        return None if self.calibrated is None else str(self.calibrated.bar)


@dataclass(frozen=True)
class TargetInfo(Record):
    """What a cell records of its target: its name, recipe, training metrics (``"card"`` in a slim entry whose
    card was not read), and where its model card is."""

    name: str = ""
    recipe: TargetRecipe | str | None = None
    recipe_key: str | None = None
    card_file: str | None = None
    n_train: int | None = None
    train_metrics: TrainMetrics | str | None = None
    train_seconds: float | None = None
    reused: bool | None = None
    load_or_train_seconds: float | None = None
    #: the content sha256 of the model card the cell attacked (where the cell records it)
    card_sha256: str | None = None
    #: p trained parameters, d input dimension, n training points and the ratio p / (d n) (targets/cards.py)
    p_over_dn: ParameterRatio | None = None
    #: the least and the largest training margin of the card's ``margins`` (binary: y·f(x); multiclass: the own
    #: logit minus the largest other), on cells recorded since the card's margins are summarised here
    margin_min: float | None = None
    margin_max: float | None = None

    @property
    def metrics(self) -> TrainMetrics:
        """The training metrics (empty when absent, or ``"card"``: not read from the model card)."""
        return self.train_metrics if isinstance(self.train_metrics, TrainMetrics) else TrainMetrics()

    @property
    def has_metrics(self) -> bool:
        return isinstance(self.train_metrics, TrainMetrics) and bool(self.train_metrics.to_dict())

    @property
    def trained_from(self) -> TargetRecipe:
        """The recipe (empty when absent or not read from the model card)."""
        return self.recipe if isinstance(self.recipe, TargetRecipe) else TargetRecipe()


@dataclass(frozen=True)
class InitInfo(Record):
    label: str = ""
    regime: str = ""
    config: Mapping[str, Any] = field(default_factory=dict)
    is_oracle: bool | None = None


@dataclass(frozen=True)
class AttackInfo(Record):
    label: str = ""
    name: str = ""
    config: Mapping[str, Any] = field(default_factory=dict)
    search_runs: int | None = None
    candidates: int | None = None


@dataclass(frozen=True)
class StoredOutcome(Record):
    """Whether an attack did its work (``attack/outcome.py``), as a run, a cell or a result stores it: the status,
    the reason in one line, and for a cell or a result how many of its runs ended with each status."""

    status: str | None = None
    reason: str | None = None
    runs: Mapping[str, int] | None = None


@dataclass(frozen=True)
class RunBatch(Record):
    """The batch a search run advanced in (the KKT attacks' ``run_batch``): the runs in it and its size; the other
    keys an attack records of its batch (``cross_target``, ``cuda_graph``, ...) are kept in ``extra``."""

    OPEN = True

    runs: list[int] | None = None
    size: int | None = None


@dataclass(frozen=True)
class SearchRun(Record):
    """One search run of a cell (``runs/execute.py``): its sampled options, its start, final loss, steps, how it
    stopped and its outcome."""

    run: int | None = None
    run_key: str | None = None
    config: Mapping[str, Any] | None = None
    init_config: Mapping[str, Any] | None = None
    init_overrides: Mapping[str, Any] | None = None
    final_loss: float | None = None
    initial_loss: float | None = None
    steps: int | None = None
    stopped: str | None = None
    message: str | None = None
    seconds: float | None = None
    #: the loss curve (a run's own ``run-NNN.json``; left out of result.json and the cell)
    trace: list[Any] | None = None
    oracle_score: float | None = None
    candidates_finite: bool | None = None
    outcome: StoredOutcome | None = None
    #: the batch the run advanced in (the KKT attacks' ``run_batch``)
    batch: RunBatch | None = None
    #: a run that converged (``stopped`` = converged): the rule, the step and the changes measured there
    early_stop: Mapping[str, Any] | None = None

    @property
    def batch_key(self) -> tuple[int | None, ...] | None:
        """The runs of the batch this run advanced in (itself alone when the batch names none); None: it ran alone."""
        if self.batch is None:
            return None
        return tuple(self.batch.runs or [self.run])

    def summary(self) -> dict[str, Any]:
        """The run's settings and outcome (every field, None where absent)."""
        return {"run": self.run, "config": self.config, "final_loss": self.final_loss, "steps": self.steps,
                "stopped": self.stopped, "seconds": self.seconds}


@dataclass(frozen=True)
class ImageRow(Record):
    """One training image's row of an evaluation's per-image table: its label, best candidate, margin and scores
    (the score columns depend on the protocol: :meth:`score`; an open record, they are kept in ``extra``)."""

    OPEN = True

    label: Any = None
    best_candidate: int | None = None
    margin: float | None = None

    def raw(self, column: str) -> Any:
        """A column as stored (None: absent)."""
        return self.extra[column] if column in self.extra else None

    def score(self, column: str) -> float | None:
        """A numeric column of the row (None: absent, null or not a number)."""
        return number(self.extra[column]) if column in self.extra else None

    def has(self, column: str) -> bool:
        return column in self.extra


def image_rows(rows: object) -> list[ImageRow]:
    """Per-image rows (JSON objects) as records; anything else in the list is left out."""
    return [ImageRow.from_dict(r) for r in rows if isinstance(r, Mapping)] if isinstance(rows, list) else []


@dataclass(frozen=True)
class CellRecord(Record):
    """One cell of a suite as the runner writes it (``bench/runner.py``) or a board stores it (a slim entry,
    read here in either its stored or its expanded form)."""

    SCHEMA = "reconbench-bench-cell/1"

    format: str | None = None
    suite: str | None = None
    suite_file: str | None = None
    suite_sha256: str | None = None
    cell_id: str = ""
    cell_key: str | None = None
    groups: list[str] = field(default_factory=list)
    status: str | None = None
    target: TargetInfo = TargetInfo()
    attack: AttackInfo = AttackInfo()
    search: Mapping[str, Any] | None = None
    init: InitInfo = InitInfo()
    seed: int | None = None
    protocol: Mapping[str, Any] | None = None
    spec: Mapping[str, Any] = field(default_factory=dict)
    invocation: int | None = None
    runs: list[Any] | None = None
    outcome: StoredOutcome | None = None
    selections: Mapping[str, Selection] | None = None
    evaluation: StoredEvaluation | None = None
    calibration_bars: Any = None
    result_dir: str | None = None
    attack_seconds: float | None = None
    error: Mapping[str, Any] | None = None
    wall_seconds: float | None = None
    #: the CPU seconds of the process that ran the cell, all its threads (absent in records written before it was kept)
    cpu_seconds: float | None = None
    finished: str | None = None
    provenance: Mapping[str, Any] | None = None
    machine: Mapping[str, Any] | None = None
    entry: EntryInfo | None = None
    record_sha256: str | None = None

    def selection(self, name: str) -> Selection:
        """A selection by name (an empty one when the cell has none of that name)."""
        sel = (self.selections or _EMPTY).get(name)
        return sel if isinstance(sel, Selection) else Selection()

    @property
    def protocol_ref(self) -> str | None:
        """The name of the evaluation protocol a slim entry stores once per board (``protocols/<ref>.json``)."""
        return None if self.evaluation is None else self.evaluation.protocol_ref

    @property
    def evaluated_metrics(self) -> Mapping[str, StoredMetric]:
        """The metrics the pooled evaluation recorded (name -> headline, direction, parameters)."""
        return (None if self.evaluation is None else self.evaluation.metrics) or _EMPTY

    @cached_property
    def recorded_spec(self) -> RecordedSpec:
        """The spec read by name."""
        return RecordedSpec.from_dict(self.spec, f"cell {self.cell_id}, its spec")

    @property
    def dtype(self) -> str | None:
        return self.recorded_spec.dtype

    @property
    def ran(self) -> CellProvenance:
        """The provenance read by name (an empty one when the cell records none); read on each use, as the
        provenance mapping is."""
        return CellProvenance.from_dict(self.provenance or _EMPTY, f"cell {self.cell_id}, its provenance")

    @property
    def git_commit(self) -> str:
        return str(self.ran.git_commit)

    @property
    def reconbench_version(self) -> str:
        return str(self.ran.reconbench_version)

    @property
    def per_image(self) -> list[ImageRow]:
        """The pooled evaluation's per-image rows (objects in an expanded record; others are left out)."""
        return image_rows(None if self.evaluation is None else self.evaluation.per_image)

    @cached_property
    def search_runs(self) -> list[SearchRun]:
        """The search runs read as records, once (objects only: a slim entry's runs are read once it is expanded)."""
        return [SearchRun.from_dict(r, f"cell {self.cell_id}, a search run") for r in self.runs or []
                if isinstance(r, Mapping)]

    @property
    def work_dir(self) -> str:
        """The cell's run folder, relative to its results folder."""
        return self.result_dir or f"work/{self.cell_id}"

    @property
    def is_entry(self) -> bool:
        return self.entry is not None


#: the door of a cell record, full or a board's slim entry (whose own schema is ``EntryInfo.SCHEMA``)
CELL_FILE: FileFormat[CellRecord] = FileFormat(CellRecord, "format", {CellRecord.SCHEMA: unchanged})
