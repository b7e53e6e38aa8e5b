"""The stationarity engine against independent computations: closed forms, a numpy re-derivation, finite
differences."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from reconbench import plugins
from reconbench.attack.kkt.stationarity import autograd_engine, gram_engine, make_engine
from reconbench.attack.kkt.surrogate import softplus_alpha, surrogate_relu

ALPHA = 3.0


def sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-z))


def numpy_stationarity(layers: list[tuple[np.ndarray, np.ndarray | None]], x: np.ndarray, coeffs: np.ndarray,
                       alpha: float, smooth: bool) -> float:
    """sum_p ||theta_p - grad_p sum_i C_i . Phi(x_i)||^2 by explicit back-propagation (no autograd, no
    Gram)."""
    h = [x.reshape(len(x), -1)]
    z = []
    for k, (w, b) in enumerate(layers):
        zk = h[-1] @ w.T + (b if b is not None else 0.0)
        z.append(zk)
        if k < len(layers) - 1:
            h.append(np.logaddexp(0.0, alpha * zk) / alpha if smooth else np.maximum(zk, 0.0))
    total, delta = 0.0, coeffs
    for k in reversed(range(len(layers))):
        w, b = layers[k]
        total += ((w - delta.T @ h[k]) ** 2).sum()
        if b is not None:
            total += ((b - delta.sum(0)) ** 2).sum()
        if k > 0:
            delta = (delta @ w) * sigmoid(alpha * z[k - 1])
    return float(total)


def layers_of(net) -> list[tuple[np.ndarray, np.ndarray | None]]:
    return [(lin.weight.detach().numpy().copy(),
             None if lin.bias is None else lin.bias.detach().numpy().copy()) for lin in net.linear_chain()]


def tiny(family: str, out_dim: int = 2, seed: int = 0):
    spec = {"mlp": {"widths": [5, 4], "init_scale": None}, "mlp_bias": {"widths": [5, 4]},
            "affine": {}}[family]
    gen = torch.Generator().manual_seed(seed)
    net = plugins.get("models", family).build((1, 2, 3), out_dim, spec, generator=gen).double()
    x = torch.randn(3, 1, 2, 3, generator=gen, dtype=torch.float64) * 0.7
    c = torch.randn(3, out_dim, generator=gen, dtype=torch.float64)
    return net, x, c


def central_difference(f, a: np.ndarray, h: float = 1e-6) -> np.ndarray:
    g = np.zeros_like(a)
    for idx in np.ndindex(a.shape):
        up, down = a.copy(), a.copy()
        up[idx] += h
        down[idx] -= h
        g[idx] = (f(up) - f(down)) / (2 * h)
    return g


def engine_value_and_grad(engine, x: torch.Tensor, c: torch.Tensor) -> tuple[float, np.ndarray, np.ndarray]:
    x = x.clone().requires_grad_(True)
    c = c.clone().requires_grad_(True)
    _, residual = engine(x)
    loss = residual(c)
    gx, gc = torch.autograd.grad(loss, [x, c])
    return float(loss.detach()), gx.numpy(), gc.numpy()


def test_surrogate_relu_forward_backward_and_double_backward():
    z = torch.linspace(-2, 2, 41, dtype=torch.float64).requires_grad_(True)
    v = torch.randn(41, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    act = surrogate_relu(ALPHA)
    out = act(z)
    assert torch.equal(out, torch.relu(z))  # exactly the ReLU forward
    (g,) = torch.autograd.grad((out * v).sum(), z, create_graph=True)
    s = 1 / (1 + torch.exp(-ALPHA * z.detach()))
    torch.testing.assert_close(g, v * s, rtol=1e-14, atol=1e-14)
    (gg,) = torch.autograd.grad(g.sum(), z)  # d/dz sigma(alpha z) = alpha s (1 - s)
    torch.testing.assert_close(gg, v * ALPHA * s * (1 - s), rtol=1e-12, atol=1e-14)
    smooth = surrogate_relu(ALPHA, "softplus")(z)
    expected = torch.log1p(torch.exp(ALPHA * z.detach())) / ALPHA
    torch.testing.assert_close(smooth, expected, rtol=1e-13, atol=1e-15)
    assert torch.isfinite(softplus_alpha(torch.tensor([1e4, -1e4], dtype=torch.float64), 300.0)).all()


@pytest.mark.parametrize("family", ["mlp", "mlp_bias", "affine"])
@pytest.mark.parametrize("forward", ["relu", "softplus"])
def test_both_engines_equal_the_numpy_derivation(family, forward):
    net, x, c = tiny(family)
    expected = numpy_stationarity(layers_of(net), x.numpy(), c.numpy(), ALPHA, forward == "softplus")
    for engine in (autograd_engine(net, ALPHA, forward), gram_engine(net.linear_chain(), ALPHA, forward)):
        value, _, _ = engine_value_and_grad(engine, x, c)
        assert value == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("family", ["mlp", "mlp_bias", "affine"])
def test_engine_gradients_match_finite_differences(family):
    """With the smooth forward every derivative the engines take is a true derivative: check them by FD."""
    net, x, c = tiny(family)
    layers = layers_of(net)

    def f_x(xa: np.ndarray) -> float:
        return numpy_stationarity(layers, xa, c.numpy(), ALPHA, True)

    def f_c(ca: np.ndarray) -> float:
        return numpy_stationarity(layers, x.numpy(), ca, ALPHA, True)

    fd_x, fd_c = central_difference(f_x, x.numpy()), central_difference(f_c, c.numpy())
    engines = (autograd_engine(net, ALPHA, "softplus"), gram_engine(net.linear_chain(), ALPHA, "softplus"))
    for engine in engines:
        _, gx, gc = engine_value_and_grad(engine, x, c)
        np.testing.assert_allclose(gx, fd_x, rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(gc, fd_c, rtol=1e-6, atol=1e-7)


def test_relu_forward_multiplier_gradient_is_exact_and_engines_agree_on_x():
    """With the reference (relu) forward the multiplier gradient is still a true derivative; the x-gradient
    uses the surrogate slope everywhere, identically in both engines."""
    net, x, c = tiny("mlp")
    fd_c = central_difference(lambda ca: numpy_stationarity(layers_of(net), x.numpy(), ca, ALPHA, False),
                              c.numpy())
    v1, gx1, gc1 = engine_value_and_grad(autograd_engine(net, ALPHA), x, c)
    v2, gx2, gc2 = engine_value_and_grad(gram_engine(net.linear_chain(), ALPHA), x, c)
    np.testing.assert_allclose(gc1, fd_c, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(gc2, fd_c, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(gx1, gx2, rtol=1e-10, atol=1e-12)
    assert v1 == pytest.approx(v2, rel=1e-12)


def test_conv_family_autograd_engine_is_consistent_with_its_value():
    gen = torch.Generator().manual_seed(3)
    net = plugins.get("models", "conv").build((1, 5, 5), 2, {"channels": 2, "kernel": 3, "hidden": 4,
                                                             "init_scale": None}, generator=gen).double()
    x = torch.randn(2, 1, 5, 5, generator=gen, dtype=torch.float64) * 0.5
    c = torch.randn(2, 2, generator=gen, dtype=torch.float64)
    engine, name = make_engine(net, ALPHA, "softplus")
    assert name == "autograd"  # no linear chain: the generic path

    def value(xa: np.ndarray) -> float:
        return float(engine(torch.as_tensor(xa))[1](c).detach())

    _, gx, _ = engine_value_and_grad(engine, x, c)
    np.testing.assert_allclose(gx, central_difference(value, x.numpy()), rtol=1e-6, atol=1e-7)


def test_engine_choice():
    net, _, _ = tiny("mlp")
    assert make_engine(net, ALPHA)[1] == "gram"
    assert make_engine(net, ALPHA, kind="autograd")[1] == "autograd"
    conv = plugins.get("models", "conv").build((1, 5, 5), 2, {"channels": 2, "kernel": 3, "hidden": 4})
    with pytest.raises(Exception, match="engine 'gram' needs"):
        make_engine(conv, ALPHA, kind="gram")
