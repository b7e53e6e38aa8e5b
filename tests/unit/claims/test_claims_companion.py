"""claims-c: the claims it measures are wired to its blocks, each beside an unchanged start; the unchanged-start
cells it runs for claims-b's blocks are read for claims-b's claims (and only where the target, start, candidates,
seeds and protocol are the same); a claim about targets of a kind is not judged on targets of another kind."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from reconbench.bench.cells import CELL_FORMAT, expand
from reconbench.bench.suite import Suite, load_suite
from reconbench.claims import page as P
from reconbench.claims import records
from reconbench.claims import verdicts as V
from reconbench.claims.measure import (
    Companion,
    companion_unchanged,
    comparison,
    measure_point,
    point_specs,
    records_of,
    unchanged_attack,
)
from reconbench.records import CellRecord

REPO = Path(__file__).resolve().parents[3]
DATA = records.load(REPO / records.DEFAULT_FILE)
SIX = ("haim-cifar", "buzaglo-cnn", "buzaglo-cnn-channels", "buzaglo-wd-nonzero-error", "runkel-table1-gt",
       "haim-first-layer")


def claim(cid: str) -> records.Claim:
    return next(c for c in DATA.claims if c.id == cid)


def record(suite: Suite, cell: Any, key: str, value: float, *, train_error: float = 0.0,
           null_max: float = 6.0) -> dict[str, Any]:
    """A finished cell record of ``cell`` whose pooled selection scores ``value`` on ``key`` (null draws at most
    ``null_max``), its target's card recording ``train_error`` and a theta residual inside the regime."""
    spread = {key: {"mean": null_max / 2, "max": null_max, "min": 0.0, "draws": 19}}
    return {
        "format": CELL_FORMAT, "cell_id": cell.cell_id, "cell_key": cell.key(suite), "status": "ok",
        "spec": {"dtype": suite.dtype}, "protocol": cell.protocol(suite),
        "target": {"name": cell.target, "n_train": 10, "train_metrics": {
            "param_norm_sq": 4.0, "train_error": train_error,
            "certificate": {"regime": {"theta": {"residual": 0.1}}}}},
        "attack": {"label": cell.attack.label, "name": cell.attack.attack},
        "init": {"label": cell.init.label, "regime": cell.init.regime, "is_oracle": False},
        "runs": [{"run": 0, "steps": 10, "stopped": "completed", "config": {"steps": 10},
                  "candidates_finite": True, "initial_loss": 2.0, "final_loss": 1.0}],
        "selections": {"pool": {"summary": {key: value, "n_train": 10}, "attack_loss": 0.01,
                                "null": {"available": True, "spread": spread}}}}


def block_cells(suite: Suite, block: str, key: str, value_of: dict[str, float], **kw: Any) -> dict[str, CellRecord]:
    """A record for every planned cell of ``block``: attack entry -> the value it scores at every seed."""
    return records_of({c.cell_id: record(suite, c, key, value_of[c.attack.label], **kw)
                       for c in expand(suite) if f"comparison:{block}" in c.groups})


# -- the data file and the suite --------------------------------------------------------------------------------
def test_the_six_runnable_claims_are_measured_by_claims_c_beside_an_unchanged_start():
    suite = load_suite("claims-c")
    still = unchanged_attack(suite)
    assert still is not None
    for cid in SIX:
        c = claim(cid)
        assert c.measured and c.suite == "claims-c", cid
        comp = comparison(suite, c.comparison)
        assert len(comp.seeds) >= V.MIN_SEEDS and suite.seed_targets and suite.seed_nulls
        if c.oracle:   # refused whatever it scores: no unchanged start needed
            continue
        assert still in comp.attacks and (c.attack or comp.attacks[0]) != still, cid


def test_stationarity_targets_use_the_stable_loss():
    """A target attacked by an attack with a stationarity premise trains with the loss that keeps moving (legacy
    only where the recipe is claims-b's, shared so that its cells and claims-c's read the same trained target)."""
    from reconbench.targets.regime import regime_test_of

    suite, shared = load_suite("claims-c"), load_suite("claims-b")
    for cell in expand(suite):
        if regime_test_of(cell.attack.attack) is None or cell.target in shared.targets:
            continue
        assert cell.recipe.train.loss_form == "stable", cell.cell_id


def test_claims_b_targets_that_claims_c_repeats_are_the_same_recipe():
    b, c = load_suite("claims-b"), load_suite("claims-c")
    for name in set(b.targets) & set(c.targets):
        assert b.targets[name].recipe.to_dict() == c.targets[name].recipe.to_dict(), name


# -- reading another suite's unchanged start ---------------------------------------------------------------------
def collapse_inputs(c_suite: Suite, attack_value: float, unchanged_value: float | None):
    """runkel-collapse's cells in claims-b and, unless None, claims-c's unchanged uniform start."""
    b_suite = load_suite("claims-b")
    cl = claim("runkel-collapse")
    found_b = block_cells(b_suite, "table1", cl.measure, {"runkel-mlp1": attack_value})
    found_c = {} if unchanged_value is None else block_cells(c_suite, "table1-unchanged", cl.measure,
                                                            {"init_only": unchanged_value})
    return cl, b_suite, found_b, found_c


def judge_collapse(c_suite: Suite, attack_value: float, unchanged_value: float | None) -> V.Decision:
    cl, b_suite, found_b, found_c = collapse_inputs(c_suite, attack_value, unchanged_value)
    comp = comparison(b_suite, cl.comparison)
    plan_b = {x.cell_id: x for x in expand(b_suite)}
    companion = Companion(c_suite, found_c, {x.cell_id: x for x in expand(c_suite)})
    points = [measure_point(cl, b_suite, comp, found_b, plan_b, *s, companions=[companion])
              for s in point_specs(cl, comp)]
    return V.decide(cl, points)


def test_claims_b_claims_read_claims_c_unchanged_start():
    c_suite = load_suite("claims-c")
    d = judge_collapse(c_suite, 18.0, 3.0)        # the attack collapses, the unchanged noise start does not
    assert d.verdict == V.REPRODUCED and "the unchanged start does not" in d.reason
    d = judge_collapse(c_suite, 18.0, 18.0)       # the noise start already sits on one image
    assert d.verdict == V.NOT_JUDGED and "unchanged start already meets it" in d.reason
    d = judge_collapse(c_suite, 18.0, None)       # claims-c not run: no comparison
    assert d.verdict == V.NOT_JUDGED and "no unchanged-start comparison" in d.reason


def test_another_suites_unchanged_start_counts_only_for_the_same_target_and_start(tmp_path):
    text = (REPO / "reconbench" / "bench" / "suites" / "claims-c.toml").read_text()
    head, rest = text.split("[targets.cifar-mlp1-wd]", 1)
    path = tmp_path / "claims-c.toml"
    path.write_text(head + "[targets.cifar-mlp1-wd]" + rest.replace("lr = 0.1\n", "lr = 0.2\n", 1))
    other = load_suite(path)   # the same names, another training recipe
    d = judge_collapse(other, 18.0, 3.0)
    assert d.verdict == V.NOT_JUDGED and "no unchanged-start comparison" in d.reason
    b_suite = load_suite("claims-b")
    c_suite = load_suite("claims-c")
    plan_b = {x.cell_id: x for x in expand(b_suite)}
    comp = comparison(b_suite, "table1")
    for suite, found in ((c_suite, True), (other, False)):
        companion = Companion(suite, {}, {x.cell_id: x for x in expand(suite)})
        hit = companion_unchanged([companion], b_suite, plan_b, comp.seeds, "cifar-mlp1-wd", "runkel-mlp1",
                                  "uniform")
        assert (hit is not None) == found
    # another start (partition) was never left unchanged by claims-c
    companion = Companion(c_suite, {}, {x.cell_id: x for x in expand(c_suite)})
    assert companion_unchanged([companion], b_suite, plan_b, comp.seeds, "cifar-mlp1-wd", "runkel-mlp1",
                               "partition") is None


def test_every_judgeable_claim_of_claims_a_and_b_has_an_unchanged_start_somewhere():
    """Each claim of claims-a/-b whose verdict can say something and whose attack has no stationarity premise
    (the gated ones are not judged on today's targets) finds its unchanged start in its own suite, by construction
    or in claims-c."""
    from reconbench.claims.measure import TARGET_MEASURES, UNCHANGED_BY_CONSTRUCTION
    from reconbench.targets.regime import regime_test_of

    suites = {n: load_suite(n) for n in ("claims-a", "claims-b", "claims-c")}
    plans = {n: {x.cell_id: x for x in expand(s)} for n, s in suites.items()}
    companion = Companion(suites["claims-c"], {}, plans["claims-c"])
    for c in DATA.claims:
        if c.suite not in ("claims-a", "claims-b") or not c.measured or not c.judge or c.oracle:
            continue
        if c.measure in TARGET_MEASURES or c.measure in UNCHANGED_BY_CONSTRUCTION or c.kind == "at_null":
            continue
        suite = suites[c.suite]
        comp = comparison(suite, c.comparison)
        for label, target, attack, init in point_specs(c, comp):
            if regime_test_of(suite.attacks[attack].attack) is not None:
                continue
            own = unchanged_attack(suite)
            hit = companion_unchanged([companion], suite, plans[c.suite], comp.seeds, target, attack, init)
            assert own is not None or hit is not None, f"{c.id} at {label}"


def test_the_page_reads_claims_c_beside_claims_a_and_b():
    assert "claims-c" in P.DEFAULT_RESULTS
    assert "claims-c" in DATA.suites and DATA.suites["claims-c"].cost != "not estimated"


# -- the premise of a claim ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(("train_error", "judged"), [(0.1, True), (0.0, False)])
def test_a_claim_about_models_with_training_errors_is_not_judged_on_models_without(train_error, judged):
    suite = load_suite("claims-c")
    cl = claim("buzaglo-wd-nonzero-error")
    assert cl.premise == "nonzero_train_error"
    comp = comparison(suite, cl.comparison)
    found = block_cells(suite, comp.name, cl.measure, {"haim_binary_kkt": 3.0, "init_only": 0.0},
                        train_error=train_error, null_max=0.0)
    plan = {x.cell_id: x for x in expand(suite)}
    points = [measure_point(cl, suite, comp, found, plan, *s) for s in point_specs(cl, comp)]
    d = V.decide(cl, points)
    if judged:
        assert d.verdict == V.REPRODUCED
    else:
        assert d.verdict == V.NOT_JUDGED and "premise" in d.reason and "training error 0" in d.reason
    # the same cells under a claim without the premise are judged
    plain = dataclasses.replace(cl, premise="")
    assert V.decide(plain, points).verdict == V.REPRODUCED


def test_an_unknown_premise_is_refused_in_one_line(tmp_path):
    from reconbench.errors import ReconbenchError

    text = (REPO / records.DEFAULT_FILE).read_text().replace('premise = "nonzero_train_error"',
                                                            'premise = "nonzero_error"', 1)
    bad = tmp_path / "claims.toml"
    bad.write_text(text)
    with pytest.raises(ReconbenchError, match="unknown premise 'nonzero_error'.*use one of"):
        records.load(bad)


def test_the_page_shows_the_unchanged_start_read_from_claims_c(tmp_path):
    import numpy as np
    from test_claims import write_cells

    rng = np.random.default_rng(3)
    results = {name: tmp_path / name for name in ("claims-a", "claims-b", "claims-c")}
    for name, folder in results.items():
        write_cells(folder, name, rng)
    page = P.generate(results, root=REPO)
    row = next(ln for ln in page.splitlines() if ln.startswith("| `runkel-collapse`"))
    assert "unchanged start (`claims-c`): mean" in row and "no unchanged-start comparison" not in row
    for cid in SIX:
        row = next(ln for ln in page.splitlines() if ln.startswith(f"| `{cid}`"))
        assert f"`claims-c` / `{claim(cid).comparison}`" in row and "**not run**" not in row, cid


# -- the paper's setting and its reported number ----------------------------------------------------------------------
@pytest.mark.parametrize("cid", ["runkel-privacy", "buzaglo-support-vectors"])
def test_claims_outside_the_papers_setting_are_not_judged_whatever_the_cells_give(cid):
    c = claim(cid)
    assert c.setting and c.outside_setting
    for verdict in (V.CONTRADICTED, V.NOT_CONTRADICTED):
        d = V._outside_setting(c, V.Decision(verdict, "the test's reason", "the test", 0.01))
        assert d.verdict == V.NOT_JUDGED and d.reason.startswith("outside the paper's setting: ")
        assert f"the cells alone give {verdict} (the test's reason)" in d.reason and d.p == 0.01
    inside = dataclasses.replace(c, outside_setting="")
    d = V._outside_setting(inside, V.Decision(V.CONTRADICTED, "r", "t", 0.01))
    assert d.verdict == V.CONTRADICTED


def test_a_contradiction_stands_only_where_the_data_file_reproduces_the_papers_setting():
    """Every claim whose cells could contradict the paper (at the null, no change, or a directed test) either
    reproduces the paper's setting and adversary or says why not."""
    for c in DATA.claims:
        if c.outside_setting:
            assert c.setting, c.id


def test_every_claim_carries_what_the_paper_reports_and_the_page_shows_it():
    page = (REPO / "docs" / "claims.md").read_text()
    for c in DATA.claims:
        assert c.paper_number, c.id
        row = next(ln for ln in page.splitlines() if ln.startswith(f"| `{c.id}`"))
        assert c.paper_number.replace("|", "\\|") in row, c.id
    assert "| the paper reports | reconbench's numbers per point |" in page
