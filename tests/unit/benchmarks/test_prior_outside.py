"""benchmarks/prior_outside.py: the check from outside of the boards' calibrated headline against candidates without
member information. Its construction reads held-out images only and member sets the boards never drew; its rates
and intervals recompute from the per-draw counts in the committed JSON; docs/calibration.md shows its table."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import beta

from reconbench.bench.cells import expand
from reconbench.bench.suite import load_suite
from reconbench.data import ProblemSpec
from reconbench.evaluation.rates import pass_rate
from reconbench.targets.problems import build_problem

REPO = Path(__file__).resolve().parents[3]
RESULT = REPO / "benchmarks" / "results" / "prior_outside.json"


def _script():
    spec = importlib.util.spec_from_file_location("prior_outside", REPO / "benchmarks" / "prior_outside.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["prior_outside"] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize(("passed", "draws"), [(0, 40), (3, 200), (17, 17), (5, 60)])
def test_the_interval_is_clopper_pearsons(passed, draws):
    """Against the beta-quantile form of the exact interval (and 1 - (alpha/2)^(1/n) at no pass)."""
    got = pass_rate(passed, draws)
    lo = 0.0 if passed == 0 else beta.ppf(0.025, passed, draws - passed + 1)
    hi = 1.0 if passed == draws else beta.ppf(0.975, passed + 1, draws - passed)
    assert got["rate"] == passed / draws
    assert got["interval"] == pytest.approx([lo, hi], rel=1e-9, abs=1e-12)
    if passed == 0:
        assert got["interval"][1] == pytest.approx(1 - 0.025 ** (1 / draws), rel=1e-9)


def test_a_bad_count_is_refused():
    with pytest.raises(ValueError, match="at least one draw"):
        pass_rate(0, 0)
    with pytest.raises(ValueError, match="between 0"):
        pass_rate(5, 4)


def test_member_sets_are_fresh_and_candidates_read_held_out_images_only():
    mod = _script()
    for name in mod.SUITES:   # the boards draw order_seed + seed far below the fresh seeds
        suite = load_suite(name)
        assert max(c.recipe.problem.order_seed for c in expand(suite)) < mod.FRESH_ORDER_SEED
    assert 40 < mod.BOARD_STRIDE   # member sets of one board never reach the next board's
    problem = build_problem(ProblemSpec(dataset="digits", task="multiclass", n_per_class=2,
                                        order_seed=mod.FRESH_ORDER_SEED))
    labels = np.repeat(np.arange(10), 2)
    held = problem.centred(problem.held_out_images(np.arange(len(problem.held_out_indices)))).flatten(1).numpy()
    members = problem.x_train().flatten(1).double().numpy()
    single = mod.candidates(problem, labels, "held_out", np.random.default_rng(3)).flatten(1).numpy()
    for j, c in enumerate(labels):   # each is a held-out image of its label, none a member
        dist = np.abs(held - single[j]).max(axis=1)
        assert dist.min() < 1e-12 and problem.held_out_labels[int(dist.argmin())] == c
        assert np.abs(members - single[j]).max(axis=1).min() > 1e-6
    for kind in ("prototype", "blurred"):   # means of held-out images: within the span of the class's pool
        cand = mod.candidates(problem, labels, kind, np.random.default_rng(4)).flatten(1).numpy()
        assert cand.shape == single.shape and np.isfinite(cand).all()


def test_the_script_runs_one_small_board(tmp_path):
    mod = _script()
    out = tmp_path / "r.json"
    assert mod.main(["--suites", "ci", "--member-sets", "1", "--member-sets-digits", "1", "--draws", "1",
                     "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    board = data["boards"]["ci"]
    assert board["calibration"]["prior_draws"] == 19 and len(board["setups"]) == 2
    assert all(s["threshold_check"] for s in board["setups"])
    assert "| `ci` |" in mod.docs_table(data)


@pytest.mark.skipif(not RESULT.exists(), reason="benchmarks/results/prior_outside.json not written yet")
def test_committed_rates_recompute_and_the_docs_show_them():
    mod = _script()
    data = json.loads(RESULT.read_text())
    for name, board in data["boards"].items():
        rows = [row for s in board["setups"] for row in s["member_sets"]]
        for field, rates in (("passes", board["rates"]), ("passes_held_out_draws_only", board["rates_held_out_draws_only"])):
            for kind in mod.KINDS:
                counts = [p for row in rows for p in row[field][kind]]
                assert rates[kind] == pass_rate(sum(1 for p in counts if p > 0), len(counts)) | {
                    k: rates[kind][k] for k in ("member_sets_with_a_pass", "member_sets", "most_images_passed_in_a_draw")}
        # the prior's draws only raise the threshold: a draw that passes with them passes without them
        for row in rows:
            assert row["threshold"] >= row["threshold_held_out_draws_only"]
            for kind in mod.KINDS:
                assert all(a <= b for a, b in zip(row["passes"][kind], row["passes_held_out_draws_only"][kind],
                                                  strict=True))
        assert board["done"] == {k: board["rates"][k]["rate"] <= 0.05 for k in mod.KINDS}, name
    page = (REPO / "docs" / "calibration.md").read_text()
    assert mod.docs_table(data) in page, "docs/calibration.md: paste `python benchmarks/prior_outside.py --table`"
    # the prose around the table
    section = page.split("## The data prior on every board, checked from outside", 1)[1]
    blurred = max(b["rates"]["blurred"]["rate"] for b in data["boards"].values())
    assert f"at most {100 * blurred:.1f}% of draws" in section
    alone_above = sorted(n for n, b in data["boards"].items() if b["rates_held_out_draws_only"]["prototype"]["rate"] > 0.05)
    assert alone_above == ["cpu-mini", "threat-models"] and "`cpu-mini`'s and\n`threat-models`' held-out-only" in section
    assert all(all(b["done"][k] for k in ("held_out", "prototype")) for b in data["boards"].values())
    assert f"took {data['seconds']:.0f} s" in section
