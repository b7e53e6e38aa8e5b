"""The theory track: every attack that declares a theory problem reproduces the theorem's outcome there."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from reconbench import plugins
from reconbench.errors import IncompatibleError
from reconbench.theory import (
    NULL_DISTANCE,
    NULL_RATIO,
    RECOVERED_DISTANCE,
    RECOVERY_RATIO,
    THEOREMS,
    check_law,
    law_problem,
    matched_distances,
)

SEEDS = (0, 1, 2, 3, 4)


pytestmark = pytest.mark.usefixtures("one_torch_thread")   # tiny problems: one torch thread


def _declaring(theorem: str) -> list[str]:
    return [n for n in plugins.names("attacks") if theorem in plugins.get("attacks", n).theorems]


def test_declared_theorems_exist_and_the_law_has_an_attack():
    for name in plugins.names("attacks"):
        assert set(plugins.get("attacks", name).theorems) <= set(THEOREMS), name
    assert _declaring("random_features_law")


def test_law_problem_is_what_it_says():
    """Points on the sqrt(d) sphere, an interpolating head, the initial head at zero with the same features, and
    p / (d n) as asked."""
    pr = law_problem(4.0, seed=3)
    x = pr.x_train.reshape(5, -1)
    assert torch.allclose(x.norm(dim=1), torch.full((5,), 10 ** 0.5, dtype=torch.float64), rtol=1e-12)
    with torch.no_grad():
        assert torch.allclose(pr.target.model(pr.x_train).reshape(-1), pr.y_train, atol=1e-9)
    assert pr.target.initial_model is not None
    assert float(pr.target.initial_model.head.weight.abs().sum()) == 0.0  # type: ignore[union-attr]
    assert torch.equal(pr.target.initial_model.features, pr.target.model.features)  # type: ignore[union-attr]
    assert pr.ratio == RECOVERY_RATIO


def test_matched_distance_forgives_order_scale_and_sign_only():
    x = torch.randn(4, 1, 1, 6, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    c = torch.stack([-2.0 * x[2], 0.5 * x[0], 3.0 * x[3], x[1]])
    assert np.allclose(matched_distances(x, c), 0.0, atol=1e-7)
    far = torch.randn(4, 1, 1, 6, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    assert float(np.median(matched_distances(x, far))) > NULL_DISTANCE


@pytest.mark.parametrize("name", _declaring("random_features_law"))
def test_law_recovery_well_above_dn(name):
    """p / (d n) = 4: near-full recovery on every seed (check_law asserts it)."""
    outcomes = check_law(plugins.get("attacks", name), SEEDS, ratios=(RECOVERY_RATIO,))
    assert len(outcomes) == len(SEEDS) and all(o.median_distance < RECOVERED_DISTANCE for o in outcomes)


@pytest.mark.parametrize("name", _declaring("random_features_law"))
def test_law_null_well_below_dn(name):
    """p / (d n) = 1/4: nothing is recovered on any seed, although the attack's own loss reaches about 0 (impostors
    fit the head)."""
    outcomes = check_law(plugins.get("attacks", name), SEEDS, ratios=(NULL_RATIO,))
    assert all(o.median_distance > NULL_DISTANCE and o.recovered == 0 for o in outcomes)
    if name == "projection_law":
        assert max(o.final_loss for o in outcomes) < 1e-6


def test_check_law_fails_an_attack_that_returns_its_start():
    """The track can fail: init_only (its random starts, unchanged) is refused at p / (d n) = 4."""
    with pytest.raises(AssertionError, match="promises recovery"):
        check_law(plugins.get("attacks", "init_only"), seeds=(0,), ratios=(RECOVERY_RATIO,))


# -- Smorodinsky, Vardi and Safran (2024): near-orthogonal data -----------------------------------------------------
def test_near_orthogonal_training_points_end_on_the_margin_and_membership_is_decided_by_the_output():
    """Known outcome: every training point on the margin, fresh points far inside it, |f(x)| separates them."""
    from reconbench.theory import FRESH_SHARE, MARGIN_SPREAD, check_near_orthogonal

    outcomes = check_near_orthogonal(SEEDS, d=600, m=60, steps=1200)
    assert all(o.margin_spread <= MARGIN_SPREAD and o.fresh_share < FRESH_SHARE for o in outcomes)


def test_near_orthogonal_fails_where_the_theorem_does_not_hold():
    """The check can fail: far from the max-margin regime (a handful of steps), the margins are spread."""
    from reconbench.theory import check_near_orthogonal

    with pytest.raises(AssertionError, match="spread"):
        check_near_orthogonal((0,), d=600, m=60, steps=3)


# -- Smorodinsky, Vardi and Safran (2024): one-dimensional data ---------------------------------------------------
@pytest.mark.parametrize("name", _declaring("one_dimensional_kinks"))
def test_one_dimensional_training_points_sit_at_the_kinks(name):
    from reconbench.theory import check_kinks

    outcomes = check_kinks(plugins.get("attacks", name), SEEDS)
    assert len(outcomes) == len(SEEDS)


def test_kinks_are_read_as_minus_b_over_w():
    """relu_kinks returns -b_j / w_j of the first layer, the most important unit first (a planted net)."""
    from reconbench.interfaces import AttackTarget, Knowledge

    net = plugins.get("models", "mlp").build((1, 1, 1), 1, {"widths": [3], "init_scale": None}).double()
    first, out = net.linear_chain()  # type: ignore[misc]
    with torch.no_grad():
        first.weight.copy_(torch.tensor([[2.0], [-1.0], [0.5]]))
        first.bias.copy_(torch.tensor([1.0, 0.25, 0.1]))
        out.weight.copy_(torch.tensor([[1.0, 10.0, 0.001]]))
    target = AttackTarget(model=net, family="mlp", homogeneity_degree=None,
                          knowledge=Knowledge(task="binary", num_classes=2, out_dim=1, input_shape=(1, 1, 1), n=2))
    attack = plugins.get("attacks", "relu_kinks")
    res = attack.run(target, torch.zeros(2, 1, 1, 1, dtype=torch.float64), torch.zeros(2, dtype=torch.long), None,
                     generator=torch.Generator())
    assert res.candidates.reshape(-1).tolist() == [0.25, -0.5]
    conv = plugins.get("models", "conv").build((1, 4, 4), 1, {"hidden": 3})
    with pytest.raises(IncompatibleError, match="fully connected first layer with a bias"):
        attack.check(AttackTarget(model=conv, family="conv", homogeneity_degree=None, knowledge=target.knowledge))


def test_kinks_in_d_dimensions_are_the_hyperplane_points_nearest_the_origin():
    from reconbench.interfaces import AttackTarget, Knowledge

    net = plugins.get("models", "mlp").build((1, 1, 2), 1, {"widths": [1], "init_scale": None}).double()
    first, out = net.linear_chain()  # type: ignore[misc]
    with torch.no_grad():
        first.weight.copy_(torch.tensor([[3.0, 4.0]]))
        first.bias.copy_(torch.tensor([-5.0]))
        out.weight.copy_(torch.tensor([[1.0]]))
    target = AttackTarget(model=net, family="mlp", homogeneity_degree=None,
                          knowledge=Knowledge(task="binary", num_classes=2, out_dim=1, input_shape=(1, 1, 2), n=1))
    res = plugins.get("attacks", "relu_kinks").run(target, torch.zeros(1, 1, 1, 2, dtype=torch.float64),
                                                    torch.zeros(1, dtype=torch.long), None, generator=torch.Generator())
    point = res.candidates.reshape(-1)
    assert torch.allclose(point, torch.tensor([0.6, 0.8], dtype=torch.float64), rtol=1e-14, atol=1e-15)
    assert abs(float(first(point[None])[0, 0])) < 1e-14   # on the unit's hyperplane
