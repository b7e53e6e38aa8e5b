"""The batched KKT engine against the sequential loop and against autograd: same gradients, same runs, divergence
confined to its run, chunking, resume, and (with CUDA) the same numbers on the GPU."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
import torch
from _helpers.gram_reference import ReferenceGram
from test_kkt_attacks import tiny_card

from reconbench import plugins
from reconbench.attack.kkt.batched import group_runs, run_stationarity_batch
from reconbench.attack.kkt.batched_gram import BatchedGram
from reconbench.attack.kkt.stationarity import gram_engine
from reconbench.config import build_config, config_to_dict
from reconbench.interfaces import AttackOutput
from reconbench.runs import RunSpec, init_config_for_run, prepare, run_attack, sample_configs

TASK = {"haim_binary_kkt": ("binary", None), "multiclass_kkt": ("multiclass", 3), "general_loss_wd": ("regression", None)}


def tiny_net(family: str, out_dim: int, seed: int = 0) -> Any:
    spec = {"mlp": {"widths": [5, 4], "init_scale": None}, "mlp_bias": {"widths": [5, 4]}, "affine": {}}[family]
    gen = torch.Generator().manual_seed(seed)
    return plugins.get("models", family).build((1, 2, 3), out_dim, spec, generator=gen).double()


@pytest.mark.parametrize("family", ["mlp", "mlp_bias", "affine"])
@pytest.mark.parametrize("forward", ["relu", "softplus"])
@pytest.mark.parametrize("layer_form", ["gram", "auto"])
def test_closed_form_gradient_equals_autograd_of_the_sequential_engine(family, forward, layer_form):
    """Value, dL/dx and dL/dC of the hand-written batched engine vs autograd through the sequential Gram engine,
    run by run, with a different alpha per run; both forms of the layers' terms ("auto" factors the narrow layers
    here: 4 candidates, widths 5-4-2, and the affine model's one layer)."""
    net = tiny_net(family, 2)
    gen = torch.Generator().manual_seed(1)
    alphas = [3.0, 10.0, 0.7]
    x = torch.randn(3, 4, 6, generator=gen, dtype=torch.float64) * 0.8
    c = torch.randn(3, 4, 2, generator=gen, dtype=torch.float64)
    batched = BatchedGram(net.linear_chain(), forward, torch.float64, torch.device("cpu"), layer_form)
    alpha = torch.tensor(alphas, dtype=torch.float64).reshape(-1, 1, 1)
    value, gx, gc = batched.value_and_grad(batched.forward(x, alpha), c, alpha)
    assert any(batched.workspace(3, 4).factored) == (layer_form == "auto")
    for r, a in enumerate(alphas):
        xr, cr = x[r].clone().requires_grad_(True), c[r].clone().requires_grad_(True)
        loss = gram_engine(net.linear_chain(), a, forward)(xr)[1](cr)
        ex, ec = torch.autograd.grad(loss, [xr, cr])
        assert float(value[r]) == pytest.approx(float(loss.detach()), rel=1e-12)
        torch.testing.assert_close(gx[r], ex, rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(gc[r], ec, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("family", ["mlp", "mlp_bias"])
@pytest.mark.parametrize("forward", ["relu", "softplus"])
def test_the_engine_equals_the_previous_layout_to_rounding_and_reuses_its_workspace(family, forward):
    """The engine with plain-layout products, in-place fused element-wise work and batched per-run sums computes
    what the transposed-layout engine of 599614b computed: the same terms summed in other orders. Tolerance: 1e-10
    relative to each output's largest magnitude; the two sum the same terms of at most 3L chained products of up to
    64 terms each in different orders (a few hundred units of float64 rounding at most; observed about 1e-15)."""
    gen = torch.Generator().manual_seed(4)
    spec = {"mlp": {"widths": [48, 64], "init_scale": None}, "mlp_bias": {"widths": [48, 64]}}[family]
    net = plugins.get("models", family).build((1, 4, 8), 3, spec, generator=gen).double()
    x = torch.randn(3, 10, 32, generator=gen, dtype=torch.float64)
    c = torch.randn(3, 10, 3, generator=gen, dtype=torch.float64)
    alpha = torch.tensor([3.0, 10.0, 0.7], dtype=torch.float64).reshape(-1, 1, 1)
    ref = ReferenceGram(net.linear_chain(), forward, torch.float64, torch.device("cpu"))
    new = BatchedGram(net.linear_chain(), forward, torch.float64, torch.device("cpu"))
    expected = ref.value_and_grad(ref.forward(x, alpha), c, alpha)
    got = new.value_and_grad(new.forward(x, alpha), c, alpha)
    for e, g in zip(expected, got, strict=True):
        scale = float(e.abs().max())
        assert float((e - g).abs().max()) <= 1e-10 * scale
    pointers = [t.data_ptr() for t in got[1:]]
    again = new.value_and_grad(new.forward(x * 0.5, alpha), c, alpha)   # a second step writes the same arrays
    assert [t.data_ptr() for t in again[1:]] == pointers
    halved = ref.value_and_grad(ref.forward(x * 0.5, alpha), c, alpha)
    assert float((halved[1] - again[1]).abs().max()) <= 1e-10 * float(halved[1].abs().max())


@pytest.mark.parametrize("name,extra", [("haim_binary_kkt", {}), ("multiclass_kkt", {}),
                                        ("multiclass_kkt", {"multipliers": "per_pair"}), ("general_loss_wd", {})])
def test_batched_terms_and_adjoints_equal_autograd_of_the_sequential_terms(name, extra):
    attack = plugins.get("attacks", name)
    _, classes = TASK[name]
    k = classes or 1
    labels = torch.tensor([0, 1, 2, 0, 1, 2] if classes else [0, 0, 0, 1, 1, 1])
    gen = torch.Generator().manual_seed(2)
    raw = ([dict(extra), dict(extra)] if name == "general_loss_wd" else
           [{**extra, "lambda_min": lm, "lambda_penalty_weight": 5.0 + lm} for lm in (0.3, 0.7)])
    configs = [build_config(attack.config_cls, r, name) for r in raw]
    like = torch.zeros((), dtype=torch.float64)
    lam = torch.stack([attack.initial_multipliers(6, c, k, gen, like) for c in configs]) * 2.0 - 0.5
    out = torch.randn(2, 6, k, generator=gen, dtype=torch.float64)
    cbar = torch.randn(2, 6, k, generator=gen, dtype=torch.float64)
    terms = attack.batch_terms(labels, configs, k, like)
    for r, cfg in enumerate(configs):
        coefficients, penalty = attack.stationarity_terms(labels, cfg, k, like)
        lr_ = lam[r].clone().requires_grad_(True)
        c = coefficients(out[r], lr_)
        torch.testing.assert_close(terms.coefficients(out, lam)[r], c.detach())
        (vjp,) = torch.autograd.grad(c, lr_, grad_outputs=cbar[r])
        torch.testing.assert_close(terms.lambda_vjp(out, cbar)[r], vjp)
        p = penalty(lr_)
        (gp,) = torch.autograd.grad(p, lr_) if p.requires_grad else (torch.zeros_like(lr_),)
        assert float(terms.penalty(lam)[r]) == pytest.approx(float(p.detach()), rel=1e-13, abs=1e-15)
        torch.testing.assert_close(terms.penalty_grad(lam)[r], gp)


def _setup(name: str, family: str = "mlp", runs: int = 3, config: dict[str, Any] | None = None, extra=None):
    task, classes = TASK[name]
    card = tiny_card(task, num_classes=classes, family=family, weight_decay=1e-3)
    spec = RunSpec(attack=name, attack_config={"steps": 200, "eval_every": 50, **(config or {})}, search_runs=runs,
                   seed=4)
    attack, target, labels = prepare(card, spec)
    problem = card.problem(None)
    init = plugins.get("inits", "gaussian")
    configs = [build_config(attack.config_cls, {**c, **(extra or {}).get(i, {})}, name)
               for i, c in enumerate(sample_configs(attack, spec))]
    starts = []
    for k, cfg in enumerate(configs):
        icfg, _ = init_config_for_run(init, spec, attack, cfg)
        starts.append((icfg, k))

    def fresh() -> tuple[list[torch.Tensor], list[torch.Generator]]:
        x0s, gens = [], []
        for icfg, k in starts:
            g = torch.Generator().manual_seed(100 + k)
            x0s.append(init.make(problem, labels, icfg, generator=g, dtype=target.dtype))
            gens.append(g)
        return x0s, gens

    return attack, target, labels, configs, fresh


def _sequential(attack, target, labels, configs, fresh) -> list[AttackOutput]:
    x0s, gens = fresh()
    return [attack.run(target, x0, labels, c, generator=g) for x0, c, g in zip(x0s, configs, gens, strict=True)]


def _assert_same_run(b: AttackOutput, s: AttackOutput, rel: float = 1e-8) -> None:
    assert b.stopped == s.stopped
    scale = float(s.candidates.norm())
    assert float((b.candidates - s.candidates).norm()) <= rel * scale
    assert b.multipliers is not None and s.multipliers is not None
    assert float((b.multipliers - s.multipliers).norm()) <= rel * float(s.multipliers.norm())
    assert b.final_loss == pytest.approx(s.final_loss, rel=rel)
    torch.testing.assert_close(b.labels, s.labels)
    assert [row["step"] for row in b.trace[:-1]] == [row["step"] for row in s.trace[:-1]]
    for rb, rs in zip(b.trace, s.trace, strict=True):
        assert rb["loss"] == pytest.approx(rs["loss"], rel=rel)


@pytest.mark.parametrize("name,family,config", [
    ("haim_binary_kkt", "mlp", {}), ("haim_binary_kkt", "mlp_bias", {}),
    # per_candidate re-chooses j* = argmax of the wrong logits at every step, a discontinuous choice: from starts
    # of scale ~1e-4 two wrong logits can tie to the last bit, and rounding (not the engine) decides; a larger
    # start keeps them apart
    ("multiclass_kkt", "mlp", {"init_scale": 0.05}),
    ("multiclass_kkt", "mlp", {"multipliers": "per_pair"}), ("general_loss_wd", "mlp", {}),
    ("haim_binary_kkt", "conv", {"steps": 40})])   # conv: no linear chain, the autograd fallback
@pytest.mark.slow
def test_batched_run_r_equals_sequential_run_r(name, family, config):
    """float64, 200 steps, each run with its own sampled lr / alpha / lambda_min / init scale: relative 1e-8."""
    attack, target, labels, configs, fresh = _setup(name, family, config=config)
    assert len({(c.lr, c.alpha) for c in configs}) == len(configs)   # the runs really differ
    sequential = _sequential(attack, target, labels, configs, fresh)
    x0s, gens = fresh()
    batched = attack.run_batched(target, x0s, labels, configs, generators=gens)
    for b, s in zip(batched, sequential, strict=True):
        assert s.stopped == "completed" and s.steps == configs[0].steps
        _assert_same_run(b, s)


@pytest.mark.slow
def test_a_diverging_run_is_frozen_and_the_others_go_on():
    """Run 1 gets lr 1e6 and blows up; runs 0 and 2 are those of the sequential loop, and run 1 returns the
    sequential loop's last finite candidates (K = 1), or, checked every K = 7 steps, the candidates of the last
    check before the blow-up, which lose at most 7 steps."""
    attack, target, labels, configs, fresh = _setup("haim_binary_kkt", extra={1: {"lr": 1e6}})
    sequential = _sequential(attack, target, labels, configs, fresh)
    assert [s.stopped for s in sequential] == ["completed", "diverged", "completed"]
    x0s, gens = fresh()
    batched = attack.run_batched(target, x0s, labels, configs, generators=gens)
    assert [b.stopped for b in batched] == ["completed", "diverged", "completed"]
    for i in (0, 2):
        _assert_same_run(batched[i], sequential[i])
    bad = batched[1]
    assert torch.isfinite(bad.candidates).all()
    torch.testing.assert_close(bad.candidates, sequential[1].candidates, rtol=1e-8, atol=0)
    assert bad.steps == sequential[1].steps - 1   # the step its candidates belong to (the loop counts one more)

    coarse = [dataclasses.replace(c, sync_every=7) for c in configs]
    x0s, gens = fresh()
    infos: list[dict[str, Any]] = []
    out = attack.run_batched(target, x0s, labels, coarse, generators=gens,
                           on_done=lambda i, o, info: infos.append(info))
    assert infos[0]["sync_every"] == 7 and infos[0]["divergence_loses_at_most_steps"] == 7
    for i in (0, 2):
        _assert_same_run(out[i], sequential[i])
    first_bad = sequential[1].steps
    assert out[1].stopped == "diverged" and out[1].steps % 7 == 0 and first_bad - 7 <= out[1].steps < first_bad
    again = dataclasses.replace(configs[1], steps=out[1].steps)   # the sequential run stopped at that step
    x0s, gens = fresh()
    short = attack.run(target, x0s[1], labels, again, generator=gens[1])
    torch.testing.assert_close(out[1].candidates, short.candidates, rtol=1e-8, atol=0)


def test_chunks_give_the_same_runs_and_are_recorded():
    attack, target, labels, configs, fresh = _setup("haim_binary_kkt", runs=3)
    x0s, gens = fresh()
    whole = attack.run_batched(target, x0s, labels, configs, generators=gens)
    chunked_cfg = [dataclasses.replace(c, max_batch=2) for c in configs]
    infos: dict[int, dict[str, Any]] = {}
    x0s, gens = fresh()
    chunked = attack.run_batched(target, x0s, labels, chunked_cfg, generators=gens,
                               on_done=lambda i, o, info: infos.__setitem__(i, info))
    assert [infos[i]["chunk"] for i in range(3)] == [0, 0, 1] and infos[0]["chunks"] == 2
    assert "max_batch=2" in infos[0]["chunk_reason"] and infos[2]["runs"] == [2]
    for a, b in zip(whole, chunked, strict=True):
        _assert_same_run(a, b, rel=1e-12)


def test_runs_that_differ_in_a_shared_option_are_batched_apart():
    attack = plugins.get("attacks", "haim_binary_kkt")
    cfgs = [config_to_dict(build_config(attack.config_cls, c, "x"))
            for c in ({"lr": 0.1}, {"lr": 0.2, "steps": 10}, {"lr": 0.3, "alpha": 5.0}, {"eval_every": 3})]
    assert group_runs(cfgs) == [[0, 2], [1], [3]]


def test_pipeline_batches_resumes_and_records_the_batch(tmp_path):
    card = tiny_card("binary", weight_decay=1e-3)
    spec = RunSpec(attack="haim_binary_kkt", attack_config={"steps": 30, "eval_every": 10}, search_runs=3, seed=2)
    out = tmp_path / "res"
    first = run_attack(card, spec, out, quiet=True)
    assert [r["run"] for r in first["runs"]] == [0, 1, 2]
    for rec in first["runs"]:
        assert rec["batch"]["runs"] == [0, 1, 2] and rec["batch"]["sync_every"] == 1
        assert rec["batch"]["engine"] == "gram" and rec["batch"]["cuda_graph"] is False
        assert rec["batch"]["tf32"] is False
    kept = (out / "runs" / "run-000.json").read_text()
    (out / "runs" / "run-001.json").unlink()
    second = run_attack(card, spec, out, quiet=True)
    assert (out / "runs" / "run-000.json").read_text() == kept       # finished runs are skipped
    redone = json.loads((out / "runs" / "run-001.json").read_text())
    assert redone["batch"]["runs"] == [1]                             # the rest start again, batched alone
    assert redone["final_loss"] == pytest.approx(first["runs"][1]["final_loss"], rel=1e-10)
    assert second["evaluation"]["summary"] == first["evaluation"]["summary"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("name,config", [("haim_binary_kkt", {}), ("multiclass_kkt", {}),
                                         ("multiclass_kkt", {"multipliers": "per_pair"})])
def test_cuda_batch_with_graphs_equals_the_cpu_batch(name, config):
    """float64 on CUDA, the step replayed as a CUDA graph, checked every 10 steps: the CPU's numbers."""
    attack, target, labels, configs, fresh = _setup(name, config=config)
    x0s, gens = fresh()
    cpu = attack.run_batched(target, x0s, labels, configs, generators=gens)
    gpu_target = dataclasses.replace(target, model=target.model.to("cuda"), device=torch.device("cuda"))
    cuda_cfg = [dataclasses.replace(c, sync_every=10) for c in configs]
    infos: list[dict[str, Any]] = []
    x0s, gens = fresh()
    gpu = attack.run_batched(gpu_target, [x.cuda() for x in x0s], labels.cuda(), cuda_cfg, generators=gens,
                           on_done=lambda i, o, info: infos.append(info))
    target.model.to("cpu")
    assert infos[0]["cuda_graph"] is True, infos[0]["notes"]
    for a, b in zip(cpu, gpu, strict=True):
        assert a.stopped == b.stopped == "completed"
        torch.testing.assert_close(b.candidates.cpu(), a.candidates, rtol=1e-8, atol=1e-12)
        assert b.final_loss == pytest.approx(a.final_loss, rel=1e-8)


def test_batch_loop_accepts_a_single_run():
    attack, target, labels, configs, fresh = _setup("haim_binary_kkt", runs=1)
    x0s, gens = fresh()
    lam0 = attack.initial_multipliers(len(x0s[0]), configs[0], 1, gens[0], x0s[0])
    terms = attack.batch_terms(labels, configs, 1, x0s[0])
    per_run = [attack.stationarity_terms(labels, configs[0], 1, x0s[0])]
    outputs, info = run_stationarity_batch(target, x0s[0][None], labels, lam0[None], configs, terms, per_run)
    x0s, gens = fresh()
    (seq,) = [attack.run(target, x0s[0], labels, configs[0], generator=gens[0])]
    _assert_same_run(outputs[0], seq)
    assert info.engine == "gram" and info.chunks == 1


def test_run_and_train_train_the_target_on_the_given_device(monkeypatch, tmp_path):
    """`reconbench run --device D` and `reconbench train --device D` hand D to the trainer (as the bench runner
    does); the trainer is stubbed, so no device D is needed."""
    from reconbench.cli import main, run_cmd, train_cmd

    seen: list[str] = []

    def fake_train(*args: Any, device: str = "cpu", **kwargs: Any) -> None:
        seen.append(device)
        raise SystemExit(7)

    monkeypatch.setattr(run_cmd, "get_or_train", fake_train)
    monkeypatch.setattr(train_cmd, "get_or_train", fake_train)
    for module in (run_cmd, train_cmd):  # the device need not exist here: training is stubbed
        monkeypatch.setattr(module, "check_device", lambda device, option="--device": device)
    monkeypatch.setattr(train_cmd, "train_target", lambda *a, **k: fake_train(device=a[4] if len(a) > 4 else "cpu"))
    tiny = ["--dataset", "digits", "--task", "binary", "--n-per-class", "3", "--widths", "16", "--steps", "5"]
    for args in (["run", "--attack", "haim_binary_kkt", *tiny, "--device", "cuda:1"],
                 ["train", *tiny, "--device", "cuda:1"],
                 ["train", *tiny, "--device", "cuda:1", "--out", str(tmp_path / "card")]):
        with pytest.raises(SystemExit) as exit_info:
            main(args)
        assert exit_info.value.code == 7
    assert seen == ["cuda:1"] * 3
