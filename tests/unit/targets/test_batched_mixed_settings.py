"""A stack of targets with their own learning rate, weight decay and loss (reconbench/targets/batched_training.py):
each target equals training it alone, exactly one target after another (the CPU's order) and within the batched
trainer's rounding tolerance as one batched product (a GPU's order); its checkpoints record each target's settings,
resume exactly, and checkpoints of the one-setting form load."""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Literal

import pytest
import torch
from _helpers.slicekit import rounding_tolerance
from safetensors import safe_open
from safetensors.torch import save_file

from reconbench.data import ProblemSpec
from reconbench.errors import ReconbenchError
from reconbench.targets.batched_training import BatchedChainGD, from_recipes, read_checkpoint
from reconbench.targets.problems import build_problem
from reconbench.targets.recipe import TargetRecipe, TrainSpec
from reconbench.targets.resumable import batch_group, resumable_reason
from reconbench.targets.training import train

STEPS = 40


Dtype = Literal["float64", "float32"]


def recipe(task: str, seed: int, dtype: Dtype = "float64", widths: tuple[int, ...] = (24, 16), family: str = "mlp",
           **train_opts: Any) -> TargetRecipe:
    return TargetRecipe(problem=ProblemSpec(task=task, n_per_class=4, num_classes=3 if task == "multiclass" else None,
                                            order_seed=seed),
                        family=family, model={"widths": list(widths)},
                        train=TrainSpec(**{"steps": STEPS, "dtype": dtype, "seed": seed, "eval_every": 7,
                                           "loss_form": "legacy", **train_opts}))


def one_output_mix(dtype: Dtype = "float64") -> list[TargetRecipe]:
    """bce and mse, two learning rates, two weight decays (one of them 0), on one output."""
    return [recipe("binary", 0, dtype, lr=0.05),
            recipe("regression", 1, dtype, lr=0.03, weight_decay=1e-2),
            recipe("binary", 2, dtype, lr=0.08, weight_decay=5e-3)]


def class_mix(dtype: Dtype = "float64") -> list[TargetRecipe]:
    """ce at two weight decays (one 0) and two learning rates, with biases."""
    return [recipe("multiclass", 0, dtype, widths=(24,), family="mlp_bias", lr=0.2),
            recipe("multiclass", 1, dtype, widths=(24,), family="mlp_bias", lr=0.2, weight_decay=1e-2),
            recipe("multiclass", 2, dtype, widths=(24,), family="mlp_bias", lr=0.1, weight_decay=1e-3)]


MIXES = {"bce+mse, two lr, two wd": one_output_mix, "ce, two lr, two wd": class_mix}


def build(recipes: list[TargetRecipe], **opts: Any) -> BatchedChainGD:
    trainer, _ = from_recipes(recipes, [build_problem(r.problem) for r in recipes], **opts)
    return trainer


def assert_equal_states(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("mix", MIXES)
def test_each_target_of_a_mixed_stack_stepped_one_by_one_equals_it_alone_exactly(mix, dtype):
    """The CPU's order: each target steps with its own scalars, the operations of a trainer of it alone."""
    recipes = MIXES[mix](dtype)
    stack = build(recipes, loss_every=7, stacked=False)
    assert not stack.uniform
    stack.run(STEPS)
    for t, r in enumerate(recipes):
        alone = build([r], loss_every=7)
        alone.run(STEPS)
        assert_equal_states(stack.state_dicts()[t], alone.state_dicts()[0])
        assert [h["loss"][t] for h in stack.history] == [h["loss"][0] for h in alone.history]
        assert stack.scales[t] == alone.scale


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("stacked", [False, True])
@pytest.mark.parametrize("mix", MIXES)
def test_each_target_of_a_mixed_stack_equals_reconbenchs_own_trainer(mix, stacked, dtype):
    """Against reconbench's closed-form loop (targets/training.py) on each recipe alone in float64, within the
    tolerance the stacks of one setting are held to (tests/unit/targets/test_batched_training.py): the stacked order
    folds each lr into its gradient and multiplies by each decay as a (T, 1, 1) factor."""
    recipes = MIXES[mix](dtype)
    problems = [build_problem(r.problem) for r in recipes]
    stack = build(recipes, loss_every=7, stacked=stacked)
    stack.run(STEPS)
    assert stack.step_count == STEPS and stack.diverged == [None] * 3
    tol = rounding_tolerance(getattr(torch, dtype), max(problems[0].n, 64, 24), STEPS)
    for r, problem, state in zip(recipes, problems, stack.state_dicts(), strict=True):
        exact = dataclasses.replace(r, train=dataclasses.replace(r.train, dtype="float64"))
        alone = train(exact, problem, quiet=True, with_certificate=False).model
        for i, layer in enumerate(alone.linear_chain()):
            for name, ref in (("weight", layer.weight), ("bias", layer.bias)):
                if ref is None:
                    continue
                got = state[f"{i}.{name}"]
                assert got.dtype == getattr(torch, dtype)
                torch.testing.assert_close(got.double(), ref.detach(), rtol=tol,
                                           atol=tol * float(ref.detach().abs().max()))


@pytest.mark.parametrize("mix", MIXES)
def test_the_stacked_step_of_a_mixed_stack_tracks_each_target_alone(mix):
    """The batched order against the one-by-one order of the same stack (float64, 40 steps): the two differ by
    rounding only, and the weight-decay factor each target leaves of its initial first layer is its own."""
    recipes = MIXES[mix]()
    one_by_one, batched = build(recipes, stacked=False), build(recipes, stacked=True)
    one_by_one.run(STEPS)
    batched.run(STEPS)
    assert batched.scales == one_by_one.scales
    assert len(set(batched.scales)) == 3 and 1.0 in batched.scales   # wd 0 keeps 1.0
    for t, r in enumerate(recipes):
        decay = 1.0 - r.train.lr * r.train.weight_decay
        assert batched.scales[t] == pytest.approx(decay ** STEPS, rel=1e-12)
    tol = rounding_tolerance(torch.float64, 64, STEPS)
    for a, b in zip(batched.state_dicts(), one_by_one.state_dicts(), strict=True):
        for k in a:
            torch.testing.assert_close(a[k], b[k], rtol=tol, atol=tol * float(b[k].abs().max()))


@pytest.mark.parametrize("stacked", [False, True])
@pytest.mark.parametrize("mix", MIXES)
def test_a_mixed_stack_trained_in_two_pieces_equals_one_run(tmp_path, mix, stacked):
    """Save mid-window, load into a fresh trainer, train the rest: bitwise one uninterrupted run, whether the stack
    is saved whole (one checkpoint, each target's settings in it) or each target to its own state file."""
    recipes = MIXES[mix]()
    whole = build(recipes, loss_every=5, stacked=stacked)
    whole.run(23)
    first = build(recipes, loss_every=5, stacked=stacked)
    first.run(11)
    first.save(tmp_path / "stack.safetensors")
    for t in range(3):
        first.save(tmp_path / f"target{t}.safetensors", target=t, with_base=False)
    resumed = build(recipes, loss_every=5, stacked=stacked)
    resumed.load(tmp_path / "stack.safetensors")
    pieces = build(recipes, loss_every=5, stacked=stacked)
    for t in range(3):
        pieces.load(tmp_path / f"target{t}.safetensors", target=t)
    for trainer in (resumed, pieces):
        assert trainer.step_count == 11 and trainer.scales == first.scales
        trainer.run(12)
        assert trainer.history == whole.history and trainer.scales == whole.scales
        for a, b in zip(trainer.state_dicts(), whole.state_dicts(), strict=True):
            assert_equal_states(a, b)


def header(path: Any) -> dict[str, Any]:
    with safe_open(str(path), framework="pt") as fh:
        return json.loads((fh.metadata() or {})["reconbench"])


def test_checkpoints_record_each_targets_own_settings(tmp_path):
    recipes = one_output_mix()
    stack = build(recipes)
    stack.run(3)
    meta = header(stack.save(tmp_path / "stack.safetensors"))
    assert meta["format"] == "reconbench-batched-training/2"
    assert (meta["loss"], meta["lr"], meta["weight_decay"]) == (["bce", "mse", "bce"], [0.05, 0.03, 0.08],
                                                               [0.0, 1e-2, 5e-3])
    # one target's state is what a trainer of it alone writes: one value of each, the version-1 form
    one = read_checkpoint(stack.save(tmp_path / "one.safetensors", target=1))
    assert (one.format, one.loss, one.lr, one.weight_decay) == ("reconbench-batched-training/1", "mse", 0.03, 1e-2)
    # resumed only by a trainer with the same settings, target by target; the setting is named, not the version
    other = [recipes[0], dataclasses.replace(recipes[1], train=dataclasses.replace(recipes[1].train, lr=0.04)),
             recipes[2]]
    with pytest.raises(ReconbenchError, match=r"checkpoint lr = \[0.05, 0.03, 0.08\], this trainer's is "
                                              r"\[0.05, 0.04, 0.08\]"):
        build(other).load(tmp_path / "stack.safetensors")
    with pytest.raises(ReconbenchError, match="checkpoint lr = 0.03, this trainer's is 0.04"):
        build(other).load(tmp_path / "one.safetensors", target=1)
    with pytest.raises(ReconbenchError, match="checkpoint loss = 'mse', this trainer's is 'bce'"):
        build(recipes).load(tmp_path / "one.safetensors", target=0)


def test_a_checkpoint_of_the_one_setting_form_loads_and_resumes(tmp_path):
    """A version-1 checkpoint laid out by hand as the writer before per-target settings laid it out (one loss, lr
    and weight decay; one scale), from a one-target trainer's state after 7 steps: a trainer of that target loads it
    at its place in a mixed stack and goes on exactly as the trainer it came from."""
    recipes = one_output_mix()
    alone = build([recipes[1]], loss_every=5)
    alone.run(7)
    tensors = {"coef": alone.coef, "pre": alone.pre, "scale": torch.tensor([alone.scale], dtype=torch.float64),
               "base.0": alone.base[0]}
    tensors.update({f"weight.{i + 1}": w for i, w in enumerate(alone.weights)})
    tensors.update({f"bias.{i}": b for i, b in enumerate(alone.biases) if b is not None})
    meta = {"format": "reconbench-batched-training/1", "targets": 1, "n": alone.n, "loss": "mse", "lr": 0.03,
            "weight_decay": 0.01, "loss_every": 5, "dtype": "torch.float64", "widths": [24, 16, 1],
            "input_dims": [64], "data_sha256": alone._meta().data_sha256, "step": 7,
            "history": [{"step": 0, "loss": alone.history[0]["loss"]}, {"step": 5, "loss": alone.history[1]["loss"]}],
            "diverged": [None], "base_sha256": "0" * 64, "extra": {"seconds": 1.0, "pieces": 1}}
    path = tmp_path / "v1.safetensors"
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(path), metadata={"reconbench": json.dumps(meta)})
    before = build(recipes, loss_every=5)
    before.run(7)
    for t in (0, 2):
        before.save(tmp_path / f"{t}.safetensors", target=t)
    stack = build(recipes, loss_every=5)
    stack.load(tmp_path / "0.safetensors", target=0)
    stack.load(path, target=1)
    stack.load(tmp_path / "2.safetensors", target=2)
    assert stack.step_count == 7 and stack.target_extra[1] == {"seconds": 1.0, "pieces": 1}
    assert stack.scales[1] == alone.scale == before.scales[1]
    for trainer in (alone, stack, before):
        trainer.run(9)
    assert_equal_states(stack.state_dicts()[1], alone.state_dicts()[0])
    assert [h["loss"][1] for h in stack.history] == [h["loss"][0] for h in alone.history]
    for t in (0, 2):
        assert_equal_states(stack.state_dicts()[t], before.state_dicts()[t])


def test_what_cannot_stack_is_refused_in_one_line():
    binary, multi = recipe("binary", 0), recipe("multiclass", 1, widths=(24, 16))
    problems = [build_problem(r.problem) for r in (binary, multi)]
    with pytest.raises(ReconbenchError, match="recipe 1 has loss 'ce', recipe 0 'bce'.*stack ce only with ce"):
        from_recipes([binary, multi], problems)
    longer = recipe("regression", 1, steps=STEPS + 1)
    with pytest.raises(ReconbenchError, match=f"recipe 1 has steps = {STEPS + 1}, recipe 0 {STEPS}; batch only recipes "
                                              "that share it .each may have its own seed, lr, weight_decay, loss.$"):
        from_recipes([binary, longer], [problems[0], build_problem(longer.problem)])
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(6, 1, 4, 4, generator=gen, dtype=torch.float64)
    from reconbench import plugins

    models = [plugins.get("models", "mlp").build((1, 4, 4), 1, {"widths": [5]}, generator=gen).double()
              for _ in range(2)]
    y = torch.tensor([0.0, 1.0] * 3, dtype=torch.float64)
    with pytest.raises(ReconbenchError, match="3 values of lr for 2 targets; give one value, or one per target"):
        BatchedChainGD(models, [x, x], [y, y], "bce", [0.1, 0.2, 0.3])
    with pytest.raises(ReconbenchError, match="stack ce only with ce"):
        BatchedChainGD(models, [x, x], [y, y], ["bce", "ce"], 0.1)
    with pytest.raises(ReconbenchError, match=r"weight_decay >= 0 \(got lr=0.1, weight_decay=-1.0 for target 1\)"):
        BatchedChainGD(models, [x, x], [y, y], "bce", 0.1, [0.0, -1.0])
    stack = BatchedChainGD(models, [x, x], [y, y], "bce", 0.1, [0.0, 0.1])
    stack.run(2)
    with pytest.raises(ReconbenchError, match="own scale; read scales"):
        _ = stack.scale


def test_recipes_that_differ_in_lr_weight_decay_and_loss_share_a_batch_group():
    """batch_group: lr, weight decay and the loss within one output layout may differ (and the seed and data set);
    the architecture, n, outputs, dtype, steps and the rest may not."""
    mixed = one_output_mix()
    assert {resumable_reason(r) for r in mixed} == {None}
    assert len({batch_group(r) for r in mixed}) == 1
    assert len({batch_group(r) for r in class_mix()}) == 1
    base = mixed[0]

    def train_with(**changes: Any) -> TargetRecipe:
        return dataclasses.replace(base, train=dataclasses.replace(base.train, **changes))

    apart = [class_mix()[0], recipe("binary", 0, widths=(24, 24)), recipe("binary", 0, "float32"),
             train_with(steps=STEPS + 1), dataclasses.replace(base, problem=dataclasses.replace(base.problem,
                                                                                               n_per_class=5)),
             train_with(eval_every=8)]
    for other in apart:
        assert batch_group(other) != batch_group(base), other


@pytest.mark.parametrize("stacked", [False, True])
def test_a_diverging_target_leaves_the_others_of_a_mixed_stack_unchanged(stacked):
    """Two affine regressors at lr 0.01 and 0.02 with weight decay 0 and 1e-3: the one whose inputs are 30 times
    larger diverges (its loss overflows); the other equals training it alone (exactly one by one, to rounding as one
    batched product), its non-finite neighbour's slice of the stack never reaching it."""
    from reconbench import plugins

    gen = torch.Generator().manual_seed(2)
    x = torch.randn(10, 1, 8, 8, generator=gen, dtype=torch.float64)
    y = torch.linspace(-1, 1, 10, dtype=torch.float64)

    def affine(seed: int) -> torch.nn.Module:
        g = torch.Generator().manual_seed(seed)
        return plugins.get("models", "affine").build((1, 8, 8), 1, {}, generator=g).double()

    both = BatchedChainGD([affine(0), affine(1)], [x, 30 * x], [y, y], ["mse", "mse"], [0.01, 0.02], [1e-3, 0.0],
                          loss_every=5, stacked=stacked)
    both.run(100)
    alone = BatchedChainGD([affine(0)], [x], [y], "mse", 0.01, 1e-3, loss_every=5)
    alone.run(100)
    assert both.diverged[0] is None and both.diverged[1] is not None and "lower lr (now 0.02)" in both.diverged[1]
    tol = 0.0 if not stacked else rounding_tolerance(torch.float64, 64, 100)
    for k, v in alone.state_dicts()[0].items():
        torch.testing.assert_close(both.state_dicts()[0][k], v, rtol=tol, atol=tol * float(v.abs().max()))
