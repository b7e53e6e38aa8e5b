"""The external defense of CONTRIBUTING.md is a real plugin: it passes the conformance suite and its own tests, and
it shows up in a suite's privacy-utility table without any change to reconbench."""

from __future__ import annotations

import json

from _helpers.examples import EXAMPLES, example_registered, load_module

from reconbench import plugins
from reconbench.bench.runner import run_suite
from reconbench.bench.suite import load_suite
from reconbench.leaderboard.render import build_leaderboard
from reconbench.leaderboard.verify import check_readme

EXAMPLE = EXAMPLES / "reconbench-lowrank-defense"

SUITE = """\
[suite]
name = "lowrank-toy"
seeds = [0, 1]
search_runs = 1

[protocol]
figures = false

[leaderboard]
figures = true

[targets.bin]
dataset = "digits"
task = "binary"
n_per_class = 3
widths = [8]
steps = 30

[attacks.toy_identity]
[inits.gaussian]

[defenses.low_rank]
values = [0.5, 0.1]

[defenses.prune]
defense = "magnitude_prune"
values = [0.9]

[privacy.toy]
title = "Toy privacy-utility axis"
targets = ["bin"]
attacks = ["toy_identity"]
inits = ["gaussian"]
"""


def test_example_defense_conforms_and_lands_in_the_privacy_table(tmp_path, toy_attack_registered):
    with example_registered("reconbench-lowrank-defense", "example-lowrank"):
        assert "low_rank" in plugins.host().names("defenses")
        tests = load_module("example_lowrank_tests", EXAMPLE / "tests" / "test_low_rank.py")
        tests.test_conforms()
        tests.test_truncation_error_is_the_dropped_singular_values()

        path = tmp_path / "lowrank-toy.toml"
        path.write_text(SUITE)
        suite = load_suite(path, strict=True)
        assert [p.target for p in suite.privacy[0].points] == [
            "bin", "bin@low_rank=0.5", "bin@low_rank=0.1", "bin@prune=0.9"]
        res, lb = tmp_path / "res", tmp_path / "lb"
        report = run_suite(suite, res, quiet=True, command="test")
        assert not report.failed if hasattr(report, "failed") else True
        data = build_leaderboard(suite, res, lb, command="test")
        rows = data["privacy"]["toy"]["rows"]
        assert "membership AUC" in [c["name"] for c in data["columns"]]  # the cells computed the membership test
        assert [(r["defense"], r["strength"]) for r in rows] == [
            ("none", None), ("low_rank", 0.5), ("low_rank", 0.1), ("prune", 0.9)]
        for r in rows:  # the table repeats each defended target's card: accuracy and the defense's records
            cell = json.loads((lb / "cells" / f"{r['target']}--toy_identity--gaussian--s0.json").read_text())
            card = json.loads((lb / "targets" / f"{cell['target']['recipe_key']}.json").read_text())
            assert r["test_accuracy"] == 1.0 - card["metrics"]["test_error"]
            headline = r["attacks"]["toy_identity / gaussian"]["headline"]
            assert headline["n"] == 2 and len(headline["values"]) == 2
            calibrated = [json.loads((lb / "cells" / f"{r['target']}--toy_identity--gaussian--s{s}.json").read_text())
                          ["selections"]["pool"]["summary"]["reconstructed_calibrated"] for s in (0, 1)]
            assert headline["values"] == calibrated  # the calibrated headline, not the papers' SSIM count
            if r["defense"] == "low_rank":
                assert card["metrics"]["defense"]["name"] == "low_rank"
                assert card["metrics"]["defense"]["config"] == {"rank_fraction": r["strength"]}
                assert 0 < r["defense_records"]["rank_kept_share"] <= r["strength"] + 0.2
        readme = (lb / "README.md").read_text()
        assert check_readme(suite, lb) == []  # --verify re-renders the privacy section from the cells too
        assert "## Toy privacy-utility axis" in readme and "rank_fraction = 0.1" in readme
        assert (lb / "figures" / "privacy-toy.png").stat().st_size > 1000
        assert sum(r["attacks"]["toy_identity / gaussian"]["pareto"] for r in rows) >= 1
