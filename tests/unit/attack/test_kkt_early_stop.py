"""The KKT attacks' recorded early stop: off by default without touching any run key, the same stop in the batched
and the sequential loop, the candidates of the step it names, the rule's numbers recomputed from a full run, and a
converged run counted as a finished one."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch
from test_kkt_attacks import tiny_card
from test_kkt_batched import _assert_same_run, _setup

from reconbench import plugins
from reconbench.attack.kkt.loop import StationarityConfig
from reconbench.attack.outcome import derive_run_outcome
from reconbench.attack.search import objective
from reconbench.bench.entries import expand
from reconbench.config import build_config, config_to_dict
from reconbench.provenance import config_hash
from reconbench.runs import RunSpec, run_attack
from reconbench.runs.pool import select_runs

BOARDS = Path(__file__).resolve().parents[3] / "leaderboards"
KKT = ("haim_binary_kkt", "multiclass_kkt", "general_loss_wd")
#: window and tolerance at which the three runs of the tiny binary setup converge at different steps (180-240 of 400)
WINDOW, TOL = 20, 0.1


def test_the_options_enter_a_configs_dict_only_when_set():
    for name in KKT:
        cls = plugins.get("attacks", name).config_cls
        default = config_to_dict(build_config(cls, {}))
        assert "early_stop" not in default and "early_stop_window" not in default
        on = config_to_dict(build_config(cls, {"early_stop": 0.01}))
        assert on["early_stop"] == 0.01 and "early_stop_window" not in on
        assert config_to_dict(build_config(cls, {"early_stop": 0.01, "early_stop_window": 50}))["early_stop_window"] == 50
        assert build_config(cls, default) == build_config(cls, {})   # a record without them reads back the same


def test_every_published_run_key_is_recomputed_unchanged():
    """Each search run stored on a published board: its key from the recipe, the spec, its index and its config as
    the attack builds it now (config_to_dict) is the key stored when it ran."""
    checked = 0
    for path in sorted(BOARDS.glob("*/cells/*.json")):
        rec = expand(json.loads(path.read_text()))
        spec = rec.get("spec") or {}
        if spec.get("attack") not in KKT:
            continue
        cls = plugins.get("attacks", spec["attack"]).config_cls
        for run in rec.get("runs") or []:
            if "run_key" not in run:
                continue
            cfg = config_to_dict(build_config(cls, run["config"]))
            key = config_hash({"card": rec["target"]["recipe_key"], "spec": spec, "run": run["run"], "cfg": cfg})
            assert key == run["run_key"], f"{path.name} run {run['run']}"
            checked += 1
    assert checked >= 100


def _runs(steps: int, eval_every: int = 50):
    return _setup("haim_binary_kkt", runs=3, config={"steps": steps, "eval_every": eval_every, "early_stop": TOL,
                                                    "early_stop_window": WINDOW})


@pytest.mark.slow
def test_batched_and_sequential_runs_stop_at_the_same_step():
    attack, target, labels, configs, fresh = _runs(400)
    x0s, gens = fresh()
    sequential = [attack.run(target, x0, labels, c, generator=g) for x0, c, g in zip(x0s, configs, gens, strict=True)]
    x0s, gens = fresh()
    batched = attack.run_batched(target, x0s, labels, configs, generators=gens)
    stops = [s.steps for s in sequential]
    assert all(s.stopped == "converged" for s in sequential) and len(set(stops)) > 1   # frozen runs ride along
    for b, s in zip(batched, sequential, strict=True):
        _assert_same_run(b, s)
        assert b.steps == s.steps and b.steps % WINDOW == 0 and 2 * WINDOW <= b.steps < 400
        assert b.early_stop is not None and s.early_stop is not None
        assert b.early_stop["step"] == b.steps and b.early_stop["window"] == WINDOW and b.early_stop["tol"] == TOL
        # the two loops agree to about 1e-8 relative in each window mean; their relative difference (about 0.02)
        # carries that error divided by the mean, so 1e-6 absolute
        assert b.early_stop["loss_change"] == pytest.approx(s.early_stop["loss_change"], abs=1e-6)
        assert f"converged at step {b.steps} of 400" in b.message and b.trace[-1]["step"] == b.steps


@pytest.mark.slow
def test_a_converged_run_returns_its_step_and_its_rule_holds_on_a_full_run():
    """The stopped run's candidates are those of the same run planned for exactly that many steps, and the loss
    change it records is the one recomputed from the full run's loss at every step (window means)."""
    attack, target, labels, configs, fresh = _runs(400, eval_every=1)
    x0s, gens = fresh()
    stopped = attack.run(target, x0s[0], labels, configs[0], generator=gens[0])
    t = stopped.steps
    assert stopped.stopped == "converged" and stopped.early_stop is not None
    full_cfg = dataclasses.replace(configs[0], early_stop=0.0, steps=t)
    x0s, gens = fresh()
    full = attack.run(target, x0s[0], labels, full_cfg, generator=gens[0])
    torch.testing.assert_close(stopped.candidates, full.candidates, rtol=0, atol=0)
    loss = [row["loss"] for row in full.trace]          # L(x_s) for s = 0..t (the last row: the final loss at t)
    now = sum(loss[t - WINDOW + 1:t + 1]) / WINDOW
    before = sum(loss[t - 2 * WINDOW + 1:t - WINDOW + 1]) / WINDOW
    assert stopped.early_stop["loss_change"] == pytest.approx(abs(now - before) / abs(before), rel=1e-9)
    assert stopped.early_stop["loss_change"] <= TOL and stopped.early_stop["candidate_change"] <= TOL


@pytest.mark.slow
def test_a_run_that_does_not_converge_in_its_budget_completes_unchanged():
    attack, target, labels, configs, fresh = _setup("haim_binary_kkt", runs=3, config={"steps": 120, "eval_every": 50})
    x0s, gens = fresh()
    off = attack.run_batched(target, x0s, labels, configs, generators=gens)
    strict = [dataclasses.replace(c, early_stop=1e-9, early_stop_window=WINDOW) for c in configs]
    x0s, gens = fresh()
    on = attack.run_batched(target, x0s, labels, strict, generators=gens)
    for a, b in zip(off, on, strict=True):
        assert b.stopped == "completed" and b.steps == 120 and b.early_stop is None
        assert torch.equal(a.candidates, b.candidates)   # the rule's bookkeeping changes nothing it does not stop


def test_early_stop_options_are_checked():
    with pytest.raises(Exception, match="early_stop"):
        build_config(StationarityConfig, {"early_stop": -0.1})
    with pytest.raises(Exception, match="early_stop_window"):
        build_config(StationarityConfig, {"early_stop_window": 0})


def test_a_converged_run_is_a_finished_run():
    run = {"stopped": "converged", "steps": 400, "config": {"steps": 3000}, "candidates_finite": True,
           "final_loss": 1.0, "oracle_score": 2.0, "run": 1}
    assert derive_run_outcome(run).ok                       # 13% of its budget, by its own rule: not stopped early
    budget = {**run, "stopped": "early_stop"}
    assert not derive_run_outcome(budget).ok
    assert objective(run, oracle=False) == 1.0
    other = {**run, "stopped": "completed", "final_loss": 3.0, "run": 0}
    assert select_runs([other, run])[0] == 1                # blind pick among finished runs


@pytest.mark.slow
def test_the_pipeline_records_the_stop(tmp_path):
    card = tiny_card("binary", weight_decay=1e-3)
    spec = RunSpec(attack="haim_binary_kkt", attack_config={"steps": 400, "eval_every": 50, "early_stop": TOL,
                                                            "early_stop_window": WINDOW}, search_runs=2, seed=2)
    result = run_attack(card, spec, tmp_path / "res", quiet=True)
    for rec in result["runs"]:
        stored = json.loads((tmp_path / "res" / "runs" / f"run-{rec['run']:03d}.json").read_text())
        if rec["stopped"] == "converged":
            assert stored["early_stop"]["step"] == rec["steps"] and stored["early_stop"]["window"] == WINDOW
            assert rec["outcome"]["status"] == "ok"
        else:
            assert "early_stop" not in stored
    assert any(r["stopped"] == "converged" for r in result["runs"])
