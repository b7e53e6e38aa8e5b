"""Search strategies: random search draws what numpy draws, a strategy is told only what an attacker has (unless it
is declared an oracle), Optuna's TPE is seeded, batched and resumable, and strategies are chosen from the CLI and
suites with one-line errors."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

import numpy as np
import pytest
from _helpers.cli import run_cli
from _helpers.suitekit import toy_targets

from reconbench import hookimpl, plugins
from reconbench.attack.search import check_search
from reconbench.bench.cells import expand
from reconbench.bench.suite import SuiteError, load_suite
from reconbench.errors import ReconbenchError
from reconbench.interfaces import SearchStrategy, Trial
from reconbench.runs import RunSpec, run_attack
from reconbench.targets.cache import get_or_train
from reconbench.targets.recipe import TargetRecipe

#: an evaluation that is quick (no null, no figures): these tests check which runs ran, not how they score
CHEAP = {"figures": False, "metrics": ["ssim", "corr"], "calibration_draws": 0, "null_draws": 0}

optuna = pytest.importorskip("optuna", reason="the optuna extra is not installed: pip install 'reconbench[optuna]'")


def tiny_card(task: str = "binary"):
    recipe = TargetRecipe.from_dict({
        "problem": {"dataset": "digits", "task": task, "n_per_class": 3, "n_test_per_class": 5},
        "family": "mlp", "model": {"widths": [16]}, "train": {"steps": 60, "lr": 0.05, "eval_every": 1000}})
    return get_or_train(recipe, quiet=True)


# -- a spy strategy: proposes fixed shifts two at a time and keeps what it is told ------------------------------
@dataclass(frozen=True)
class Spy(SearchStrategy):
    name: str = "spy"
    description: str = "test-only strategy recording what it is told"
    oracle: bool = False
    told: list[Trial] = field(default_factory=list)
    asks: list[int] = field(default_factory=list)

    def start(self, space: Any, runs: int, seed: int, config: Any) -> Any:
        spy = self
        shifts = iter([0.001 * (i + 1) for i in range(runs)])

        class Session:
            def ask(self) -> list[dict[str, Any]]:
                batch = [{"shift": s} for s in islice(shifts, 2)]
                spy.asks.append(len(batch))
                return batch

            def tell(self, trials: list[Trial]) -> None:
                spy.told.extend(trials)

        return Session()


@pytest.fixture
def spies():
    blind, oracle = Spy(), Spy(name="spy_oracle", oracle=True)

    class SpyPlugin:
        @hookimpl
        def register_searches(self, register):  # type: ignore[no-untyped-def]
            register(blind)
            register(oracle)

    host = plugins.host()
    name = host.register(SpyPlugin(), name="spy-search-plugin")
    yield blind, oracle
    host.unregister(name)


def test_random_search_draws_what_numpy_draws_and_stays_out_of_the_spec(toy_attack_registered, tmp_path):
    spec = RunSpec(attack="toy_identity", search_runs=4, seed=7, protocol=CHEAP)
    result = run_attack(tiny_card(), spec, tmp_path / "r", quiet=True)
    rng = np.random.default_rng(7)
    assert [r["config"]["shift"] for r in result["runs"]] == [rng.uniform(0.0, 0.01) for _ in range(4)]
    assert "search" not in result["spec"] and result["search"]["strategy"] == "random"
    assert result["search"]["oracle"] is False


def test_a_blind_strategy_is_told_the_attack_loss_and_an_oracle_one_the_oracle_score(toy_attack_registered, spies,
                                                                                       tmp_path):
    blind, oracle = spies
    for strategy in spies:
        spec = RunSpec(attack="toy_identity", search_runs=5, seed=0, search=strategy.name, protocol=CHEAP)
        result = run_attack(tiny_card(), spec, tmp_path / strategy.name, quiet=True)
        runs = result["runs"]
        assert strategy.asks == [2, 2, 1]   # the strategy's rounds, in order
        assert [t.run for t in strategy.told] == [0, 1, 2, 3, 4]
        assert [t.params["shift"] for t in strategy.told] == [r["config"]["shift"] for r in runs]
        assert result["spec"]["search"] == strategy.name and result["search"]["oracle"] is strategy.oracle
    # the toy attack's loss is its shift; the oracle score is the extraction score, which reads training images
    assert [t.objective for t in blind.told] == pytest.approx([0.001, 0.002, 0.003, 0.004, 0.005])
    stored = json.loads((tmp_path / "spy_oracle" / "result.json").read_text())["runs"]
    assert [t.objective for t in oracle.told] == [r["oracle_score"] for r in stored]
    assert [t.objective for t in oracle.told] != [t.objective for t in blind.told]


def test_optuna_is_seeded_and_proposes_inside_the_space(toy_attack_registered, tmp_path):
    def shifts(seed: int, folder: str) -> list[float]:
        spec = RunSpec(attack="toy_identity", search_runs=6, seed=seed, search="optuna", protocol=CHEAP)
        return [r["config"]["shift"] for r in run_attack(tiny_card(), spec, tmp_path / folder, quiet=True)["runs"]]

    first = shifts(3, "a")
    assert first == shifts(3, "b") != shifts(4, "c")
    assert all(0.0 <= s <= 0.01 for s in first) and len(set(first)) == 6


def test_optuna_rounds_run_as_batches_and_resume_with_the_same_proposals(tmp_path):
    card = tiny_card()
    spec = RunSpec(attack="haim_binary_kkt", attack_config={"steps": 10, "eval_every": 5}, search_runs=4, seed=2,
                   search="optuna", search_config={"batch": 2}, protocol=CHEAP)
    first = run_attack(card, spec, tmp_path / "r", quiet=True)
    assert [r["batch"]["runs"] for r in first["runs"]] == [[0, 1], [0, 1], [2, 3], [2, 3]]
    assert first["search"] == {"strategy": "optuna", "config": {"batch": 2, "startup": 0, "multivariate": True},
                               "oracle": False, "objective": "final attack loss (reads no training images)"}
    runs_dir = tmp_path / "r" / "runs"
    kept = {k: (runs_dir / f"run-00{k}.json").stat().st_mtime_ns for k in (0, 1, 2)}
    for name in ("run-003.json", "run-003.safetensors"):
        (runs_dir / name).unlink()
    (tmp_path / "r" / "result.json").unlink()
    again = run_attack(card, spec, tmp_path / "r", quiet=True)
    assert [r["config"] for r in again["runs"]] == [r["config"] for r in first["runs"]]
    assert {k: (runs_dir / f"run-00{k}.json").stat().st_mtime_ns for k in (0, 1, 2)} == kept   # read back, not rerun
    assert again["runs"][3]["final_loss"] == first["runs"][3]["final_loss"]


def test_a_missing_optuna_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "optuna", None)
    with pytest.raises(ReconbenchError, match=r"pip install 'reconbench\[optuna\]'"):
        check_search("optuna", {})
    check_search("random", {})   # the default needs nothing


def test_the_cli_records_the_strategy_and_refuses_a_bad_one(toy_attack_registered, tmp_path, capsys):
    card = tiny_card()
    code, _, err = run_cli(["run", "--attack", "toy_identity", "--model", str(card.path), "--search", "optuna",
                            "--search-set", "batch=-1", "--out", str(tmp_path / "bad")], capsys)
    assert code != 0 and "batch" in err and len(err.strip().splitlines()) == 1
    code, _, err = run_cli(["run", "--attack", "toy_identity", "--model", str(card.path), "--search", "optunaa",
                            "--out", str(tmp_path / "bad")], capsys)
    assert code != 0 and "Did you mean: optuna" in err and "reconbench list searches" in err
    cheap = [a for k, v in CHEAP.items() for a in ("--protocol-set", f"{k}={json.dumps(v)}")]
    code, _, _ = run_cli(["run", "--attack", "toy_identity", "--model", str(card.path), "--search", "optuna",
                          "--search-runs", "3", "--out", str(tmp_path / "ok"), "--quiet", *cheap], capsys)
    result = json.loads((tmp_path / "ok" / "result.json").read_text())
    assert code == 0 and result["spec"]["search"] == "optuna" and len(result["runs"]) == 3


SUITE = """\
[suite]
name = "t"
seeds = [0]
search_runs = 2

""" + toy_targets(10) + """
[attacks.toy_identity]
config = { steps = 1 }

[[grid]]
targets = ["bin"]
attacks = ["toy_identity"]
"""


def _suite(tmp_path, text: str, name: str = "s.toml"):
    path = tmp_path / name
    path.write_text(text)
    return load_suite(path)


def test_suites_choose_a_strategy_and_the_default_keeps_cell_keys(tmp_path, toy_attack_registered):
    plain = _suite(tmp_path, SUITE)
    explicit = _suite(tmp_path, SUITE.replace('search_runs = 2\n', 'search_runs = 2\nsearch = "random"\n'), "e.toml")
    tpe = _suite(tmp_path, SUITE.replace("config = { steps = 1 }", 'config = { steps = 1 }\nsearch = "optuna"'),
                 "o.toml")
    cell, same, other = expand(plain)[0], expand(explicit)[0], expand(tpe)[0]
    assert "search" not in cell.identity(plain) and cell.key(plain) == same.key(explicit)
    assert other.key(tpe) != cell.key(plain) and other.run_spec(tpe).search == "optuna"


@pytest.mark.parametrize("edit, key", [
    (('search_runs = 2\n', 'search_runs = 2\nsearch = "tpe"\n'), "suite.search"),
    (("config = { steps = 1 }", 'config = { steps = 1 }\nsearch = "optuna"\nsearch_config = { batch = -2 }'),
     "attacks.toy_identity.search_config"),
])
def test_a_bad_strategy_in_a_suite_is_one_line_naming_the_key(tmp_path, toy_attack_registered, edit, key):
    with pytest.raises(SuiteError) as info:
        _suite(tmp_path, SUITE.replace(*edit))
    assert key in str(info.value) and len(str(info.value).splitlines()) == 1


def test_boards_name_a_strategy_other_than_the_default_and_mark_an_oracle_one():
    from reconbench.leaderboard.tables import ORACLE_SELECTION_MARK, search_label

    assert search_label("optuna", {"batch": 4}) == "optuna (batch=4)"
    assert search_label("optuna_oracle", {}) == f"optuna_oracle {ORACLE_SELECTION_MARK}"


def test_the_search_benchmark_compares_strategies_at_equal_budget():
    from pathlib import Path

    suite = load_suite(Path(__file__).resolve().parents[3] / "benchmarks" / "search_strategies.toml", strict=True)
    budgets: dict[tuple[str, int], set[str]] = {}
    for a in suite.attacks.values():
        budgets.setdefault((a.attack, a.search_runs * a.config["steps"]), set()).add(a.search)
    assert sorted(budgets.values(), key=sorted) == [{"optuna", "random"}] * 2   # each attack: both, same runs x steps
    assert len(suite.seeds) >= 5


def test_runs_default_search_starts_with_the_attacks_default_and_draws_the_rest_inside_its_default_space(tmp_path):
    attack = plugins.get("attacks", "multiclass_kkt")
    spec = RunSpec(attack="multiclass_kkt", attack_config={"steps": 0}, search_runs=40, seed=3, search="default_first")
    from reconbench.runs import sample_configs

    configs = sample_configs(attack, spec)
    assert configs[0] == {"steps": 0}   # nothing drawn: every option at the attack's default
    space = attack.default_search_space()
    lows = {k: getattr(d, "low", None) for k, d in space.items()}
    for cfg in configs[1:]:
        assert set(cfg) == set(space) | {"steps"}
        assert all(space[k].low <= cfg[k] <= space[k].high for k in space)
    # the draws stay inside the narrowed lr range, which lies inside the papers' declared one
    assert lows["lr"] > attack.search_space()["lr"].low
    assert min(c["lr"] for c in configs[1:]) >= lows["lr"]
    # the suites' default (random) still draws from the declared space, the same values as before
    rng = np.random.default_rng(3)
    declared = attack.search_space()
    first = {k: d.sample(rng) for k, d in declared.items()}
    plain = sample_configs(attack, RunSpec(attack="multiclass_kkt", attack_config={"steps": 0}, search_runs=2, seed=3))
    assert plain[0] == {**first, "steps": 0}


def test_the_cli_runs_the_default_first_unless_a_strategy_is_named(toy_attack_registered, tmp_path, capsys):
    card = tiny_card()
    cheap = [a for k, v in CHEAP.items() for a in ("--protocol-set", f"{k}={json.dumps(v)}")]
    code, _, err = run_cli(["run", "--attack", "toy_identity", "--model", str(card.path), "--search-runs", "3",
                            "--out", str(tmp_path / "d"), "--quiet", *cheap], capsys)
    assert code == 0, err
    result = json.loads((tmp_path / "d" / "result.json").read_text())
    assert result["spec"]["search"] == "default_first" and result["runs"][0]["config"]["shift"] == 0.0
    assert all(0.0 <= r["config"]["shift"] <= 0.01 for r in result["runs"][1:])
