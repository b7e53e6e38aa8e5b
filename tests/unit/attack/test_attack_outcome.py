"""Failed attacks are a separate outcome: per run and per cell, recorded by the pipeline, derived for stored cells, and
shown (never counted as 0 reconstructed) by the leaderboard tables, the privacy table and the claims page."""

from __future__ import annotations

import json
import math
import textwrap
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from _helpers.suitekit import toy_targets

from reconbench import hookimpl, plugins
from reconbench.attack.outcome import (
    DIVERGED,
    NON_FINITE,
    OK,
    STOPPED_EARLY,
    cell_outcome,
    derive_run_outcome,
    failure_text,
    outcome_of_runs,
)
from reconbench.bench.cells import expand
from reconbench.bench.runner import load_cells, run_suite
from reconbench.bench.suite import load_suite
from reconbench.claims import page as C
from reconbench.claims import records
from reconbench.claims.verdicts import NOT_RUN
from reconbench.config import option
from reconbench.interfaces import Attack, AttackOutput, ThreatModel
from reconbench.leaderboard.render import build_leaderboard

REPO = Path(__file__).resolve().parents[3]


def run(stopped: str = "completed", steps: int = 10, planned: int | None = 10, **extra: Any) -> dict[str, Any]:
    config = {} if planned is None else {"steps": planned}
    return {"run": 0, "stopped": stopped, "steps": steps, "message": "m", "config": config, "oracle_score": 1.0,
            **extra}


@pytest.mark.parametrize("record, status", [
    (run(), OK),
    (run("diverged", steps=0), DIVERGED),
    (run("diverged", steps=9), DIVERGED),                   # a late divergence is still one
    (run("failed", steps=0, oracle_score=math.inf), DIVERGED),  # the attack raised (DivergedError)
    (run(candidates_finite=False), NON_FINITE),
    (run(oracle_score=math.inf), NON_FINITE),               # a record from before the flag: scored +inf
    (run("early_stop", steps=0), STOPPED_EARLY),            # no step taken: the candidates are the start
    (run("early_stop", steps=4), STOPPED_EARLY),            # fewer than half of the planned steps
    (run("early_stop", steps=5), OK),                       # half of them: it did its work
    (run("early_stop", steps=0, planned=0), OK),            # the null attack plans no step
    (run("early_stop", steps=0, planned=None), OK),         # no step budget declared: not judged
    (run("early_stop", steps=0, planned=None, config={"outer_steps": 10}), STOPPED_EARLY),
])
def test_run_outcome_from_what_the_run_did(record, status):
    outcome = derive_run_outcome(record)
    assert outcome.status == status and outcome.reason


def test_cell_outcome_is_ok_when_any_run_is_and_else_its_most_frequent_failure():
    ok, div, early = run(), run("diverged", steps=1), run("early_stop", steps=0)
    assert outcome_of_runs([ok, div]).status == OK and outcome_of_runs([ok, div]).runs == {OK: 1, DIVERGED: 1}
    assert outcome_of_runs([div, div]).status == DIVERGED
    assert outcome_of_runs([early, early, div]).status == STOPPED_EARLY
    assert outcome_of_runs([early, div]).status == DIVERGED   # a tie goes to the more serious failure
    stored = {"status": "ok", "runs": [div], "outcome": {"status": OK, "reason": "stored", "runs": {OK: 1}}}
    assert cell_outcome(stored).reason == "stored"            # a stored outcome wins over the derived one
    assert cell_outcome({"status": "failed", "runs": [div]}) is None  # a cell that did not run has none
    assert failure_text({STOPPED_EARLY: 1, DIVERGED: 2}, 3) == "diverged 2/3, stopped early 1/3"


def _published(board: str, cell: str) -> dict[str, Any]:
    from reconbench.bench.runner import read_cell

    path = REPO / "leaderboards" / board / "cells" / f"{cell}.json"
    if not path.exists():
        pytest.skip(f"{board} was re-published without {cell}")
    rec = read_cell(path)   # a slim entry as a full record
    assert rec is not None
    return rec


def _without_outcomes(rec: dict[str, Any]) -> dict[str, Any]:
    """A cell record as written before outcomes were stored: no cell outcome, no run outcomes."""
    bare = {k: v for k, v in rec.items() if k != "outcome"}
    bare["runs"] = [{k: v for k, v in run.items() if k != "outcome"} for run in rec.get("runs") or []]
    return bare


@pytest.mark.parametrize("board, cell, status", [
    # every run of these DP-SGD cells diverged; the undefended target's ran
    ("defenses-cpu", "mnist-binary@dp_sgd=1--haim_binary_kkt--gaussian--s0", DIVERGED),
    ("defenses-cpu", "mnist-binary@dp_sgd=16--haim_binary_kkt--gaussian--s1", DIVERGED),
    ("defenses-cpu", "mnist-binary--haim_binary_kkt--gaussian--s0", OK),
])
def test_stored_cells_without_outcomes_get_one_from_their_runs(board, cell, status):
    assert cell_outcome(_without_outcomes(_published(board, cell))).status == status


@pytest.mark.parametrize("board", ["ci", "defenses-cpu", "claims-b"])
def test_every_published_outcome_is_what_the_runs_give_without_it(board):
    """The outcome stored at run time against the one derived from the run records alone (as for old records)."""
    from reconbench.bench.runner import read_cell

    statuses: Counter[str] = Counter()
    for path in sorted((REPO / "leaderboards" / board / "cells").glob("*.json")):
        rec = read_cell(path)
        assert rec is not None
        stored = rec.get("outcome")
        if rec.get("status") != OK or not isinstance(stored, dict):
            continue
        assert cell_outcome(_without_outcomes(rec)).status == stored["status"], path.name
        statuses[stored["status"]] += 1
    assert sum(statuses.values()) > 0, f"{board} stores no outcomes"


@dataclass
class ScriptConfig:
    steps: int = option(4, "planned steps")
    behaviour: str = option("ok", "ok | diverge | stall | nan: what every run of this config does")


@dataclass(frozen=True)
class ScriptedAttack(Attack):
    """Returns its start, having done what ``behaviour`` says: the harness sees only the output."""

    name: str = "scripted_outcome"
    description: str = "test-only attack whose runs end as scripted"
    needs: frozenset = frozenset({"labels"})
    threat: ThreatModel = ThreatModel(labels=True)
    tasks: frozenset = frozenset({"binary", "multiclass"})
    config_cls: type = ScriptConfig

    def run(self, target: Any, x0: torch.Tensor, labels: torch.Tensor, config: ScriptConfig, *, generator: Any,
            progress: Any = None) -> AttackOutput:
        stopped, steps, cands = {"ok": ("completed", config.steps, x0), "diverge": ("diverged", 1, x0),
                                 "stall": ("early_stop", 0, x0),
                                 "nan": ("completed", config.steps, torch.full_like(x0, math.nan))}[config.behaviour]
        return AttackOutput(candidates=cands, labels=labels, final_loss=1.0, steps=steps, stopped=stopped)


class ScriptedPlugin:
    @hookimpl
    def register_attacks(self, register):  # type: ignore[no-untyped-def]
        register(ScriptedAttack())


@pytest.fixture
def scripted():
    host = plugins.host()
    name = host.register(ScriptedPlugin(), name="scripted-outcome-plugin")
    yield
    host.unregister(name)


SUITE = textwrap.dedent("""\
    [suite]
    name = "outcomes"
    seeds = [0, 1]
    search_runs = 2

    [protocol]
    figures = false

    """) + toy_targets(20) + textwrap.dedent("""
    [attacks.works]
    attack = "scripted_outcome"
    [attacks.diverges]
    attack = "scripted_outcome"
    config = { behaviour = "diverge" }
    [attacks.stalls]
    attack = "scripted_outcome"
    config = { behaviour = "stall" }
    [attacks.nan]
    attack = "scripted_outcome"
    config = { behaviour = "nan" }

    [inits.gaussian]
    config = { scale = 0.05 }

    [[grid]]
    targets = ["bin"]
    attacks = "*"
    """)


@pytest.mark.slow
def test_failed_attacks_are_recorded_and_shown_as_failures(tmp_path, scripted):
    path = tmp_path / "outcomes.toml"
    path.write_text(SUITE)
    suite = load_suite(path)
    run_suite(suite, tmp_path / "res", quiet=True)
    cells = load_cells(tmp_path / "res")
    expected = {"works": OK, "diverges": DIVERGED, "stalls": STOPPED_EARLY, "nan": NON_FINITE}
    for cid, rec in cells.items():
        attack = rec["attack"]["label"]
        assert rec["status"] == "ok" and rec["outcome"]["status"] == expected[attack], cid
        assert all(r["outcome"]["status"] == expected[attack] for r in rec["runs"])
        result = json.loads((tmp_path / "res" / rec["result_dir"] / "result.json").read_text())
        assert result["outcome"] == rec["outcome"]

    data = build_leaderboard(suite, tmp_path / "res", tmp_path / "lb", figures=False)
    rows = {r["attack"]: r for r in data["tables"]["pool"]}
    assert rows["works"]["attack_failed"] is None and len(rows["works"]["cells"]) == 2
    for attack in ("diverges", "stalls", "nan"):
        row = rows[attack]
        # no failed cell is aggregated: the row has no number at all, not a 0
        assert row["cells"] == [] and all(m["n"] == 0 and m["mean"] is None for m in row["metrics"].values())
        assert row["attack_failed"]["text"] == f"{expected[attack].replace('_', ' ')} 2/2"
    readme = (tmp_path / "lb" / "README.md").read_text()
    line = next(ln for ln in readme.splitlines() if ln.startswith("| bin ") and "| diverges " in ln)
    assert "diverged 2/2" in line and " 0.0" not in line
    assert "## Failed attacks" in readme and "bin--stalls--gaussian--s1" in readme
    assert len(data["header"]["attack_failed"]) == 6


PRIVACY = textwrap.dedent("""\
    [suite]
    name = "privacy-outcomes"
    seeds = [0, 1]
    search_runs = 2

    [protocol]
    figures = false

    """) + toy_targets(20) + textwrap.dedent("""
    [attacks.works]
    attack = "scripted_outcome"
    [inits.gaussian]
    config = { scale = 0.05 }
    [defenses.weight_noise]
    values = [0.1]
    [privacy.p]
    title = "privacy"
    targets = ["bin"]
    attacks = ["works"]
    inits = ["gaussian"]
    """)


def privacy_cells(suite: Any) -> list[Any]:
    """The cells of the PRIVACY suite as the runner records them (tests/_helpers/recordkit.py): two search runs
    each, all of which diverged on the defended target; the undefended target's runs completed."""
    from _helpers.recordkit import cell_record, selection, target_info, train_metrics

    out = []
    for cell in expand(suite):
        defended = "@" in cell.target
        runs = [run("diverged" if defended else "completed", steps=3 if defended else 10) for _ in range(2)]
        sel = {"pool": selection({"reconstructed_calibrated": 1.0 + cell.seed, "good_count": 2.0},
                                 null_spread={"reconstructed_calibrated": {"mean": 0.1, "max": 0.5}})}
        metrics = train_metrics(train_error=0.0, test_error=0.3 if defended else 0.2)
        rec = cell_record(cell, suite, sel, target=target_info(cell, metrics=metrics))
        out.append(rec.updated(runs=runs, outcome=outcome_of_runs(runs).to_dict()))
    return out


def test_a_privacy_row_whose_attack_failed_says_so_not_defended(tmp_path, scripted):
    from _helpers.recordkit import write_results

    path = tmp_path / "p.toml"
    path.write_text(PRIVACY)
    suite = load_suite(path)
    res = write_results(tmp_path / "res", privacy_cells(suite))
    data = build_leaderboard(suite, res, tmp_path / "lb", figures=False)
    rows = {r["defense"]: r for r in data["privacy"]["p"]["rows"]}
    failed = rows["weight_noise"]["attacks"]["works / gaussian"]
    assert failed["headline"]["n"] == 0 and failed["attack_failed"]["text"] == "diverged 2/2" and not failed["pareto"]
    assert rows["none"]["attacks"]["works / gaussian"]["headline"]["n"] == 2
    line = next(ln for ln in (tmp_path / "lb" / "README.md").read_text().splitlines()
                if ln.startswith("| bin ") and "weight_noise" in ln)
    assert "attack failed, diverged 2/2" in line


def test_a_claim_whose_attack_failed_is_not_judged_as_a_zero():
    """runkel-table1-random: once, the bilevel attack from random starts stopped at outer step 0 and 3 of its planned
    steps under a time cap, and counting those cells as 0 reconstructed 'reproduced' the claim. The published cells
    are rewritten here into that old form (no stored outcome, runs that stopped early): the claim must not be judged."""
    folders = {k: REPO / v for k, v in C.DEFAULT_RESULTS.items()}
    found = C.load_all(folders)
    stale = [cid for cid in found["claims-b"] if cid.startswith("cifar-mlp1-wd--runkel-mlp1--uniform--")]
    assert stale, "claims-b has no runkel-mlp1 cells from the uniform start"
    for k, cid in enumerate(stale):
        rec = found["claims-b"][cid]
        budget = (rec.runs or [])[0]["config"]["outer_steps"]
        found["claims-b"][cid] = rec.without("outcome").updated(runs=[
            {**run, "steps": (0, 1)[k % 2] * (budget // 3), "stopped": "time_budget", "outcome": None}
            for run in rec.runs or []])
    data = records.load(REPO / records.DEFAULT_FILE)
    res = next(r for r in C.measure_claims(data, folders, found=found) if r.claim.id == "runkel-table1-random")
    assert res.verdict == NOT_RUN and "did not complete its steps" in res.reason
    assert not res.points[0].seeds and res.points[0].failed
    assert "attack failed" in C.number_text(res)


def test_a_row_where_some_seeds_failed_shows_the_others_and_the_failures():
    from reconbench.leaderboard.readme import render_comparison, render_main_table
    from reconbench.leaderboard.tables import Stat
    from reconbench.records import Column, ComparisonTable, TableRow

    failed = {"cells": ["c2"], "statuses": {DIVERGED: 1}, "of": 2, "text": "diverged 1/2"}
    col = {"name": "count", "higher_is_better": True, "format": ".1f"}
    row = {"target": "t", "attack": "a", "attack_name": "a", "init": "i", "init_is_oracle": False, "cells": ["c1"],
           "attack_failed": failed, "best": True, "metrics": {"count": {**Stat([3.0]).to_dict(), "null": None}}}
    line = render_main_table([TableRow.from_dict(row)], [Column.from_dict(col)]).splitlines()[-1]
    assert "| 1 (diverged 1/2) " in line and "| 3.0 " in line
    none_ran = {**row, "cells": [], "attack_failed": {**failed, "statuses": {DIVERGED: 2}, "text": "diverged 2/2"},
                "metrics": {"count": {**Stat([]).to_dict(), "null": None}}}
    assert "| diverged 2/2 " in render_main_table([TableRow.from_dict(none_ran)], [Column.from_dict(col)]).splitlines()[-1]
    comp = {"axis": "n", "axis_values": [1, 2], "metrics": ["count"], "rows": [{
        "attack": "a", "init": "i", "selection": "pool", "init_is_oracle": False, "values": [
            {"count": Stat([3.0]).to_dict(), "attack_failed": failed},
            {"count": Stat([]).to_dict(), "attack_failed": none_ran["attack_failed"]}]}]}
    line = render_comparison(ComparisonTable.from_dict(comp), [Column.from_dict(col)]).splitlines()[-1]
    assert "| 3.0 (diverged 1/2) " in line and "| diverged 2/2 " in line
