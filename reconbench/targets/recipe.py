"""Target recipes: the problem a target is trained on, its architecture, how it is trained, and its defense."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import torch

from reconbench import plugins
from reconbench.config import MAX_SEED, Limit, check_value, option
from reconbench.data import ProblemSpec
from reconbench.errors import ReconbenchError
from reconbench.targets.losses import get_loss
from reconbench.targets.problems import recorded_spec_dict

DTYPES = {"float64": torch.float64, "float32": torch.float32}


@dataclass(frozen=True)
class TrainSpec:
    """How a target is trained: full-batch gradient descent without momentum (the papers' recipe)."""

    loss: str | None = option(None, "bce (binary), ce (multiclass), mse / l25 / huber (regression); None: task default")
    lr: float = option(0.01, "learning rate", gt=0)
    steps: int = option(10_000, "number of full-batch GD steps", ge=1)
    weight_decay: float = option(0.0, "coupled weight decay wd (minimises L + wd/2 ||theta||^2), on all parameters",
                                 ge=0)
    dtype: Literal["float64", "float32"] = option("float64", "training precision")
    schedule: Literal["constant", "inverse_loss"] = option(
        "constant", "constant: the papers' plain GD; inverse_loss: lr * min(cap, threshold/loss) once loss < threshold")
    schedule_threshold: float = option(0.1, "inverse_loss: loss below which the lr is scaled up", gt=0)
    schedule_cap: float = option(1e4, "inverse_loss: the largest lr multiplier", ge=1)
    stop_loss: float = option(0.0, "stop early once the training loss falls below this (0: never)", ge=0)
    eval_every: int = option(1000, "record train/test metrics every this many steps", ge=1)
    seed: int = option(0, "seed of the weight initialisation", ge=0, le=MAX_SEED)
    certify_every: int = option(0, "compute the convergence certificate every this many steps, recorded in the "
                                   "history (0: only after training)", ge=0)
    stop_at_gate: float = option(0.0, "stop once the certificate's gate measure (docs/regime.md) is at most this, "
                                      "checked every certify_every steps; `steps` is then the budget (0: never)", ge=0)
    loss_form: Literal["legacy", "stable"] = option(
        "stable", "stable: bce/ce as softplus forms in float64, whose loss and gradient do not round to 0 at large "
                  "margins (docs/regime.md#losses-that-keep-moving); legacy: torch's forms, which do (a recipe that "
                  "does not name it is legacy, so targets published before the option retrain bit-identically)")
    float32_trainer: Literal["autograd", "closed_form"] = option(
        "autograd", "float32 linear chains (mlp, mlp_bias, affine): closed_form trains them by the closed-form loop "
                    "float64 recipes use (faster; weights equal to the autograd loop's to float32 rounding), autograd "
                    "by torch's autograd loop (the default, as every float32 target trained before the option); no "
                    "effect in float64")


#: TrainSpec fields written into a recipe (and its cache key) only when they differ from their default, so the
#: recipes written before they existed keep their keys
OPTIONAL_TRAIN_FIELDS = ("certify_every", "stop_at_gate", "float32_trainer")
#: TrainSpec fields whose value in a recipe that does not name them is not the field's default (the default of new
#: recipes), but the behaviour of recipes written before the field existed; written only when they differ from it
LEGACY_TRAIN_VALUES: dict[str, Any] = {"loss_form": "legacy"}


@dataclass(frozen=True)
class TargetRecipe:
    """A target model: the problem it is trained on, its architecture, and how it is trained."""

    problem: ProblemSpec = field(default_factory=ProblemSpec)
    family: str = "mlp"
    model: dict[str, Any] = field(default_factory=dict)
    train: TrainSpec = field(default_factory=TrainSpec)
    defense: str | None = None                      # a registered defense applied before release
    defense_config: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        train = asdict(self.train)
        defaults = TrainSpec()
        for k in OPTIONAL_TRAIN_FIELDS:
            if train[k] == getattr(defaults, k):
                del train[k]
        if self.train.dtype == "float64":   # both trainers run the closed-form loop there: one key per training
            train.pop("float32_trainer", None)
        for k, old in LEGACY_TRAIN_VALUES.items():
            if train[k] == old:
                del train[k]
        d = {"problem": self.problem.to_dict(), "family": self.family, "model": dict(self.model), "train": train}
        if self.defense is not None:  # keeps the keys (and cache hashes) of undefended recipes unchanged
            d["defense"] = self.defense
            d["defense_config"] = dict(self.defense_config)
        return d

    def validate(self) -> TargetRecipe:
        """Resolve every named plugin and option now, before any training starts."""
        from reconbench.config import build_config

        family = plugins.model(self.family)
        defaults = family.default_spec()
        unknown = set(self.model) - set(defaults)
        if unknown:
            raise ReconbenchError(f"model family {self.family!r} has no option {sorted(unknown)[0]!r}; its options "
                                  f"are: {', '.join(sorted(defaults)) or '(none)'}")
        for k, v in self.model.items():
            check_model_option(self.family, k, v, defaults[k])
        p = self.problem
        plugins.dataset(p.dataset.partition(":")[0])   # a name that is not registered, before any data is read
        if p.task == "multiclass" and p.num_classes is not None and p.num_classes < 2:
            raise ReconbenchError(f"--num-classes {p.num_classes}: a multiclass target needs at least 2 classes; "
                                  "pass --num-classes 2 or more (or --task binary)")
        get_loss(self.train.loss, self.problem.task, self.train.loss_form)
        shrink = self.train.lr * self.train.weight_decay
        if shrink > 2.0:  # each step scales the weights by (1 - lr * wd): beyond 2 in size they grow without bound
            raise ReconbenchError(f"--weight-decay {self.train.weight_decay:g} with --lr {self.train.lr:g}: each step "
                                  f"scales the weights by 1 - lr x weight decay = {1.0 - shrink:.3g}, so training "
                                  f"diverges whatever the data; use a weight decay below 2 / lr = "
                                  f"{2.0 / self.train.lr:.3g}")
        if self.train.stop_at_gate > 0 and self.train.certify_every == 0:
            raise ReconbenchError(f"stop_at_gate={self.train.stop_at_gate:g} is checked on the certificate, which is "
                                  "computed every certify_every steps; set certify_every (e.g. 1000)")
        if self.defense is None and self.defense_config:
            raise ReconbenchError(f"defense options {sorted(self.defense_config)} are given without a defense; "
                                  "name one with --defense (see `reconbench list defenses`)")
        if self.defense is not None:
            defense = plugins.defense(self.defense)
            build_config(defense.config_cls, self.defense_config, f"defense {defense.name}")
        return self

    @property
    def widths(self) -> Any:
        """The hidden widths the model options name (None: the family has no ``widths`` option)."""
        return self.model.get("widths")

    def key(self) -> str:
        """A short hash naming this recipe (used as the cache key of trained targets)."""
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()[:16]

    @classmethod
    def from_dict(cls, d: dict[str, Any], *, recorded: bool = False) -> TargetRecipe:
        """The recipe of a table (a suite's, or a recorded one: ``recorded``, whose problem recorded without
        ``order`` was built in file order); a key it leaves out stands for its :data:`RECIPE_DEFAULTS` value."""
        from reconbench.config import build_config

        if not isinstance(d, dict):
            raise ReconbenchError(f"a recipe is a table of {', '.join(sorted(RECIPE_DEFAULTS))}, got a "
                                  f"{type(d).__name__}")
        extra = set(d) - set(RECIPE_DEFAULTS)
        if extra:
            raise ReconbenchError(f"recipe: unknown key {sorted(extra)[0]!r}; known keys: "
                                  f"{', '.join(sorted(RECIPE_DEFAULTS))}")
        full = {**RECIPE_DEFAULTS, **d}
        for k in ("problem", "model", "train", "defense_config"):
            if full[k] is not None and not isinstance(full[k], dict):
                raise ReconbenchError(f"recipe: {k} must be a table of options, got {type(full[k]).__name__} "
                                      f"{full[k]!r}")
        for k in ("family", "defense"):
            if full[k] is not None and not isinstance(full[k], str):
                raise ReconbenchError(f"recipe: {k} must be a name (a string), got {type(full[k]).__name__} "
                                      f"{full[k]!r}")
        problem = recorded_spec_dict(full["problem"]) if recorded and full["problem"] is not None else full["problem"]
        return cls(problem=build_config(ProblemSpec, problem, "recipe.problem"),
                   family=str(full["family"]), model=dict(full["model"] or {}),
                   train=build_config(TrainSpec, {**LEGACY_TRAIN_VALUES, **(full["train"] or {})},
                                      "recipe.train"),
                   defense=full["defense"], defense_config=dict(full["defense_config"] or {}))


#: the value a recipe table's key stands for when the table leaves it out (one place for every reader)
RECIPE_DEFAULTS: dict[str, Any] = {"problem": None, "family": "mlp", "model": None, "train": None, "defense": None,
                                   "defense_config": None}


def recorded_recipe(d: Any) -> TargetRecipe:
    """The recipe a card, cell or result records (its problem recorded without ``order`` was built in file order)."""
    return TargetRecipe.from_dict(d, recorded=True)


def check_model_option(family: str, key: str, value: object, default: object) -> None:
    """A model option must have its default's type (bool, integer, number, string, list) and sign, and be finite.

    Model families declare their options as a dict of defaults, so the default is the only type information there is.
    """
    where = f"model option {key}={value!r} (family {family!r}, default {default!r})"
    if default is None:
        check_value(value, None, f"model option {key}")
        return
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise ReconbenchError(f"{where}: expected true or false; pass --model-set {key}=true or {key}=false")
        return
    if isinstance(default, (list, tuple)):
        if not isinstance(value, (list, tuple)):
            raise ReconbenchError(f"{where}: expected a list like {list(default)!r}; pass --model-set "
                                  f"'{key}={json.dumps(list(default), separators=(',', ':'))}'")
        for item in value:
            check_model_option(family, key, item, default[0] if default else None)
        return
    if isinstance(default, (int, float)):
        is_int = isinstance(default, int)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (is_int and not isinstance(value, int)):
            kind = "an integer" if is_int else "a number"
            raise ReconbenchError(f"{where}: expected {kind}; pass e.g. --model-set {key}={default!r}")
        limit = Limit(gt=0) if default > 0 else Limit(ge=0) if default == 0 else None
        check_value(value, limit, f"model option {key} (family {family!r})")
        return
    if isinstance(default, str) and not isinstance(value, str):
        raise ReconbenchError(f"{where}: expected a string")
