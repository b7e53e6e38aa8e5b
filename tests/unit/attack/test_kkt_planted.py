"""Planted solutions: networks built so that theta = grad_theta (1/m) sum_i s_i(x_i) holds exactly.

Construction (one hidden layer, one hidden unit per planted point, Phi(x) = V relu(W x + b)): the points x_k
form a scaled regular simplex with x_k . x_i < -1 for i != k, and unit k has w_k = beta x_k, b_k = beta, so it
is active on x_k alone (z_kk = beta (|x_k|^2 + 1) > 0, z_ik = beta (x_k . x_i + 1) < 0). With the coefficient
row c_k of s_k (binary: lambda_k y_k / m; two-class multiclass: lambda_k (e_y - e_j) / m; regression:
lambda_k / m) and the output column V[:, k] = c_k z_kk, stationarity holds iff |c_k|^2 (|x_k|^2 + 1) = 1,
which fixes lambda_k. With a large alpha the surrogate slope sigma(alpha z) is 1 or 0 to machine precision at
these pre-activations, so the identity is exact. The solution is isolated: x_k = w_k / b_k.
"""

from __future__ import annotations

import math

import pytest
import torch

from reconbench import plugins
from reconbench.attack.kkt.loop import run_stationarity_attack
from reconbench.config import build_config
from reconbench.interfaces import AttackTarget, Knowledge

M, SIDE, ALPHA = 4, 8, 1000.0


def simplex(m: int, dim: int, seed: int = 0) -> torch.Tensor:
    """m points with pairwise dot products -s^2/m = -1.5 and norms^2 = s^2 (1 - 1/m), in `dim` dims."""
    s2 = 1.5 * m
    v = (torch.eye(m, dtype=torch.float64) - 1.0 / m) * math.sqrt(s2)
    gen = torch.Generator().manual_seed(seed)
    q, _ = torch.linalg.qr(torch.randn(dim, m, dtype=torch.float64, generator=gen))
    return v @ q.T


def planted(task: str, signs: torch.Tensor | None = None):
    """(target, x*, labels, lambda*) for a task; ``signs``: the regression multipliers' signs."""
    x = simplex(M, SIDE * SIDE)
    labels = torch.tensor([0, 0, 1, 1])
    out_dim = 2 if task == "multiclass" else 1
    norm2 = (x ** 2).sum(1)
    if task == "binary":
        lam = M / torch.sqrt(norm2 + 1)
        c = (lam * (2.0 * labels - 1))[:, None] / M
    elif task == "multiclass":
        lam = M / torch.sqrt(2 * (norm2 + 1))
        one_hot = torch.nn.functional.one_hot
        c = lam[:, None] * (one_hot(labels, 2) - one_hot(1 - labels, 2)) / M
    else:
        lam = M / torch.sqrt(norm2 + 1) * (torch.tensor([1.0, -1.0, 1.0, -1.0]) if signs is None else signs)
        c = lam[:, None] / M
    beta = 0.5
    spec = {"widths": [M], "init_scale": None}
    net = plugins.get("models", "mlp").build((1, SIDE, SIDE), out_dim, spec).double()
    with torch.no_grad():
        first, out = net.layers
        first.weight.copy_(beta * x)
        first.bias.fill_(beta)
        out.weight.copy_((c * (beta * (norm2 + 1))[:, None]).T)
    knowledge = Knowledge(task=task, num_classes=2, out_dim=out_dim, input_shape=(1, SIDE, SIDE),
                          class_counts=[2, 2],
                          loss={"binary": "bce", "multiclass": "ce", "regression": "mse"}[task])
    target = AttackTarget(model=net, family="mlp", homogeneity_degree=2, knowledge=knowledge)
    return target, x.reshape(M, 1, SIDE, SIDE), labels, lam


ATTACK_FOR = {"binary": "haim_binary_kkt", "multiclass": "multiclass_kkt", "regression": "general_loss_wd"}


def attack_loss(target, attack_name: str, x: torch.Tensor, labels: torch.Tensor, lam: torch.Tensor,
                engine: str) -> float:
    """The attack's own loss (its terms s_i and penalty, the shared loop) at (x, lambda), after zero steps."""
    attack = plugins.get("attacks", attack_name)
    cfg = attack.config_cls(steps=0, alpha=ALPHA, engine=engine, box=10.0)  # zero steps: below what users may set
    coefficients, penalty = attack.stationarity_terms(labels, cfg, target.knowledge.out_dim, x)
    return run_stationarity_attack(target, x, labels, lam, coefficients, penalty, cfg).final_loss


@pytest.mark.parametrize("task", ["binary", "multiclass", "regression"])
@pytest.mark.parametrize("engine", ["autograd", "gram"])
def test_attack_loss_vanishes_at_the_planted_solution(task, engine):
    target, x, labels, lam = planted(task)
    theta_sq = sum(float((p.detach() ** 2).sum()) for p in target.model.parameters())
    at_truth = attack_loss(target, ATTACK_FOR[task], x, labels, lam, engine)
    # the gram engine expands ||theta - s||^2 = ||theta||^2 - 2 theta.s + ||s||^2: the cancellation leaves float64
    # rounding of order eps * ||theta||^2 (a few dozen terms), which is what a kernel may round to, not zero
    assert at_truth < 64 * torch.finfo(torch.float64).eps * theta_sq
    # and it is not small elsewhere: a moved point or a wrong multiplier costs
    assert attack_loss(target, ATTACK_FOR[task], x * 1.1, labels, lam, engine) > 1e-4 * theta_sq
    assert attack_loss(target, ATTACK_FOR[task], x, labels, lam * 1.1, engine) > 1e-4 * theta_sq


@pytest.mark.parametrize("task", ["binary", "multiclass", "regression"])
def test_attack_started_near_the_planted_solution_returns_to_it(task):
    attack = plugins.get("attacks", ATTACK_FOR[task])
    # regression multipliers start N(0, 1) and must not cross 0: plant with the signs the attack will draw
    cfg = build_config(attack.config_cls, {"steps": 1500, "alpha": ALPHA, "lr": 0.02, "lambda_lr": 0.02,
                                           "box": 10.0})
    lam0 = attack.initial_multipliers(M, cfg, 1, torch.Generator().manual_seed(0), torch.zeros(()).double())
    target, x, labels, lam = planted(task, signs=lam0.sign())
    noise = torch.randn(x.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    x0 = x + 0.03 * noise * (x.flatten(1).norm(dim=1) / noise.flatten(1).norm(dim=1))[:, None, None, None]
    out = attack.run(target, x0, labels, cfg, generator=torch.Generator().manual_seed(0))
    assert out.stopped == "completed", out.message
    start = (x0 - x).norm() / x.norm()
    end = (out.candidates - x).norm() / x.norm()
    assert end < start / 20, (float(start), float(end))
    assert out.trace[-1]["stationarity_relative"] < 1e-4
