"""The invocation record of a suite call: written at the start and at the end, and in between as cells end at most
every PROGRESS_EVERY seconds; its final content does not depend on how often it was rewritten."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from _helpers.suitekit import toy_targets

from reconbench.bench import runner
from reconbench.bench.suite import load_suite

SUITE = textwrap.dedent("""\
    [suite]
    name = "inv"
    seeds = [0, 1]
    search_runs = 1

    """) + toy_targets(20) + textwrap.dedent("""
    [inits.gaussian]
    config = { scale = 0.05 }

    [attacks.not_registered]

    [[grid]]
    targets = ["bin", "mc"]
    attacks = "*"
    """)
WRITE_INVOCATION = runner.write_invocation


def _run(tmp_path: Path, name: str, every: float, monkeypatch: pytest.MonkeyPatch) -> tuple[dict, list[dict]]:
    """The final invocation record and every version of it written, with PROGRESS_EVERY = ``every``."""
    (tmp_path / "suite.toml").write_text(SUITE)
    written: list[dict] = []

    def recording(out: Path, number: int, data: dict) -> None:
        written.append(json.loads(json.dumps(data)))
        WRITE_INVOCATION(out, number, data)

    monkeypatch.setattr(runner, "PROGRESS_EVERY", every)
    monkeypatch.setattr(runner, "write_invocation", recording)
    out = tmp_path / name
    report = runner.run_suite(load_suite(tmp_path / "suite.toml"), out, quiet=True, command="reconbench bench inv")
    assert len(report.ran) == 4 and len(report.failed) == 4   # the attack is not registered: each cell fails fast
    return json.loads((out / "invocations" / "000.json").read_text()), written


def test_the_record_is_rewritten_as_cells_end_at_most_every_progress_every_seconds(tmp_path, monkeypatch):
    final_each, each = _run(tmp_path, "each", 0.0, monkeypatch)
    final_rare, rare = _run(tmp_path, "rare", 1e9, monkeypatch)
    assert len(each) == 2 + 4   # the start, every cell, the end
    assert [w["cells_run"] for w in each[1:5]] == [final_each["cells_run"][:k] for k in range(1, 5)]
    assert len(rare) == 2 and rare[0]["status"] == "running" and rare[0]["cells_run"] == []   # the start, the end
    for final in (final_each, final_rare):
        assert final["status"] == "completed" and len(final["cells_run"]) == 4
    timing = {"started", "elapsed_seconds"}
    assert {k: v for k, v in final_each.items() if k not in timing} == \
        {k: v for k, v in final_rare.items() if k not in timing}
