"""Helpers that tests of several rooms share for slices and batched training: the rounding tolerance of the batched
trainer and the paper suite's planned work, sized without reading data."""

from __future__ import annotations

from typing import Any

import torch

from reconbench.bench.cells import expand
from reconbench.bench.slice_costs import CellWork, CostModel, cell_work
from reconbench.bench.suite import load_suite
from reconbench.preflight import TargetSize, model_parameters


def rounding_tolerance(dtype: torch.dtype, fan_in: int, steps: int) -> float:
    """Relative tolerance from rounding alone: every step's products sum at most ``fan_in`` terms, each sum off by
    at most fan_in * eps relative, and the errors of ``steps`` steps add up (GD over 40 small steps does not amplify
    them by more than a small factor; a wrong term in any update moves the weights by about lr, far more)."""
    return steps * fan_in * torch.finfo(dtype).eps


def paper_works() -> tuple[Any, list[CellWork], dict[str, TargetSize]]:
    """paper.toml's cells and their work, sized from the recipes (CIFAR-10 3x32x32, MNIST 1x28x28): no data read."""
    suite = load_suite("paper")
    shapes = {"npz:cifar10/cifar10_train_subset.npz": (3, 32, 32), "mnist_test": (1, 28, 28)}
    sizes: dict[str, TargetSize] = {}
    works = []
    for cell in expand(suite):
        p = cell.recipe.problem
        classes = 2 if p.task != "multiclass" else int(p.num_classes or 10)
        out_dim = classes if p.task == "multiclass" else 1
        shape = shapes[p.dataset]
        key = cell.recipe.key()
        if key not in sizes:
            sizes[key] = TargetSize(shape, classes * int(p.n_per_class or 0),
                                    model_parameters(cell.recipe.family, shape, out_dim, cell.recipe.model))
        works.append(cell_work(cell, sizes[key]))
    return suite, works, sizes


def digits_works(suite_path: Any) -> list[CellWork]:
    """A ``digits`` suite's cells as a slice with ``--pack`` sees them (8 x 8 inputs), sized without reading data."""
    suite = load_suite(str(suite_path))
    works = []
    for cell in expand(suite):
        p = cell.recipe.problem
        size = TargetSize((1, 8, 8), 2 * int(p.n_per_class or 0),
                          model_parameters(cell.recipe.family, (1, 8, 8), 1, cell.recipe.model))
        works.append(cell_work(cell, size, pieces=True, dtype=suite.dtype))
    return works


#: fields of a cell record that say when, where and how fast it ran (not what it computed)
RUN_FIELDS = ("seconds", "finished", "created", "record_sha256", "machine", "message", "invocation", "reused",
              "git_commit")


def deterministic(value: Any) -> Any:
    """A record without its timings, dates, machine and seal: what one uninterrupted run must reproduce."""
    import math

    if isinstance(value, dict):
        return {k: deterministic(v) for k, v in value.items() if not any(f in k for f in RUN_FIELDS)}
    if isinstance(value, list):
        return [deterministic(v) for v in value]
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    return value


def digits_sizes(suite: Any) -> dict[str, TargetSize]:
    """The sizes of a `digits` suite's targets (8x8 images, 10 per target as the tiny suites train)."""
    sizes = {}
    for cell in expand(suite):
        p = model_parameters(cell.recipe.family, (1, 8, 8), 1, cell.recipe.model)
        sizes[cell.recipe.key()] = TargetSize((1, 8, 8), 10, p)
    return sizes


class TickClock:
    """Advances one second at every read: the slice's only view of time, so where training stops is fixed."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def cheap() -> CostModel:
    """A CPU cost model of one second per phase and no rate: plans and executors decide by counts, not timings."""
    return CostModel.for_device("cpu", {p: {"fixed": 1.0, "rate": 0.0} for p in ("train", "attack", "evaluate")})
