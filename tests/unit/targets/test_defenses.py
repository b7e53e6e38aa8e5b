"""Each defense changes the model as its definition says (docs/defenses.md); DP-SGD reports the epsilon that the
RDP analysis of the Gaussian mechanism gives, checked against closed forms."""

from __future__ import annotations

import copy
import math
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from scipy.optimize import brentq
from scipy.stats import norm

from reconbench import plugins
from reconbench.config import build_config
from reconbench.data import ProblemSpec
from reconbench.errors import IncompatibleError, ReconbenchError
from reconbench.interfaces import TrainingRun
from reconbench.targets.problems import build_problem
from reconbench.targets.recipe import TargetRecipe, TrainSpec
from reconbench.targets.training import certify, train

BINARY = ProblemSpec(dataset="digits", task="binary", n_per_class=3, n_test_per_class=5)
MULTI = ProblemSpec(dataset="digits", task="multiclass", num_classes=3, n_per_class=3, n_test_per_class=5)


def defense(name):
    return plugins.get("defenses", name)


def apply(name, model, cfg=None, seed=0):
    d = defense(name)
    return d.apply(model, None, build_config(d.config_cls, cfg or {}, name), generator=torch.Generator().manual_seed(seed))


def net(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(64, 200), torch.nn.ReLU(), torch.nn.Linear(200, 3)).double()


def recipe(defense_name=None, cfg=None, spec=BINARY, steps=40, **train):
    return TargetRecipe(problem=spec, family="mlp", model={"widths": [16]},
                        train=TrainSpec(lr=0.05, steps=steps, **train), defense=defense_name, defense_config=cfg or {})


@pytest.fixture(scope="module")
def binary_problem():
    return build_problem(BINARY)


# -- before release ------------------------------------------------------------------------------------
@pytest.mark.parametrize("per_channel", [False, True])
def test_int8_quantisation_rounds_to_the_grid_within_half_a_step(per_channel):
    model = net()
    before = copy.deepcopy(model)
    rec = apply("int8_quantise", model, {"per_channel": per_channel})
    worst = 0.0
    for p0, p1 in zip(before.parameters(), model.parameters(), strict=True):
        rows0 = p0.reshape(p0.shape[0], -1) if per_channel and p0.dim() > 1 else p0.reshape(1, -1)
        rows1 = p1.reshape(rows0.shape)
        scale = rows0.abs().amax(dim=1, keepdim=True) / 127
        k = rows1 / scale
        assert torch.allclose(k, k.round(), atol=1e-6)                 # on the integer grid of its row
        assert bool((k.round().abs() <= 127).all())
        assert bool(((rows1 - rows0).abs() <= scale / 2 + 1e-12).all())  # round-to-nearest error bound
        assert len(torch.unique(rows1[0])) <= 255
        worst = max(worst, float((rows1 - rows0).detach().abs().max()))
    assert rec["levels"] == 255 and rec["max_abs_error"] == pytest.approx(worst)


def test_magnitude_prune_zeroes_the_smallest_fraction():
    model = net()
    before = copy.deepcopy(model)
    apply("magnitude_prune", model, {"fraction": 0.3})
    for p0, p1 in zip(before.parameters(), model.parameters(), strict=True):
        if int(0.3 * p0.numel()) == 0:
            assert torch.equal(p0, p1)
            continue
        zero = p1 == 0
        assert zero.sum() >= int(0.3 * p0.numel())
        assert zero.double().mean() < 0.3 + 2 / p0.numel()            # no more than the fraction (ties aside)
        assert p0[zero].abs().max() <= p0[~zero].abs().min()           # the pruned ones are the smallest
        assert torch.equal(p1[~zero], p0[~zero])                       # the others are untouched


def test_weight_noise_has_the_stated_relative_std():
    model = net()
    before = copy.deepcopy(model)
    apply("weight_noise", model, {"relative_std": 0.05})
    w0, w1 = before[0].weight, model[0].weight
    rel = (w1 - w0) / w0.pow(2).mean().sqrt()
    assert float(rel.std()) == pytest.approx(0.05, rel=0.05)  # 12,800 draws: sd of the estimate ~0.6 %
    assert abs(float(rel.mean())) < 0.002


# -- during training -----------------------------------------------------------------------------------
def _run(spec, targets, loss_fn, model=None):
    problem = build_problem(spec)
    model = model or torch.nn.Linear(64, 1).double()
    return TrainingRun(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1), loss_fn=loss_fn,
                       x=problem.x_train(torch.float64), targets=targets, problem=problem, steps=10)


def test_label_smoothing_targets_binary_and_multiclass():
    eps = 0.2
    d = defense("label_smoothing")
    cfg = build_config(d.config_cls, {"smoothing": eps}, d.name)
    y = torch.tensor([0.0, 1.0, 1.0, 0.0], dtype=torch.float64)
    run = _run(BINARY, y.clone(), None)
    d.start_training(run, cfg, generator=torch.Generator())
    assert torch.allclose(run.targets, torch.tensor([0.1, 0.9, 0.9, 0.1], dtype=torch.float64))
    labels = torch.tensor([0, 2, 1, 2])
    run = _run(MULTI, labels, F.cross_entropy)
    d.start_training(run, cfg, generator=torch.Generator())
    logits = torch.randn(4, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    q = (1 - eps) * F.one_hot(labels, 3).double() + eps / 3
    expected = -(q * torch.log_softmax(logits, dim=1)).sum(dim=1).mean()
    assert float(run.loss_fn(logits, labels)) == pytest.approx(float(expected), rel=1e-12)
    with pytest.raises(IncompatibleError, match="regression"):
        d.start_training(_run(ProblemSpec(dataset="digits", task="regression", n_per_class=2), y, None), cfg,
                         generator=torch.Generator())


def test_weight_decay_defense_equals_training_with_that_weight_decay(binary_problem):
    a = train(recipe("weight_decay", {"weight_decay": 0.01}), binary_problem, quiet=True, with_certificate=False)
    b = train(recipe(weight_decay=0.01), binary_problem, quiet=True, with_certificate=False)
    for p, q in zip(a.model.parameters(), b.model.parameters(), strict=True):
        assert torch.allclose(p, q, rtol=1e-12, atol=1e-15)
    assert a.metrics["defense"]["records"]["total_weight_decay"] == 0.01


def test_early_stopping_stops_where_the_loss_first_crosses(binary_problem):
    a = train(recipe("early_stopping", {"loss_threshold": 0.5}, steps=400), binary_problem, quiet=True,
              with_certificate=False)
    ref = train(recipe(steps=400, stop_loss=0.5), binary_problem, quiet=True, with_certificate=False)  # the trainer's own rule
    assert a.metrics["steps_run"] == ref.metrics["steps_run"] < 400
    assert a.metrics["defense"]["records"]["stopped_at_step"] == a.metrics["steps_run"]
    b = train(recipe("early_stopping", {"loss_threshold": 0.0, "max_fraction": 0.25}, steps=40), binary_problem,
              quiet=True, with_certificate=False)
    assert b.metrics["steps_run"] == 10


def test_utility_before_and_after_a_release_defense_is_in_the_card(binary_problem):
    res = train(recipe("magnitude_prune", {"fraction": 0.9}), binary_problem, quiet=True, with_certificate=False)
    assert {"test_error", "train_error"} <= set(res.metrics["before_defense"])
    assert res.metrics["defense"]["config"] == {"fraction": 0.9} and "test_error" in res.metrics


# -- DP-SGD --------------------------------------------------------------------------------------------
@pytest.fixture
def opacus():
    """Opacus, for the tests that train with DP-SGD or read its accountant: they skip without it (it is the optional
    ``dp`` extra); every other test of this file runs."""
    return pytest.importorskip("opacus")


def rdp_epsilon_full_batch(sigma, steps, delta, orders):
    """Closed form: with sampling rate 1 each step is a Gaussian mechanism of sensitivity C and noise sigma*C, whose
    Renyi divergence of order a is a / (2 sigma^2); T steps compose additively. RDP -> (eps, delta) by the
    conversion of Balle et al. 2020 (Theorem 21), minimised over the orders."""
    best = math.inf
    for a in orders:
        rdp = steps * a / (2 * sigma**2)
        eps = rdp + math.log1p(-1 / a) - (math.log(delta) + math.log(a)) / (a - 1)
        best = min(best, eps)
    return best


def exact_gaussian_epsilon(mu, delta):
    """The tight epsilon of a Gaussian mechanism with mu = sensitivity / noise (Balle & Wang 2018)."""
    def delta_of(eps):
        return norm.cdf(-eps / mu + mu / 2) - math.exp(eps + norm.logcdf(-eps / mu - mu / 2))
    return brentq(lambda e: delta_of(e) - delta, 0.0, 1000.0)


@pytest.mark.usefixtures("opacus")
@pytest.mark.parametrize("sigma", [2.0, 8.0])
def test_dp_sgd_reports_the_epsilon_of_its_gaussian_mechanism(binary_problem, sigma):
    from opacus.accountants import RDPAccountant

    steps, delta = 30, 1e-5
    res = train(recipe("dp_sgd", {"noise_multiplier": sigma, "max_grad_norm": 1.0, "delta": delta}, steps=steps),
                binary_problem, quiet=True, with_certificate=False)
    rec = res.metrics["defense"]["records"]
    assert rec["steps"] == steps and rec["sample_rate"] == 1.0 and rec["delta"] == delta
    closed = rdp_epsilon_full_batch(sigma, steps, delta, RDPAccountant.DEFAULT_ALPHAS)
    assert rec["epsilon"] == pytest.approx(closed, rel=1e-6)
    # composing T Gaussian mechanisms of the same sensitivity is one Gaussian mechanism with mu = sqrt(T) / sigma;
    # RDP is a valid but not tight bound: at least the exact epsilon, and not far above it
    exact = exact_gaussian_epsilon(math.sqrt(steps) / sigma, delta)
    assert exact <= rec["epsilon"] <= 1.6 * exact + 0.5


@pytest.mark.usefixtures("opacus")
def test_dp_sgd_clips_per_sample_and_adds_noise_of_the_stated_scale():
    """One step against a hand computation: per-sample gradients clipped to C, averaged over n, plus N(0, (sigma C /
    n)^2) noise; with sigma = 0 the step is exactly the clipped mean."""
    d = defense("dp_sgd")
    problem = build_problem(BINARY)
    x, y = problem.x_train(torch.float64), problem.targets(problem.train_labels)
    n, C, lr = len(y), 0.05, 1.0

    def loss_fn(out, t):
        return F.binary_cross_entropy_with_logits(out.reshape(-1), t)

    base = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 4000), torch.nn.Tanh(), torch.nn.Linear(4000, 1)).double()
    grads = []
    for i in range(n):
        m = copy.deepcopy(base)
        loss_fn(m(x[i : i + 1]), y[i : i + 1]).backward()
        g = torch.cat([p.grad.reshape(-1) for p in m.parameters()])
        grads.append(g * min(1.0, C / float(g.norm())))
    expected = torch.stack(grads).mean(dim=0)
    assert float(torch.stack([g.norm() for g in grads]).min()) > C * 0.999  # clipping is active for every sample

    def one_step(sigma):
        model = copy.deepcopy(base)
        run = TrainingRun(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=lr), loss_fn=loss_fn, x=x,
                          targets=y, problem=problem, steps=1)
        cfg = build_config(d.config_cls, {"noise_multiplier": sigma, "max_grad_norm": C}, d.name)
        d.start_training(run, cfg, generator=torch.Generator().manual_seed(0))
        run.optimizer.zero_grad()
        run.loss_fn(run.model(x), y).backward()
        run.optimizer.step()
        d.after_step(run, 0, 0.0, cfg)
        d.end_training(run, cfg)
        assert run.model is model
        return torch.cat([(p0 - p1).detach().reshape(-1) for p0, p1 in zip(base.parameters(), model.parameters(), strict=True)])

    # Opacus divides by (norm + 1e-6) when clipping and rounds the clip factors to single precision
    assert torch.allclose(one_step(0.0), lr * expected, rtol=1e-5, atol=1e-6 * float(expected.abs().max()))
    noise = one_step(3.0) - lr * expected
    assert float(noise.std()) == pytest.approx(3.0 * C / n, rel=0.03)  # ~264k coordinates
    assert abs(float(noise.mean())) < 0.01 * 3.0 * C / n


@pytest.mark.usefixtures("opacus")
def test_dp_sgd_refuses_batch_norm():
    pytest.importorskip("timm")
    problem = build_problem(BINARY)
    r = TargetRecipe(problem=BINARY, family="timm_resnet", train=TrainSpec(steps=2), defense="dp_sgd")
    with pytest.raises(IncompatibleError, match="BatchNorm2d"):
        train(r, problem, quiet=True, with_certificate=False)


@pytest.mark.usefixtures("opacus")
def test_dp_sgd_certifies_during_training_on_the_weights_of_that_step(binary_problem):
    """certify_every under DP-SGD: the certificate recorded at step 4 of a 6-step run is the one of the released
    weights of the same recipe trained for 4 steps (unwrapped by Opacus' own to_standard_module), and computing it
    leaves the training run unchanged."""
    cfg = {"noise_multiplier": 1.0, "max_grad_norm": 1.0}
    certified = train(recipe("dp_sgd", cfg, steps=6, certify_every=2), binary_problem, quiet=True,
                      with_certificate=False)
    checks = {int(h["step"]): h["certificate"] for h in certified.history if "certificate" in h}
    assert sorted(checks) == [2, 4]
    assert certified.metrics["stopped_by"] == "steps" and certified.metrics["defense"]["records"]["steps"] == 6

    plain = train(recipe("dp_sgd", cfg, steps=6), binary_problem, quiet=True, with_certificate=False)
    for p, q in zip(certified.model.parameters(), plain.model.parameters(), strict=True):
        assert torch.equal(p, q)

    four = recipe("dp_sgd", cfg, steps=4)
    released = train(four, binary_problem, quiet=True, with_certificate=False).model
    assert not released._forward_hooks and all(not m._forward_hooks for m in released.modules())
    direct = certify(copy.deepcopy(released), four, binary_problem, init_decay=1.0, with_regime=False)
    for key in ("residual_at_train", "residual_at_random", "ratio"):
        assert checks[4][key] == pytest.approx(direct[key], rel=1e-12)
    assert checks[4]["learned"]["ratio"] == pytest.approx(direct["learned"]["ratio"], rel=1e-12)


@pytest.mark.usefixtures("opacus")
def test_dp_sgd_without_noise_has_no_finite_epsilon(binary_problem):
    res = train(recipe("dp_sgd", {"noise_multiplier": 0.0}, steps=3), binary_problem, quiet=True, with_certificate=False)
    assert res.metrics["defense"]["records"]["epsilon"] is None
    assert np.isfinite(res.metrics["test_error"])


def test_dp_sgd_without_opacus_is_refused_with_the_install_line(binary_problem, monkeypatch):
    """Without Opacus (hidden here whether or not it is installed) DP-SGD training stops before its first step with
    one line naming the package and how to install it."""
    monkeypatch.setitem(sys.modules, "opacus", None)   # `import opacus` raises ImportError
    with pytest.raises(ReconbenchError, match=r"the dp_sgd defense needs the opacus package; install it with") as info:
        train(recipe("dp_sgd", {"noise_multiplier": 1.0}, steps=3), binary_problem, quiet=True, with_certificate=False)
    assert "\n" not in str(info.value)


def test_a_release_only_defense_reuses_the_undefended_training_of_this_process(binary_problem):
    from reconbench.targets import defended

    defended._TRAINED.clear()
    fresh = train(recipe("int8_quantise", {"bits": 4}), binary_problem, quiet=True, with_certificate=False)
    assert "training_reused" not in fresh.metrics
    defended._TRAINED.clear()
    base = train(recipe(), binary_problem, quiet=True, with_certificate=False)
    reused = train(recipe("int8_quantise", {"bits": 4}), binary_problem, quiet=True, with_certificate=False)
    assert "training_reused" in reused.metrics and reused.metrics["steps_run"] == base.metrics["steps_run"]
    for p, q in zip(fresh.model.parameters(), reused.model.parameters(), strict=True):
        assert torch.equal(p, q)
    assert reused.metrics["before_defense"]["test_error"] == base.metrics["test_error"]
    # a training-time defense never reuses: its loop differs
    wd = train(recipe("weight_decay", {"weight_decay": 0.01}), binary_problem, quiet=True, with_certificate=False)
    assert "training_reused" not in wd.metrics


def test_the_target_cache_trains_the_undefended_recipe_once_for_release_defenses(tmp_path, binary_problem):
    from reconbench.targets import defended
    from reconbench.targets.cache import get_or_train, train_target

    defended._TRAINED.clear()
    card = get_or_train(recipe("magnitude_prune", {"fraction": 0.5}), tmp_path, quiet=True)
    folders = sorted(p.name for p in (tmp_path / "targets").iterdir())
    assert folders == sorted([recipe().key(), recipe("magnitude_prune", {"fraction": 0.5}).key()])
    defended._TRAINED.clear()
    fresh = train_target(recipe("magnitude_prune", {"fraction": 0.5}), tmp_path / "fresh", quiet=True)
    assert "training_reused" in card.data["metrics"] and "training_reused" not in fresh.data["metrics"]
    for p, q in zip(card.load_model().parameters(), fresh.load_model().parameters(), strict=True):
        assert torch.equal(p, q)


@pytest.mark.parametrize("defense, values, key", [
    ("weight_decay", {"weight_decay": -1e-3}, "weight_decay"),
    ("early_stopping", {"max_fraction": 0.0}, "max_fraction"),
    ("early_stopping", {"max_fraction": 1.5}, "max_fraction"),
    ("dp_sgd", {"noise_multiplier": -1.0}, "noise_multiplier"),
    ("dp_sgd", {"max_grad_norm": 0.0}, "max_grad_norm"),
    ("dp_sgd", {"delta": 1.0}, "delta"),
])
def test_out_of_range_defense_options_are_refused_before_training(defense, values, key):
    cls = plugins.get("defenses", defense).config_cls
    with pytest.raises(ReconbenchError, match=f"{key}.*out of range"):
        build_config(cls, values, f"defense {defense}")
