"""README's table of the quick start's run is what a fresh run of that command prints (same rows, names, nulls)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("readme_default_run", REPO / "benchmarks" / "readme_default_run.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_readme_table_is_a_fresh_default_run(tmp_path: Path) -> None:
    script = _script()
    published = script.readme_block((REPO / "README.md").read_text())
    assert script.block(script.fresh_result(tmp_path)) == published


def test_readme_table_rows_are_the_console_lines() -> None:
    """Every row of the README's table names a number the console prints, with the same value and null."""
    from reconbench.cli.summary import SummaryRow, markdown_table

    evaluation = {"summary": {"reconstructed_calibrated": 3, "n_train": 5, "calibrated_threshold": 0.9,
                              "reconstructed": 4, "membership_auc": 0.75},
                  "null": {"draws": 5, "spread": {"reconstructed_calibrated": {"mean": 0.2, "max": 1},
                                                  "reconstructed": {"mean": 3.0, "std": 0.5},
                                                  "membership_auc": {"mean": 0.5, "std": 0.04}}},
                  "protocol": {"calibration": {"score": "corr", "calibration_draws": 19}}}
    table = markdown_table(evaluation)
    assert "| **reconstructed (calibrated headline)**: corr > 0.900, the best any of 19 null draws reached | **3 of 5** " \
           "| mean 0.2, max 1 over 5 draws | higher |" in table
    assert "| reconstructed (papers' protocol) | 4 | 3 (sd 0.5) | higher |" in table
    assert "| membership_auc | 0.75 | 0.5 (sd 0.04) | higher |" in table
    assert "n_train" not in table and isinstance(SummaryRow("a", "b"), SummaryRow)
