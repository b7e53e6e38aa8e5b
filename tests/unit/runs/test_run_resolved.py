"""A run is resolved once at its edge (``reconbench run``, a bench cell) and handed down: the protocol is resolved once
per cell, the attack and init configs are built once, search runs get the validated options, and a suite's metric
options reach its column labels."""

from __future__ import annotations

import dataclasses
import json
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _helpers.cli import run_cli
from _helpers.suitekit import toy_targets

from reconbench import config as config_module
from reconbench import plugins
from reconbench.bench.cells import expand
from reconbench.bench.runner import TargetPool, run_cell
from reconbench.bench.suite import SuiteError, load_suite
from reconbench.config import build_config
from reconbench.errors import ReconbenchError
from reconbench.evaluation import protocol as protocol_module
from reconbench.evaluation.reported import label_of, lookup
from reconbench.runs.resolved import CLI_NAMES, resolve_run
from reconbench.runs.spec import RunSpec

TINY = ["--dataset", "digits", "--task", "binary", "--n-per-class", "3", "--widths", "8", "--steps", "20"]
#: a light protocol: the calibrated headline with 2 draws, 1 reported null draw, no figures
LIGHT = {"calibration_draws": 2, "null_draws": 1, "figures": False}


def spy_everywhere(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> list[tuple[Any, ...]]:
    """Replace ``module.name`` in every loaded module that imported it by a wrapper that records each call's
    positional arguments (a module that imports it later, inside a function, reads the patched attribute)."""
    original: Callable[..., Any] = getattr(module, name)
    calls: list[tuple[Any, ...]] = []

    def spy(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return original(*args, **kwargs)

    for mod in list(sys.modules.values()):
        try:
            held = mod.__dict__.get(name) if hasattr(mod, "__dict__") else None
        except Exception:  # a lazy module that refuses attribute access
            continue
        if held is original:
            monkeypatch.setattr(mod, name, spy)
    return calls


def test_the_spy_counts_calls_made_through_any_import(monkeypatch):
    calls = spy_everywhere(monkeypatch, protocol_module, "resolve_protocol")
    from reconbench.evaluation import resolve_protocol as imported  # the package re-exports it

    imported({}, "mlp")
    protocol_module.resolve_protocol({}, "conv")
    assert [c[1] for c in calls] == ["mlp", "conv"]


# -- one bench cell -------------------------------------------------------------------------------------------
SUITE = textwrap.dedent("""\
    [suite]
    name = "once"
    seeds = [0]
    search_runs = 2

    [protocol]
    calibration_draws = 2
    null_draws = 1
    figures = false

    """) + toy_targets(20) + textwrap.dedent("""
    [attacks.toy_identity]
    config = { steps = 1 }

    [inits.gaussian]
    config = { scale = 0.05 }

    [[grid]]
    targets = ["bin"]
    attacks = "*"
    """)


def test_a_bench_cell_resolves_its_protocol_once(tmp_path, toy_attack_registered, monkeypatch):
    path = tmp_path / "suite.toml"
    path.write_text(SUITE)
    suite = load_suite(path)
    (cell,) = expand(suite)
    targets = TargetPool(tmp_path / "out", None, None, quiet=True)
    targets.get(cell)   # the target is trained outside the count
    calls = spy_everywhere(monkeypatch, protocol_module, "resolve_protocol")
    attack_builds = spy_everywhere(monkeypatch, config_module, "build_config")
    rec = run_cell(cell, suite, cell.run_spec(suite), tmp_path / "out", targets, invocation=0, data_root=None,
                   quiet=True)
    assert rec["status"] == "ok", rec["error"]
    assert len(rec["runs"]) == 2 and rec["selections"]["blind"]["run"] is not None   # selections were scored too
    assert len(calls) == 1, f"resolve_protocol ran {len(calls)} times in one cell"
    # the attack's config is built once for both runs (the cell record's header builds the init config it records
    # for a cell that fails before its run, beside the one the run resolves)
    assert [c[0].__name__ for c in attack_builds].count("ToyConfig") == 1


# -- one command-line run -------------------------------------------------------------------------------------
@pytest.mark.slow
def test_a_cli_run_resolves_once_and_runs_the_validated_steps(tmp_path, capsys, toy_attack_registered, monkeypatch):
    calls = spy_everywhere(monkeypatch, protocol_module, "resolve_protocol")
    builds = spy_everywhere(monkeypatch, config_module, "build_config")
    out = tmp_path / "res"
    args = ["run", "--attack", "toy_identity", *TINY, "--search-runs", "2", "--set", "steps=2.0", "--out", str(out),
            "-q", *(a for k, v in LIGHT.items() for a in ("--protocol-set", f"{k}={str(v).lower()}"))]
    code, _, err = run_cli(args, capsys)
    assert code == 0, err
    assert len(calls) == 1, f"resolve_protocol ran {len(calls)} times in one run"
    built = [c[0].__name__ for c in builds]
    assert built.count("ToyConfig") == 1 and built.count("GaussianConfig") == 1, built
    result = json.loads((out / "result.json").read_text())
    # --set steps=2.0 was validated once into the integer 2, and that value ran (the spec records the input as given)
    assert [r["config"]["steps"] for r in result["runs"]] == [2, 2]
    assert all(isinstance(r["config"]["steps"], int) for r in result["runs"])
    assert result["spec"]["attack_config"] == {"steps": 2.0}


def test_a_bad_set_value_is_refused_before_training_with_the_option_named(tmp_path, capsys, toy_attack_registered):
    code, _, err = run_cli(["run", "--attack", "toy_identity", *TINY, "--set", "steps=-1.5", "--out",
                            str(tmp_path / "r"), "-q"], capsys)
    assert code != 0 and "--set steps" in err and "Traceback" not in err
    assert not (tmp_path / "r").exists()


# -- search runs get the validated options ---------------------------------------------------------------------
def test_search_run_configs_equal_a_fresh_build_of_proposal_and_fixed_options():
    attack = plugins.attack("multiclass_kkt")
    fixed = {"steps": 7, "lr": 0.5}
    run = resolve_run(RunSpec(attack="multiclass_kkt", attack_config=fixed, search_runs=4), "mlp")
    rng = np.random.default_rng(0)
    for _ in range(8):
        proposal = {k: d.sample(rng) for k, d in attack.search_space().items()}
        expected = build_config(attack.config_cls, {**proposal, **fixed}, "independent")
        assert run.run_config(proposal) == expected
        assert run.run_config(proposal) is not run.attack_config   # each run its own copy


def test_a_proposal_out_of_range_is_refused_naming_the_option():
    run = resolve_run(RunSpec(attack="multiclass_kkt"), "mlp")
    with pytest.raises(ReconbenchError, match=r"attack multiclass_kkt\.lr: -1\.0 is out of range"):
        run.run_config({"lr": -1.0})
    with pytest.raises(ReconbenchError, match="unknown option 'lrr'.*Did you mean: lr"):
        run.run_config({"lrr": 0.1})


def test_the_init_config_takes_the_attack_overrides_unless_the_user_set_them():
    run = resolve_run(RunSpec(attack="haim_binary_kkt"), "mlp")
    cfg = run.run_config({"init_scale": 0.003})
    init_cfg, applied = run.init_config_for(cfg)
    assert applied == {"scale": 0.003} and init_cfg.scale == 0.003 and run.init_config.scale != 0.003
    pinned = resolve_run(RunSpec(attack="haim_binary_kkt", init_config={"scale": 0.5}), "mlp", CLI_NAMES)
    init_cfg, applied = pinned.init_config_for(pinned.run_config({"init_scale": 0.003}))
    assert applied == {} and init_cfg.scale == 0.5


@pytest.mark.parametrize(("spec", "message"), [
    (RunSpec(attack="haim_binary_kkt", attack_config={"stepz": 1}), r"--set: unknown option 'stepz'"),
    (RunSpec(attack="haim_binary_kkt", init_config={"scale": "big"}), r"--init-set scale: expected a number"),
    (RunSpec(attack="haim_binary_kkt", protocol={"top_k": 0}), r"protocol"),
    (RunSpec(attack="haim_binary_kkt", dtype="float16"), r"unknown dtype 'float16'"),
    (RunSpec(attack="haim_binary_kkt", search="no_such_search"), r"unknown search strategy 'no_such_search'"),
])
def test_resolving_refuses_each_bad_part_in_one_line(spec, message):
    with pytest.raises(ReconbenchError, match=message) as info:
        resolve_run(spec, "mlp", CLI_NAMES)
    assert "\n" not in str(info.value).strip()


def test_the_spec_stays_the_recorded_form():
    spec = RunSpec(attack="haim_binary_kkt", attack_config={"steps": 5.0}, seed=3)
    run = resolve_run(spec, "mlp")
    assert run.spec is spec and spec.to_dict()["attack_config"] == {"steps": 5.0}
    assert run.fixed == {"steps": 5} and isinstance(run.fixed["steps"], int)


# -- a suite's metric options reach its column labels -----------------------------------------------------------
def _suite_with(tmp_path: Path, protocol: str, columns: str) -> Any:
    text = SUITE.replace("[protocol]\n", "[protocol]\n" + protocol) + "\n[leaderboard]\n" + columns
    path = tmp_path / "suite.toml"
    path.write_text(text)
    return load_suite(path)


CORR_COLUMN = 'columns = [{ key = "reconstructed_corr", higher_is_better = true }]\n'


def test_a_suite_threshold_reaches_the_correlation_column_label(tmp_path, toy_attack_registered):
    suite = _suite_with(tmp_path, "corr = { threshold = 0.75 }\n", CORR_COLUMN)
    assert [c.name for c in suite.leaderboard.columns] == ["corr > 0.75"]


def test_the_default_threshold_gives_the_published_label(tmp_path, toy_attack_registered):
    suite = _suite_with(tmp_path, "", CORR_COLUMN)
    assert [c.name for c in suite.leaderboard.columns] == ["corr > 0.9"]


def test_a_column_without_a_name_needs_a_declared_key(tmp_path, toy_attack_registered):
    with pytest.raises(SuiteError, match="needs a `name`"):
        _suite_with(tmp_path, "", 'columns = [{ key = "made_up_key", higher_is_better = true }]\n')


def test_a_label_takes_the_recorded_or_resolved_option_else_the_default():
    rep = lookup("reconstructed_corr")
    assert rep is not None and "{threshold" in rep.label
    resolved = protocol_module.resolve_protocol({"corr.threshold": 0.6}, "mlp")
    assert label_of(rep, resolved.metric_configs) == "corr > 0.6"
    assert label_of(rep, {"corr": {"threshold": 0.95}}) == "corr > 0.95"   # as result.json records it
    assert label_of(rep, None) == "corr > 0.9"
    plain = lookup("reconstructed_calibrated")
    assert plain is not None and label_of(plain, {"corr": {"threshold": 0.6}}) == plain.label


def test_published_default_columns_keep_their_labels():
    from reconbench.bench.suite.columns import default_columns

    resolved = protocol_module.resolve_protocol({"corr.threshold": 0.5}, "mlp")
    assert [c.name for c in default_columns(resolved.metric_configs)] == [c.name for c in default_columns()]
    assert all("{" not in c.name for c in default_columns())


def test_resolved_run_is_frozen():
    run = resolve_run(RunSpec(attack="haim_binary_kkt"), "mlp")
    with pytest.raises(dataclasses.FrozenInstanceError):
        run.attack = plugins.attack("multiclass_kkt")  # type: ignore[misc]


# -- one way to declare a range -------------------------------------------------------------------------------
def test_a_range_is_refused_alike_for_a_plugin_option_the_protocol_and_a_suite_key(tmp_path, toy_attack_registered):
    from reconbench.evaluation.protocol import Protocol

    messages = []
    for values in ({"corr.threshold": 1.5}, {"good_threshold": 1.0}):
        with pytest.raises(ReconbenchError) as info:
            protocol_module.resolve_protocol(values, "mlp")
        messages.append(str(info.value))
    path = tmp_path / "suite.toml"
    path.write_text(SUITE.replace("search_runs = 2", "search_runs = 0"))
    with pytest.raises(SuiteError) as info:
        load_suite(path)
    messages.append(str(info.value))
    assert all("is out of range" in m and "it must be" in m for m in messages), messages
    # the protocol's bounds are declared on its fields, where `reconbench list` and the docs read them
    from reconbench.config import field_limits

    assert {"good_threshold", "top_k", "avg_threshold", "calibration_draws"} <= set(field_limits(Protocol))


def test_every_declared_default_lies_within_its_own_bounds():
    from reconbench.config import field_limits
    from reconbench.evaluation.protocol import Protocol

    classes = [Protocol] + [e.obj.config_cls for kind in ("attacks", "inits", "metrics", "defenses", "searches")
                            for e in plugins.host().entries(kind)]
    for cls in classes:
        if not dataclasses.is_dataclass(cls):
            continue
        default = cls()
        for name, limit in field_limits(cls).items():
            value = getattr(default, name)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                assert limit.holds(value), f"{cls.__name__}.{name} = {value} outside {limit.describe()}"
