"""loo_ntk: the dual gradient against a per-candidate loop, a planted zero, central differences of the objective in
float64, the reference's beta ramp and box penalty values, frozen a' with one kernel, batching, conformance."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from reconbench import conformance, plugins
from reconbench.attack.kkt.surrogate import softplus_alpha
from reconbench.attack.ntk import NTKProblem, batched_value_and_grad, beta_at, box_penalty, dual_gradient, objective
from reconbench.config import build_config
from reconbench.nets import TargetNet
from reconbench.runs.prepare import prepare
from reconbench.runs.spec import RunSpec

ATTACK = "loo_ntk"
SHAPE = (1, 3, 3)


pytestmark = pytest.mark.usefixtures("one_torch_thread")   # tiny problems: one torch thread


def _rand(*shape: int, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _net(k: int = 2, seed: int = 0) -> TargetNet:
    family = plugins.get("models", "mlp_bias")
    return family.build(SHAPE, k, {"widths": [7, 5]}, generator=torch.Generator().manual_seed(seed)).double()


def test_beta_ramp_is_the_references():
    assert beta_at(0, 20000, 200) == 11.0
    assert beta_at(20000, 20000, 200) == pytest.approx(20.0, rel=1e-12)
    assert beta_at(40000, 20000, 200) == pytest.approx(110.0, rel=1e-12)
    assert beta_at(45575, 20000, 200) < 200.0 and beta_at(45576, 20000, 200) == 200.0
    assert beta_at(80000, 20000, 200) == 200.0


def test_box_penalty_values():
    mean = torch.full(SHAPE, 0.3, dtype=torch.float64)
    inside = torch.stack([-mean, 1.0 - mean])                      # the box's corners
    assert float(box_penalty(inside, mean)) == 0.0
    out = inside.clone()
    out[1, 0, 1, 2] = 0.8                                          # 0.1 above 1 - mu
    assert float(box_penalty(out, mean)) == pytest.approx(0.1 * 0.1 ** 2 / 9, rel=1e-12)


def test_dual_gradient_is_the_weighted_sum_of_candidate_gradients():
    """G with a = m K b equals sum_j b_j . grad f(x_j), each gradient taken alone."""
    net = _net()
    x, b = _rand(4, *SHAPE, seed=1), _rand(4, 2, seed=2)
    params = {n: p.detach() for n, p in net.named_parameters()}
    g = dual_gradient(params, {}, net, x, b * b.numel())
    loop = {n: torch.zeros_like(p) for n, p in params.items()}
    for j in range(4):
        net.zero_grad()
        (net(x[j:j + 1])[0] * b[j]).sum().backward()
        for n, p in net.named_parameters():
            loop[n] += p.grad  # type: ignore[operator]
    for n in params:
        assert torch.allclose(g[n], loop[n], rtol=1e-12, atol=1e-14), n


def _planted(both: bool) -> tuple[NTKProblem, torch.Tensor, torch.Tensor, torch.Tensor, float]:
    """theta_0 := theta_f - G(x*, a*; theta_f) under softplus_beta, so that (x*, a*, a' = 0) fits exactly."""
    beta = 11.0
    net = _net(seed=3)
    x, a = 0.1 * _rand(5, *SHAPE, seed=4), _rand(5, 2, seed=5)
    params = {n: p.detach() for n, p in net.named_parameters()}
    with net.use_activation(lambda z: softplus_alpha(z, beta)):
        g = dual_gradient(params, {}, net, x, a)
    initial = copy.deepcopy(net)
    with torch.no_grad():
        for n, p in initial.named_parameters():
            p.copy_(params[n] - g[n])
    problem = NTKProblem.of(net, initial, torch.full(SHAPE, 0.5, dtype=torch.float64))
    return problem, x, a, torch.zeros_like(a), beta


@pytest.mark.parametrize("both", [False, True])
def test_planted_solution_has_loss_zero(both):
    problem, x, a, a0, beta = _planted(both)
    run = batched_value_and_grad(problem, objective(problem, both), beta)
    scale = float(sum((d ** 2).sum() for d in problem.delta.values()))
    _, (total, stat) = run(x[None], a[None], a0[None])
    # the loss is a squared norm: its root against the root of the scale, relative to float64 rounding of sums
    assert math.sqrt(float(total[0])) < 1e-12 * math.sqrt(max(scale, 1.0)) and float(stat[0]) == float(total[0])
    perm = torch.tensor([3, 0, 4, 1, 2])
    _, (total_p, _) = run(x[perm][None], a[perm][None], a0[None])
    assert math.sqrt(float(total_p[0])) < 1e-12 * math.sqrt(max(scale, 1.0))
    _, (moved, _) = run((x + 0.05 * _rand(*x.shape, seed=6))[None], a[None], a0[None])
    assert float(moved[0]) > 1e-6 * scale


def test_gradient_matches_central_differences_both_kernels():
    problem, x, a, a0, beta = _planted(True)
    x, a, a0 = x + 0.3 * _rand(*x.shape, seed=7), a + 0.2, _rand(*a.shape, seed=8)
    x[0, 0, 0, 0] = 2.0                                           # one pixel outside the box
    loss = objective(problem, both_kernels=True)
    run = batched_value_and_grad(problem, loss, beta)
    grads, _ = run(x[None], a[None], a0[None])
    dirs = [_rand(*t.shape, seed=10 + i) for i, t in enumerate((x, a, a0))]
    analytic = sum(float((g[0] * d).sum()) for g, d in zip(grads, dirs, strict=True))
    eps = 1e-6

    def total(sign: float) -> float:
        _, (value, _) = run(*[(t + sign * eps * d)[None] for t, d in zip((x, a, a0), dirs, strict=True)])
        return float(value[0])

    fd = (total(1.0) - total(-1.0)) / (2 * eps)
    assert analytic == pytest.approx(fd, rel=1e-6)


def test_second_duals_get_no_gradient_with_one_kernel():
    problem, x, a, a0, beta = _planted(False)
    grads, _ = batched_value_and_grad(problem, objective(problem, False), beta)(x[None], a[None], (a0 + 1)[None])
    assert bool((grads[2] == 0).all())  # so Adam leaves a' exactly where it started


def test_a_batch_of_runs_equals_the_runs_alone():
    card = conformance.tiny_card("binary")
    attack = plugins.get("attacks", ATTACK)
    _, target, labels = prepare(card, RunSpec(attack=ATTACK))
    cfgs = [build_config(attack.config_cls, {"steps": 4, "lr": lr}, ATTACK) for lr in (0.01, 0.05)]
    x0s = [0.2 * _rand(len(labels), *card.data["input_shape"], seed=s) for s in (20, 21)]
    got: dict[int, object] = {}
    attack.run_batch(target, x0s, labels, cfgs, generators=[torch.Generator().manual_seed(s) for s in (1, 2)],
                     on_done=lambda i, r, b: got.__setitem__(i, r))
    for i in range(2):
        alone = attack.run(target, x0s[i], labels, cfgs[i], generator=torch.Generator().manual_seed(i + 1))
        assert torch.allclose(got[i].candidates, alone.candidates, rtol=1e-9, atol=1e-12)  # type: ignore[attr-defined]
        assert got[i].final_loss == pytest.approx(alone.final_loss, rel=1e-9)  # type: ignore[attr-defined]


def test_loo_ntk_conforms():
    conformance.check_attack(plugins.get("attacks", ATTACK))
