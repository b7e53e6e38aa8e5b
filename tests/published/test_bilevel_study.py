"""The bilevel-cpu-mini study is defined once, by its suite, and the committed results are exactly its cells."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reconbench.bench.cells import expand
from reconbench.bench.suite import load_suite

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "benchmarks" / "results" / "bilevel"
SPEC_KEYS = ("attack", "attack_config", "init", "init_config", "seed", "candidates", "search_runs", "dtype")


def _identity(recipe_key: str, spec: dict) -> str:
    return json.dumps({"recipe_key": recipe_key, **{k: spec[k] for k in SPEC_KEYS}}, sort_keys=True)


def test_every_committed_bilevel_result_is_one_cell_of_the_suite():
    committed = sorted(RESULTS.glob("**/result.json"))
    if not committed:
        pytest.skip("no committed bilevel results in this checkout")
    suite = load_suite("bilevel-cpu-mini")
    cells = {_identity(c.recipe.key(), c.run_spec(suite).to_dict()): c.cell_id for c in expand(suite)}
    unmatched, matched = [], set()
    for path in committed:
        result = json.loads(path.read_text())
        key = _identity(result["target"]["recipe_key"], result["spec"])
        if key in cells:
            matched.add(cells[key])
        else:
            unmatched.append(str(path.relative_to(RESULTS)))
    assert not unmatched, f"committed results no cell of bilevel-cpu-mini reproduces: {unmatched}"
    assert matched == set(cells.values()), f"suite cells without committed results: {sorted(set(cells.values()) - matched)}"


def test_the_suite_targets_are_the_committed_targets():
    path = RESULTS / "targets.json"
    if not path.exists():
        pytest.skip("no committed bilevel targets in this checkout")
    committed = {info["recipe"]["family"] + str(info["recipe"]["model"]): info["recipe"]
                 for info in json.loads(path.read_text()).values()}
    suite = load_suite("bilevel-cpu-mini")
    ours = {t.recipe.family + str(t.recipe.model): t.recipe.to_dict() for t in suite.targets.values()}
    assert ours == committed


def test_the_study_caps_its_attacks_by_steps_never_by_seconds():
    """A wall-clock budget makes a result depend on the machine's speed and load: the study caps by work only."""
    suite = load_suite("bilevel-cpu-mini")
    assert "max_seconds" not in suite.path.read_text()
    for entry in suite.attacks.values():
        assert "max_seconds" not in entry.config
        assert isinstance(entry.config.get("steps", entry.config.get("outer_steps")), int)


def test_no_committed_bilevel_run_had_a_time_budget():
    committed = sorted(RESULTS.glob("**/result.json"))
    if not committed:
        pytest.skip("no committed bilevel results in this checkout")
    timed = [f"{path.relative_to(RESULTS)} run {run['run']}" for path in committed
             for run in json.loads(path.read_text())["runs"] if run["config"].get("max_seconds", 0.0) > 0]
    assert not timed, f"committed runs stopped by a time budget (max_seconds > 0): {timed}"
