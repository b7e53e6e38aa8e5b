"""Benchmark suite files: where they live, their schema and the one checker holding a file to it, and the parsed
:class:`Suite` (a grid of target recipes x attacks x init regimes x seeds, comparisons, privacy axes, leaderboard
columns). :func:`load_suite` reads and checks a file; the file format is described in
:mod:`reconbench.bench.suite.load`."""

from reconbench.bench.suite.columns import ColumnSpec, LeaderboardOptions, default_columns
from reconbench.bench.suite.entries import AttackEntry, Comparison, GridBlock, InitEntry, TargetEntry, Variant
from reconbench.bench.suite.files import (
    LOCAL_SUITES,
    SHIPPED_SUITES,
    SuiteError,
    display_path,
    find_suite,
    read_suite_text,
    suite_search_path,
)
from reconbench.bench.suite.load import Suite, load_suite
from reconbench.bench.suite.privacy import DefenseEntry, PrivacyAxis, PrivacyPoint
from reconbench.bench.suite.targets import recipe_from_table

__all__ = ["LOCAL_SUITES", "SHIPPED_SUITES", "AttackEntry", "ColumnSpec", "Comparison", "DefenseEntry", "GridBlock",
           "InitEntry", "LeaderboardOptions", "PrivacyAxis", "PrivacyPoint", "Suite", "SuiteError", "TargetEntry",
           "Variant", "default_columns", "display_path", "find_suite", "load_suite", "read_suite_text",
           "recipe_from_table", "suite_search_path"]
