"""A published board's ``results.json``: header, columns, targets, tables, comparisons, privacy tables, figures.

Two versions, each with its upgrade step at the door (:data:`BOARD_RESULTS_FILE`):

* ``reconbench-leaderboard/1`` (the form ``leaderboard/render.py`` builds): every number written; read as it is.
* ``reconbench-leaderboard/2`` (the compact form a board publishes, ``leaderboard/results_file.py``): every
  statistic (:class:`Stat`: ``mean``, ``sd``, ``n``, ``values``, ``ci95``, ``value_range``) leaves out ``mean``,
  ``sd``, ``n`` and ``ci95`` wherever its ``values`` and ``value_range`` give them back exactly; :func:`expand`
  puts them back, so every reader sees the full form.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from reconbench.records.record import FileFormat, Record, unchanged
from reconbench.records.rendered_with import RenderedWith

_EMPTY: Mapping[str, Any] = {}


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
    null: NullSummary | None = None
    #: the cells of a privacy-utility point's held-out null (``leaderboard/privacy.py``)
    cells: list[str] | None = None


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
    attack_failed: Failures | None = None
    metrics: Mapping[str, MetricStat] | None = None
    search: str | None = None
    converged: bool | None = None
    calibration_bars: list[str] = field(default_factory=list)
    best: bool = False
    within_noise_of_best: bool | None = None
    #: the outside submissions (``leaderboard add``) whose cells the row holds (empty for the suite's own rows)
    outside: list[str] = field(default_factory=list)
    #: the attack's threat model (its short name), on boards where some attack reads more than theta and labels
    threat_model: str | None = None
    #: p / (d n) of the row's target (targets/cards.py), on boards that show the threat model
    p_over_dn: float | None = None

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
    #: the least and the largest training margin (cells recorded since the target record carries them)
    margin_min: float | None = None
    margin_max: float | None = None


@dataclass(frozen=True)
class ComparisonValue(Record):
    """One point of a comparison row: the cells at one value of the axis, and a statistic per metric
    (:meth:`stat`; the metrics are keys of the point, named by the comparison: an open record, kept in ``extra``)."""

    OPEN = True

    axis_value: Any = None
    target: str = ""
    cells: list[str] = field(default_factory=list)
    attack_failed: Failures | None = None

    def stat(self, metric: str) -> MetricStat:
        return MetricStat.from_dict(self.extra[metric]) if isinstance(self.extra.get(metric), Mapping) \
            else MetricStat()


@dataclass(frozen=True)
class ComparisonRow(Record):
    attack: str = ""
    init: str = ""
    selection: str = ""
    values: list[ComparisonValue] | None = None
    init_is_oracle: bool = False


@dataclass(frozen=True)
class ComparisonTable(Record):
    """The table a board publishes of a suite's comparison (:class:`reconbench.bench.suite.Comparison`, a
    ``[[leaderboard.comparisons]]`` table: one target with one axis varied): its axis values, metrics and rows."""

    title: str = ""
    axis: str = ""
    base: str = ""
    axis_values: list[Any] = field(default_factory=list)
    metrics: list[str] = field(default_factory=list)
    rows: list[ComparisonRow] | None = None


@dataclass(frozen=True)
class Figure(Record):
    """A board's figure: its file and caption, or why it was not drawn."""

    title: str = ""
    file: str | None = None
    caption: str | None = None
    reason: str | None = None
    cells: list[str] | None = None
    #: drawing it failed where the board was rendered (``reason`` holds the error), as opposed to a figure the cells
    #: give nothing for; written only then
    failed: bool | None = None


@dataclass(frozen=True)
class PrivacyAttack(Record):
    """One attack series at one point of a privacy-utility table: its headline over seeds and its held-out null."""

    headline: MetricStat = MetricStat()
    null: MetricStat | None = None
    cells: list[str] = field(default_factory=list)
    pareto: bool = False
    attack_failed: Failures | None = None


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
    attacks: Mapping[str, PrivacyAttack] | None = None

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
    rows: list[PrivacyRow] | None = None
    figure: Figure | None = None


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
class CommitCells(Record):
    """The cells of a board that ran at one commit (``header.cell_commits`` of a board whose cells came from slices):
    how many, the slice packs that brought them (their manifests' sha256; none for cells run in the results
    folder itself) and their ids (a slice's cell record names no commit: this is where each cell's commit is kept)."""

    commit: str = ""
    cells: int = 0
    packs: list[str] = field(default_factory=list)
    cell_ids: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class BoardHeader(Record):
    """How a board was made: suite, commands, machines, versions, the cells' counts."""

    suite: str | None = None
    description: str | None = None
    suite_file: str | None = None
    suite_sha256: str | None = None
    commands: list[Command] | None = None
    machines: list[str] = field(default_factory=list)
    wall_seconds: float = 0.0
    invocations: int = 0
    cell_seconds: float = 0.0
    reconbench_versions: list[str] = field(default_factory=list)
    git_commits: list[str] = field(default_factory=list)
    rendered_by: str = ""
    rendered_with: RenderedWith = RenderedWith()
    rendered: str = ""
    attack_failed: list[Mapping[str, Any]] | None = None
    cells: Mapping[str, int] = field(default_factory=dict)
    note: str | None = None
    submissions: list[Submission] | None = None
    #: a board with cells merged from slice packs: the commits its cells ran at, with how many each (absent otherwise)
    cell_commits: list[CommitCells] | None = None
    #: a board that does not hold every planned cell: "k of N cells" (absent on a complete board)
    progress: str | None = None

    @property
    def rendered_commit(self) -> str | None:
        """The git commit the board was rendered at (None when not recorded)."""
        return self.rendered_with.git_commit


@dataclass(frozen=True)
class BoardResults(Record):
    """A board's ``results.json``: header, columns, targets, tables per selection, comparisons, privacy tables,
    figures, stored candidates, failures. Read in the full form: a published board's file (the compact
    ``SCHEMA``, whose statistics leave out what their values give) as ``leaderboard/results_file.read_results``
    expands it; a file of the earlier, full format (``reconbench-leaderboard/1``) as it is."""

    SCHEMA = "reconbench-leaderboard/2"
    #: the full form, as rendered (every number written)
    FULL_SCHEMA: ClassVar[str] = "reconbench-leaderboard/1"

    format: str | None = None
    header: BoardHeader = BoardHeader()
    columns: list[Column] | None = None
    targets: list[TargetRow] | None = None
    tables: Mapping[str, list[TableRow]] | None = None
    comparisons: Mapping[str, ComparisonTable] | None = None
    privacy: Mapping[str, PrivacyTable] | None = None
    figures: Mapping[str, Figure] | None = None
    stored_candidates: list[str] = field(default_factory=list)
    failures: list[Mapping[str, Any]] = field(default_factory=list)
    not_run: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)

    def table(self, selection: str) -> list[TableRow]:
        return list((self.tables or _EMPTY).get(selection) or [])

    @property
    def column_list(self) -> list[Column]:
        return list(self.columns or [])


# -- a statistic over seeds, and the compact form ---------------------------------------------------------
@dataclass
class Stat:
    """A table entry over seeds: mean, sample sd, n and the 95% interval of the mean (Student t), clipped to the
    values the statistic can take."""

    values: list[float]
    #: the values the statistic can take (None: unbounded); the interval is clipped to it
    value_range: tuple[float | None, float | None] = (None, None)

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> float | None:
        return statistics.fmean(self.values) if self.values else None

    @property
    def sd(self) -> float | None:
        return statistics.stdev(self.values) if len(self.values) > 1 else None

    @property
    def ci95(self) -> tuple[float, float] | None:
        """95% interval of the mean over seeds (Student t, n - 1 degrees of freedom), clipped to the value range
        (with 2 or 3 seeds the t interval is wide and would otherwise reach counts below 0); None below two seeds."""
        if self.n < 2 or self.mean is None or self.sd is None:
            return None
        from scipy.stats import t

        half = float(t.ppf(0.975, self.n - 1)) * self.sd / math.sqrt(self.n)
        lo, hi = self.mean - half, self.mean + half
        floor, ceiling = self.value_range
        return (lo if floor is None else max(lo, floor), hi if ceiling is None else min(hi, ceiling))

    def to_dict(self) -> dict[str, Any]:
        ci = self.ci95
        return {"mean": self.mean, "sd": self.sd, "n": self.n, "values": self.values,
                "ci95": None if ci is None else list(ci), "value_range": list(self.value_range)}

    @classmethod
    def from_metric(cls, m: MetricStat) -> Stat:
        lo, hi = m.value_range or (None, None)
        return cls(list(m.values), (lo, hi))


#: the fields of a statistic that its ``values`` and ``value_range`` give (:class:`Stat`)
DERIVED = ("mean", "sd", "n", "ci95")


def is_stat(d: dict[str, Any]) -> bool:
    return isinstance(d.get("values"), list) and isinstance(d.get("value_range"), list) and len(d["value_range"]) == 2


def derived(d: dict[str, Any]) -> dict[str, Any] | None:
    """The fields :class:`Stat` derives from a statistic's values (None: they are not numbers)."""
    try:
        lo, hi = d["value_range"]
        full = Stat(list(d["values"]), (lo, hi)).to_dict()
    except (TypeError, ValueError):
        return None
    return {k: full[k] for k in DERIVED}


def same_json(a: object, b: object) -> bool:
    """Equal, exactly (NaN equal to NaN; an int equal to the same float is not the same JSON)."""
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_json(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and a == b


def compact(value: object) -> Any:
    """``value`` with each statistic's derived fields left out where :class:`Stat` gives them back exactly."""
    if isinstance(value, list):
        return [compact(v) for v in value]
    if not isinstance(value, dict):
        return value
    out = {k: compact(v) for k, v in value.items()}
    if is_stat(value) and all(k in value for k in DERIVED):
        got = derived(value)
        if got is not None and all(same_json(value[k], got[k]) for k in DERIVED):
            out = {k: v for k, v in out.items() if k not in DERIVED}
    return out


def expand(value: object) -> Any:
    """``value`` with each statistic's derived fields put back (a statistic that has them is left as it is): the
    upgrade of a compact ``results.json``."""
    if isinstance(value, list):
        return [expand(v) for v in value]
    if not isinstance(value, dict):
        return value
    out = {k: expand(v) for k, v in value.items()}
    if is_stat(value) and not any(k in value for k in DERIVED) and (got := derived(value)) is not None:
        out = {**got, **out}
    return out


#: the door of a board's results.json: the full form read as it is, the compact one expanded
BOARD_RESULTS_FILE: FileFormat[BoardResults] = FileFormat(
    BoardResults, "format", {BoardResults.FULL_SCHEMA: unchanged, BoardResults.SCHEMA: expand},
    fix="render the board again with this reconbench")
