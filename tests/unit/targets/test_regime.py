"""The regime test of each threat model (reconbench/targets/regime.py): a planted KKT point of a homogeneous ReLU net
reads 0 to rounding, random inputs read near 1, the stationary point of a convex regularised loss reads 0, the
Jacobian the fit uses matches finite differences, and old certificates give the same residual."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from reconbench import plugins
from reconbench.targets.certificate import fit_stationarity, stationarity_terms
from reconbench.targets.regime import MAX_RESIDUAL, in_regime, regime_residuals, residual_for


def _separated_inputs(n: int, d: int, seed: int) -> torch.Tensor:
    """n inputs with <x_i, x_j> + 1 < 0 for i != j: orthonormal directions pulled towards minus their mean."""
    gen = torch.Generator().manual_seed(seed)
    q, _ = torch.linalg.qr(torch.randn(d, n, generator=gen, dtype=torch.float64))
    q = q.T
    x = 4.0 * (q - q.mean(dim=0, keepdim=True))  # <x_i, x_j> = -16/n for i != j
    return x


def _planted(task: str, n: int = 4, k: int = 3, units_per_sample: int = 3, d: int = 30, seed: int = 0):
    """A one-hidden-layer ReLU net (first layer with bias, output without: 2-homogeneous) whose weights are an exact
    non-negative combination of the gradients of the stationarity terms at its training inputs.

    Hidden unit u serves sample i: (W_u, b_u) = a_u (x_i, 1), active at x_i only, since a_u (<x_i, x_j> + 1) < 0 for
    j != i. With s_i = ||x_i||^2 + 1, binary: v_u = y_i a_u sqrt(s_i), lambda_i = 1 / sqrt(s_i); multiclass (every
    wrong class j one term, one multiplier mu_i = 1 / sqrt(K (K-1) s_i)): V[:, u] = a_u s_i mu_i (K e_{y_i} - 1).
    """
    x = _separated_inputs(n, d, seed)
    off_diagonal = (x @ x.T + 1.0)[~torch.eye(n, dtype=torch.bool)]
    assert float(off_diagonal.max()) < 0
    gen = torch.Generator().manual_seed(seed + 1)
    out_dim = k if task == "multiclass" else 1
    labels = torch.arange(n) % (k if task == "multiclass" else 2)
    family = plugins.get("models", "mlp")
    net = family.build((1, 1, d), out_dim, {"widths": [n * units_per_sample]}, generator=gen).double()
    first, last = net.layers[0], net.layers[1]
    a = 0.5 + torch.rand(n * units_per_sample, generator=gen, dtype=torch.float64)
    with torch.no_grad():
        for u in range(n * units_per_sample):
            i = u // units_per_sample
            s = float(x[i] @ x[i]) + 1.0
            first.weight[u] = a[u] * x[i]
            first.bias[u] = a[u]
            if task == "binary":
                last.weight[0, u] = (2.0 * float(labels[i]) - 1.0) * a[u] * math.sqrt(s)
            else:
                mu = 1.0 / math.sqrt(k * (k - 1) * s)
                col = -torch.ones(k, dtype=torch.float64)
                col[int(labels[i])] += k
                last.weight[:, u] = a[u] * s * mu * col
    return net, x.reshape(n, 1, 1, d), labels


@pytest.mark.parametrize("task", ["binary", "multiclass"])
def test_a_planted_kkt_point_reads_zero_and_random_inputs_read_near_one(task):
    net, x, labels = _planted(task)
    res = regime_residuals(net, x, labels, task)
    assert res["theta"]["residual"] < 1e-10  # 0 up to float64 rounding of a norm ratio
    assert res["theta"]["margin_set"] == list(range(len(x)))  # every sample carries a positive multiplier
    assert min(res["theta"]["margin_set_margins"]) > 0
    assert in_regime(res["theta"]["residual"])
    gen = torch.Generator().manual_seed(7)
    noise = torch.randn(x.shape, generator=gen, dtype=torch.float64) * x.std()
    rand = regime_residuals(net, noise, labels, task)
    assert rand["theta"]["residual"] > 0.9
    assert not in_regime(rand["theta"]["residual"])


def test_the_planted_multipliers_are_the_closed_form_ones():
    net, x, labels = _planted("binary")
    res = regime_residuals(net, x, labels, "binary")
    s = (x.reshape(len(x), -1) ** 2).sum(dim=1) + 1.0
    np.testing.assert_allclose(res["theta"]["multipliers"], (1.0 / s.sqrt()).numpy(), rtol=1e-8)


def test_a_planted_point_moved_off_the_cone_reads_its_distance():
    """theta + delta with delta orthogonal to every term's gradient (a first-layer row moved along a direction
    orthogonal to every input): the residual is ||delta|| / ||theta + delta||, known without the fit."""
    net, x, labels = _planted("binary")
    theta_sq = sum(float((p.detach() ** 2).sum()) for p in net.parameters())
    x_flat = x.reshape(len(x), -1)
    extra = torch.randn(x_flat.shape[1], 1, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    q, _ = torch.linalg.qr(torch.cat([x_flat.T, extra], 1))
    off = q[:, -1]  # orthogonal to every x_i: no gradient of a first-layer weight row has a component along it
    eps = 0.05 * math.sqrt(theta_sq)
    with torch.no_grad():
        net.layers[0].weight[0] += eps * off  # unit 0 stays active at its own sample only (off is orthogonal to all)
    res = regime_residuals(net, x, labels, "binary")
    theta_sq_new = sum(float((p.detach() ** 2).sum()) for p in net.parameters())
    assert res["theta"]["residual"] == pytest.approx(eps / math.sqrt(theta_sq_new), rel=1e-6)


def test_the_jacobian_matches_finite_differences():
    """The terms' gradient with respect to theta (what the fit spans) against central differences."""
    net, x, labels = _planted("multiclass", d=12)
    params = {n: p.detach().clone() for n, p in net.named_parameters()}
    terms = stationarity_terms(net, x, labels, "multiclass")
    jac = torch.func.jacrev(terms)(params)
    gen = torch.Generator().manual_seed(5)
    direction = {n: torch.randn(p.shape, generator=gen, dtype=torch.float64) for n, p in params.items()}
    h = 1e-6
    plus = terms({n: p + h * direction[n] for n, p in params.items()})
    minus = terms({n: p - h * direction[n] for n, p in params.items()})
    fd = (plus - minus) / (2 * h)
    analytic = sum((jac[n].reshape(len(fd), -1) @ direction[n].reshape(-1)) for n in params)
    # central differences: error O(h^2) plus rounding O(eps / h); no ReLU kink is within h of any pre-activation here
    np.testing.assert_allclose(fd.numpy(), analytic.numpy(), rtol=1e-6, atol=1e-8)


def test_the_regularised_residual_is_zero_at_the_minimiser_of_a_convex_regularised_loss():
    """Logistic regression with weight decay is strictly convex; its minimiser (found by L-BFGS here, checked by
    the gradient norm, not by the code under test) reads ~0, the starting weights read far from 0."""
    gen = torch.Generator().manual_seed(0)
    n, d, wd = 12, 8, 0.05
    x = torch.randn(n, 1, 1, d, generator=gen, dtype=torch.float64)
    labels = (torch.arange(n) % 2).double()
    net = plugins.get("models", "affine").build((1, 1, d), 1, {}, generator=gen).double()
    start = regime_residuals(net, x, labels, "binary", weight_decay=wd)["regularised"]["residual"]
    opt = torch.optim.LBFGS(net.parameters(), lr=1.0, max_iter=500, tolerance_grad=1e-14, tolerance_change=1e-16,
                            line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        opt.zero_grad()
        s = (2 * labels - 1) * net(x).reshape(-1)
        loss = torch.nn.functional.softplus(-s).mean() + wd / 2 * sum((p ** 2).sum() for p in net.parameters())
        loss.backward()
        return loss

    for _ in range(5):
        opt.step(closure)
    closure()
    grad_norm = sum(float((p.grad ** 2).sum()) for p in net.parameters()) ** 0.5
    theta_norm = sum(float((p.detach() ** 2).sum()) for p in net.parameters()) ** 0.5
    res = regime_residuals(net, x, labels, "binary", weight_decay=wd)["regularised"]["residual"]
    # the residual is the regularised loss's gradient norm over wd ||theta||, here computed by the test's own loss
    assert res == pytest.approx(grad_norm / (wd * theta_norm), rel=1e-4, abs=1e-12)
    assert res < 1e-6
    assert start > 0.5


def test_old_certificates_give_the_same_theta_residual():
    """A card written before the regime block: the square root of its NNLS residual is the norm ratio."""
    net, x, labels = _planted("binary")
    gen = torch.Generator().manual_seed(11)
    with torch.no_grad():
        for p in net.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=gen, dtype=torch.float64) * p.abs().mean())
    new = regime_residuals(net, x, labels, "binary")["theta"]["residual"]
    old = fit_stationarity(net, x, labels, "binary").relative_residual
    value, how = residual_for({"residual_at_train": old}, "theta")
    assert value == pytest.approx(new, rel=1e-6)
    assert "certificate" in how
    assert residual_for({"regime": {"theta": {"residual": 0.2}}}, "regularised") == (0.2, "theta fit (trained "
                                                                                      "without weight decay)")
    assert residual_for(None, "theta") == (None, "no certificate")
    assert MAX_RESIDUAL == 0.5


@pytest.mark.parametrize(("family", "task"), [("mlp", "binary"), ("mlp", "multiclass"), ("mlp", "regression"),
                                              ("mlp_bias", "multiclass"), ("affine", "binary")])
def test_the_closed_form_chain_operators_agree_with_autodiff(family, task):
    """Two implementations of G = J J^T, J v and J^T lambda: the chain's closed form and autodiff's products."""
    from reconbench.targets import regime

    gen = torch.Generator().manual_seed(2)
    k = 4 if task == "multiclass" else 1
    spec = {"widths": [7, 5]} if family == "mlp" else ({"widths": [6]} if family == "mlp_bias" else {})
    net = plugins.get("models", family).build((1, 3, 3), k, spec, generator=gen).double()
    x = torch.randn(6, 1, 3, 3, generator=gen, dtype=torch.float64)
    labels = torch.arange(6) % max(k, 2)
    names = [n for n, _ in net.named_parameters()]
    params = {n: p.detach() for n, p in net.named_parameters()}
    fast = regime._chain_operators(net, x, labels, task, names)
    assert fast is not None
    slow = regime._autodiff_operators(net, x, labels, task, names, params)
    assert fast[0] == slow[0]
    np.testing.assert_allclose(fast[1], slow[1], rtol=1e-10, atol=1e-12)
    v = torch.randn(sum(p.numel() for p in params.values()), generator=gen, dtype=torch.float64)
    lam = torch.rand(fast[0], generator=gen, dtype=torch.float64)
    np.testing.assert_allclose(fast[2](v).numpy(), slow[2](v).numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(fast[3](lam).numpy(), slow[3](lam).numpy(), rtol=1e-10, atol=1e-12)
