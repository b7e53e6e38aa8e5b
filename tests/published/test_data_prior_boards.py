"""The data prior on the ci and cpu-mini boards (protocol ``prior_draws`` and the ``data_prior`` baseline row), what
the claims page says its boards' bound is against, the candidate count it states, a batch of runs counted once in a
cell's attack time, and a published board checked against the suite version it was rendered from."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import tomllib

from reconbench import plugins
from reconbench.attack.candidates import default_m
from reconbench.bench.cells import expand
from reconbench.bench.runner import run_suite
from reconbench.bench.suite import load_suite
from reconbench.claims.page import DEFAULT_RESULTS, prior_bound_text
from reconbench.evaluation.protocol import resolve_protocol
from reconbench.interfaces import Knowledge
from reconbench.leaderboard.published_suite import published_suite
from reconbench.leaderboard.verify import _attack_seconds_problem, _record_problems
from reconbench.records import BoardResults, CellRecord
from reconbench.records.target_quantities import TARGET_QUANTITIES
from reconbench.runs.seconds import attack_seconds, summed_seconds

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", ["ci", "cpu-mini"])
def test_every_cell_calibrates_against_the_data_prior_and_every_target_has_a_data_prior_row(name):
    suite = load_suite(name)
    raw = tomllib.loads(suite.path.read_text())   # read here without the suite loader
    assert raw["protocol"]["prior_draws"] == 19
    cells = expand(suite)
    for c in cells:
        cal = resolve_protocol(c.protocol(suite), c.recipe.family).calibration_dict()
        assert cal["prior"]["draws"] == 19 and cal["prior"]["fpr_bound_for_prior_candidates"] == pytest.approx(1 / 20)
    prior = [c for c in cells if c.attack.attack == "data_prior"]
    # the row averages the partition start's decoys: non-member images, no member information
    assert prior and {c.init.regime for c in prior} == {"partition"}
    main_seeds = set(suite.seeds)
    for target in {c.target for c in cells if "@" not in c.cell_id}:
        assert {c.seed for c in prior if c.target == target} == main_seeds, target


def test_the_claims_page_says_what_each_boards_bound_is_against():
    text = prior_bound_text(list(DEFAULT_RESULTS))
    page = (REPO / "docs" / "claims.md").read_text()
    rules = page.split("## Verdict rules", 1)[1].split("## Claims", 1)[0]
    assert text in rules
    held_only, with_prior = text.split("calibrated on held-out draws only")[0], text.split("data-prior draws")[0]
    for name in DEFAULT_RESULTS:
        j = tomllib.loads(load_suite(name).path.read_text()).get("protocol", {}).get("prior_draws", 0)
        if j:
            assert f"`{name}` (K = 19, J = {j})" in text and f"`{name}`" not in held_only
        else:
            assert f"`{name}` (K = 19)" in held_only and f"`{name}` (K = 19, J" not in with_prior


def test_the_claims_page_states_each_attacks_own_candidate_count():
    """m = 2n for the papers' attacks, m = n for projection_law: the count the runner gives an attack by default."""
    page = (REPO / "docs" / "claims.md").read_text()
    stated = re.findall(r"; (\w+), [^;|]*? pooled, m = (\d*n)\b", page)
    assert {a for a, _ in stated} >= {"haim_binary_kkt", "projection_law"}
    knowledge = Knowledge(task="binary", num_classes=2, out_dim=1, input_shape=(1, 8, 8), n=10)
    for attack, m in stated:
        factor = default_m(knowledge, plugins.attack(attack).candidate_factor) // 10
        assert m == ("n" if factor == 1 else f"{factor}n"), attack


def test_a_batch_of_runs_counts_once_in_the_attack_time():
    """Runs 0 and 1 advanced together (each clock started with the batch), run 2 alone."""
    runs = [{"run": 0, "seconds": 4.0, "batch": {"runs": [0, 1]}}, {"run": 1, "seconds": 5.0, "batch": {"runs": [0, 1]}},
            {"run": 2, "seconds": 2.5}]
    assert attack_seconds(runs) == 7.5 and summed_seconds(runs) == 11.5
    assert attack_seconds(runs[2:]) == summed_seconds(runs[2:]) == 2.5
    assert attack_seconds([]) == 0.0
    # a slim entry drops the batch record: its time is checked as the sum of some of its runs' seconds
    slim = [{k: v for k, v in r.items() if k != "batch"} for r in runs]
    assert _attack_seconds_problem(7.5, slim, slim=True) is None
    assert _attack_seconds_problem(11.5, slim, slim=True) is None
    assert _attack_seconds_problem(7.5, slim, slim=False) is not None
    assert "sum of some" in (_attack_seconds_problem(3.0, slim, slim=True) or "")
    assert _attack_seconds_problem(7.5, runs, slim=False) is None and _attack_seconds_problem(9.0, runs, slim=False)


def test_a_bench_cell_records_its_batch_once_and_verify_accepts_both_records(tmp_path):
    suite = load_suite("ci")
    cid = "digits-binary--haim_binary_kkt--gaussian--s0"
    run_suite(suite, tmp_path, only=[cid], quiet=True)
    raw = json.loads((tmp_path / "cells" / f"{cid}.json").read_text())
    runs = raw["runs"]
    assert len(runs) == 2 and all(r.get("batch") for r in runs)   # the KKT attack advanced both runs together
    assert raw["attack_seconds"] == max(r["seconds"] for r in runs) <= raw["wall_seconds"]

    def problems(rec: dict) -> list[str]:
        return [p for p in _record_problems(tmp_path, cid, rec, CellRecord.from_dict(rec, cid)) if "attack_seconds" in p]

    unsealed = {k: v for k, v in raw.items() if k != "seal"}
    assert problems(unsealed) == []
    assert problems({**unsealed, "attack_seconds": sum(r["seconds"] for r in runs)}) == []   # a cell written before
    assert problems({**unsealed, "attack_seconds": 0.5 * raw["attack_seconds"]})


def test_margin_set_size_is_lower_is_better():
    assert TARGET_QUANTITIES["margin_set_size"].higher_is_better is False
    assert TARGET_QUANTITIES["theta_residual"].higher_is_better is False
    columns = {c.name: c.higher_is_better for c in load_suite("training-length").leaderboard.columns}
    assert columns["margin set size"] is False   # the board's next render marks it lower-is-better


def test_a_board_is_checked_against_the_suite_version_it_was_rendered_from(tmp_path):
    board = tmp_path / "ci"
    shutil.copytree(REPO / "leaderboards" / "ci", board)
    suite = load_suite("ci")
    header = BoardResults.from_dict(json.loads((board / "results.json").read_text())).header
    got = published_suite(suite, board)
    if header.suite_sha256 == suite.text_sha256:
        assert got.commit is None and got.suite is suite and got.note(board) is None
    else:
        if shutil.which("git") is None or not (REPO / ".git").exists():
            pytest.skip("the suite's earlier version is read from git history, which this checkout lacks")
        assert got.commit == header.rendered_with.git_commit
        assert got.suite.text_sha256 == header.suite_sha256 and got.suite.path == suite.path
        assert got.stale + got.not_run > 0 and "publish the board again" in (got.note(board) or "")
    # a header naming a commit the history does not hold: the current suite, as before
    data = json.loads((board / "results.json").read_text())
    data["header"]["rendered_with"]["git_commit"] = "0" * 40
    data["header"]["suite_sha256"] = "f" * 64
    (board / "results.json").write_text(json.dumps(data))
    fallback = published_suite(suite, board)
    assert fallback.commit is None and fallback.suite is suite
