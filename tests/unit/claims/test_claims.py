"""The claims page: the claims data file is complete and wired to the suites, its quotes are in the papers' text,
the combining tests have the error rates they state (closed forms), the verdict rules decide known cases as written,
the page's numbers are the cells', and the committed page is what the generator writes."""

from __future__ import annotations

import dataclasses
import json
import math
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from _helpers.claims_cells import write_cells

from reconbench.bench.cells import expand
from reconbench.bench.suite import load_suite
from reconbench.claims import page as P
from reconbench.claims import records, stats
from reconbench.claims import verdicts as V
from reconbench.claims.measure import MEASURES, Point, SeedValue, comparison, point_specs
from reconbench.errors import ReconbenchError
from reconbench.records import CellRecord

REPO = Path(__file__).resolve().parents[3]
#: attack entries that take no steps: the start returned unchanged, the first-layer weight rows
BASELINES = ("init_only", "weight_rows")
SUITES = ("claims-a", "claims-b", "claims-c")
DATA = records.load(REPO / records.DEFAULT_FILE)
#: papers whose text the papers' folder lacks: their claims quote the abstract (Iurada et al.: arXiv 2509.22214)
NOT_IN_FOLDER = frozenset({"iurada2026"})
#: every claim the issue tracker's review of the first edition named (including those the page had omitted)
NAMED = ("haim-margin", "haim-first-layer", "haim-bias", "buzaglo-neurons", "buzaglo-classes-quality",
         "buzaglo-classes-count", "buzaglo-wd-margin", "buzaglo-wd-nonzero-error", "buzaglo-cnn-channels",
         "buzaglo-cnn-kernel", "buzaglo-cifar100", "buzaglo-support-vectors", "buzaglo-init-binary",
         "buzaglo-init-multiclass", "buzaglo-wd-binary", "buzaglo-cnn", "runkel-table1-theta", "runkel-collapse",
         "runkel-privacy", "runkel-linear-underdetermined", "runkel-n01", "runkel-kkt-partition-majority",
         "runkel-kkt-partition-single", "runkel-mixture", "runkel-table1-random", "runkel-table1-partition")


# -- the data file --------------------------------------------------------------------------------------------
def test_the_data_file_holds_every_named_claim_with_a_pointer_and_a_verdict_or_reason():
    ids = [c.id for c in DATA.claims]
    assert len(ids) >= 25 and len(set(ids)) == len(ids)
    assert set(NAMED) <= set(ids)
    assert {c.paper.key for c in DATA.claims} == {"haim2022", "buzaglo2023", "runkel2024", "iurada2026"}
    for c in DATA.claims:
        assert c.where and c.statement
        assert c.measured or c.reason, c.id
        assert c.in_text or not c.judge or not c.measured, f"{c.id}: a statement not in the text cannot be judged"


def test_every_measured_claim_reads_a_block_with_five_independent_seeds():
    suites = {name: load_suite(name) for name in {*SUITES, P.GPU_SUITE, *(c.suite for c in DATA.claims if c.measured)}}
    for c in DATA.claims:
        if not c.measured:
            continue
        suite = suites[c.suite]
        assert suite.seed_targets and suite.seed_nulls, c.suite
        comp = comparison(suite, c.comparison)
        assert len(comp.seeds) >= V.MIN_SEEDS, c.id
        specs = point_specs(c, comp)
        assert specs and c.measure in MEASURES
        for label in (c.attack, c.init):
            assert label is None or label in (*comp.attacks, *comp.inits), (c.id, label)
        for _, _, _, init in specs:  # only a claim marked as an oracle sanity check reads the training images
            assert c.oracle or suite.inits[init].regime != "ground_truth", c.id
        if c.suite in P.GPU_ROUTED:  # the GPU suite repeats every block of the CPU claims suites under the same name
            gpu = comparison(suites[P.GPU_SUITE], c.comparison)
            assert [s[0].split(" = ")[0] for s in point_specs(c, gpu)] == [s[0].split(" = ")[0] for s in specs], c.id
        if c.kind in ("trend", "comparison", "some_above", "no_change"):
            assert len(specs) >= 2, c.id


def papers_folder() -> Path | None:
    env = os.environ.get("RECONBENCH_PAPERS")
    for folder in ([Path(env)] if env else []) + [REPO.parent / "shared" / "papers", REPO.parents[1] / "shared" /
                                                  "papers"]:
        if folder.is_dir():
            return folder
    return None


def test_every_quote_is_in_the_papers_text():
    folder = papers_folder()
    if folder is None:
        pytest.skip("the papers' text is not at hand (set RECONBENCH_PAPERS to its folder)")
    texts = {p.name: " ".join(p.read_text().split()) for p in folder.glob("*.txt")}
    for c in DATA.claims:
        if c.paper.key in NOT_IN_FOLDER:   # quoted from its abstract, which the folder does not hold
            assert c.source not in texts and c.quote, c.id
            continue
        assert c.source in texts, (c.id, c.source)
        if c.quote:
            assert " ".join(c.quote.split()) in texts[c.source], (c.id, c.quote)


@pytest.mark.parametrize("record, problem", [
    ({"kind": "trend", "direction": "sideways"}, "direction"),
    ({"kind": "threshold", "direction": "up"}, "threshold"),
    ({"kind": "not_run", "measure": ""}, "reason"),
    ({"kind": "guess"}, "unknown kind"),
    ({"bogus": 1}, "unknown field"),
    ({"judge": False}, "judge = false"),
])
def test_a_bad_record_is_refused_in_one_line(tmp_path, record, problem):
    base = {"id": "x", "paper": "p", "where": "Fig. 1", "statement": "s", "kind": "above_null", "quote": "q",
            "measure": "reconstructed_calibrated", "suite": "claims-a", "comparison": "haim-binary"}
    lines = ['[papers.p]\ntitle = "T"\nshort = "S"\ntext = "t.txt"\n', "[[claims]]"]
    for k, v in {**base, **record}.items():
        lines.append(f"{k} = {json.dumps(v) if not isinstance(v, bool) else str(v).lower()}")
    path = tmp_path / "claims.toml"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ReconbenchError, match=problem) as err:
        records.load(path)
    assert "\n" not in str(err.value)


# -- the tests that combine seeds -------------------------------------------------------------------------------
def test_binomial_p_against_closed_forms():
    assert stats.binomial_p(5, 5, 0.05) == pytest.approx(0.05 ** 5)
    assert stats.binomial_p(2, 5, 0.05) == pytest.approx(1 - 0.95 ** 5 - 5 * 0.05 * 0.95 ** 4)
    assert stats.binomial_p(1, 5, 0.05) == pytest.approx(1 - 0.95 ** 5)
    assert stats.binomial_p(0, 5, 0.05) == 1.0
    assert stats.binomial_p(5, 5, 0.5) == pytest.approx(1 / 32)


def test_the_binomial_test_holds_its_level_when_every_seed_is_at_its_bound():
    """Simulated seeds that pass their null with probability exactly 5%: the combined test rejects at most 5%."""
    rng = np.random.default_rng(0)
    passes = rng.binomial(5, 0.05, size=200_000)
    rejected = np.mean([stats.binomial_p(int(x), 5, 0.05) <= stats.ALPHA for x in passes])
    assert rejected <= 0.05


def test_sign_and_trend_tests_against_closed_forms():
    p, wins, untied = stats.sign_p([0.6, 0.7, 0.8, 0.9, 0.55], 0.5, above=True)
    assert (p, wins, untied) == (pytest.approx(1 / 32), 5, 5)
    p, wins, untied = stats.sign_p([0.6, 0.5, 0.8, 0.9, 0.55], 0.5, above=True)  # a tie is dropped
    assert (p, wins, untied) == (pytest.approx(1 / 16), 4, 4)
    two = np.array([[0.0, 1.0], [0.0, 2.0], [1.0, 4.0], [0.0, 3.0], [2.0, 2.5]])
    up, down, _, how = stats.trend_p(two)
    assert up == pytest.approx(1 / 32) and down == pytest.approx(1.0) and "exact" in how
    three = np.array([[0.0, 1.0, 2.0]] * 5) + np.arange(5)[:, None]
    up, down, _, _ = stats.trend_p(three)
    assert up == pytest.approx(1 / 6 ** 5) and down == pytest.approx(1.0)
    flat = np.ones((5, 3))
    assert stats.trend_p(flat)[:2] == (1.0, 1.0)


def test_the_trend_test_is_uniform_under_no_trend():
    rng = np.random.default_rng(1)
    ps = [stats.trend_p(rng.normal(size=(5, 2)))[0] for _ in range(400)]
    assert abs(np.mean(np.asarray(ps) <= 0.0625) - 0.0625) < 0.04  # 2 of 32 arrangements


def test_spearman_against_the_textbook_formula():
    x, y = [1, 2, 3, 4, 5], [5, 6, 7, 8, 7]
    assert stats.spearman(x, [1, 2, 3, 4, 5]) == pytest.approx(1.0)
    assert stats.spearman([1, 2, 3, 4], [4, 3, 1, 2]) == pytest.approx(1 - 6 * 18 / (4 * 15))
    # with a tie: y's average ranks are 1, 2, 3.5, 5, 3.5 (Pearson correlation of the ranks)
    assert stats.spearman(x, y) == pytest.approx(np.corrcoef([1, 2, 3, 4, 5], [1, 2, 3.5, 5, 3.5])[0, 1])
    assert stats.spearman([1, 1, 1], [1, 2, 3]) is None


# -- the verdict rules on synthetic points -------------------------------------------------------------------------
def claim(kind: str, **kw: Any) -> records.Claim:
    paper = DATA.papers["haim2022"]
    return records.Claim(id="x", paper=paper, where="w", statement="s", kind=kind,  # type: ignore[arg-type]
                         measure=kw.pop("measure", "reconstructed_calibrated"), suite="claims-a",
                         comparison="haim-binary", **kw)


def pt(values: list[float], beyond: list[bool] | None = None, p0: float = 0.05, label: str = "p",
       unchanged: bool = True) -> Point:
    """A point; with ``unchanged``, beside it the same start left unchanged scoring a constant 0.5 at the null (a
    start that meets no claim: the rules for an unchanged start that does are tested in test_claims_rules.py)."""
    seeds = [SeedValue(s, f"c{s}", v, 0.0, 0.0, 19, None if beyond is None else beyond[s], None if beyond is None
                       else p0) for s, v in enumerate(values)]
    still = pt([0.5] * len(values), None if beyond is None else [False] * len(values), p0, label, False) \
        if unchanged else None
    return Point(label, "t", "a", "i", seeds, unchanged=still)


def test_above_the_null():
    at_null = pt([0.0] * 5, [False] * 5)
    d = V.decide(claim("above_null"), [at_null])
    assert d.verdict == V.NOT_REPRODUCED and d.p == 1.0
    d = V.decide(claim("above_null"), [pt([3.0] * 5, [True] * 5)])
    assert d.verdict == V.REPRODUCED and d.p == pytest.approx(0.05 ** 5) and "5 of 5" in d.test
    d = V.decide(claim("above_null"), [pt([1, 1, 0, 0, 0], [True, True, False, False, False])])
    assert d.verdict == V.REPRODUCED and d.p == pytest.approx(1 - 0.95 ** 5 - 5 * 0.05 * 0.95 ** 4)
    d = V.decide(claim("above_null"), [pt([1, 0, 0, 0, 0], [True] + [False] * 4)])
    assert d.verdict == V.NOT_REPRODUCED
    # every point must pass: one point at the null keeps the claim from being reproduced
    d = V.decide(claim("above_null"), [pt([3.0] * 5, [True] * 5), at_null])
    assert d.verdict == V.NOT_REPRODUCED
    # "beyond every one of D null draws": the per-seed bound is 1/(D+1)
    d = V.decide(claim("above_null", measure="max_candidates_per_image"),
                 [pt([9.0] * 5, [True] * 3 + [False] * 2, p0=1 / 20)])
    assert d.verdict == V.REPRODUCED and d.p == pytest.approx(stats.binomial_p(3, 5, 1 / 20))


def test_at_the_null():
    assert V.decide(claim("at_null"), [pt([0.0] * 5, [False] * 5)]).verdict == V.NOT_CONTRADICTED
    d = V.decide(claim("at_null"), [pt([2, 1, 3, 0, 0], [True, True, True, False, False])])
    assert d.verdict == V.CONTRADICTED and d.p == pytest.approx(stats.binomial_p(3, 5, 0.05))


def test_trend_comparison_and_no_change():
    low, high = pt([0, 1, 0, 2, 1], label="a"), pt([3, 4, 2, 5, 6], label="b")
    d = V.decide(claim("trend", direction="up"), [low, high])
    assert d.verdict == V.REPRODUCED and d.p == pytest.approx(1 / 32)
    assert V.decide(claim("trend", direction="down"), [low, high]).verdict == V.CONTRADICTED
    mixed = pt([1, 0, 3, 1, 2], label="c")
    assert V.decide(claim("comparison", direction="up"), [low, mixed]).verdict == V.NOT_REPRODUCED
    assert V.decide(claim("no_change"), [low, mixed]).verdict == V.NOT_CONTRADICTED
    # two-sided with 5 seeds the smallest p is 2/32 > 0.05: such a claim could never be contradicted ...
    assert V.decide(claim("no_change"), [low, high]).verdict == V.NOT_CONTRADICTED
    # ... so no-change claims run 6 seeds (smallest p 2/64)
    d = V.decide(claim("no_change"), [pt([0, 1, 0, 2, 1, 0], label="a"), pt([3, 4, 2, 5, 6, 1], label="b")])
    assert d.verdict == V.CONTRADICTED and d.p == pytest.approx(2 / 64)


def smallest_p(c: records.Claim, seeds: int, points: int) -> float:
    """The smallest p-value the claim's test can reach with this many seeds and points (all values distinct)."""
    if c.kind in ("above_null", "at_null"):
        p0 = 0.05 if MEASURES[c.measure].null == "calibrated" else 1 / 20
        return stats.binomial_p(seeds, seeds, p0) * (points if c.kind == "at_null" else 1)
    if c.kind == "threshold":
        return 0.5 ** seeds
    if c.kind == "some_above":
        return (points - 1) * 0.5 ** seeds
    one_sided = 1 / math.factorial(points) ** seeds
    return 2 * one_sided if c.kind == "no_change" else one_sided


def test_every_measured_claim_can_reach_a_verdict_either_way():
    """A test whose smallest p-value exceeds the level cannot fail: every claim's seeds and points leave room."""
    suites = {name: load_suite(name) for name in {*SUITES, P.GPU_SUITE, *(c.suite for c in DATA.claims if c.measured)}}
    for c in DATA.claims:
        if c.measured:
            # the GPU suite judges the same claim from its own block
            for name in {c.suite, P.GPU_SUITE} if c.suite in P.GPU_ROUTED else {c.suite}:
                comp = comparison(suites[name], c.comparison)
                assert smallest_p(c, len(comp.seeds), len(point_specs(c, comp))) <= stats.ALPHA, (c.id, name)


def test_some_point_above_the_first_is_corrected_for_the_points():
    base, same, high = pt([1, 1, 1, 1, 1], label="0"), pt([1, 1, 1, 1, 1], label="1"), pt([2, 3, 2, 4, 2], label="2")
    d = V.decide(claim("some_above", direction="up"), [base, same, high])
    assert d.verdict == V.NOT_REPRODUCED and d.p == pytest.approx(2 / 32)  # 1/32, Bonferroni over 2 points
    six = [pt([1] * 5, label="0"), pt([2, 3, 2, 4, 2], label="1")]
    assert V.decide(claim("some_above", direction="up"), six).p == pytest.approx(1 / 32)


def test_threshold():
    d = V.decide(claim("threshold", direction="up", threshold=0.5, measure="init_copy_share"),
                 [pt([0.6, 0.7, 0.9, 0.8, 0.75])])
    assert d.verdict == V.REPRODUCED and d.p == pytest.approx(1 / 32)
    d = V.decide(claim("threshold", direction="up", threshold=0.5, measure="init_copy_share"),
                 [pt([0.1, 0.2, 0.3, 0.2, 0.0])])
    assert d.verdict == V.CONTRADICTED


def test_missing_short_or_failed_cells_are_not_run_and_unjudged_claims_are_not_judged():
    four = pt([3.0] * 4, [True] * 4)
    assert V.decide(claim("above_null"), [four]).verdict == V.NOT_RUN
    failed = pt([3.0] * 5, [True] * 5)
    failed.failed.append(("c9", "stopped after 0 of 4 planned step(s)"))
    d = V.decide(claim("above_null"), [failed])
    assert d.verdict == V.NOT_RUN and "did not complete" in d.reason and d.p is None
    d = V.decide(claim("above_null", judge=False, reason="why"), [pt([3.0] * 5, [True] * 5)])
    assert d.verdict == V.NOT_JUDGED and d.p is None


# -- the page against synthetic cells ------------------------------------------------------------------------------
def test_the_page_shows_each_cells_numbers_and_the_verdict_the_rules_give(tmp_path):
    rng = np.random.default_rng(7)
    cells = {name: write_cells(tmp_path / name, name, rng) for name in SUITES}
    results = {name: tmp_path / name for name in SUITES}
    page = P.generate(results, root=REPO)
    measured = P.measure_claims(DATA, results)
    judged = 0
    for res in measured:
        row = next(ln for ln in page.splitlines() if ln.startswith(f"| `{res.claim.id}`"))
        assert f"**{res.verdict}**" in row
        if not res.claim.measured:
            assert res.verdict == V.NOT_RUN and res.claim.reason.replace("|", "\\|") in row
            continue
        spec = MEASURES[res.claim.measure]
        for p in res.points:
            assert len(p.seeds) == len(comparison(load_suite(res.claim.suite), res.claim.comparison).seeds)
            values = []
            for s in p.seeds:
                rec = cells[res.claim.suite][s.cell]
                value = {"theta_gap_relative": rec["selections"]["pool"]["attack_loss"] / 4.0,
                         "theta_gap_reduction": rec["runs"][0]["final_loss"] / 2.0}.get(
                    res.claim.measure, rec["selections"]["pool"]["summary"].get(res.claim.measure))
                assert s.value == pytest.approx(value)
                values.append(spec.show(value))
            assert f"{p.label}: mean" in row and f"(seeds: {', '.join(values)})" in row
        if res.claim.kind == "above_null" and res.claim.measure == "reconstructed_calibrated":
            # the binomial test computed here from the cells' own counts
            for p in res.points:
                passes = sum(1 for s in p.seeds if cells[res.claim.suite][s.cell]["selections"]["pool"]["summary"][
                    "reconstructed_calibrated"] >= 1)
                assert f"{passes} of {len(p.seeds)} beyond their null" in row
        if res.decision.p is not None:
            assert f"**p = {V.fmt_p(res.decision.p)}**: " in row
            judged += 1
    assert judged >= 18


def test_without_results_every_measured_claim_is_not_run_with_its_setup(tmp_path):
    page = P.generate({name: tmp_path / "missing" for name in SUITES}, root=REPO)
    for c in DATA.claims:
        row = next(ln for ln in page.splitlines() if ln.startswith(f"| `{c.id}`"))
        assert f"**{V.NOT_RUN}**" in row
        if c.measured:
            assert f"`{c.suite}` / `{c.comparison}`" in row and "seeds (each retrains the target)" in row


def test_gpu_page_reads_every_measured_claim_from_the_gpu_suite(tmp_path):
    page = P.generate({P.GPU_SUITE: tmp_path / "missing"}, root=REPO, gpu=True)
    for c in DATA.claims:
        row = next(ln for ln in page.splitlines() if ln.startswith(f"| `{c.id}`"))
        if c.measured and c.suite in (*P.GPU_ROUTED, P.GPU_SUITE):
            assert f"`{P.GPU_SUITE}` / `{c.comparison}`" in row and "no finished cells yet" in row
        elif c.measured:   # a suite with no GPU twin (threat-models) is not among the results a GPU page reads
            assert f"`{c.suite}` / `{c.comparison}`" in row and "not among those read here" in row
    assert "n = 100 (50 per class)" in next(ln for ln in page.splitlines() if ln.startswith("| `runkel-privacy`"))


def test_committed_page_is_what_the_generator_writes(monkeypatch):
    monkeypatch.chdir(REPO)
    assert (REPO / "docs" / "claims.md").read_text() == P.generate(root=REPO), (
        "docs/claims.md is out of date: run `python -m reconbench.claims`")
    assert P.main(["--check"]) == 0


# -- the suites ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", SUITES)
def test_claims_suites_cap_by_steps_never_by_seconds(name):
    suite = load_suite(name)
    assert "max_seconds" not in suite.path.read_text()
    for entry in suite.attacks.values():
        assert "max_seconds" not in entry.config and "max_inner_iters" not in entry.config
        if entry.attack in BASELINES:   # no attack steps at all
            continue
        assert isinstance(entry.config.get("steps", entry.config.get("outer_steps")), int)


@pytest.mark.parametrize("name", (*SUITES, P.GPU_SUITE))
def test_claims_targets_draw_exchangeable_members_and_non_members(name):
    """Membership, first-layer and calibrated tests compare training images with held-out ones: every target walks a
    seeded permutation of its data file, so members, decoys and held-out images are exchangeable draws."""
    suite = load_suite(name)
    assert all(t.recipe.problem.order == "shuffled" for t in suite.targets.values())


def test_seed_nulls_gives_every_seed_its_own_null_draws():
    suite = load_suite("claims-a")
    cells = [c for c in expand(suite) if c.cell_id.startswith("mnist-binary--")]
    seeds = {c.protocol(suite).get("null_seed") for c in cells}
    assert seeds == {c.seed for c in cells} and len(seeds) >= 5 and len({c.key(suite) for c in cells}) == len(cells)
    plain = dataclasses.replace(suite, seed_nulls=False)
    assert {c.protocol(plain).get("null_seed") for c in cells} == {None}
    assert cells[1].run_spec(suite).protocol["null_seed"] == cells[1].seed


# -- the margin measure --------------------------------------------------------------------------------------------
def test_margin_score_metric_on_known_margins():
    from plugins.metrics import MarginScore, MarginScoreConfig

    ev = SimpleNamespace(margins=np.array([1.0, 1.05, 2.0, 3.0]), n=4, problem=SimpleNamespace(task="binary"),
                         protocol=SimpleNamespace(base=SimpleNamespace(primary_metric="ssim")),
                         primary_scores=lambda: np.array([0.9, 0.5, math.nan, 0.1]))
    out = MarginScore().compute(ev, MarginScoreConfig())  # type: ignore[arg-type]
    # ranks of the margins 1..4 against the scores' 4, 3, 1 (unmatched: lowest), 2
    assert out["summary"]["margin_score_spearman"] == pytest.approx(1 - 6 * 18 / (4 * 15))
    assert out["summary"]["margin_near_min_share"] == pytest.approx(0.5)
    ev.margins = None
    assert MarginScore().compute(ev, MarginScoreConfig())["summary"]["margin_score_spearman"] is None  # type: ignore


def test_initial_loss_is_the_traces_step_zero():
    from reconbench.runs.execute import initial_loss

    assert initial_loss([{"step": 0.0, "loss": 4.5}, {"step": 1.0, "loss": 2.0}]) == 4.5
    assert initial_loss([{"step": 3, "loss": 4.5}]) is None  # a trace that starts later has no start value
    assert initial_loss([]) is None
    rec = CellRecord(runs=[{"initial_loss": 4.0, "final_loss": 1.0}, {"initial_loss": 2.0, "final_loss": 1.0}])
    assert MEASURES["theta_gap_reduction"].value(rec) == pytest.approx((0.25 + 0.5) / 2)
    assert MEASURES["theta_gap_reduction"].value(CellRecord(runs=[{"final_loss": 1.0}])) is None


def test_claims_read_slim_board_entries(tmp_path):
    """A published board stores slim entries (reconbench/bench/entries.py): null spreads keep their mean and largest
    draw for the board's columns only. The claims' nulls and the run fields they read survive that."""
    from reconbench.bench.entries import make_entry, null_keys
    from reconbench.claims.measure import load_all, measure_point, plans

    rng = np.random.default_rng(5)
    full = write_cells(tmp_path / "full", "claims-b", rng)
    suite = load_suite("claims-b")
    keep = null_keys(k for col in suite.leaderboard.columns for k in col.keys)
    (tmp_path / "slim" / "cells").mkdir(parents=True)
    for cid, rec in full.items():
        (tmp_path / "slim" / "cells" / f"{cid}.json").write_text(json.dumps(make_entry(rec, keep)))
    found = load_all({"claims-b": tmp_path / "slim"})["claims-b"]
    plan = plans({"claims-b": suite})["claims-b"]
    for c in DATA.claims:
        if c.suite != "claims-b":
            continue
        comp = comparison(suite, c.comparison)
        for spec in point_specs(c, comp):
            p = measure_point(c, suite, comp, found, plan, *spec)
            assert len(p.seeds) == len(comp.seeds) and not p.missing, (c.id, spec[0])
            if MEASURES[c.measure].null != "none":
                assert all(s.beyond is not None for s in p.seeds), c.id


def test_the_page_names_the_kind_of_source_not_the_file():
    source_label = P.source_label
    assert source_label("haim2022-slides.txt") == "the authors' slides"
    assert source_label("buzaglo2023-appendix.txt") == "the appendix"
    assert source_label("runkel2024-paper.txt") == "the paper"
    assert source_label("other.txt") == "the paper's text"
    page = (REPO / "docs" / "claims.md").read_text()
    assert ".txt`" not in page and "-slides.txt" not in page
