"""The leaderboard table of a suite: its options and the metric columns of its tables (by default the numbers the
metrics declare as board columns)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from reconbench.bench.suite.schema import (
    COLUMN_TABLE,
    LEADERBOARD_TABLE,
    Checker,
    ColumnTable,
    LeaderboardTable,
    SuiteTables,
)
from reconbench.records.target_quantities import TARGET_QUANTITIES


@dataclass(frozen=True)
class ColumnSpec:
    """One metric column of the leaderboard tables."""

    name: str
    keys: tuple[str, ...]  # evaluation summary keys tried in order (the first present is used)
    higher_is_better: bool
    fmt: str = ".3g"
    source: str = "summary"  # summary | attack_loss | wall_seconds | calibrated (the count against the selection's
    # bar) | target (a number of the cell's target: records/target_quantities.py)
    optional: bool = False  # shown only when some cell records one of the keys (a metric older cells lack)
    named: bool = False  # named in the suite's [leaderboard] columns: a key no finished cell reports is an error


def default_columns(metric_configs: Mapping[str, object] | None = None) -> tuple[ColumnSpec, ...]:
    """The default columns: the numbers the evaluation and the registered metrics declare as board columns
    (:mod:`reconbench.evaluation.reported`; the calibrated headline first, then the papers' count, top-10 SSIM,
    membership precision, the membership test's AUC where cells computed it, distinct share, init copies), then the
    attack's final loss and the cell's wall time. A metric plugin that declares a column appears here with no
    other change; keys are tried in order (the declared key, then its older names). A label that names its metric's
    options takes them from ``metric_configs`` (the suite's resolved protocol)."""
    from reconbench.evaluation.reported import board_columns, label_of

    cols = [ColumnSpec(label_of(r, metric_configs), (r.key, *r.aliases), r.higher_is_better, r.fmt,
                       optional=r.optional_column) for r in board_columns()]
    # the calibrated count against the threshold calibrated for the selection itself (evaluation/bars.py: pooled,
    # one run, or oracle-selected among the runs), where cells record calibration bars
    cols.insert(1, ColumnSpec("calibrated, own bar", (), True, ".1f", source="calibrated", optional=True))
    return (*cols, ColumnSpec("attack loss", (), False, ".3g", source="attack_loss"),
            ColumnSpec("wall s", (), False, ".1f", source="wall_seconds"))


@dataclass(frozen=True)
class LeaderboardOptions:
    store_candidates: int | None = None  # None: every cell's candidates are published; k: a sample of k cells
    sample_cells: tuple[str, ...] = ()  # cells whose candidates a published board always keeps (leaderboard/slim.py)
    figures: bool = True
    sample_images: int = 8
    figure_inits: tuple[str, ...] | None = None  # init labels eligible for the sample figure (None: non-oracle)
    #: the most bytes of full candidates a board keeps, its first sampled cell included, and a slice's pack carries
    #: of a sampled cell (None: the first sampled cell always, leaderboard/slim.py); a paper-size cell passes any
    #: budget a repository can hold
    candidates_max_bytes: int | None = None
    #: whether a board keeps the figure pairs (leaderboard/figure_pairs.py) of each cell its reconstructions figure
    #: shows whose full candidates it does not store (a figure drawn from a subset keeps it regardless)
    figure_pairs: bool = False
    columns: tuple[ColumnSpec, ...] = field(default_factory=default_columns)


def read_leaderboard_table(tables: SuiteTables, chk: Checker) -> LeaderboardTable:
    return LeaderboardTable(**chk.section(tables.leaderboard, LEADERBOARD_TABLE, ("leaderboard",)))


def leaderboard_options(lb: LeaderboardTable, chk: Checker,
                        metric_configs: Mapping[str, object] | None = None) -> LeaderboardOptions:
    store = lb.store_candidates
    if isinstance(store, str) and store != "all":
        raise chk.fail(("leaderboard", "store_candidates"), f'expected "all" or a number of cells, got {store!r}')
    if isinstance(store, int) and store < 1:
        raise chk.fail(("leaderboard", "store_candidates"), f"is {store}: a board keeps the candidates of at least one "
                       'cell, or of all ("all"), so that its numbers can be re-scored; give a number of cells from 1')
    if lb.candidates_max_bytes is not None and lb.candidates_max_bytes < 0:
        raise chk.fail(("leaderboard", "candidates_max_bytes"), f"is {lb.candidates_max_bytes}: give the most bytes of "
                       "full candidates a board keeps, 0 or more (0: none; the figure pairs then picture its cells)")
    columns = (read_columns(lb.columns, chk, ("leaderboard", "columns"), metric_configs) if lb.columns is not None
               else default_columns(metric_configs))
    return LeaderboardOptions(
        store_candidates=None if store == "all" else int(store),
        sample_cells=tuple(lb.sample_cells),
        figures=lb.figures,
        sample_images=lb.sample_images,
        candidates_max_bytes=lb.candidates_max_bytes,
        figure_pairs=lb.figure_pairs,
        columns=(*columns, *target_columns(lb.target_columns, columns, chk)),
    )


def target_column(name: str) -> ColumnSpec:
    """The column of a number of the cell's target (records/target_quantities.py), shown over seeds like a metric."""
    q = TARGET_QUANTITIES[name]
    return ColumnSpec(q.label, (name,), q.higher_is_better, q.fmt, source="target", named=True)


def target_columns(names: list[str], columns: tuple[ColumnSpec, ...], chk: Checker) -> tuple[ColumnSpec, ...]:
    """``[leaderboard] target_columns``: numbers of each cell's target shown after the metric columns."""
    taken = {c.name for c in columns}
    out = []
    for i, name in enumerate(names):
        keys = ("leaderboard", "target_columns", i)
        if name not in TARGET_QUANTITIES:
            raise chk.fail(keys, f"{name!r} is not a number a cell records of its target; one of: "
                                 f"{', '.join(TARGET_QUANTITIES)}")
        col = target_column(name)
        if col.name in taken:
            raise chk.fail(keys, f"{name!r} is given twice, or its column {col.name!r} is already a column; keep one")
        taken.add(col.name)
        out.append(col)
    return tuple(out)


#: the longest column name; characters that would change a Markdown table or HTML around a name are refused
MAX_COLUMN_NAME = 60
COLUMN_NAME_FORBIDDEN = "|<`[]\\&"


def column_name_problem(name: str) -> str | None:
    """Why ``name`` cannot head a table column (None: it can): it is shown in the README and the site as it is."""
    if not name.strip():
        return "is empty; give the column a name"
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in name):
        return "holds a line break or another control character; give a one-line name"
    if len(name) > MAX_COLUMN_NAME:
        return f"is {len(name):,} characters long; give a name of at most {MAX_COLUMN_NAME}"
    if bad := sorted({ch for ch in name if ch in COLUMN_NAME_FORBIDDEN}):
        return f"holds {' '.join(bad)}, which would change the README's table or HTML; leave them out"
    return None


def format_problem(fmt: str) -> str | None:
    """Why ``fmt`` cannot format a column's numbers (None: it can), checked on a whole and a fractional number."""
    try:
        for value in (0.25, 12345.0, -3.0):
            format(value, fmt)
    except (ValueError, TypeError) as exc:
        return f"is not a Python number format ({exc}); use one like .3g, .2f or .1%"
    return None


def read_columns(raw: list[dict[str, Any]], chk: Checker, keys: tuple[Any, ...],
                 metric_configs: Mapping[str, object] | None = None) -> tuple[ColumnSpec, ...]:
    cols = []
    seen: set[str] = set()
    for i, c in enumerate(raw):
        ck = (*keys, i)
        col = ColumnTable(**chk.section(c, COLUMN_TABLE, ck))
        source = col.source
        col_keys = (*col.keys, *(() if col.key is None else (col.key,)))
        if source == "summary" and not col_keys:
            raise chk.fail(ck, "a summary column needs `key` (or `keys`): the evaluation summary key it shows")
        if source == "target" and (len(col_keys) != 1 or col_keys[0] not in TARGET_QUANTITIES):
            raise chk.fail(ck, f"a target column needs one `key`, a number a cell records of its target; one of: "
                               f"{', '.join(TARGET_QUANTITIES)}")
        name = col.name if col.name is not None else declared_label(col_keys, metric_configs)
        if name is None:
            raise chk.fail((*ck, "name"), f"column of key {col_keys[0] if col_keys else source!r} needs a `name`: no "
                           "metric declares that key (a declared key's label, e.g. `corr > 0.9`, names it by default)")
        if (why := column_name_problem(name)) is not None:
            raise chk.fail((*ck, "name"), f"column name {name[:60]!r} {why}")
        if name in seen:
            raise chk.fail((*ck, "name"), f"column name {name!r} is given twice; give each column its own name")
        seen.add(name)
        fmt = col.format
        if (why := format_problem(fmt)) is not None:
            raise chk.fail((*ck, "format"), f"format {fmt!r} {why}")
        cols.append(ColumnSpec(name, col_keys, col.higher_is_better, fmt, source, named=True))
    return tuple(cols)


def declared_label(keys: tuple[str, ...], metric_configs: Mapping[str, object] | None) -> str | None:
    """The label the evaluation or a metric declares for the first of ``keys``, its options filled in from the
    suite's protocol (``reconstructed_corr`` -> ``corr > 0.9``, or the suite's ``corr.threshold``); None: undeclared."""
    from reconbench.evaluation.reported import label_of, lookup

    rep = lookup(keys[0]) if keys else None
    return None if rep is None else label_of(rep, metric_configs)
