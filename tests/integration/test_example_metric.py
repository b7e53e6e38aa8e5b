"""The external metric of examples/ is a real plugin: it passes the conformance suite and its own tests, and its
declared numbers become a board's column, with values from the cells, without any change to reconbench."""

from __future__ import annotations

import json
import math

from _helpers.examples import EXAMPLES, example_registered, load_module

from reconbench import plugins
from reconbench.bench.runner import run_suite
from reconbench.bench.suite import load_suite
from reconbench.leaderboard.render import build_leaderboard

EXAMPLE = EXAMPLES / "reconbench-psnr-metric"

SUITE = """\
[suite]
name = "psnr-toy"
seeds = [0, 1]
search_runs = 1

[protocol]
figures = false

[leaderboard]
figures = false

[targets.bin]
dataset = "digits"
task = "binary"
n_per_class = 3
widths = [8]
steps = 30

[attacks.toy_identity]
[inits.gaussian]
[inits.ground_truth]

[[grid]]
targets = ["bin"]
attacks = ["toy_identity"]
inits = ["gaussian", "ground_truth"]
"""


def test_example_metric_conforms_and_becomes_a_board_column(tmp_path, toy_attack_registered):
    with example_registered("reconbench-psnr-metric", "example-psnr"):
        assert "psnr" in plugins.host().names("metrics")
        tests = load_module("example_psnr_tests", EXAMPLE / "tests" / "test_psnr.py")
        tests.test_conforms()
        tests.test_a_constant_offset_gives_the_closed_form()

        path = tmp_path / "psnr-toy.toml"
        path.write_text(SUITE)
        suite = load_suite(path, strict=True)
        res, lb = tmp_path / "res", tmp_path / "lb"
        run_suite(suite, res, quiet=True, command="test")
        data = build_leaderboard(suite, res, lb, command="test", figures=False)
        label = "mean PSNR of matched images (dB)"
        assert label in [c["name"] for c in data["columns"]]
        readme = (lb / "README.md").read_text()
        assert label in readme
        means = {}
        for init in ("gaussian", "ground_truth"):
            values = [json.loads((res / "cells" / f"bin--toy_identity--{init}--s{seed}.json").read_text())
                      ["selections"]["pool"]["summary"]["mean_psnr_matched"] for seed in (0, 1)]
            assert all(0.0 <= v <= 100.0 for v in values)
            row = next(r for r in data["tables"]["pool"] if r["init"] == init)
            assert math.isclose(row["metrics"][label]["mean"], sum(values) / 2, rel_tol=1e-12)
            means[init] = sum(values) / 2
        # the toy attack returns its start shifted by at most 0.01: from the training images themselves that is
        # at least 40 dB (clipping at 0 and 1 only lowers the error); from Gaussian noise, far less
        assert means["ground_truth"] >= 40.0 > means["gaussian"] + 10.0
