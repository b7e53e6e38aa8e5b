"""benchmarks/state_regime.py: its closed-form per-sample gradients agree with autograd, its NNLS fit reads 0 at a
planted KKT point and the distance moved at a point moved off the cone, and its float32 rounding count is exact on
hand-made values."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
import torch

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def sr() -> ModuleType:
    spec = importlib.util.spec_from_file_location("state_regime", REPO / "benchmarks" / "state_regime.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["state_regime"] = mod
    spec.loader.exec_module(mod)
    return mod


def _net(rng: np.random.Generator, d: int = 6, w: int = 5) -> list[np.ndarray]:
    return [rng.normal(size=(w, d + 1)), rng.normal(size=(w, w)), rng.normal(size=(1, w))]


def _autograd_jacobian(layers: list[np.ndarray], x: np.ndarray, y: np.ndarray, alpha: float | None = None) -> np.ndarray:
    """Rows y_i grad_theta f(x_i), by torch autograd on an independent forward pass (first layer: [W1 | b1]); with
    ``alpha`` through the attacks' surrogate ReLU (reconbench.attack.kkt.surrogate)."""
    from reconbench.attack.kkt.surrogate import surrogate_relu

    act = torch.relu if alpha is None else surrogate_relu(alpha)
    params = [torch.tensor(t, requires_grad=True) for t in layers]
    rows = []
    for xi, yi in zip(x, y, strict=True):
        xt = torch.cat([torch.tensor(xi), torch.ones(1, dtype=torch.float64)])
        f = params[2] @ act(params[1] @ act(params[0] @ xt))
        grads = torch.autograd.grad(f.sum(), params)
        rows.append(yi * torch.cat([g.flatten() for g in grads]).numpy())
    return np.stack(rows)


@pytest.mark.parametrize("alpha", [None, 3.0])
def test_gram_and_inner_products_equal_autograd(sr, alpha):
    rng = np.random.default_rng(0)
    layers, x, y = _net(rng), rng.normal(size=(7, 6)), rng.choice([-1.0, 1.0], size=7)
    jac = _autograd_jacobian(layers, x, y, alpha)
    sizes = [t.size for t in layers]
    blocks = np.split(jac, np.cumsum(sizes)[:-1], axis=1)
    parts = sr.per_sample_parts(layers, x, alpha)
    v = [rng.normal(size=t.shape) for t in layers]
    for gram, block in zip(sr.gram_by_layer(parts, y), blocks, strict=True):
        np.testing.assert_allclose(gram, block @ block.T, rtol=1e-12, atol=1e-12)
    for inner, block, vl in zip(sr.inner_by_layer(parts, y, v), blocks, v, strict=True):
        np.testing.assert_allclose(inner, block @ vl.flatten(), rtol=1e-12, atol=1e-12)


def test_each_layers_inner_product_with_theta_is_the_output(sr):
    """Homogeneity: <theta_l, grad_l f(x)> = f(x) for every layer of a bias-free-after-the-first ReLU MLP."""
    rng = np.random.default_rng(1)
    layers, x = _net(rng), rng.normal(size=(9, 6))
    y = np.ones(9)
    parts = sr.per_sample_parts(layers, x)
    for inner in sr.inner_by_layer(parts, y, layers):
        np.testing.assert_allclose(inner, parts["f"], rtol=1e-12, atol=1e-12)


def test_nnls_reads_zero_at_a_planted_kkt_point_and_the_distance_off_it(sr):
    rng = np.random.default_rng(2)
    layers, x, y = _net(rng), rng.normal(size=(4, 6)), np.array([1.0, -1.0, 1.0, -1.0])
    jac = _autograd_jacobian(layers, x, y)
    lam = np.array([0.5, 1.5, 0.0, 2.0])
    planted = jac.T @ lam
    sizes = [t.size for t in layers]
    v = [b.reshape(t.shape) for b, t in zip(np.split(planted, np.cumsum(sizes)[:-1]), layers, strict=True)]
    parts = sr.per_sample_parts(layers, x)   # gradients at `layers`; v is a non-negative combination of them
    grams, sq = sr.gram_by_layer(parts, y), [float((t * t).sum()) for t in v]
    fit = sr.nnls_fit(grams, sr.inner_by_layer(parts, y, v), sq)
    assert fit["residual"] < 1e-7
    np.testing.assert_allclose(fit["lam"], lam, rtol=1e-6, atol=1e-9)
    # move v off the span of the gradients by a vector orthogonal to it: the residual is that vector's length
    basis, _ = np.linalg.qr(jac.T)
    off = rng.normal(size=planted.size)
    off -= basis @ (basis.T @ off)
    off *= 0.3 / np.linalg.norm(off)
    moved = planted + off
    v2 = [b.reshape(t.shape) for b, t in zip(np.split(moved, np.cumsum(sizes)[:-1]), layers, strict=True)]
    sq2 = [float((t * t).sum()) for t in v2]
    fit2 = sr.nnls_fit(grams, sr.inner_by_layer(parts, y, v2), sq2)
    assert fit2["residual"] * np.linalg.norm(moved) == pytest.approx(0.3, rel=1e-6)


def test_lost_share_counts_updates_below_half_an_ulp(sr):
    value = torch.tensor([1.0, 1.0, 1.0, 0.0], dtype=torch.float32)
    ulp = 2.0 ** -23   # float32 spacing above 1
    update = torch.tensor([0.25 * ulp, 2.0 * ulp, 0.0, 1e-30], dtype=torch.float64)
    got = sr.lost_share(value, update)
    assert got["entries_lost"] == 0.25   # only the first: the zero update is not counted, 1e-30 is kept at 0
    want = (0.25 * ulp) ** 2 / ((0.25 * ulp) ** 2 + (2.0 * ulp) ** 2 + 1e-60)
    assert got["norm_sq_lost"] == pytest.approx(want, rel=1e-14)


def test_cell_ranges_flag_a_setting_outside_the_papers_range(sr):
    runs = [{"run": 0, "final_loss": 3.0, "config": {"lr": 1e-3, "init_scale": 1e-3, "lambda_min": 0.2, "alpha": 50.0}},
            {"run": 1, "final_loss": 2.0, "config": {"lr": 2.0, "init_scale": 1e-3, "lambda_min": 0.2, "alpha": 50.0}}]
    got = sr.cell_ranges({"runs": runs})
    assert got["final_loss_min"] == 2.0 and got["runs"] == 2
    assert got["lr"] == {"min": 1e-3, "max": 2.0, "paper": [1e-5, 1.0], "inside": False}
    assert got["alpha"]["inside"] and got["lambda_min"]["inside"]
    assert got["best_run"]["run"] == 1


def test_the_docs_kkt_table_is_the_committed_json():
    """docs/regime.md's table of the paper-size targets' fits states benchmarks/results/regime/state_regime.json."""
    import json

    data = json.loads((REPO / "benchmarks" / "results" / "regime" / "state_regime.json").read_text())["targets"]
    mnist, cifar = data["4eef26d9a3e7ba9d"]["fit"], data["fcde427475ca584c"]["fit"]
    lines = (REPO / "docs" / "regime.md").read_text().splitlines()
    start = lines.index("| fit | at the 500 training images | at 500 held-out images | "
                        "by layer at training images: [W1 b1] / W2 / w3 |")
    rows = [[c.strip() for c in ln.strip().strip("|").split("|")] for ln in lines[start + 2:start + 4]]

    def pair(key: str) -> str:
        return f"{mnist[key]['residual']:.3f} ({cifar[key]['residual']:.3f})"

    def layers(key: str) -> str:
        one = " / ".join(f"{v:.3f}" for v in mnist[key]["residual_by_layer"])
        two = " / ".join(f"{v:.3f}" for v in cifar[key]["residual_by_layer"])
        return f"{one} ({two})"

    for row, what in zip(rows, ("theta", "learned"), strict=True):
        assert row[1:] == [pair(f"{what}_at_train"), pair(f"{what}_at_heldout"), layers(f"{what}_at_train")]
