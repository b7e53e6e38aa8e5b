"""The batched KKT step with its avoidable work removed (the box prior's excess in one pass, the CUDA-graph step's
update without temporaries or copies back, the cross-target engine without per-run copies of the weights) against
the step before (tests/_helpers/step_before_lean.py): bit for bit on the CPU, in float64 and float32, for every
kind of batch the engine runs: each attack's equations, biases, per-run hyperparameters, stopped runs (diverged and
converged), cross-target batches. And the step options (off by default) that change only the rounding."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import pytest
import torch
from _helpers.step_before_lean import CrossGramPerRunCopies, StepsBeforeLean, box_before_softshrink
from test_cross_target import cell_request, fresh
from test_kkt_batched import _setup

from reconbench.attack import cross_target
from reconbench.attack.cross_target import CrossGram, run_cross_target
from reconbench.attack.kkt import batched
from reconbench.attack.kkt.batched import State, StepOptions, Steps, gram_evaluator, step_options
from reconbench.attack.kkt.batched_gram import BatchedGram
from reconbench.interfaces import AttackOutput

pytestmark = pytest.mark.usefixtures("one_torch_thread")

DTYPES = [torch.float64, torch.float32]


def _in(dtype: torch.dtype, attack: Any, target: Any, labels: Any, configs: Any, fresh_: Any) -> tuple[Any, ...]:
    """The setup's target and starts in ``dtype`` (the tiny cards train in float64)."""
    if dtype == torch.float64:
        return target, fresh_
    t32 = dataclasses.replace(target, model=copy.deepcopy(target.model).to(dtype), dtype=dtype)

    def fresh32() -> tuple[list[torch.Tensor], list[torch.Generator]]:
        x0s, gens = fresh_()
        return [x.to(dtype) for x in x0s], gens

    return t32, fresh32


def assert_identical(a: list[AttackOutput], b: list[AttackOutput]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert (x.stopped, x.steps, x.final_loss, x.early_stop) == (y.stopped, y.steps, y.final_loss, y.early_stop)
        assert torch.equal(x.candidates, y.candidates)
        assert x.multipliers is not None and y.multipliers is not None
        assert torch.equal(x.multipliers, y.multipliers)
        assert x.trace == y.trace


CASES = [("haim_binary_kkt", "mlp", {}, {}),
         ("haim_binary_kkt", "mlp_bias", {}, {1: {"lr": 1e6}}),                # run 1 diverges
         ("haim_binary_kkt", "mlp", {"early_stop": 0.1, "early_stop_window": 20, "steps": 300}, {}),   # converge
         ("haim_binary_kkt", "mlp", {"sync_every": 7}, {1: {"lr": 1e6}}),   # diverges between checks
         ("multiclass_kkt", "mlp", {"init_scale": 0.05}, {}),
         ("multiclass_kkt", "mlp", {"multipliers": "per_pair"}, {}),
         ("general_loss_wd", "mlp", {}, {})]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name,family,config,extra", CASES)
def test_runs_equal_the_runs_of_the_step_before_bit_for_bit(monkeypatch, dtype, name, family, config, extra):
    """Whole batched searches (each run with its own sampled lr, alpha, lambda_min and init scale; some stopped)
    with the one-pass box prior against the same searches with the clamp-and-subtract box prior."""
    attack, target, labels, configs, fresh_ = _setup(name, family, config=config, extra=extra)
    assert len({(c.lr, c.alpha) for c in configs}) == len(configs)   # the runs really differ
    target, fresh_ = _in(dtype, attack, target, labels, configs, fresh_)
    x0s, gens = fresh_()
    new = attack.run_batched(target, x0s, labels, configs, generators=gens)
    with monkeypatch.context() as patch:
        patch.setattr(batched, "_box_value_and_add_grad", box_before_softshrink)
        x0s, gens = fresh_()
        old = attack.run_batched(target, x0s, labels, configs, generators=gens)
    assert_identical(new, old)
    stopped = {o.stopped for o in new}
    if extra:
        assert "diverged" in stopped
    if "early_stop" in config:
        assert "converged" in stopped


def test_the_one_pass_box_prior_is_the_clamp_form_on_every_entry():
    """x - box above, x + box below, +0 inside (the clamp form's x - x), +-inf and nan kept: value and gradient bit
    for bit (a nan compared as a nan in the same place)."""
    for dtype in DTYPES:
        gen = torch.Generator().manual_seed(5)
        x = (3 * torch.randn(3, 7, 50, generator=gen, dtype=torch.float64)).to(dtype)
        x[0, 0, :7] = torch.tensor([0.0, -0.0, 1.5, -1.5, float("inf"), float("-inf"), float("nan")], dtype=dtype)
        box = torch.full((3, 1, 1), 1.5, dtype=dtype)
        g0 = torch.randn(x.shape, generator=gen, dtype=torch.float64).to(dtype)
        got_grad, want_grad = g0.clone(), g0.clone()
        got_buf, want_buf = torch.empty_like(x), torch.empty_like(x)
        got = batched._box_value_and_add_grad(x, box, got_grad, got_buf, common=1.5, dots="bmm")
        want = box_before_softshrink(x, box, want_grad, want_buf, common=1.5, dots="bmm")
        assert torch.equal(got.isnan(), want.isnan()) and torch.equal(got.nan_to_num(), want.nan_to_num())
        assert torch.equal(got_grad.isnan(), want_grad.isnan())
        assert torch.equal(got_grad.nan_to_num(), want_grad.nan_to_num())
        assert torch.isnan(got_grad[0, 0, 6]) and torch.equal(got[1:], want[1:])


def _graph_steps(cls: type[Steps], dtype: torch.dtype, alive: list[bool], steps: int) -> tuple[Any, BatchedGram]:
    """``steps`` of the CUDA-graph step's form (eagerly, on the CPU) from fixed starts, some runs not alive."""
    attack, target, labels, configs, fresh_ = _setup("haim_binary_kkt", "mlp_bias")
    target, fresh_ = _in(dtype, attack, target, labels, configs, fresh_)
    x0s, gens = fresh_()
    x0 = torch.stack(x0s)
    lam0 = torch.stack([attack.initial_multipliers(len(x0s[0]), c, 1, g, x)
                        for c, g, x in zip(configs, gens, x0s, strict=True)]).to(dtype)
    like = x0.to(dtype)
    gram = BatchedGram(target.model.linear_chain(), "relu", dtype, torch.device("cpu"))
    alpha = batched.per_run_column(configs, "alpha", like, 2)
    box = batched.per_run_column(configs, "box", like, 2)
    scale = torch.ones(len(configs), 1, 1, dtype=dtype)
    evaluate = gram_evaluator(gram, attack.batch_terms(labels, configs, 1, like), alpha, box, scale)
    state = State(like.flatten(2).clone(), lam0.clone())
    stepper = cls(state, evaluate, configs, True)
    stepper.write_eval()
    state.alive.copy_(torch.tensor(alive))
    for _ in range(steps):
        stepper.masked()
    return state, gram


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("alive", [[True, True, True], [True, False, True]])
def test_the_graph_step_equals_the_step_before_bit_for_bit_and_allocates_no_copy(dtype, alive):
    """The masked update (a stopped run's candidates untouched) and the state after 6 steps, every array; the
    state's gradient is the engine's own array (not a copy of it)."""
    new, gram = _graph_steps(Steps, dtype, alive, 6)
    old, _ = _graph_steps(StepsBeforeLean, dtype, alive, 6)
    for a, b in zip(new.tensors(), old.tensors(), strict=True):
        assert torch.equal(a, b)
    r, m = new.x.shape[0], new.x.shape[1]
    assert new.grad_x.data_ptr() == gram.workspace(r, m).hbar[0].data_ptr()
    if not all(alive):   # the stopped run is where it started
        start, _ = _graph_steps(Steps, dtype, alive, 0)
        assert torch.equal(new.x[1], start.x[1]) and not torch.equal(new.x[0], start.x[0])


def _chains(family: str, dtype: torch.dtype) -> list[Any]:
    name = "multiclass_kkt" if family == "mlp_bias" else "haim_binary_kkt"
    reqs = [cell_request(name, wd, 1, s) for wd, s in ((0.0, 1), (1e-3, 2), (3e-3, 3))]
    return [copy.deepcopy(r.target.model).to(dtype).linear_chain() for r in reqs]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("family", ["mlp", "mlp_bias"])
@pytest.mark.parametrize("order", [[0, 0, 1, 1, 1, 2], [0, 1, 0, 2, 2], [2, 0, 0]])
def test_the_cross_target_engine_without_per_run_copies_equals_the_one_with_them(dtype, family, order):
    """Unequal and interleaved orders of runs over three targets: value and both gradients bit for bit, and the
    weights held once per target."""
    chains = _chains(family, dtype)
    gen = torch.Generator().manual_seed(0)
    r, m = len(order), 5
    x = torch.randn(r, m, chains[0][0].in_features, generator=gen, dtype=torch.float64).to(dtype)
    c = torch.randn(r, m, chains[0][-1].out_features, generator=gen, dtype=torch.float64).to(dtype)
    alpha = torch.linspace(5.0, 50.0, r, dtype=dtype).reshape(-1, 1, 1)
    new = CrossGram(chains, order, "relu", dtype, torch.device("cpu"))
    old = CrossGramPerRunCopies(chains, order, "relu", dtype, torch.device("cpu"))
    got = [t.clone() for t in new.value_and_grad(new.forward(x, alpha), c, alpha)]
    want = old.value_and_grad(old.forward(x, alpha), c, alpha)
    for g, w in zip(got, want, strict=True):
        assert torch.equal(g, w)
    assert all(w.shape[0] == len(chains) for w in new.weights) and new.segments


@pytest.mark.parametrize("name", ["haim_binary_kkt", "multiclass_kkt"])
def test_a_cross_target_search_with_unequal_cells_equals_the_one_with_per_run_copies(monkeypatch, name):
    reqs = [cell_request(name, wd, runs, seed) for wd, runs, seed in ((0.0, 2, 1), (1e-3, 3, 2), (3e-3, 1, 3))]
    new = run_cross_target([fresh(r) for r in reqs])
    with monkeypatch.context() as patch:
        patch.setattr(cross_target, "CrossGram", CrossGramPerRunCopies)
        old = run_cross_target([fresh(r) for r in reqs])
    for a, b in zip(new, old, strict=True):
        assert_identical(a.outputs, b.outputs)
        assert all(batch["cross_target"]["targets"] == 3 for batch in a.batches)


def test_step_options_are_off_by_default_recorded_when_on_and_reset_after_the_block():
    """dots="reduce" is the CPU's default form (bit for bit); dots="bmm" (a GPU's form) and layer_form="auto" sum in
    other orders (float64: within 1e-9 relative after 200 steps; a wrong sum would be off by far more)."""
    attack, target, labels, configs, fresh_ = _setup("haim_binary_kkt", "mlp")

    def search(options: StepOptions | None) -> tuple[list[AttackOutput], list[dict[str, Any]]]:
        infos: list[dict[str, Any]] = []
        x0s, gens = fresh_()
        if options is None:
            return attack.run_batched(target, x0s, labels, configs, generators=gens,
                                      on_done=lambda i, o, info: infos.append(info)), infos
        with step_options(options):
            out = attack.run_batched(target, x0s, labels, configs, generators=gens,
                                     on_done=lambda i, o, info: infos.append(info))
        return out, infos

    default, infos = search(None)
    assert batched.current_step_options() == StepOptions() and infos[0]["notes"] == []
    reduce, infos = search(StepOptions(dots="reduce"))
    assert_identical(reduce, default)
    assert infos[0]["notes"] == ["step options: dots=reduce"]
    for options in (StepOptions(dots="bmm"), StepOptions(layer_form="auto")):
        other, infos = search(options)
        assert infos[0]["notes"] == [f"step options: {options.label()}"]
        for a, b in zip(other, default, strict=True):
            assert a.stopped == b.stopped
            assert float((a.candidates - b.candidates).abs().max()) <= 1e-9 * float(b.candidates.abs().max())
    assert batched.current_step_options() == StepOptions()
