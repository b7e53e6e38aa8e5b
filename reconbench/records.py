"""Typed records of what flows through the house: a run's result (``result.json``), a cell record and its
selections (``bench/runner.py``), a board entry's slim-form metadata (``bench/entries.py``), and a published board's
``results.json`` (header, columns, table rows, target rows).

Each record is a frozen dataclass read with ``from_dict`` and written back with ``to_dict``. Reading is tolerant:
every field may be absent (older files lack newer keys), and keys a record does not name are kept in ``extra`` and
written back in their place, so ``to_dict(from_dict(x)) == x`` for every file the project has published. Readers use
the attributes and the small helpers (``CellRecord.selection``, ``Selection.value``) instead of chains of
``dict.get``; writers still build plain dicts. The JSON formats are versioned by the ``format`` / ``kind`` string
their writers stamp (each top-level record names it as ``SCHEMA``); :data:`SCHEMA_VERSION` versions this typed view.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, ClassVar, TypeVar

from reconbench.errors import ReconbenchError

#: the version of the typed view; bump it when a field changes meaning
SCHEMA_VERSION = 1

R = TypeVar("R", bound="Record")
_EMPTY: Mapping[str, Any] = {}


def number(v: Any) -> float | None:
    """A stored value as a float: a number, a boolean, or ``{"value": x}``; None for NaN, text or absent."""
    if isinstance(v, Mapping):
        v = v.get("value")
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, (int, float)) and not math.isnan(float(v)):
        return float(v)
    return None


def mapping(v: Any) -> Mapping[str, Any]:
    """``v`` when it is a JSON object, else an empty one (a field absent, null, or a placeholder string)."""
    return v if isinstance(v, Mapping) else _EMPTY


def plain(v: Any) -> Any:
    """A record, or JSON values holding records, as plain JSON values."""
    if isinstance(v, Record):
        return v.to_dict()
    if isinstance(v, Mapping):
        return {k: plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [plain(x) for x in v]
    return v


def _of(cls: type[R]) -> Callable[[Any], Any]:
    """Read a nested record (left as it is when it is not a JSON object: older files put null or text there)."""
    return lambda v: cls.from_dict(v) if isinstance(v, Mapping) else v


def _map_of(cls: type[R]) -> Callable[[Any], Any]:
    return lambda v: {k: cls.from_dict(x) if isinstance(x, Mapping) else x for k, x in v.items()} \
        if isinstance(v, Mapping) else v


def _list_of(cls: type[R]) -> Callable[[Any], Any]:
    return lambda v: [cls.from_dict(x) if isinstance(x, Mapping) else x for x in v] if isinstance(v, list) else v


def nested(reader: Callable[[Any], Any], default: Any = None) -> Any:
    """A field read through ``reader`` (``_of``, ``_map_of``, ``_list_of``)."""
    return field(default=default, metadata={"read": reader})


@dataclass(frozen=True)
class Record:
    """Base of the typed records: tolerant reading, key-preserving writing."""

    #: keys of the JSON object that no field names, kept to be written back
    extra: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False, kw_only=True)
    #: the order of the keys as read (written back in it)
    key_order: tuple[str, ...] = field(default=(), repr=False, compare=False, kw_only=True)

    _OWN: ClassVar[frozenset[str]] = frozenset({"extra", "key_order"})
    #: the format (schema and its version) of the JSON file a top-level record reads, as its writer stamps it
    SCHEMA: ClassVar[str | None] = None

    @classmethod
    def from_dict(cls: type[R], d: Any) -> R:
        """The record of a JSON object: each named field read (nested records through their reader), every other
        key kept in ``extra``; a one-line error when ``d`` is not an object."""
        if not isinstance(d, Mapping):
            raise ReconbenchError(f"a {cls.__name__} is a JSON object, got {type(d).__name__}; the file is damaged, "
                                  "restore or re-render it")
        kw: dict[str, Any] = {}
        named = set()
        for f in fields(cls):
            if f.name in cls._OWN:
                continue
            named.add(f.name)
            if f.name in d:
                read = f.metadata.get("read")
                kw[f.name] = read(d[f.name]) if read else d[f.name]
        extra = {k: v for k, v in d.items() if k not in named}
        return cls(**kw, extra=extra, key_order=tuple(d))

    def to_dict(self) -> dict[str, Any]:
        """The JSON object: the keys read, in their order, then fields set that were not read."""
        values: dict[str, Any] = {}
        for f in fields(self):
            if f.name in self._OWN:
                continue
            v = getattr(self, f.name)
            default = f.default_factory() if f.default_factory is not MISSING else f.default  # type: ignore[misc]
            if f.name in self.key_order or v != default:
                values[f.name] = plain(v)
        out: dict[str, Any] = {}
        for k in self.key_order:
            if k in values:
                out[k] = values.pop(k)
            elif k in self.extra:
                out[k] = self.extra[k]
        out.update(values)
        out.update({k: v for k, v in self.extra.items() if k not in out})
        return out


# -- a cell -----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Spread(Record):
    """A summary number over the held-out null's draws: its mean, standard deviation, least and largest value."""

    mean: float | None = None
    std: float | None = None
    min: float | None = None
    max: float | None = None


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
    null: Mapping[str, Any] | None = None
    calibrated: Mapping[str, Any] | None = None
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
        spread = mapping(mapping(self.null).get("spread"))
        return Spread.from_dict(spread[key]) if isinstance(spread.get(key), Mapping) else None

    @property
    def calibrated_count(self) -> float | None:
        return number(mapping(self.calibrated).get("count"))

    @property
    def calibrated_bar(self) -> str | None:
        return None if not self.calibrated else str(self.calibrated["bar"])


@dataclass(frozen=True)
class ProblemRecipe(Record):
    dataset: str | None = None
    task: str | None = None
    n_per_class: int | None = None
    num_classes: int | None = None


@dataclass(frozen=True)
class TrainRecipe(Record):
    loss: str | None = None
    weight_decay: float | None = None


@dataclass(frozen=True)
class TargetRecipe(Record):
    """The recipe a target was trained from (the part the tables show; the rest kept as read)."""

    family: str | None = None
    problem: ProblemRecipe = nested(_of(ProblemRecipe), ProblemRecipe())
    model: Mapping[str, Any] | None = None
    train: TrainRecipe = nested(_of(TrainRecipe), TrainRecipe())
    defense: str | None = None
    defense_config: Mapping[str, Any] | None = None

    @property
    def widths(self) -> Any:
        return mapping(self.model).get("widths")


@dataclass(frozen=True)
class TrainMetrics(Record):
    """A target's training evidence as its model card records it."""

    loss_name: str | None = None
    steps_run: int | None = None
    train_error: float | None = None
    test_error: float | None = None
    train_loss: float | None = None
    train_seconds: float | None = None
    certificate: Mapping[str, Any] | None = None
    before_defense: Mapping[str, Any] | None = None
    defense: Mapping[str, Any] | None = None
    margins: list[float] | None = None

    @property
    def stationarity_ratio(self) -> float | None:
        """The certificate's stationarity ratio (None: no certificate, or none recorded)."""
        value = mapping(self.certificate).get("ratio")
        return float(value) if isinstance(value, (int, float)) else None

    @property
    def defense_records(self) -> Mapping[str, Any]:
        """What a defense recorded when it was applied (its privacy budget, ...); empty without a defense."""
        return mapping(mapping(self.defense).get("records"))

    @property
    def certificate_dict(self) -> dict[str, Any] | None:
        return self.certificate if isinstance(self.certificate, dict) else None


@dataclass(frozen=True)
class TargetInfo(Record):
    """What a cell records of its target: its name, recipe, training metrics (``"card"`` in a slim entry whose
    card was not read), and where its model card is."""

    name: str = ""
    recipe: TargetRecipe | str | None = nested(_of(TargetRecipe))
    recipe_key: str | None = None
    card_file: str | None = None
    n_train: int | None = None
    train_metrics: TrainMetrics | str | None = nested(_of(TrainMetrics))
    train_seconds: float | None = None
    reused: bool | None = None
    #: the content sha256 of the model card the cell attacked (where the cell records it)
    card_sha256: str | None = None

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
class EntryInfo(Record):
    """A slim board entry's own metadata (``bench/entries.py``): its schema, the digest of the full record it was
    made from, the digits of its per-image rows (and, once expanded, its seal)."""

    SCHEMA = "reconbench-board-entry/1"

    schema: str | None = None
    full_record_sha256: str | None = None
    row_digits: int | None = None


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
    target: TargetInfo = nested(_of(TargetInfo), TargetInfo())
    attack: AttackInfo = nested(_of(AttackInfo), AttackInfo())
    search: Mapping[str, Any] | None = None
    init: InitInfo = nested(_of(InitInfo), InitInfo())
    seed: int | None = None
    protocol: Mapping[str, Any] | None = None
    spec: Mapping[str, Any] = field(default_factory=dict)
    invocation: int | None = None
    runs: list[Any] | None = None
    outcome: Mapping[str, Any] | None = None
    selections: Mapping[str, Selection] = nested(_map_of(Selection), None)
    evaluation: Mapping[str, Any] | None = None
    calibration_bars: Any = None
    result_dir: str | None = None
    attack_seconds: float | None = None
    error: Mapping[str, Any] | None = None
    wall_seconds: float | None = None
    finished: str | None = None
    provenance: Mapping[str, Any] | None = None
    machine: Mapping[str, Any] | None = None
    entry: EntryInfo | None = nested(_of(EntryInfo))
    record_sha256: str | None = None

    def selection(self, name: str) -> Selection:
        """A selection by name (an empty one when the cell has none of that name)."""
        sel = (self.selections or _EMPTY).get(name)
        return sel if isinstance(sel, Selection) else Selection()

    @property
    def protocol_ref(self) -> str | None:
        """The name of the evaluation protocol a slim entry stores once per board (``protocols/<ref>.json``)."""
        ref = mapping(self.evaluation).get("protocol_ref")
        return None if ref is None else str(ref)

    @property
    def evaluated_metrics(self) -> Mapping[str, Any]:
        """The metrics the pooled evaluation recorded (name -> headline, direction, parameters)."""
        return mapping(mapping(self.evaluation).get("metrics"))

    @property
    def dtype(self) -> str | None:
        return self.spec.get("dtype")

    @property
    def git_commit(self) -> str:
        return str(mapping(self.provenance).get("git_commit"))

    @property
    def reconbench_version(self) -> str:
        return str(mapping(self.provenance).get("reconbench_version"))

    @property
    def per_image(self) -> list[ImageRow]:
        """The pooled evaluation's per-image rows (objects in an expanded record; others are left out)."""
        return image_rows(mapping(self.evaluation).get("per_image"))

    @property
    def work_dir(self) -> str:
        """The cell's run folder, relative to its results folder."""
        return self.result_dir or f"work/{self.cell_id}"

    @property
    def is_entry(self) -> bool:
        return self.entry is not None


@dataclass(frozen=True)
class Invocation(Record):
    """One ``reconbench bench`` invocation of a results folder (``invocations/NNN.json``)."""

    invocation: int | None = None
    command: str | None = None
    status: str | None = None
    started: str | None = None
    elapsed_seconds: float | None = None
    git_commit: str | None = None
    reconbench_version: str | None = None
    machine: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class SearchRun(Record):
    """One search run of a cell: its sampled options, final loss, steps and how it stopped."""

    run: int | None = None
    config: Mapping[str, Any] | None = None
    final_loss: float | None = None
    steps: int | None = None
    stopped: str | None = None
    seconds: float | None = None

    def summary(self) -> dict[str, Any]:
        """The run's settings and outcome (every field, None where absent)."""
        return {"run": self.run, "config": self.config, "final_loss": self.final_loss, "steps": self.steps,
                "stopped": self.stopped, "seconds": self.seconds}


@dataclass(frozen=True)
class ImageRow(Record):
    """One training image's row of an evaluation's per-image table: its label, best candidate, margin and scores
    (the score columns depend on the protocol: :meth:`score`)."""

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


def image_rows(rows: Any) -> list[ImageRow]:
    """Per-image rows (JSON objects) as records; anything else in the list is left out."""
    return [ImageRow.from_dict(r) for r in rows if isinstance(r, Mapping)] if isinstance(rows, list) else []


@dataclass(frozen=True)
class Digest(Record):
    """What a board card keeps of a list it leaves out: its length (``count`` of indices, ``points`` of a
    training curve) and the sha256 of its bytes (``leaderboard/board_cards.py``)."""

    count: int | None = None
    points: int | None = None
    sha256: str | None = None


@dataclass(frozen=True)
class ProblemIndices(Record):
    """The data-set indices of a target's training problem; a board card keeps the held-out ``test`` indices as a
    :class:`Digest`, a card as ``reconbench train`` writes it as the list."""

    train: list[int] | None = None
    test: list[int] | Digest | None = nested(_of(Digest))


@dataclass(frozen=True)
class CardProblem(Record):
    indices: ProblemIndices = nested(_of(ProblemIndices), ProblemIndices())


@dataclass(frozen=True)
class BoardCardNote(Record):
    """The ``board_card`` field of a model card as a board keeps it: its schema, and the digest of the training
    curve it leaves out."""

    schema: str | None = None
    history: Digest | None = nested(_of(Digest))


@dataclass(frozen=True)
class CardData(Record):
    """A model card's JSON (``targets/<recipe key>.json``), as ``reconbench train`` writes it or in the compact
    form a board keeps (``board_card`` set: no ``history``, the test indices as a :class:`Digest`): the parts a
    board's readers check against."""

    recipe_key: str | None = None
    family: str | None = None
    recipe: TargetRecipe | None = nested(_of(TargetRecipe))
    problem: CardProblem = nested(_of(CardProblem), CardProblem())
    metrics: TrainMetrics = nested(_of(TrainMetrics), TrainMetrics())
    history: list[Any] | None = None
    content_sha256: str | None = None
    board_card: BoardCardNote | None = nested(_of(BoardCardNote))

    @property
    def is_board_card(self) -> bool:
        return isinstance(self.board_card, BoardCardNote)

    @property
    def test_indices(self) -> list[int] | Digest | None:
        """The held-out test indices (a list), their :class:`Digest` (a board card), or None when not recorded."""
        indices = self.problem.indices if isinstance(self.problem, CardProblem) else None
        test = indices.test if isinstance(indices, ProblemIndices) else None
        return test if isinstance(test, (list, Digest)) else None


@dataclass(frozen=True)
class SubmissionBoard(Record):
    suite: str | None = None
    suite_sha256: str | None = None


@dataclass(frozen=True)
class SubmissionProvenance(Record):
    contributor: str | None = None
    git_commits: list[str] | None = None
    reconbench_versions: list[str] | None = None
    machines: list[str] | None = None
    commands: list[Any] | None = None
    packed: str | None = None


@dataclass(frozen=True)
class SubmissionFile(Record):
    """A submission packed by ``leaderboard submit`` (``leaderboard/submit.py``): the board it is for, the suite
    addition its cells ran with, its slim entries (kept as stored: each is sealed), their protocols and candidates."""

    SCHEMA = "reconbench-submission/1"

    format: str | None = None
    board: SubmissionBoard = nested(_of(SubmissionBoard), SubmissionBoard())
    suite_sha256: str | None = None
    suite_addition: str | None = None
    entries: list[Any] = field(default_factory=list)
    protocols: Mapping[str, Any] = field(default_factory=dict)
    candidates: Mapping[str, str] = field(default_factory=dict)
    provenance: SubmissionProvenance = nested(_of(SubmissionProvenance), SubmissionProvenance())
    record_sha256: str | None = None

    def candidates_of(self, cell_id: str) -> str | None:
        return self.candidates[cell_id] if cell_id in self.candidates else None


# -- a run ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RunTarget(Record):
    card: str | None = None
    recipe: Mapping[str, Any] | None = None
    recipe_key: str | None = None
    card_sha256: str | None = None
    family: str | None = None
    task: str | None = None
    n_train: int | None = None
    train_metrics: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class RunResult(Record):
    """A run's ``result.json`` (``runs/result.py``): the pooled and selected evaluations, the runs, provenance."""

    SCHEMA = "reconbench-result/1"

    kind: str | None = None
    attack: str | None = None
    init: str | None = None
    init_config: Mapping[str, Any] | None = None
    init_is_oracle: bool | None = None
    spec: Mapping[str, Any] = field(default_factory=dict)
    search: Mapping[str, Any] | None = None
    target: RunTarget = nested(_of(RunTarget), RunTarget())
    selection: Mapping[str, Any] = field(default_factory=dict)
    runs: list[Mapping[str, Any]] = field(default_factory=list)
    failed_runs: list[int] = field(default_factory=list)
    outcome: Mapping[str, Any] | None = None
    evaluation: Mapping[str, Any] = field(default_factory=dict)
    evaluation_selected: Mapping[str, Any] = field(default_factory=dict)
    calibration_bars: Any = None
    figures: list[str] = field(default_factory=list)
    wall_seconds: float | None = None
    provenance: Mapping[str, Any] | None = None

    def selected_run(self, name: str) -> int | None:
        """The run a selection (blind, oracle) picked; None when none finished."""
        run = mapping(self.selection.get(name)).get("run")
        return run if isinstance(run, int) else None


# -- a published board's results.json ---------------------------------------------------------------------
@dataclass(frozen=True)
class Column(Record):
    name: str = ""
    key: str | None = None
    keys_tried: list[str] = field(default_factory=list)
    source: str = "summary"
    higher_is_better: bool = True
    direction_from: str = ""
    format: str = ".3g"


@dataclass(frozen=True)
class NullSummary(Record):
    """The held-out null of a table entry: the mean over its cells of their null means, and the largest draw."""

    mean: float | None = None
    max: float | None = None
    cells: Any = None


@dataclass(frozen=True)
class MetricStat(Record):
    """One table entry over seeds: mean, sd, 95% interval, values, and the held-out null of its cells."""

    mean: float | None = None
    sd: float | None = None
    n: int = 0
    values: list[float] = field(default_factory=list)
    ci95: list[float] | None = None
    value_range: list[float | None] | None = None
    key: str | None = None
    null: NullSummary | None = nested(_of(NullSummary))


@dataclass(frozen=True)
class Failures(Record):
    """A row's cells whose attack failed: their ids, counts by status, and the text the tables print."""

    cells: list[str] = field(default_factory=list)
    statuses: Mapping[str, int] = field(default_factory=dict)
    of: int = 0
    text: str = ""


@dataclass(frozen=True)
class TableRow(Record):
    """A row of a board's main table: target x attack x init over seeds, one statistic per column."""

    target: str = ""
    attack: str = ""
    attack_name: str | None = None
    init: str = ""
    init_regime: str | None = None
    init_is_oracle: bool = False
    selection: str = ""
    oracle_selection: bool = False
    cells: list[str] = field(default_factory=list)
    seeds: list[int] = field(default_factory=list)
    attack_failed: Failures | None = nested(_of(Failures))
    metrics: Mapping[str, MetricStat] = nested(_map_of(MetricStat), None)
    search: str | None = None
    converged: bool | None = None
    calibration_bars: list[str] = field(default_factory=list)
    best: bool = False
    within_noise_of_best: bool | None = None
    #: the outside submissions (``leaderboard add``) whose cells the row holds (empty for the suite's own rows)
    outside: list[str] = field(default_factory=list)

    def metric(self, name: str) -> MetricStat:
        m = (self.metrics or _EMPTY).get(name)
        return m if isinstance(m, MetricStat) else MetricStat()


@dataclass(frozen=True)
class TargetRow(Record):
    """A row of a board's targets table: a trained target's recipe and training evidence, and the suite's gates."""

    target: str = ""
    recipe_key: str | None = None
    dataset: str | None = None
    task: str | None = None
    n_train: int | None = None
    n_per_class: int | None = None
    num_classes: int | None = None
    family: str | None = None
    widths: list[int] | None = None
    loss: str | None = None
    weight_decay: float | None = None
    defense: str | None = None
    defense_config: Mapping[str, Any] | None = None
    steps: int | None = None
    train_error: float | None = None
    test_error: float | None = None
    train_loss: float | None = None
    stationarity_ratio: float | None = None
    gate: float | None = None
    learned_gate: float | None = None
    converged: bool | None = None
    train_seconds: float | None = None
    cells: list[str] = field(default_factory=list)
    learned_ratio: float | None = None
    theta_residual: float | None = None
    margin_set_size: int | None = None
    regularised_residual: float | None = None


@dataclass(frozen=True)
class ComparisonValue(Record):
    """One point of a comparison row: the cells at one value of the axis, and a statistic per metric
    (:meth:`stat`; the metrics are keys of the point, named by the comparison)."""

    axis_value: Any = None
    target: str = ""
    cells: list[str] = field(default_factory=list)
    attack_failed: Failures | None = nested(_of(Failures))

    def stat(self, metric: str) -> MetricStat:
        return MetricStat.from_dict(self.extra[metric]) if isinstance(self.extra.get(metric), Mapping) \
            else MetricStat()


@dataclass(frozen=True)
class ComparisonRow(Record):
    attack: str = ""
    init: str = ""
    selection: str = ""
    values: list[ComparisonValue] = nested(_list_of(ComparisonValue), None)
    init_is_oracle: bool = False


@dataclass(frozen=True)
class Comparison(Record):
    """A comparison of a board: one target with one axis varied (``[[leaderboard.comparisons]]`` of a suite)."""

    title: str = ""
    axis: str = ""
    base: str = ""
    axis_values: list[Any] = field(default_factory=list)
    metrics: list[str] = field(default_factory=list)
    rows: list[ComparisonRow] = nested(_list_of(ComparisonRow), None)


@dataclass(frozen=True)
class Figure(Record):
    """A board's figure: its file and caption, or why it was not drawn."""

    title: str = ""
    file: str | None = None
    caption: str | None = None
    reason: str | None = None
    cells: list[str] | None = None


@dataclass(frozen=True)
class PrivacyAttack(Record):
    """One attack series at one point of a privacy-utility table: its headline over seeds and its held-out null."""

    headline: MetricStat = nested(_of(MetricStat), MetricStat())
    null: MetricStat | None = nested(_of(MetricStat))
    cells: list[str] = field(default_factory=list)
    pareto: bool = False
    attack_failed: Failures | None = nested(_of(Failures))


@dataclass(frozen=True)
class PrivacyRow(Record):
    """One point of a privacy axis: a defended (or undefended) target, its utility, and each attack series."""

    base: str = ""
    defense: str = "none"
    defense_name: str | None = None
    strength_option: str | None = None
    strength: Any = None
    target: str = ""
    test_accuracy: float | None = None
    train_accuracy: float | None = None
    test_accuracy_before_release: float | None = None
    steps_run: int | None = None
    defense_records: Mapping[str, Any] = field(default_factory=dict)
    attacks: Mapping[str, PrivacyAttack] = nested(_map_of(PrivacyAttack), None)

    @property
    def epsilon(self) -> Any:
        """The privacy budget the defense recorded ("" when it records none)."""
        return self.defense_records.get("epsilon", "")

    def attack(self, series: str) -> PrivacyAttack:
        a = (self.attacks or _EMPTY).get(series)
        return a if isinstance(a, PrivacyAttack) else PrivacyAttack()


@dataclass(frozen=True)
class PrivacyTable(Record):
    """A privacy-utility table of a board (``[[privacy]]`` of a suite)."""

    title: str = ""
    headline_key: str | None = None
    selection: str = "pool"
    series: list[str] = field(default_factory=list)
    rows: list[PrivacyRow] = nested(_list_of(PrivacyRow), None)
    figure: Figure | None = nested(_of(Figure))


@dataclass(frozen=True)
class Command(Record):
    invocation: int | None = None
    command: str | None = None
    status: str | None = None
    started: str | None = None
    elapsed_seconds: float | None = None
    git_commit: str | None = None
    reconbench_version: str | None = None


@dataclass(frozen=True)
class Submission(Record):
    """An outside submission merged into a board (``leaderboard/accept.py``)."""

    id: str = ""
    contributor: str | None = None
    cells: list[str] = field(default_factory=list)
    git_commits: list[str] = field(default_factory=list)
    reconbench_versions: list[str] = field(default_factory=list)
    machines: list[str] = field(default_factory=list)
    packed: str | None = None
    submission_sha256: str | None = None
    #: the sha256 of the board's suite text with the submission's addition appended
    suite_sha256: str | None = None


@dataclass(frozen=True)
class BoardHeader(Record):
    """How a board was made: suite, commands, machines, versions, the cells' counts."""

    suite: str | None = None
    description: str | None = None
    suite_file: str | None = None
    suite_sha256: str | None = None
    commands: list[Command] = nested(_list_of(Command), None)
    machines: list[str] = field(default_factory=list)
    wall_seconds: float = 0.0
    invocations: int = 0
    cell_seconds: float = 0.0
    reconbench_versions: list[str] = field(default_factory=list)
    git_commits: list[str] = field(default_factory=list)
    rendered_by: str = ""
    rendered_with: Mapping[str, Any] = field(default_factory=dict)
    rendered: str = ""
    attack_failed: list[Mapping[str, Any]] | None = None
    cells: Mapping[str, int] = field(default_factory=dict)
    note: str | None = None
    submissions: list[Submission] = nested(_list_of(Submission), None)

    @property
    def rendered_commit(self) -> str | None:
        """The git commit the board was rendered at (None when not recorded)."""
        commit = self.rendered_with.get("git_commit")
        return None if commit is None else str(commit)


@dataclass(frozen=True)
class BoardResults(Record):
    """A board's ``results.json``: header, columns, targets, tables per selection, comparisons, privacy tables,
    figures, stored candidates, failures. Read in the full form: a published board's file (the compact
    ``SCHEMA``, whose statistics leave out what their values give) as ``leaderboard/results_file.read_results``
    expands it; a file of the earlier, full format (``reconbench-leaderboard/1``) as it is."""

    SCHEMA = "reconbench-leaderboard/2"

    format: str | None = None
    header: BoardHeader = nested(_of(BoardHeader), BoardHeader())
    columns: list[Column] = nested(_list_of(Column), None)
    targets: list[TargetRow] = nested(_list_of(TargetRow), None)
    tables: Mapping[str, list[TableRow]] = nested(
        lambda v: {k: _list_of(TableRow)(x) for k, x in v.items()} if isinstance(v, Mapping) else v, None)
    comparisons: Mapping[str, Comparison] = nested(_map_of(Comparison), None)
    privacy: Mapping[str, PrivacyTable] = nested(_map_of(PrivacyTable), None)
    figures: Mapping[str, Figure] = nested(_map_of(Figure), None)
    stored_candidates: list[str] = field(default_factory=list)
    failures: list[Mapping[str, Any]] = field(default_factory=list)
    not_run: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)

    def table(self, selection: str) -> list[TableRow]:
        return list((self.tables or _EMPTY).get(selection) or [])

    @property
    def column_list(self) -> list[Column]:
        return list(self.columns or [])
