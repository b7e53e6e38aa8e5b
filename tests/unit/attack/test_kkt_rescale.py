"""The KKT attacks' ``rescale`` option: the norm it targets, what it keeps, and that it makes the attack run on
weights far from the scale its learning rates suit (as DP-SGD's noise leaves them)."""

from __future__ import annotations

import copy
import dataclasses
import math

import pytest
import torch

from reconbench.attack.kkt.rescale import default_init_norm, rescaled_target
from reconbench.config import build_config
from reconbench.errors import IncompatibleError
from reconbench.nets import init_linear_default_
from reconbench.runs import RunSpec, prepare
from reconbench.targets.cache import get_or_train
from reconbench.targets.recipe import TargetRecipe


def test_init_norm_is_the_mean_squared_norm_of_the_default_init():
    """numel / (3 fan_in) per weight and bias, against the norms of 40 fresh default initialisations."""
    layers = torch.nn.Sequential(torch.nn.Linear(60, 50), torch.nn.ReLU(), torch.nn.Linear(50, 30, bias=False))
    gen = torch.Generator().manual_seed(0)
    squares = []
    for _ in range(40):
        for m in (layers[0], layers[2]):
            init_linear_default_(m, gen)
        squares.append(sum(float((p.detach().double() ** 2).sum()) for p in layers.parameters()))
    mean = sum(squares) / len(squares)
    sd = (sum((s - mean) ** 2 for s in squares) / (len(squares) - 1)) ** 0.5
    assert default_init_norm(layers) ** 2 == pytest.approx(50 * 60 / 180 + 50 / 180 + 30 * 50 / 150)
    assert abs(default_init_norm(layers) ** 2 - mean) < 4 * sd / math.sqrt(len(squares))
    with pytest.raises(IncompatibleError, match="rescale=none"):
        default_init_norm(torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3)))


def _card():
    recipe = TargetRecipe.from_dict({
        "problem": {"dataset": "digits", "task": "binary", "n_per_class": 3, "n_test_per_class": 5},
        "family": "mlp", "model": {"widths": [16]}, "train": {"steps": 60, "lr": 0.05, "eval_every": 1000}})
    return get_or_train(recipe, quiet=True)


def _target(scale: float):
    """The tiny target's released weights multiplied by ``scale`` (what a blown-up release looks like)."""
    attack, target, labels = prepare(_card(), RunSpec(attack="haim_binary_kkt"))
    if scale != 1.0:
        model = copy.deepcopy(target.model)
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(scale)
        target = dataclasses.replace(target, model=model)
    return attack, target, labels


def test_rescaled_target_has_the_init_norm_and_the_same_function_up_to_c_to_the_L():
    _, target, _ = _target(1.0)
    scaled, c = rescaled_target(target, "init_norm")
    norm = math.sqrt(sum(float((p.detach().double() ** 2).sum()) for p in scaled.model.parameters()))
    assert norm == pytest.approx(default_init_norm(target.model), rel=1e-12)
    x = torch.randn(7, *_card().problem().image_shape, dtype=target.dtype)
    degree = target.homogeneity_degree
    assert degree and torch.allclose(scaled.model(x), c ** degree * target.model(x), rtol=1e-12, atol=0)
    assert rescaled_target(target, "none") == (target, 1.0)
    with pytest.raises(IncompatibleError, match="homogeneous"):
        rescaled_target(dataclasses.replace(target, homogeneity_degree=None), "init_norm")


def _attack(target, labels, attack, rescale: str, steps: int = 40):
    cfg = build_config(attack.config_cls, {"steps": steps, "rescale": rescale, "eval_every": 10}, "haim_binary_kkt")
    gen = torch.Generator().manual_seed(3)
    x0 = cfg.init_scale * torch.randn(len(labels), *_card().problem().image_shape, generator=gen, dtype=torch.float64)
    return attack.run(target, x0.to(target.dtype), labels, cfg, generator=gen)


def test_rescale_makes_the_attack_run_on_blown_up_weights_and_undoes_the_blow_up():
    attack, blown, labels = _target(1e4)
    plain = _attack(blown, labels, attack, "none")
    assert plain.stopped == "diverged" and plain.steps < 40   # as on the DP-SGD targets of defenses-cpu
    fixed = _attack(blown, labels, attack, "init_norm")
    losses = [t["loss"] for t in fixed.trace]
    assert fixed.stopped == "completed" and all(math.isfinite(v) for v in losses) and losses[-1] < losses[0]
    # c * (1e4 theta) and c' * theta are the same weights: the attack no longer sees the released scale
    _, original, _ = _target(1.0)
    same = _attack(original, labels, attack, "init_norm")
    assert torch.allclose(fixed.candidates, same.candidates, rtol=1e-9, atol=1e-12)
