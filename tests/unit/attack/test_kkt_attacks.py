"""The three KKT attack plugins: their terms, their checks, divergence handling, smoke runs on `digits`."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import pytest
import torch

from reconbench import hookimpl, plugins
from reconbench.config import build_config, option
from reconbench.errors import DivergedError, IncompatibleError
from reconbench.interfaces import Attack, AttackOutput, AttackTarget, Knowledge, ModelFamily
from reconbench.runs import RunSpec, run_attack
from reconbench.targets.cache import get_or_train
from reconbench.targets.cards import METRICS_HASH_FIELD, load_card, metrics_sha256
from reconbench.targets.recipe import TargetRecipe

KKT = ["haim_binary_kkt", "multiclass_kkt", "general_loss_wd"]
TASK = {"haim_binary_kkt": "binary", "multiclass_kkt": "multiclass", "general_loss_wd": "regression"}


FAMILY_SPEC = {"mlp": {"widths": [16]}, "mlp_bias": {"widths": [16]}, "affine": {},
               "conv": {"channels": 2, "kernel": 3, "hidden": 16}}


def tiny_card(task: str, num_classes: int | None = None, family: str = "mlp", weight_decay: float = 0.0):
    model = FAMILY_SPEC[family]
    recipe = TargetRecipe.from_dict({
        "problem": {"dataset": "digits", "task": task, "n_per_class": 3, "num_classes": num_classes,
                    "n_test_per_class": 5},
        "family": family, "model": model,
        "train": {"steps": 60, "lr": 0.05, "weight_decay": weight_decay, "eval_every": 1000}})
    return get_or_train(recipe, quiet=True)


@pytest.mark.parametrize("name", KKT)
def test_smoke_run_on_digits(name, tmp_path):
    card = tiny_card(TASK[name], num_classes=3 if name == "multiclass_kkt" else None, weight_decay=1e-3)
    spec = RunSpec(attack=name, attack_config={"steps": 25, "eval_every": 5}, search_runs=2, seed=1)
    result = run_attack(card, spec, tmp_path / "res", quiet=True)
    assert len(result["runs"]) == 2 and result["failed_runs"] == []
    for rec in result["runs"]:
        assert rec["stopped"] in ("completed", "diverged") and rec["steps"] > 0
        # the searched init scale reached the gaussian init regime, and was recorded
        assert rec["init_config"]["scale"] == rec["config"]["init_scale"] == rec["init_overrides"]["scale"]
        assert math.isfinite(rec["final_loss"])
    assert result["selection"]["blind"]["run"] in (0, 1) and result["selection"]["oracle"]["run"] in (0, 1)
    assert set(result["evaluation_selected"]) == {"blind", "oracle"}
    assert (tmp_path / "res" / "figures" / "attack_loss.png").exists()
    trace = json.loads((tmp_path / "res" / "runs" / "run-000.json").read_text())["trace"]
    assert [t["step"] for t in trace] == [0, 5, 10, 15, 20, 25]
    for t in trace:
        assert t["loss"] == pytest.approx(t["stationarity"] + t["prior"] + t["lambda_penalty"])


@pytest.mark.parametrize("family", ["mlp_bias", "affine", "conv"])
def test_every_swappable_family_can_be_attacked(family, tmp_path):
    card = tiny_card("binary", family=family)
    result = run_attack(card, RunSpec(attack="haim_binary_kkt", attack_config={"steps": 10}), tmp_path / "r",
                        quiet=True)
    (run,) = result["runs"]
    assert run["stopped"] == "completed" and math.isfinite(run["final_loss"])
    assert run["message"].startswith("engine " + ("autograd" if family == "conv" else "gram"))


def test_the_attacks_use_their_terms():
    """C_i for each attack, against explicit per-candidate formulas."""
    gen = torch.Generator().manual_seed(0)
    out = torch.randn(6, 4, generator=gen, dtype=torch.float64)
    labels = torch.tensor([0, 0, 1, 2, 3, 3])
    like = torch.zeros((), dtype=torch.float64)
    mc = plugins.get("attacks", "multiclass_kkt")
    lam = torch.rand(6, generator=gen, dtype=torch.float64)
    coeffs, _ = mc.stationarity_terms(labels, build_config(mc.config_cls, {}), 4, like)
    c = coeffs(out, lam)
    for i in range(6):
        wrong = max((j for j in range(4) if j != labels[i]), key=lambda j: out[i, j])
        expect = torch.zeros(4, dtype=torch.float64)
        expect[labels[i]], expect[wrong] = lam[i], -lam[i]
        torch.testing.assert_close(c[i], expect)
    lam_pair = torch.rand(6, 3, generator=gen, dtype=torch.float64)
    pair_cfg = build_config(mc.config_cls, {"multipliers": "per_pair"})
    coeffs, penalty = mc.stationarity_terms(labels, pair_cfg, 4, like)
    c = coeffs(out, lam_pair)
    for i in range(6):
        expect = torch.zeros(4, dtype=torch.float64)
        for k, j in enumerate(j for j in range(4) if j != labels[i]):
            expect[labels[i]] += lam_pair[i, k]
            expect[j] -= lam_pair[i, k]
        torch.testing.assert_close(c[i], expect)
    assert float(penalty(torch.full((6, 3), 0.2, dtype=torch.float64))) == 0.0  # sums 0.6 >= 0.05, all >= 0
    assert float(penalty(torch.full((6, 3), -0.1, dtype=torch.float64))) > 0
    hb = plugins.get("attacks", "haim_binary_kkt")
    hb_cfg = build_config(hb.config_cls, {})
    coeffs, penalty = hb.stationarity_terms(torch.tensor([0, 0, 1, 1]), hb_cfg, 1, like)
    lam4 = torch.tensor([0.5, 0.2, 0.3, 0.01], dtype=torch.float64)
    signs = torch.tensor([-1.0, -1, 1, 1], dtype=torch.float64)
    torch.testing.assert_close(coeffs(out[:4, :1], lam4)[:, 0], lam4 * signs)
    expected = 5 * sum(max(0.0, hb_cfg.lambda_min - v) ** 2 for v in lam4.tolist())  # 5 sum max(0, l_min - l)^2
    assert float(penalty(lam4)) == pytest.approx(expected)


def test_divergence_stops_with_a_clear_message_and_keeps_finite_candidates():
    card = tiny_card("binary")
    target = AttackTarget(model=card.load_model(torch.float64), family="mlp", homogeneity_degree=2,
                          knowledge=card.knowledge())
    attack = plugins.get("attacks", "haim_binary_kkt")
    cfg = build_config(attack.config_cls, {"steps": 200, "lr": 1e12, "init_scale": 0.1})
    x0 = torch.randn(12, 1, 8, 8, dtype=torch.float64) * 0.1
    labels = torch.tensor([0] * 6 + [1] * 6)
    out = attack.run(target, x0, labels, cfg, generator=torch.Generator().manual_seed(0))
    assert out.stopped == "diverged" and out.steps < 200
    assert "lower lr" in out.message.lower() and "step" in out.message
    assert torch.isfinite(out.candidates).all() and math.isfinite(out.final_loss)


@dataclass
class FlakyConfig:
    shift: float = option(0.0, "runs with shift > 0.5 raise DivergedError")


@dataclass(frozen=True)
class FlakyAttack(Attack):
    name: str = "flaky_test_attack"
    description: str = "test-only: fails on some configs"
    needs: frozenset = frozenset()
    tasks: frozenset = frozenset({"binary"})
    config_cls: type = FlakyConfig

    def search_space(self):
        from reconbench.config import Uniform

        return {"shift": Uniform(0.0, 1.0)}

    def check(self, target):
        return None

    def run(self, target, x0, labels, config, *, generator, progress=None):
        if config.shift > 0.5:
            raise DivergedError("loss is nan at step 3")
        return AttackOutput(candidates=x0 + config.shift, labels=labels, final_loss=config.shift, steps=1)


class FlakyPlugin:
    @hookimpl
    def register_attacks(self, register):  # type: ignore[no-untyped-def]
        register(FlakyAttack())


def test_a_failed_run_is_recorded_and_the_search_goes_on(tmp_path):
    host = plugins.host()
    name = host.register(FlakyPlugin(), name="flaky-test-plugin")
    try:
        card = tiny_card("binary")
        result = run_attack(card, RunSpec(attack="flaky_test_attack", search_runs=6, seed=3), tmp_path / "r",
                            quiet=True)
    finally:
        host.unregister(name)
    failed = [r for r in result["runs"] if r["config"]["shift"] > 0.5]
    assert failed and result["failed_runs"] == [r["run"] for r in failed]
    assert all(r["stopped"] == "failed" and "nan" in r["message"] for r in failed)
    assert len(result["runs"]) == 6
    assert result["selection"]["blind"]["run"] not in result["failed_runs"]


def test_wrong_task_names_the_attack_to_use(tmp_path):
    card = tiny_card("multiclass", num_classes=10)
    with pytest.raises(IncompatibleError, match="multiclass_kkt") as info:
        run_attack(card, RunSpec(attack="haim_binary_kkt"), tmp_path / "r", quiet=True)
    assert "binary" in str(info.value)
    assert not (tmp_path / "r").exists()  # failed before any work
    binary = tiny_card("binary")
    with pytest.raises(IncompatibleError, match="haim_binary_kkt"):
        run_attack(binary, RunSpec(attack="multiclass_kkt"), tmp_path / "r", quiet=True)
    # the attack's own check, called directly on a target whose outputs do not fit
    k = Knowledge(task="binary", num_classes=2, out_dim=3, input_shape=(1, 8, 8), class_counts=[3, 3])
    target = AttackTarget(model=binary.load_model(), family="mlp", homogeneity_degree=2, knowledge=k)
    with pytest.raises(IncompatibleError, match="3 output"):
        plugins.get("attacks", "haim_binary_kkt").check(target)


@dataclass(frozen=True)
class FrozenActivationFamily(ModelFamily):
    name: str = "frozen_act_test"
    description: str = "test-only family whose activation cannot be swapped"
    swappable_activation: bool = False


class FrozenPlugin:
    @hookimpl
    def register_models(self, register):  # type: ignore[no-untyped-def]
        register(FrozenActivationFamily())


def test_family_without_swappable_activation_is_refused():
    host = plugins.host()
    name = host.register(FrozenPlugin(), name="frozen-test-plugin")
    try:
        card = tiny_card("binary")
        target = AttackTarget(model=card.load_model(), family="frozen_act_test", homogeneity_degree=None,
                              knowledge=card.knowledge())
        with pytest.raises(IncompatibleError, match="swappable activation") as info:
            plugins.get("attacks", "haim_binary_kkt").check(target)
        assert "mlp" in str(info.value)  # names the families that work
    finally:
        host.unregister(name)


def test_missing_knowledge_fails_before_work_and_names_alternatives(tmp_path):
    card = tiny_card("regression", weight_decay=1e-3)
    data = json.loads((card.path / "card.json").read_text())
    data["metrics"]["loss_name"] = None
    data[METRICS_HASH_FIELD] = metrics_sha256(data)   # a card of a recipe whose loss is not stated, not an edited one
    (card.path / "card.json").write_text(json.dumps(data))
    with pytest.raises(IncompatibleError, match="general_loss_wd.*needs loss.*does not need it"):
        run_attack(load_card(card.path), RunSpec(attack="general_loss_wd"), tmp_path / "r", quiet=True)
    assert not (tmp_path / "r").exists()


def test_wrong_loss_is_refused():
    card = tiny_card("regression")
    k = Knowledge(task="regression", num_classes=2, out_dim=1, input_shape=(1, 8, 8), loss="bce")
    target = AttackTarget(model=card.load_model(), family="mlp", homogeneity_degree=2, knowledge=k)
    with pytest.raises(IncompatibleError, match="mse, l25, huber"):
        plugins.get("attacks", "general_loss_wd").check(target)


def test_cli_default_recipe_path_runs(tmp_path, capsys):
    """`reconbench run --attack multiclass_kkt` with its default digits recipe, shrunk by explicit options."""
    from reconbench.cli import main

    args = ["run", "--attack", "multiclass_kkt", "--n-per-class", "1", "--widths", "24", "--steps", "40",
            "--set", "steps=15", "--search-runs", "2", "--out", str(tmp_path / "res"), "-q"]
    with pytest.raises(SystemExit) as info:
        main(args)
        raise SystemExit(0)
    assert (info.value.code or 0) == 0, capsys.readouterr().err
    result = json.loads((tmp_path / "res" / "result.json").read_text())
    assert result["attack"] == "multiclass_kkt" and len(result["runs"]) == 2
    assert result["target"]["recipe"]["problem"]["dataset"] == "digits"
    assert result["target"]["recipe"]["train"]["schedule"] == "inverse_loss"  # the default recipe
