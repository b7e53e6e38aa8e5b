"""Time per KKT attack step at the cpu-mini shapes, against a plain re-implementation of the reference loop.

    OMP_NUM_THREADS=1 python -m pytest benchmarks/bench_kkt.py --benchmark-enable --benchmark-json=bench.json
    python benchmarks/bench_kkt.py bench.json        # per-step times and engine / baseline ratios

Each benchmarked call runs STEPS attack iterations (the engine's call also evaluates the final loss once
more).
Shapes (width-1000 two-hidden-layer MLPs, m = 2n candidates): MNIST binary n = 20 (D = 784, 1 output),
CIFAR-10 binary n = 20 (D = 3072, 1 output), MNIST 10-class n = 50 (D = 784, 10 outputs).

``baseline`` is the reference loop written the plain way, kept here on purpose: the surrogate ReLU as an
autograd
Function, g = autograd.grad(s, theta, 1/m, create_graph=True), loss.backward() (which also fills theta.grad,
as the
reference does), two SGD-momentum optimisers, float64.
"""

from __future__ import annotations

import json
import sys

import pytest
import torch

STEPS = 5
SHAPES = {"mnist_binary": (784, 40, 1), "cifar_binary": (3072, 40, 1), "mnist_10class": (784, 100, 10)}


def make_model(dim: int, out_dim: int, dtype: torch.dtype):
    from reconbench import plugins

    gen = torch.Generator().manual_seed(0)
    net = plugins.get("models", "mlp").build((1, 1, dim), out_dim, {"widths": [1000, 1000]}, generator=gen)
    return net.to(dtype)


# -- the baseline: the reference loop, written plainly ------------------------------------------------------
class ModifiedReLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, z, alpha):  # type: ignore[no-untyped-def, override]
        ctx.save_for_backward(z)
        ctx.alpha = alpha
        return z.clamp_min(0)

    @staticmethod
    def backward(ctx, g):  # type: ignore[no-untyped-def, override]
        (z,) = ctx.saved_tensors
        return g * torch.sigmoid(ctx.alpha * z), None


def baseline_loop(model, x0: torch.Tensor, y: torch.Tensor, steps: int, alpha: float = 100.0) -> float:
    params = list(model.parameters())
    m = len(x0)
    x = x0.clone().requires_grad_(True)
    lam = torch.rand(m, dtype=x0.dtype).requires_grad_(True)
    opt_x = torch.optim.SGD([x], lr=1e-3, momentum=0.9)
    opt_l = torch.optim.SGD([lam], lr=1e-4, momentum=0.9)
    loss = torch.zeros(())
    with model.use_activation(lambda z: ModifiedReLU.apply(z, alpha)):
        for _ in range(steps):
            values = model(x)
            if values.shape[1] == 1:
                s = lam * y * values.squeeze(1)
            else:
                own = values.gather(1, y.long()[:, None]).squeeze(1)
                other = values.scatter(1, y.long()[:, None], float("-inf")).max(dim=1).values
                s = lam * (own - other)
            grads = torch.autograd.grad(
                s, params, grad_outputs=torch.full_like(s, 1.0 / m), create_graph=True
            )
            kkt = sum(((p - g) ** 2).sum() for p, g in zip(params, grads, strict=True))
            prior = ((x - 1).clamp_min(0) ** 2).sum() + ((-1 - x).clamp_min(0) ** 2).sum()
            loss = kkt + prior + 5 * ((0.05 - lam).clamp_min(0) ** 2).sum()
            if torch.isnan(kkt):
                raise RuntimeError("nan")
            opt_x.zero_grad()
            opt_l.zero_grad()
            loss.backward()
            opt_x.step()
            opt_l.step()
    return float(loss)


def engine_loop(
    model, x0: torch.Tensor, labels: torch.Tensor, steps: int, engine: str, out_dim: int
) -> float:
    from reconbench import plugins
    from reconbench.config import build_config
    from reconbench.interfaces import AttackTarget, Knowledge

    task = "binary" if out_dim == 1 else "multiclass"
    attack = plugins.get("attacks", "haim_binary_kkt" if task == "binary" else "multiclass_kkt")
    cfg = build_config(attack.config_cls, {"steps": steps, "lr": 1e-3, "alpha": 100.0, "engine": engine})
    c, h, w = x0.shape[1:]
    knowledge = Knowledge(task=task, num_classes=max(out_dim, 2), out_dim=out_dim, input_shape=(c, h, w))
    target = AttackTarget(
        model=model, family="mlp", homogeneity_degree=3, knowledge=knowledge, dtype=x0.dtype
    )
    return attack.run(target, x0, labels, cfg, generator=torch.Generator().manual_seed(0)).final_loss


def inputs(shape: str, dtype: torch.dtype):
    dim, m, out_dim = SHAPES[shape]
    torch.manual_seed(0)
    x0 = torch.randn(m, 1, 1, dim, dtype=dtype) * 1e-2
    k = max(out_dim, 2)
    labels = torch.div(torch.arange(m) * k, m, rounding_mode="floor")
    return make_model(dim, out_dim, dtype), x0, labels, out_dim


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("impl", ["engine_auto", "engine_autograd", "baseline"])
def test_step_time(benchmark, shape, dtype, impl):
    if impl == "baseline" and dtype == "float32":
        pytest.skip("the baseline is the reference's float64 loop")
    model, x0, labels, out_dim = inputs(shape, getattr(torch, dtype))
    benchmark.group = f"{shape}"
    benchmark.extra_info.update({"steps_per_call": STEPS, "shape": shape, "dtype": dtype, "impl": impl})
    if impl == "baseline":
        y = (2.0 * labels - 1.0).to(x0) if out_dim == 1 else labels
        value = benchmark.pedantic(baseline_loop, args=(model, x0, y, STEPS), rounds=3, warmup_rounds=1)
    else:
        value = benchmark.pedantic(
            engine_loop,
            args=(model, x0, labels, STEPS, impl.split("_")[1], out_dim),
            rounds=3,
            warmup_rounds=1,
        )
    assert value == value  # finite, not NaN


def summarise(path: str) -> None:
    data = json.load(open(path))
    rows = {}
    for b in data["benchmarks"]:
        info = b["extra_info"]
        rows[(info["shape"], info["dtype"], info["impl"])] = b["stats"]["median"] / info["steps_per_call"]
    print(f"{'shape':15s} {'dtype':8s} {'impl':16s} {'ms/step':>9s} {'baseline/impl':>14s}")
    for (shape, dtype, impl), t in sorted(rows.items()):
        base = rows.get((shape, "float64", "baseline"))
        ratio = f"{base / t:14.2f}" if base else ""
        print(f"{shape:15s} {dtype:8s} {impl:16s} {t * 1e3:9.1f} {ratio}")


if __name__ == "__main__":
    summarise(sys.argv[1])
