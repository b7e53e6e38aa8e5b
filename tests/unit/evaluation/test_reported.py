"""Metrics declare their own numbers: a new metric is one file, and its column reaches the boards, the interval
clipping and the console with no change elsewhere."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import torch
from _helpers.suitekit import toy_targets

from reconbench import hookimpl, plugins
from reconbench.bench.suite import ColumnSpec, default_columns, load_suite
from reconbench.evaluation import reported
from reconbench.interfaces import Metric, MetricResult, NoOptions, Reported
from reconbench.leaderboard.render import build_leaderboard
from reconbench.leaderboard.tables import value_range
from reconbench.records import StoredEvaluation


@dataclass(frozen=True)
class BrightMetric(Metric):
    """Share of training images whose matched reconstruction is brighter than the image: a number no built-in has."""

    name: str = "test_brightness"
    description: str = "test-only metric: share of reconstructions brighter than their training image"
    config_cls: type = NoOptions
    headline: str = "brighter_share"
    reports: tuple[Reported, ...] = (
        Reported("brighter_share", "brighter share", "share", higher_is_better=False, fmt=".2f", column=45, console=65),
    )

    def compute(self, evaluation: Any, config: Any) -> MetricResult:
        recon = evaluation.recon_display.numpy().reshape(evaluation.n, -1).mean(1)
        orig = evaluation.originals.numpy().reshape(evaluation.n, -1).mean(1)
        return {"summary": {"brighter_share": float(np.mean(recon > orig))}, "per_image": {}}


class BrightPlugin:
    @hookimpl
    def register_metrics(self, register):  # type: ignore[no-untyped-def]
        register(BrightMetric())


@pytest.fixture
def bright_metric_registered():
    host = plugins.host()
    name = host.register(BrightPlugin(), name="bright-test-plugin")
    yield
    host.unregister(name)


def test_builtin_declarations_give_the_published_default_columns():
    # the columns every published board was rendered with, before metrics declared them
    assert default_columns() == (
        ColumnSpec("reconstructed (calibrated)", ("reconstructed_calibrated",), True, ".1f"),
        ColumnSpec("calibrated, own bar", (), True, ".1f", source="calibrated", optional=True),
        ColumnSpec("papers' protocol", ("reconstructed", "n_reconstructed", "good_count"), True, ".1f"),
        ColumnSpec("top-10 SSIM", ("top_k_mean_ssim", "ssim_top10", "top10_ssim"), True, ".3f"),
        ColumnSpec("membership precision", ("membership_precision", "precision_vs_decoys"), True, ".2f"),
        ColumnSpec("membership AUC", ("membership_auc",), True, ".2f", optional=True),
        ColumnSpec("distinct share", ("distinct_share",), True, ".2f"),
        ColumnSpec("init copies", ("init_copy_share",), False, ".2f"),
        ColumnSpec("attack loss", (), False, ".3g", source="attack_loss"),
        ColumnSpec("wall s", (), False, ".1f", source="wall_seconds"),
    )


def test_every_summary_number_of_a_real_evaluation_is_declared(tmp_path):
    """Nothing the built-in evaluation reports is left to a guess from its name."""
    from reconbench.data import ProblemSpec
    from reconbench.evaluation import evaluate
    from reconbench.targets.problems import build_problem

    problem = build_problem(ProblemSpec(dataset="digits", task="multiclass", n_per_class=1, num_classes=3))
    cand = problem.x_train(torch.float64)
    ev = evaluate(problem, cand, family="mlp", labels=torch.as_tensor(problem.train_labels),
                  protocol={"calibration_draws": 2, "null_draws": 1})
    declared = reported.declared()
    numeric = [k for k, v in ev["summary"].items() if isinstance(v, int | float) and not isinstance(v, bool)]
    missing = [k for k in numeric if k not in declared and k != "calibrated_threshold"]
    assert missing == []
    for key in numeric:
        if key in declared and key != "calibrated_threshold":
            lo, hi = reported.bounds(declared[key], problem.n)
            slack = 1e-12  # a correlation of identical images rounds to 1 + a few ulps
            assert (lo is None or ev["summary"][key] >= lo - slack) and (hi is None or ev["summary"][key] <= hi + slack), key


def test_an_external_metric_reaches_the_board_and_the_console(tmp_path, toy_attack_registered,
                                                             bright_metric_registered):
    from _helpers.recordkit import cell_record, selection, write_results

    from reconbench.bench.cells import expand
    from reconbench.cli.run_cmd import headline_lines
    from reconbench.data import ProblemSpec
    from reconbench.evaluation import evaluate
    from reconbench.targets.problems import build_problem

    assert value_range("brighter_share") == (0.0, 1.0)
    assert [r.key for r in reported.console_keys()].index("brighter_share") > 0
    suite_file = tmp_path / "toy.toml"
    suite_file.write_text('[suite]\nname = "toy"\nseeds = [0]\nsearch_runs = 1\n\n' + toy_targets(20)
                          + '\n[attacks.toy_identity]\nconfig = { steps = 1 }\n\n[inits.gaussian]\n'
                          'config = { scale = 0.05 }\n\n[[grid]]\ntargets = ["bin"]\nattacks = ["toy_identity"]\n')
    suite = load_suite(suite_file)
    assert "brighter share" in [c.name for c in suite.leaderboard.columns]
    # the evaluation computes it (the training images as candidates) and the console shows it ...
    problem = build_problem(ProblemSpec(dataset="digits", task="binary", n_per_class=2))
    evaluation = evaluate(problem, problem.x_train(torch.float64), family="mlp",
                          labels=torch.as_tensor(problem.train_labels),
                          protocol={"calibration_draws": 2, "null_draws": 1, "figures": False})
    assert 0.0 <= evaluation["summary"]["brighter_share"] <= 1.0
    lines = headline_lines(StoredEvaluation.from_dict(evaluation, "evaluation"))
    assert any(line.strip().startswith("brighter_share [lower = more leakage]") for line in lines)
    # ... and a board of cells that recorded it has its column (cells built from the records, no suite run)
    cells = [cell_record(cell, suite, {"pool": selection(evaluation["summary"])}) for cell in expand(suite)]
    res, lb = write_results(tmp_path / "res", cells), tmp_path / "lb"
    build_leaderboard(suite, res, lb, figures=False)
    readme = (lb / "README.md").read_text()
    header = next(line for line in readme.splitlines() if "papers' protocol" in line and line.startswith("|"))
    assert "brighter share" in header
    data = json.loads((lb / "results.json").read_text())
    assert any("brighter share" in json.dumps(v) for v in data.values())
