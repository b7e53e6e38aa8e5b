"""projection_law and the random_features family: the loss against an independent QR form, its gradients against the
closed form and central differences (float64), a planted zero on a trained target, batching, conformance."""

from __future__ import annotations

import math

import pytest
import torch

from reconbench import conformance, plugins
from reconbench.attack.projection import head_features, head_layer, projection_loss, projection_residual_qr
from reconbench.config import build_config
from reconbench.data import ProblemSpec
from reconbench.runs.prepare import prepare
from reconbench.runs.spec import RunSpec
from reconbench.targets.cache import train_target
from reconbench.targets.recipe import TargetRecipe, TrainSpec

ATTACK = "projection_law"


pytestmark = pytest.mark.usefixtures("one_torch_thread")   # tiny problems: one torch thread


def _rand(*shape: int, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def test_loss_equals_the_residual_of_an_orthonormal_basis():
    h, w = _rand(3, 4, 30, seed=0), _rand(2, 30, seed=1)
    loss, used = projection_loss(h, w)
    assert torch.allclose(loss, projection_residual_qr(h, w), rtol=0, atol=1e-12)
    assert bool((used == 0).all()) and bool(((loss >= 0) & (loss <= 1)).all())
    # W inside the span of the features: exactly explained
    inside = _rand(2, 4, seed=2) @ h[1]
    assert float(projection_loss(h, inside)[0][1]) == pytest.approx(0.0, abs=1e-12)


def test_gradient_in_the_features_is_the_closed_form():
    """dL/dH = 2 (a a^T H - a W) / ||W||^2 with a = (H H^T)^{-1} H W^T (K = 1), against autograd."""
    h, w = _rand(1, 5, 12, seed=3).requires_grad_(True), _rand(1, 12, seed=4)
    (grad,) = torch.autograd.grad(projection_loss(h, w)[0].sum(), h)
    hd = h.detach()[0]
    a = torch.linalg.solve(hd @ hd.T, hd @ w.T)
    closed = 2.0 * (a @ a.T @ hd - a @ w) / (w ** 2).sum()
    assert torch.allclose(grad[0], closed, rtol=1e-10, atol=1e-12)


def _rf_model(d: int, p: int, k: int, seed: int) -> torch.nn.Module:
    family = plugins.get("models", "random_features")
    return family.build((1, 1, d), k, {"width": p, "head_init_scale": 1.0},
                        generator=torch.Generator().manual_seed(seed)).double()


def test_gradient_in_the_candidates_matches_central_differences():
    model = _rf_model(6, 40, 2, seed=5)
    head = head_layer(model)
    w = _rand(2, 40, seed=6)
    x = _rand(2, 4, 1, 1, 6, seed=7)
    v = _rand(*x.shape, seed=8)

    def loss(xs: torch.Tensor) -> torch.Tensor:
        with model.use_activation(torch.tanh):  # smooth features, so that differences converge
            h, _ = head_features(model, head, xs.reshape(-1, 1, 1, 6))
        return projection_loss(h.reshape(2, 4, -1), w)[0].sum()

    xg = x.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(loss(xg), xg)
    eps = 1e-5
    fd = (loss(x + eps * v) - loss(x - eps * v)) / (2 * eps)
    assert float((grad * v).sum()) == pytest.approx(float(fd), rel=1e-6, abs=1e-9)


@pytest.fixture(scope="module")
def rf_card(tmp_path_factory):
    recipe = TargetRecipe(problem=ProblemSpec(dataset="digits", task="binary", n_per_class=3, n_test_per_class=2),
                          family="random_features", model={"width": 600},
                          train=TrainSpec(steps=100, lr=0.05))
    return train_target(recipe, tmp_path_factory.mktemp("rf"), quiet=True)


def test_planted_zero_on_a_trained_random_features_target(rf_card):
    """Gradient descent from a zero head keeps W - W0 in the span of the training features: the loss at the training
    images is 0 to rounding, for them permuted and rescaled too, and not at other images."""
    _, target, _ = prepare(rf_card, RunSpec(attack=ATTACK))
    attack = plugins.get("attacks", ATTACK)
    attack.check(target)
    problem = rf_card.problem()
    x = problem.x_train(torch.float64)
    head = head_layer(target.model)
    from reconbench_plugins.projection_law import head_change

    w = head_change(target)
    assert float(w.norm()) > 0

    def loss(xs: torch.Tensor) -> float:
        h, _ = head_features(target.model, head, xs)
        return float(projection_loss(h[None], w)[0][0])

    assert loss(x) < 1e-12
    assert loss(2.5 * x.flip(0)) < 1e-12
    other = problem.x_test(torch.float64)[: len(x)]
    assert loss(other) > 1e-3
    card = rf_card.data["p_over_dn"]
    assert card == {"p": 600, "d": 64, "n": 6, "ratio": 600 / (64 * 6)}


def test_a_batch_of_runs_equals_the_runs_alone(rf_card):
    _, target, labels = prepare(rf_card, RunSpec(attack=ATTACK))
    attack = plugins.get("attacks", ATTACK)
    cfgs = [build_config(attack.config_cls, {"steps": 15, "lr": lr}, ATTACK) for lr in (0.5, 3.0)]
    x0s = [_rand(len(labels), 1, 8, 8, seed=s) for s in (9, 10)]
    got: dict[int, object] = {}
    attack.run_batch(target, x0s, labels, cfgs, generators=[torch.Generator(), torch.Generator()],
                     on_done=lambda i, r, b: got.__setitem__(i, r))
    for i in range(2):
        alone = attack.run(target, x0s[i], labels, cfgs[i], generator=torch.Generator())
        batched = got[i]
        assert torch.allclose(batched.candidates, alone.candidates, rtol=1e-9, atol=1e-12)  # type: ignore[attr-defined]
        assert batched.final_loss == pytest.approx(alone.final_loss, rel=1e-8, abs=1e-15)  # type: ignore[attr-defined]
        norms = alone.candidates.flatten(1).norm(dim=1)
        assert torch.allclose(norms, torch.full_like(norms, math.sqrt(64)), rtol=1e-12)


def test_projection_law_conforms():
    conformance.check_attack(plugins.get("attacks", ATTACK))


def test_random_features_family_conforms():
    conformance.check_model_family(plugins.get("models", "random_features"))
    net = plugins.get("models", "random_features").build((1, 4, 4), 2, {"width": 7})
    assert [n for n, _ in net.named_parameters()] == ["head.weight"] and "features" in net.state_dict()
    assert float(net.head.weight.abs().sum()) == 0.0   # the head starts at zero by default
