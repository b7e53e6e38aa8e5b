"""The cross-target KKT batch (reconbench/attack/cross_target.py) against the per-cell path: the search runs of several
cells on different targets of one shape, advanced together, give each run the candidates, multipliers, losses and
trace its own cell's batch gives it."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from test_kkt_attacks import tiny_card

from reconbench import plugins
from reconbench.attack.cross_target import CrossGram, CrossRequest, cross_key, run_cross_target
from reconbench.attack.kkt.batched_gram import BatchedGram
from reconbench.config import build_config
from reconbench.errors import ReconbenchError
from reconbench.runs import RunSpec, init_config_for_run, prepare, sample_configs

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TASK = {"haim_binary_kkt": ("binary", None, "mlp"), "multiclass_kkt": ("multiclass", 3, "mlp_bias"),
        "general_loss_wd": ("regression", None, "mlp")}
STEPS = 40
EPS = torch.finfo(torch.float64).eps


def rounding_tolerance(fan_in: int, steps: int) -> float:
    """Relative tolerance from rounding alone. The two paths compute the same function with the same operations but
    for the products by the weights, whose sums of at most ``fan_in`` terms may be grouped differently by a batched
    product than by one product over all rows: each such sum is then off by at most fan_in * eps relative. The
    differences of ``steps`` SGD steps add up (small steps of a smooth loss do not amplify them by more than a small
    factor), so steps * fan_in * eps, at least the 1e-14 the project allows (a wrong weight or start moves a run by
    far more: the test of distinct targets below checks that)."""
    return max(steps * fan_in * EPS, 1e-14)


def cell_request(name: str, weight_decay: float, runs: int, seed: int) -> CrossRequest:
    """One cell's search runs on a tiny digits target (the weight decay picks the target; all share one shape)."""
    task, classes, family = TASK[name]
    card = tiny_card(task, num_classes=classes, family=family, weight_decay=weight_decay)
    spec = RunSpec(attack=name, attack_config={"steps": STEPS, "eval_every": 10}, search_runs=runs, seed=seed)
    attack, target, labels = prepare(card, spec)
    problem = card.problem(None)
    init = plugins.get("inits", "gaussian")
    configs = [build_config(attack.config_cls, c, name) for c in sample_configs(attack, spec)]
    x0s, gens = [], []
    for k, cfg in enumerate(configs):
        icfg, _ = init_config_for_run(init, spec, attack, cfg)
        g = torch.Generator().manual_seed(seed * 1000 + k)
        x0s.append(init.make(problem, labels, icfg, generator=g, dtype=target.dtype))
        gens.append(g)
    return CrossRequest(attack, target, x0s, labels, configs, gens, name=f"{name}-wd{weight_decay}")


def per_cell(req: CrossRequest) -> list[Any]:
    """The same request through the attack's own batch (fresh generators at the same state)."""
    gens = [torch.Generator().set_state(g.get_state()) for g in req.generators]
    return req.attack.run_batched(req.target, [x.clone() for x in req.x0s], req.labels, req.configs, generators=gens)


def fresh(req: CrossRequest) -> CrossRequest:
    return CrossRequest(req.attack, req.target, [x.clone() for x in req.x0s], req.labels, req.configs,
                        [torch.Generator().set_state(g.get_state()) for g in req.generators], req.name)


def assert_same_runs(expected: list[Any], got: list[Any], tol: float) -> None:
    assert len(expected) == len(got)
    for e, g in zip(expected, got, strict=True):
        assert g.stopped == e.stopped and g.steps == e.steps
        for a, b in ((e.candidates, g.candidates), (e.multipliers, g.multipliers)):
            scale = float(a.abs().max())
            assert float((a - b).abs().max()) <= tol * scale
        assert g.final_loss == pytest.approx(e.final_loss, rel=tol)
        assert [r["step"] for r in g.trace] == [r["step"] for r in e.trace]
        for re_, rg in zip(e.trace, g.trace, strict=True):
            for key in ("loss", "stationarity", "prior", "lambda_penalty", "stationarity_relative"):
                assert rg[key] == pytest.approx(re_[key], rel=tol, abs=tol * abs(re_["loss"]))


@pytest.mark.parametrize("name", sorted(TASK))
@pytest.mark.parametrize("runs", [(3, 3, 3), (2, 3, 1)])
def test_cross_target_batch_equals_each_cell_alone(name, runs):
    """Three cells on three targets of one shape (equal runs per cell: one bmm over the targets; unequal: one bmm per
    cell's runs over a view of its target's weights), against each cell's own batched search."""
    reqs = [cell_request(name, wd, r, seed) for wd, r, seed in zip((0.0, 1e-3, 3e-3), runs, (1, 2, 3), strict=True)]
    keys = {cross_key(r) for r in reqs}
    assert len(keys) == 1 and None not in keys, "the three cells must form one group"
    expected = [per_cell(r) for r in reqs]
    results = run_cross_target([fresh(r) for r in reqs])
    fan_in = max(reqs[0].x0s[0][0].numel(), 16)
    tol = rounding_tolerance(fan_in, STEPS)
    for req, exp, res in zip(reqs, expected, results, strict=True):
        assert_same_runs(exp, res.outputs, tol)
        for i, batch in enumerate(res.batches):
            assert batch["cross_target"]["runs"] == sum(runs) and batch["cross_target"]["targets"] == 3
            assert len(batch["cross_target"]["cells"]) == 3
            assert i in batch["runs"] and batch["runs"] == list(range(len(req.configs)))
    # the targets differ, and so do the runs' results: a run that read another target's weights would fail above
    assert not torch.equal(expected[0][0].candidates, expected[1][0].candidates)


def test_each_run_reads_its_own_targets_weights():
    """Swapping two targets' weights in the batch (run r reading target t+1's layers) is caught: the engine's value
    for run r equals the single-target engine's on its own target only."""
    reqs = [cell_request("haim_binary_kkt", wd, 2, s) for wd, s in ((0.0, 1), (3e-3, 2))]
    chains = [r.target.model.linear_chain() for r in reqs]
    x = torch.stack([x for r in reqs for x in r.x0s]).flatten(2).double()
    c = torch.randn(4, x.shape[1], 1, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    alpha = torch.full((4, 1, 1), 50.0, dtype=torch.float64)
    cross = CrossGram(chains, [0, 0, 1, 1], "relu", torch.float64, torch.device("cpu"))
    value, gx, gc = cross.value_and_grad(cross.forward(x, alpha), c, alpha)
    value, gx, gc = value.clone(), gx.clone(), gc.clone()
    for t, rows in ((0, slice(0, 2)), (1, slice(2, 4))):
        alone = BatchedGram(chains[t], "relu", torch.float64, torch.device("cpu"))
        v, ex, ec = alone.value_and_grad(alone.forward(x[rows], alpha[rows]), c[rows], alpha[rows])
        tol = rounding_tolerance(x.shape[2], 1)
        torch.testing.assert_close(value[rows], v, rtol=tol, atol=0.0)
        torch.testing.assert_close(gx[rows], ex, rtol=tol, atol=tol * float(ex.abs().max()))
        torch.testing.assert_close(gc[rows], ec, rtol=tol, atol=tol * float(ec.abs().max()))
        other = BatchedGram(chains[1 - t], "relu", torch.float64, torch.device("cpu"))
        w = other.value_and_grad(other.forward(x[rows], alpha[rows]), c[rows], alpha[rows])[0]
        assert not torch.allclose(value[rows], w, rtol=1e-6)


def test_targets_of_different_shapes_are_refused_and_kept_apart():
    reqs = [cell_request("haim_binary_kkt", 0.0, 2, 1), cell_request("multiclass_kkt", 0.0, 2, 1)]
    assert cross_key(reqs[0]) != cross_key(reqs[1])
    with pytest.raises(ReconbenchError, match="one shape"):
        CrossGram([r.target.model.linear_chain() for r in reqs], [0, 1], "relu", torch.float64, torch.device("cpu"))
    results = run_cross_target([fresh(r) for r in reqs])   # each alone, through its attack's own batch
    for req, res in zip(reqs, results, strict=True):
        assert_same_runs(per_cell(req), res.outputs, 0.0)
        assert all("cross_target" not in b for b in res.batches)
