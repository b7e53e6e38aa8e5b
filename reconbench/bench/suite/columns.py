"""The leaderboard table of a suite: its options and the metric columns of its tables (by default the numbers the
metrics declare as board columns)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from reconbench.bench.suite.schema import COLUMN_TABLE, LEADERBOARD_TABLE, Checker


@dataclass(frozen=True)
class ColumnSpec:
    """One metric column of the leaderboard tables."""

    name: str
    keys: tuple[str, ...]  # evaluation summary keys tried in order (the first present is used)
    higher_is_better: bool
    fmt: str = ".3g"
    source: str = "summary"  # summary | attack_loss | wall_seconds | calibrated (the count against the selection's bar)
    optional: bool = False  # shown only when some cell records one of the keys (a metric older cells lack)


def default_columns() -> tuple[ColumnSpec, ...]:
    """The default columns: the numbers the evaluation and the registered metrics declare as board columns
    (:mod:`reconbench.evaluation.reported`; the calibrated headline first, then the papers' count, top-10 SSIM,
    membership precision, the membership test's AUC where cells computed it, distinct share, init copies), then the
    attack's final loss and the cell's wall time. A metric plugin that declares a column appears here with no
    other change; keys are tried in order (the declared key, then its older names)."""
    from reconbench.evaluation.reported import board_columns

    cols = [ColumnSpec(r.label, (r.key, *r.aliases), r.higher_is_better, r.fmt, optional=r.optional_column)
            for r in board_columns()]
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
    columns: tuple[ColumnSpec, ...] = field(default_factory=default_columns)


def read_leaderboard_table(data: dict[str, Any], chk: Checker) -> dict[str, Any]:
    return chk.section(data.get("leaderboard", {}), LEADERBOARD_TABLE, ("leaderboard",))


def leaderboard_options(lb: dict[str, Any], chk: Checker) -> LeaderboardOptions:
    store = lb.get("store_candidates", "all")
    if isinstance(store, str) and store != "all":
        raise chk.fail(("leaderboard", "store_candidates"), f'expected "all" or a number of cells, got {store!r}')
    return LeaderboardOptions(
        store_candidates=None if store == "all" else int(store),
        sample_cells=tuple(lb.get("sample_cells", ())),
        figures=lb.get("figures", True),
        sample_images=lb.get("sample_images", 8),
        columns=read_columns(lb["columns"], chk, ("leaderboard", "columns")) if "columns" in lb else default_columns(),
    )


def read_columns(raw: list[dict], chk: Checker, keys: tuple[Any, ...]) -> tuple[ColumnSpec, ...]:
    cols = []
    for i, c in enumerate(raw):
        ck = (*keys, i)
        chk.section(c, COLUMN_TABLE, ck)
        source = c.get("source", "summary")
        col_keys = tuple(c.get("keys", [])) + ((c["key"],) if "key" in c else ())
        if source == "summary" and not col_keys:
            raise chk.fail(ck, "a summary column needs `key` (or `keys`): the evaluation summary key it shows")
        cols.append(ColumnSpec(c["name"], col_keys, c["higher_is_better"], c.get("format", ".3g"), source))
    return tuple(cols)
