"""Typed records of the files that flow through the house, one module per file format, each holding its records
and its door (a :class:`~reconbench.records.record.FileFormat`: the version stamp selects an upgrade step, then
the record reads the JSON strictly):

* :mod:`~reconbench.records.run_result`: a run's ``result.json`` (``reconbench-result/1``);
* :mod:`~reconbench.records.evaluation`: a run's evaluation block (in a result and a cell), its held-out null, a
  selection's count against its calibrated bar;
* :mod:`~reconbench.records.cell`: a cell record (``reconbench-bench-cell/1``), full or a board's slim entry;
* :mod:`~reconbench.records.board_entry`: a slim entry's own metadata (``reconbench-board-entry/1``);
* :mod:`~reconbench.records.board_results`: a board's ``results.json`` (``reconbench-leaderboard/1`` and ``/2``);
* :mod:`~reconbench.records.model_card`: a model card (``reconbench-card/1``), full or a board's compact card;
* :mod:`~reconbench.records.submission`: a packed submission (``reconbench-submission/1``);
* :mod:`~reconbench.records.invocation`: an invocation of ``reconbench bench`` (``invocations/NNN.json``);
* :mod:`~reconbench.records.cost_table`: a slice plan's cost table (``reconbench-cost-table/1``) and the GPU probe's
  JSON (``reconbench-gpu-probe/1``), each with the upgrade of its first, unstamped form;
* :mod:`~reconbench.records.board_releases`: a board's numbered releases (``RELEASES.json``,
  ``reconbench-board-releases/1``);
* :mod:`~reconbench.records.audit`: an audit's ``audit.json`` (``reconbench-audit/1``), imported from its module.

:mod:`~reconbench.records.record` holds the base record, the strict codec (cattrs) and the door. Every name is
re-exported here.
"""

from reconbench.records.board_entry import EntryInfo
from reconbench.records.board_releases import RELEASES_FILE, BoardRelease, BoardReleases
from reconbench.records.board_results import (
    BOARD_RESULTS_FILE,
    BoardHeader,
    BoardResults,
    Column,
    Command,
    CommitCells,
    ComparisonRow,
    ComparisonTable,
    ComparisonValue,
    Failures,
    Figure,
    MetricStat,
    NullSummary,
    PrivacyAttack,
    PrivacyRow,
    PrivacyTable,
    Submission,
    TableRow,
    TargetRow,
)
from reconbench.records.cell import (
    CELL_FILE,
    AttackInfo,
    CellRecord,
    ImageRow,
    InitInfo,
    SearchRun,
    Selection,
    Spread,
    StoredOutcome,
    TargetInfo,
    image_rows,
)
from reconbench.records.cost_table import (
    COST_TABLE_FILE,
    PROBE_FILE,
    CostTable,
    PhaseCost,
    Probe,
    ProbeAttackRow,
    ProbeTrainerRow,
)
from reconbench.records.evaluation import Calibrated, Candidates, HeldOutNull, StoredEvaluation, StoredMetric
from reconbench.records.invocation import INVOCATION_FILE, Invocation
from reconbench.records.model_card import (
    CARD_FILE,
    BoardCardNote,
    CardData,
    CardProblem,
    Digest,
    ProblemIndices,
    TrainMetrics,
)
from reconbench.records.record import (
    SCHEMA_VERSION,
    FileFormat,
    Record,
    decode,
    mapping,
    number,
    plain,
    register_value_type,
)
from reconbench.records.run_result import RUN_RESULT_FILE, PickedRun, RunResult, RunTarget
from reconbench.records.submission import SUBMISSION_FILE, SubmissionBoard, SubmissionFile, SubmissionProvenance
from reconbench.targets.recipe import TargetRecipe

__all__ = [
    "BOARD_RESULTS_FILE", "CARD_FILE", "CELL_FILE", "COST_TABLE_FILE", "INVOCATION_FILE", "PROBE_FILE",
    "RELEASES_FILE", "RUN_RESULT_FILE",
    "SCHEMA_VERSION", "SUBMISSION_FILE", "AttackInfo", "BoardCardNote", "BoardHeader", "BoardRelease", "CommitCells",
    "BoardReleases", "BoardResults", "Calibrated", "Candidates", "CardData", "CardProblem",
    "CellRecord", "Column", "CostTable", "PhaseCost", "Probe", "ProbeAttackRow", "ProbeTrainerRow",
    "Command", "ComparisonTable", "ComparisonRow", "ComparisonValue", "Digest", "EntryInfo",
    "StoredEvaluation", "Failures", "Figure", "FileFormat", "HeldOutNull", "ImageRow", "InitInfo", "Invocation",
    "StoredMetric", "StoredOutcome", "MetricStat", "NullSummary", "PickedRun",
    "PrivacyAttack", "PrivacyRow", "PrivacyTable", "ProblemIndices", "Record", "RunResult",
    "RunTarget", "SearchRun", "Selection", "Spread", "Submission", "SubmissionBoard", "SubmissionFile",
    "SubmissionProvenance", "TableRow", "TargetInfo", "TargetRecipe", "TargetRow", "TrainMetrics",
    "decode", "image_rows", "mapping", "number", "plain", "register_value_type",
]
