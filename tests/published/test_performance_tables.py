"""docs/performance.md's rendered tables are what their committed benchmark JSON renders to."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _tables():
    spec = importlib.util.spec_from_file_location("performance_tables", ROOT / "benchmarks" / "performance_tables.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_table_block_names_a_known_table():
    tables = _tables()
    found = tables.blocks((ROOT / "docs" / "performance.md").read_text())
    assert found, "docs/performance.md has no rendered table blocks"
    assert set(found) <= set(tables.TABLES)


@pytest.mark.parametrize("name", ["default_run_vs_599614b", "step_ab_fast", "step_ab_stock", "step_parts_fast",
                                  "early_stop_digits", "float32_readme_run"])
def test_the_table_is_its_json(name):
    tables = _tables()
    found = tables.blocks((ROOT / "docs" / "performance.md").read_text())
    assert name in found, f"docs/performance.md lost the {name} table"
    assert found[name] == tables.TABLES[name](), "stale: run python benchmarks/performance_tables.py --write"


def test_a_changed_number_is_caught(tmp_path):
    """The check can fail: a block whose number differs from the JSON is reported."""
    tables = _tables()
    text = (ROOT / "docs" / "performance.md").read_text()
    body = tables.blocks(text)["step_ab_fast"]
    tampered = text.replace(body, body.replace("|", "| 9", 1))
    assert tables.rendered(tampered) != tampered
