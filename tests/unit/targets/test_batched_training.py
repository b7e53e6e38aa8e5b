"""Several targets trained as one computation (reconbench/targets/batched_training.py): each equals training it alone,
checkpoints resume exactly, the host reads once per window, and a diverged target leaves the others alone."""

from __future__ import annotations

import dataclasses
import math
from typing import Literal

import pytest
import torch
from _helpers.slicekit import rounding_tolerance

from reconbench import plugins
from reconbench.data import ProblemSpec
from reconbench.errors import ReconbenchError
from reconbench.targets.batched_training import BatchedChainGD, from_recipes
from reconbench.targets.losses import get_loss
from reconbench.targets.problems import build_problem
from reconbench.targets.recipe import TargetRecipe, TrainSpec
from reconbench.targets.training import train

STEPS = 40


def recipes_for(task: str, family: str, model: dict, dtype: Literal["float64", "float32"], **train_opts) -> list[TargetRecipe]:
    """Three targets of one shape: different seeds draw different training images and initial weights."""
    return [TargetRecipe(problem=ProblemSpec(task=task, n_per_class=4, num_classes=3 if task == "multiclass" else None,
                                             order_seed=s),
                         family=family, model=model,
                         train=TrainSpec(steps=STEPS, dtype=dtype, seed=s, eval_every=7, **train_opts))
            for s in range(3)]


CASES = [("binary", "mlp", {"widths": [24, 16]}, {"lr": 0.05}),
         ("multiclass", "mlp_bias", {"widths": [24]}, {"lr": 0.2, "weight_decay": 1e-2}),
         ("regression", "mlp", {"widths": [24, 16]}, {"lr": 0.05, "weight_decay": 1e-3})]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("task, family, model, opts", CASES)
def test_each_target_equals_training_it_alone(task, family, model, opts, dtype):
    """Against reconbench's own trainer run on each recipe alone in float64 (its closed-form loop), within the
    batch's dtype's rounding. Float32 is compared with the float64 run, not with the float32 autograd loop: there a
    ReLU whose pre-activation lies within rounding of 0 can take the other side (seen on the regression case's second
    target: 3e-4 apart after 40 steps while both stay within 5e-8 of float64), which no rounding tolerance covers."""
    recipes = recipes_for(task, family, model, dtype, **opts)
    problems = [build_problem(r.problem) for r in recipes]
    trainer, _ = from_recipes(recipes, problems, loss_every=7)
    trainer.run(STEPS)
    assert trainer.step_count == STEPS and trainer.diverged == [None] * 3
    fan_in = max(problems[0].n, 64, *model["widths"])   # digits: 64 pixels; the Gram product sums n terms
    tol = rounding_tolerance(getattr(torch, dtype), fan_in, STEPS)
    for recipe, problem, state in zip(recipes, problems, trainer.state_dicts(), strict=True):
        exact = TargetRecipe(problem=recipe.problem, family=family, model=model,
                             train=dataclasses.replace(recipe.train, dtype="float64"))
        alone = train(exact, problem, quiet=True, with_certificate=False).model
        start = dict(build_model_like(recipe, problem).named_parameters())
        for name, ref in alone.named_parameters():
            got = state[chain_name(alone, name)]
            assert got.dtype == getattr(torch, dtype)
            assert not torch.equal(ref, start[name].to(ref.dtype)), "the weights must move"
            torch.testing.assert_close(got.double(), ref.detach(), rtol=tol, atol=tol * float(ref.detach().abs().max()))


def build_model_like(recipe: TargetRecipe, problem):
    from reconbench.targets.training import build_model

    return build_model(recipe, problem)


def chain_name(model, name: str) -> str:
    """The trainer's name ("i.weight") of a model parameter: its index in the model's linear chain."""
    ids = {id(layer.weight): i for i, layer in enumerate(model.linear_chain())}
    ids.update({id(layer.bias): i for i, layer in enumerate(model.linear_chain()) if layer.bias is not None})
    return f"{ids[id(model.get_parameter(name))]}.{name.rsplit('.', 1)[1]}"


def plain_gd(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, loss_fn, lr: float, steps: int) -> list[float]:
    """Plain autograd full-batch GD (an independent implementation); returns the loss before each step."""
    losses = []
    params = list(model.parameters())
    for _ in range(steps):
        loss = loss_fn(model(x), y)
        losses.append(float(loss.detach()))
        grads = torch.autograd.grad(loss, params)
        with torch.no_grad():
            for p, g in zip(params, grads, strict=True):
                p.sub_(lr * g)
    return losses


def mlp(input_shape: tuple[int, int, int], seed: int) -> torch.nn.Module:
    gen = torch.Generator().manual_seed(seed)
    return plugins.get("models", "mlp").build(input_shape, 1, {"widths": [20, 12]}, generator=gen).double()


@pytest.mark.parametrize("stacked", [False, True])
def test_targets_of_different_input_dimensions_step_together(stacked):
    """The input dimension enters only through X Xᵀ: a 64-pixel and a 3 x 4 x 4 target of one n batch together,
    and each equals plain autograd GD on it alone, as does the loss history read every k steps. Both orders: one
    target at a time (the CPU's default) and one batched product over the stack (a GPU's)."""
    gen = torch.Generator().manual_seed(5)
    shapes = [(1, 8, 8), (3, 4, 4)]
    xs = [torch.randn(10, *s, generator=gen, dtype=torch.float64) for s in shapes]
    ys = [torch.tensor([0.0, 1.0] * 5, dtype=torch.float64) for _ in shapes]
    models = [mlp(s, i) for i, s in enumerate(shapes)]
    refs = [mlp(s, i) for i, s in enumerate(shapes)]
    trainer = BatchedChainGD(models, xs, ys, "bce", lr=0.1, loss_every=6, stacked=stacked)
    trainer.run(STEPS)
    _, bce = get_loss("bce", "binary")
    for t, (ref, x, y) in enumerate(zip(refs, xs, ys, strict=True)):
        losses = plain_gd(ref, x, y, bce, 0.1, STEPS)
        state = trainer.state_dicts()[t]
        tol = rounding_tolerance(torch.float64, 48, STEPS)
        for i, layer in enumerate(ref.linear_chain()):
            torch.testing.assert_close(state[f"{i}.weight"], layer.weight.detach(), rtol=tol,
                                       atol=tol * float(layer.weight.detach().abs().max()))
        assert [h["step"] for h in trainer.history] == list(range(0, STEPS, 6))
        for h in trainer.history:
            assert math.isclose(h["loss"][t], losses[h["step"]], rel_tol=tol)


@pytest.mark.parametrize("weight_decay, loss_every, split, stacked", [(0.0, 4, 9, False), (1e-2, 5, 10, False),
                                                                     (1e-2, 100, 17, False), (1e-2, 4, 9, True)])
def test_resuming_from_a_checkpoint_equals_one_uninterrupted_run(tmp_path, weight_decay, loss_every, split, stacked):
    """train(k) -> save -> load into a fresh trainer -> train(rest) gives bitwise the weights and history of
    train(all): the checkpoint holds the factorised state itself (splits inside and at the end of a window)."""
    recipes = recipes_for("multiclass", "mlp_bias", {"widths": [16]}, "float64", lr=0.2, weight_decay=weight_decay)
    problems = [build_problem(r.problem) for r in recipes]
    whole, _ = from_recipes(recipes, problems, loss_every=loss_every, stacked=stacked)
    whole.run(23)
    first, _ = from_recipes(recipes, problems, loss_every=loss_every, stacked=stacked)
    first.run(split)
    first.save(tmp_path / "state.safetensors")
    resumed, _ = from_recipes(recipes, problems, loss_every=loss_every, stacked=stacked)
    resumed.load(tmp_path / "state.safetensors")
    assert resumed.step_count == split
    resumed.run(23 - split)
    assert resumed.history == whole.history
    for a, b in zip(resumed.state_dicts(), whole.state_dicts(), strict=True):
        assert a.keys() == b.keys()
        for k in a:
            assert torch.equal(a[k], b[k]), k


def test_a_checkpoint_resumes_only_its_own_targets(tmp_path):
    recipes = recipes_for("binary", "mlp", {"widths": [16]}, "float64")
    problems = [build_problem(r.problem) for r in recipes]
    trainer, _ = from_recipes(recipes, problems)
    trainer.run(3)
    path = trainer.save(tmp_path / "state.safetensors")
    other, _ = from_recipes(recipes[::-1], problems[::-1])
    with pytest.raises(ReconbenchError, match="data_sha256.*resume with the targets"):
        other.load(path)
    (tmp_path / "junk.safetensors").write_bytes(b"not a checkpoint")
    with pytest.raises(ReconbenchError, match="not a readable training checkpoint"):
        trainer.load(tmp_path / "junk.safetensors")


def test_the_host_reads_once_per_window(monkeypatch):
    """No host synchronisation per step: the loss and the finiteness flag are read once every k steps."""
    reads = []
    original = BatchedChainGD._check
    monkeypatch.setattr(BatchedChainGD, "_check", lambda self, *a: reads.append(a) or original(self, *a))
    recipes = recipes_for("binary", "mlp", {"widths": [16]}, "float64")
    trainer, _ = from_recipes(recipes, [build_problem(r.problem) for r in recipes], loss_every=10)
    trainer.run(50)
    assert len(reads) == 5


@pytest.mark.parametrize("stacked", [False, True])
def test_a_diverging_target_leaves_the_others_unchanged(stacked):
    """Two affine regressors at lr 0.01: the one whose inputs are 30 times larger diverges (its Gram matrix's top
    eigenvalue times lr passes 2, so its loss grows until it overflows); it is marked with its window, and the other
    one's weights are those of a batch without it (to rounding: a batch of one may take another BLAS kernel)."""
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(10, 1, 8, 8, generator=gen, dtype=torch.float64)
    y = torch.linspace(-1, 1, 10, dtype=torch.float64)

    def affine(seed: int) -> torch.nn.Module:
        g = torch.Generator().manual_seed(seed)
        return plugins.get("models", "affine").build((1, 8, 8), 1, {}, generator=g).double()

    both = BatchedChainGD([affine(0), affine(1)], [x, 30 * x], [y, y], "mse", lr=0.01, loss_every=5, stacked=stacked)
    both.run(100)
    alone = BatchedChainGD([affine(0)], [x], [y], "mse", lr=0.01, loss_every=5)
    alone.run(100)
    assert both.diverged[0] is None
    assert both.diverged[1] is not None and "lower lr" in both.diverged[1]
    assert both.step_count == 100 and math.isfinite(both.history[-1]["loss"][0])
    tol = rounding_tolerance(torch.float64, 64, 100)
    for k, v in alone.state_dicts()[0].items():
        torch.testing.assert_close(both.state_dicts()[0][k], v, rtol=tol, atol=tol * float(v.abs().max()))


def test_batching_refuses_what_one_step_cannot_hold():
    base = recipes_for("binary", "mlp", {"widths": [16]}, "float64")
    problems = [build_problem(r.problem) for r in base]
    wider = TargetRecipe(problem=base[1].problem, model={"widths": [24]}, train=base[1].train)
    with pytest.raises(ReconbenchError, match="equal n and widths"):
        from_recipes([base[0], wider], problems[:2])
    schedule = TargetRecipe(problem=base[1].problem, model=base[1].model,
                            train=TrainSpec(schedule="inverse_loss", steps=STEPS))
    with pytest.raises(ReconbenchError, match="inverse_loss.*train it alone"):
        from_recipes([base[0], schedule], problems[:2])
    single = TargetRecipe(problem=base[1].problem, model=base[1].model,
                          train=TrainSpec(lr=0.5, steps=STEPS, dtype="float32"))
    with pytest.raises(ReconbenchError, match="dtype = 'float32'.*share it"):
        from_recipes([base[0], single], problems[:2])


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_the_single_target_loop_reads_the_loss_every_hundred_steps(monkeypatch, dtype):
    """At a constant lr the one-target trainer (closed-form loop in float64, autograd loop in float32) no longer
    reads the loss on the host every step: 250 steps, records at steps 0 and 249, reads at 99 and 199."""
    items = []
    original = torch.Tensor.item
    monkeypatch.setattr(torch.Tensor, "item", lambda self: items.append(1) or original(self))
    recipe = recipes_for("binary", "mlp", {"widths": [16]}, dtype)[0]
    recipe = dataclasses.replace(recipe, train=dataclasses.replace(recipe.train, steps=250, eval_every=1000))
    result = train(recipe, build_problem(recipe.problem), quiet=True, with_certificate=False)
    assert len(items) == 4
    assert [h["step"] for h in result.history] == [0.0, 249.0]
    assert result.metrics["precision"] == {"training_dtype": dtype, "attack_matmul": None,
                                           "loss_accumulation_dtype": dtype}
