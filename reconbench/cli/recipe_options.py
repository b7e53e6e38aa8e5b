"""Command-line options that describe a target recipe, shared by `train` and `run`."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import tomllib

from reconbench import plugins
from reconbench.cli.common import SEED, Count, parse_assignments, parse_int_list
from reconbench.config import build_config, check_option
from reconbench.data import ProblemSpec
from reconbench.errors import ReconbenchError
from reconbench.targets.recipe import TargetRecipe, TrainSpec

_OPTIONS = [
    click.option("--recipe", "recipe_file", type=click.Path(dir_okay=False, exists=True), default=None,
                 help="TOML or JSON file with [problem], family, [model] and [train] (options below override it)."),
    click.option("--dataset", default=None, help="Data set: digits (default), mnist, mnist_test, cifar10, cifar100, npz:PATH."),
    click.option("--task", type=click.Choice(["binary", "multiclass", "regression"]), default=None, help="Task."),
    click.option("--n-per-class", type=Count(1), default=None, help="Training images per class."),
    click.option("--num-classes", type=Count(2), default=None, help="Multiclass: use classes 0..K-1."),
    click.option("--binary-rule", default=None, help="Binary/regression rule: parity or vehicles_animals."),
    click.option("--order", type=click.Choice(["shuffled", "file"]), default=None,
                 help="Walk the data set in a seeded permutation (default) or in file order (the papers' subsets) "
                      "when picking training images, decoys and the held-out pool."),
    click.option("--order-seed", type=click.IntRange(min=0), default=None,
                 help="Seed of the permutation (--order shuffled; default 0)."),
    click.option("--family", default=None, help="Model family (see `reconbench list models`)."),
    click.option("--widths", default=None, help="Hidden widths for MLP families, e.g. 1000,1000."),
    click.option("--model-set", multiple=True, help="Model option KEY=VALUE (repeatable), e.g. init_scale=1e-4."),
    click.option("--steps", type=Count(1), default=None, help="Training steps (full-batch GD)."),
    click.option("--lr", type=float, default=None, help="Training learning rate."),
    click.option("--weight-decay", type=float, default=None, help="Training weight decay."),
    click.option("--loss", default=None, help="Training loss: bce, ce, mse, l25, huber."),
    click.option("--schedule", type=click.Choice(["constant", "inverse_loss"]), default=None,
                 help="Learning-rate schedule: inverse_loss (faster; recorded) or constant, the papers' plain GD."),
    click.option("--train-dtype", type=click.Choice(["float64", "float32"]), default=None, help="Training precision."),
    click.option("--loss-form", type=click.Choice(["legacy", "stable"]), default=None,
                 help="The loss's numerical form: stable (softplus / log-sum-exp in float64, so training keeps moving "
                      "where the legacy form's loss underflows to 0) or legacy (default: the form published targets "
                      "were trained with; docs/regime.md)."),
    click.option("--train-seed", type=SEED, default=None, help="Seed of the weight initialisation."),
    click.option("--defense", default=None, help="Defense applied before release (see `reconbench list defenses`)."),
    click.option("--defense-set", multiple=True, help="Defense option KEY=VALUE (repeatable)."),
]

@dataclass(frozen=True)
class RecipeOptions:
    """The recipe options of ``train`` and ``run`` as the command line gave them (None, or no assignment: not
    given)."""

    recipe_file: str | None = None
    dataset: str | None = None
    task: str | None = None
    n_per_class: int | None = None
    num_classes: int | None = None
    binary_rule: str | None = None
    order: str | None = None
    order_seed: int | None = None
    family: str | None = None
    widths: str | None = None
    model_set: tuple[str, ...] = ()
    steps: int | None = None
    lr: float | None = None
    weight_decay: float | None = None
    loss: str | None = None
    schedule: str | None = None
    train_dtype: str | None = None
    loss_form: str | None = None
    train_seed: int | None = None
    defense: str | None = None
    defense_set: tuple[str, ...] = ()

    def problem(self) -> dict[str, Any]:
        """The problem's options given (``[problem]`` keys)."""
        given = {"dataset": self.dataset, "task": self.task, "n_per_class": self.n_per_class,
                 "num_classes": self.num_classes, "binary_rule": self.binary_rule, "order": self.order,
                 "order_seed": self.order_seed}
        return {k: v for k, v in given.items() if v is not None}

    def train(self) -> dict[str, tuple[object, str]]:
        """The training options given (``[train]`` key -> value and the option that gave it)."""
        given = {"steps": (self.steps, "--steps"), "lr": (self.lr, "--lr"),
                 "weight_decay": (self.weight_decay, "--weight-decay"), "loss": (self.loss, "--loss"),
                 "schedule": (self.schedule, "--schedule"), "dtype": (self.train_dtype, "--train-dtype"),
                 "seed": (self.train_seed, "--train-seed"), "loss_form": (self.loss_form, "--loss-form")}
        return {k: (v, label) for k, (v, label) in given.items() if v is not None}


def _train_defaults() -> dict[str, str]:
    """What `train` uses for a recipe option it is not given: the defaults of the recipe's records."""
    problem, train, recipe = ProblemSpec(), TrainSpec(), TargetRecipe()
    return {"task": problem.task, "n_per_class": str(problem.n_per_class),
            "num_classes": "every class of the data set", "binary_rule": "the data set's",
            "family": recipe.family, "widths": "the family's, see `reconbench list models -v`",
            "steps": str(train.steps), "lr": str(train.lr), "weight_decay": str(train.weight_decay),
            "loss": "the task's: bce, ce or mse", "schedule": train.schedule, "train_dtype": train.dtype,
            "train_seed": str(train.seed)}


def _with_default(opt: Callable[..., Any], defaults: dict[str, str]) -> Callable[..., Any]:
    """``opt`` (a click.option decorator) with ``(default: ...)`` added to its help where ``defaults`` holds its
    parameter's name."""
    def add(fn: Callable[..., Any]) -> Callable[..., Any]:
        fn = opt(fn)
        param = fn.__click_params__[-1]   # type: ignore[attr-defined]  # where click.option keeps it
        if param.name in defaults:
            default, text = defaults[param.name], param.help.rstrip(".")
            param.help = (f"{text[:-1]}; default: {default})." if text.endswith(")")
                          else f"{text} (default: {default}).")
        return fn
    return add


def recipe_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The recipe options of `run`: one not given takes the value of the attack's default target (the command's help
    says so)."""
    for opt in reversed(_OPTIONS):
        fn = opt(fn)
    return fn


def train_recipe_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The recipe options of `train`, each help stating the default recipe's value."""
    defaults = _train_defaults()
    for opt in reversed(_OPTIONS):
        fn = _with_default(opt, defaults)(fn)
    return fn


def _read_recipe_file(path: str) -> dict[str, Any]:
    try:
        text = Path(path).read_text()
        data = json.loads(text) if path.endswith(".json") else tomllib.loads(text)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ReconbenchError(f"--recipe {path}: cannot read it as {'JSON' if path.endswith('.json') else 'TOML'} "
                              f"({exc}); fix the file") from None
    if not isinstance(data, dict):
        raise ReconbenchError(f"--recipe {path}: a recipe is a table with [problem], family, [model] and [train], "
                              f"got a {type(data).__name__}")
    return data


def recipe_from_options(options: RecipeOptions | Mapping[str, Any], base: dict[str, Any] | None = None
                        ) -> TargetRecipe:
    """Merge: built-in defaults < ``base`` (e.g. the attack's default recipe) < --recipe file < explicit options
    (``options``: as the command line gave them, or its keyword arguments)."""
    opts = options if isinstance(options, RecipeOptions) else RecipeOptions(**options)
    d: dict[str, Any] = {"problem": {}, "model": {}, "train": {}}

    def merge(src: dict[str, Any]) -> None:
        for k, v in src.items():
            if k in ("problem", "model", "train") and isinstance(v, dict):
                d[k].update(v)
            else:
                d[k] = v

    merge(base or {})
    if opts.recipe_file:
        merge(_read_recipe_file(opts.recipe_file))
    d["problem"].update(opts.problem())
    for key, (value, label) in opts.train().items():
        d["train"][key] = check_option(TrainSpec, key, value, label)
    if opts.family:
        if opts.family != d.get("family"):
            d["model"] = {}  # the base's model options belong to another family
        d["family"] = opts.family
    widths = parse_int_list(opts.widths, "--widths")
    if widths is not None:
        d["model"]["widths"] = widths
    d["model"].update(parse_assignments(tuple(opts.model_set), "--model-set"))
    if opts.defense:
        d["defense"] = opts.defense
    if opts.defense_set:
        given = parse_assignments(tuple(opts.defense_set), "--defense-set")
        if d.get("defense"):
            build_config(plugins.defense(d["defense"]).config_cls, given, "--defense-set")
        d["defense_config"] = {**d.get("defense_config", {}), **given}
    return TargetRecipe.from_dict(d).validate()


