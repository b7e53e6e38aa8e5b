"""Target recipes and the full-batch gradient-descent trainer of the papers."""

from __future__ import annotations

import copy
import hashlib
import json
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import torch

from reconbench import plugins
from reconbench.config import MAX_SEED, Limit, check_value, option
from reconbench.errors import DivergedError, ReconbenchError
from reconbench.nets import TargetNet
from reconbench.progress import Progress
from reconbench.targets.certificate import certificate, gate_value
from reconbench.targets.chain_gd import ChainGD, chain_layers
from reconbench.targets.defended import DefenseSession
from reconbench.targets.losses import error_rate, get_loss, margins
from reconbench.targets.problems import Problem, ProblemSpec

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


#: TrainSpec fields written into a recipe (and its cache key) only when they differ from their default, so the
#: recipes written before they existed keep their keys
OPTIONAL_TRAIN_FIELDS = ("certify_every", "stop_at_gate")


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
        d = {"problem": self.problem.to_dict(), "family": self.family, "model": dict(self.model), "train": train}
        if self.defense is not None:  # keeps the keys (and cache hashes) of undefended recipes unchanged
            d["defense"] = self.defense
            d["defense_config"] = dict(self.defense_config)
        return d

    def validate(self) -> TargetRecipe:
        """Resolve every named plugin and option now, before any training starts."""
        from reconbench.config import build_config

        family = plugins.get("models", self.family)
        defaults = family.default_spec()
        unknown = set(self.model) - set(defaults)
        if unknown:
            raise ReconbenchError(f"model family {self.family!r} has no option {sorted(unknown)[0]!r}; its options "
                                  f"are: {', '.join(sorted(defaults)) or '(none)'}")
        for k, v in self.model.items():
            check_model_option(self.family, k, v, defaults[k])
        p = self.problem
        if p.task == "multiclass" and p.num_classes is not None and p.num_classes < 2:
            raise ReconbenchError(f"--num-classes {p.num_classes}: a multiclass target needs at least 2 classes; "
                                  "pass --num-classes 2 or more (or --task binary)")
        get_loss(self.train.loss, self.problem.task)
        if self.train.stop_at_gate > 0 and self.train.certify_every == 0:
            raise ReconbenchError(f"stop_at_gate={self.train.stop_at_gate:g} is checked on the certificate, which is "
                                  "computed every certify_every steps; set certify_every (e.g. 1000)")
        if self.defense is None and self.defense_config:
            raise ReconbenchError(f"defense options {sorted(self.defense_config)} are given without a defense; "
                                  "name one with --defense (see `reconbench list defenses`)")
        if self.defense is not None:
            defense = plugins.get("defenses", self.defense)
            build_config(defense.config_cls, self.defense_config, f"defense {defense.name}")
        return self

    def key(self) -> str:
        """A short hash naming this recipe (used as the cache key of trained targets)."""
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()[:16]

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TargetRecipe:
        from reconbench.config import build_config

        known = {"problem", "family", "model", "train", "defense", "defense_config"}
        if not isinstance(d, dict):
            raise ReconbenchError(f"a recipe is a table of {', '.join(sorted(known))}, got a {type(d).__name__}")
        extra = set(d) - known
        if extra:
            raise ReconbenchError(f"recipe: unknown key {sorted(extra)[0]!r}; known keys: {', '.join(sorted(known))}")
        for k in ("problem", "model", "train", "defense_config"):
            if d.get(k) is not None and not isinstance(d[k], dict):
                raise ReconbenchError(f"recipe: {k} must be a table of options, got {type(d[k]).__name__} {d[k]!r}")
        for k in ("family", "defense"):
            if d.get(k) is not None and not isinstance(d[k], str):
                raise ReconbenchError(f"recipe: {k} must be a name (a string), got {type(d[k]).__name__} {d[k]!r}")
        return cls(problem=build_config(ProblemSpec, d.get("problem"), "recipe.problem"),
                   family=str(d.get("family", "mlp")), model=dict(d.get("model") or {}),
                   train=build_config(TrainSpec, d.get("train"), "recipe.train"),
                   defense=d.get("defense"), defense_config=dict(d.get("defense_config") or {}))


def check_model_option(family: str, key: str, value: Any, default: Any) -> None:
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
                                  f"{key}={json.dumps(list(default))}")
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


@dataclass
class TrainResult:
    model: TargetNet
    metrics: dict[str, Any]
    history: list[dict[str, Any]]


def build_model(recipe: TargetRecipe, problem: Problem) -> TargetNet:
    family = plugins.get("models", recipe.family)
    gen = torch.Generator().manual_seed(recipe.train.seed)
    return family.build(problem.image_shape, problem.out_dim, dict(recipe.model), generator=gen)


def apply_defense(recipe: TargetRecipe, model: TargetNet, problem: Problem) -> None:
    """The recipe's defense before release only (training-time hooks run inside :func:`train`)."""
    DefenseSession(recipe).release(model, problem)


def evaluate_model(model: TargetNet, problem: Problem, loss_fn: Any, dtype: torch.dtype,
                   device: torch.device | str = "cpu") -> dict[str, float]:
    """Train/test loss and error in eval mode (normalisation layers use their running statistics)."""
    was_training = model.training
    model.eval()
    with torch.no_grad():
        out: dict[str, float] = {}
        for split, x, lab in (("train", problem.x_train(dtype), problem.train_labels),
                              ("test", problem.x_test(dtype), problem.test_labels)):
            if len(lab) == 0:
                continue
            o = model(x.to(device)).cpu()
            out[f"{split}_loss"] = float(loss_fn(o, problem.targets(lab, dtype)))
            out[f"{split}_error"] = error_rate(o, torch.as_tensor(lab), problem.task)
    model.train(was_training)
    return out


def stalled_samples(model: TargetNet, problem: Problem, loss_fn: Any, dtype: torch.dtype) -> int:
    """Training samples whose loss gradient is exactly zero in the training precision but not in float64.

    In float32 the BCE gradient sigmoid(z) - 1 of a positive sample rounds to 0 once its margin passes about
    16.6: from then on gradient descent no longer moves that sample, and longer training changes nothing.
    Counted for classification only, whose exact loss gradient is never zero (a regression fit exact to float32
    precision is a minimiser, not a stall).
    """
    if dtype == torch.float64 or problem.task == "regression":
        return 0
    x, lab = problem.x_train(torch.float64), problem.train_labels
    zero = []
    for dt in (dtype, torch.float64):
        net = copy.deepcopy(model).to(dt)
        out = net(x.to(dt)).detach().requires_grad_(True)
        (grad,) = torch.autograd.grad(loss_fn(out, problem.targets(lab, dt)), out)
        zero.append((grad.reshape(len(x), -1) == 0).all(dim=1))
    return int((zero[0] & ~zero[1]).sum())


def certify(model: TargetNet, recipe: TargetRecipe, problem: Problem, init_decay: float | None) -> dict[str, Any]:
    """The certificate of ``model`` (converted to float64 in place) at the training data, with the learned part
    measured from the recipe's initial weights, of which weight decay left ``init_decay`` (None: unknown, no
    learned part)."""
    return certificate(model, problem.x_train(torch.float64), torch.as_tensor(problem.train_labels), problem.task,
                       init=None if init_decay is None else build_model(recipe, problem),
                       init_decay=1.0 if init_decay is None else init_decay)


def train(recipe: TargetRecipe, problem: Problem, quiet: bool = False, with_certificate: bool = True,
          device: str = "cpu") -> TrainResult:
    """Train a target by full-batch GD (on ``device``; the weights come back on the CPU); stop on NaN."""
    recipe.validate()
    spec = recipe.train
    dtype = DTYPES[spec.dtype]
    loss_name, loss_fn = get_loss(spec.loss, problem.task)
    model = build_model(recipe, problem).to(dtype).to(device)
    x = problem.x_train(dtype).to(device)
    y = problem.targets(problem.train_labels, dtype).to(device)
    session = DefenseSession(recipe)
    # the closed-form loop for linear chains; the autograd loop (and its optimizer, whose construction imports
    # torch's compiler stack) for other families and for defenses that act during training
    # (the closed-form loop only in float64: in float32 its factorised first-layer update rounds differently from the
    # autograd loop's, enough to diverge under the inverse-loss schedule where that loop did not: cpu-mini's CIFAR
    # 10-class target at step 109)
    layers = chain_layers(model) if session.release_only() and dtype == torch.float64 else None
    net: torch.nn.Module = model
    train_loss = loss_fn
    if layers is None:
        opt: torch.optim.Optimizer = torch.optim.SGD(model.parameters(), lr=spec.lr, weight_decay=spec.weight_decay)
        run = session.start(model, opt, loss_fn, x, y, problem, spec.steps)  # a training-time defense may swap these
        net, opt, train_loss, y = run.model, run.optimizer, run.loss_fn, run.targets
    model.train()
    reused = session.recall(recipe, device)  # the same loop already ran here for a release-only defense's recipe
    if reused is not None:
        model.load_state_dict(reused["state"])
    history: list[dict[str, Any]] = []
    chain = ChainGD(layers, x, y, train_loss, spec.weight_decay) if layers is not None and reused is None else None

    def gd_step(lr_of_loss: Callable[[float], float]) -> float:
        """One full-batch GD step; returns the loss before it (the step is skipped when that is not finite)."""
        if chain is not None:  # closed-form backward, same arithmetic as the autograd loop below
            loss_t, dz = chain.loss_and_grad()
            value = loss_t.item()
            if math.isfinite(value):
                chain.step(dz, lr_of_loss(value))
            return value
        loss = train_loss(net(x), y)
        value = loss.item()
        if math.isfinite(value):
            for g in opt.param_groups:
                g["lr"] = lr_of_loss(value)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        return value

    t0 = time.perf_counter()
    lr_mult = 1.0
    loss_value = math.nan

    init_decay = 1.0  # what coupled weight decay leaves of the initial weights: prod_t (1 - lr_t wd)

    def step_size(loss_now: float) -> float:
        nonlocal lr_mult, init_decay
        if spec.schedule == "inverse_loss":
            lr_mult = min(spec.schedule_cap, spec.schedule_threshold / loss_now) \
                if 0 < loss_now < spec.schedule_threshold else 1.0
        init_decay *= 1.0 - spec.lr * lr_mult * spec.weight_decay
        return spec.lr * lr_mult

    step = 0
    stopped_by = "steps"
    with Progress(spec.steps, f"train {recipe.family} on {problem.spec.dataset}", quiet=quiet) as bar:
        for step in range(0 if reused is not None else spec.steps):
            loss_value = gd_step(step_size)
            if not math.isfinite(loss_value):
                raise DivergedError(
                    f"training diverged at step {step} (loss {loss_value}); lower --lr (now {spec.lr}) "
                    f"or use the constant schedule")
            if step % spec.eval_every == 0 or step == spec.steps - 1:
                if chain is not None:
                    chain.sync()
                rec = {"step": float(step), "loss": loss_value, "lr_multiplier": lr_mult}
                rec.update(evaluate_model(model, problem, loss_fn, dtype, device))
                history.append(rec)
            bar.update(step + 1, {"loss": loss_value})
            if (spec.stop_loss > 0 and loss_value < spec.stop_loss) or session.after_step(step, loss_value):
                stopped_by = "stop_loss" if spec.stop_loss > 0 and loss_value < spec.stop_loss else "defense"
                break
            if spec.certify_every and (step + 1) % spec.certify_every == 0 and step + 1 < spec.steps:
                if chain is not None:
                    chain.sync()
                check = certify(copy.deepcopy(model), recipe, problem, init_decay)
                history.append({"step": float(step + 1), "loss": loss_value, "gate_value": gate_value(check),
                                "certificate": check})
                gate_now = gate_value(check)
                if spec.stop_at_gate > 0 and gate_now is not None and gate_now <= spec.stop_at_gate:
                    stopped_by = "gate"
                    break
    if chain is not None:
        chain.sync()
    model = session.end(model).eval()
    wall = time.perf_counter() - t0
    decay_left: float | None = init_decay
    if reused is not None:
        step, loss_value, history, wall = reused["step"], reused["loss"], reused["history"], reused["wall"]
        decay_left = reused.get("init_decay", 1.0 if spec.weight_decay == 0 else None)
    else:
        session.remember(recipe, device, model, step=step, loss=loss_value, history=history, wall=wall,
                         init_decay=init_decay)
    model = model.cpu()
    metrics: dict[str, Any] = {"loss_name": loss_name, "steps_run": step + 1, "final_loss": loss_value,
                               "train_seconds": wall, "train_device": str(device)}
    if spec.certify_every:
        metrics["stopped_by"] = stopped_by
    if reused is not None:
        metrics["training_reused"] = "weights of the undefended recipe trained earlier in this process"
    if recipe.defense is not None:
        metrics["before_defense"] = evaluate_model(model, problem, loss_fn, dtype)
        session.release(model, problem)
        metrics["defense"] = session.card_record()
    metrics.update(evaluate_model(model, problem, loss_fn, dtype))
    with torch.no_grad():
        out = model(problem.x_train(dtype))
        m = margins(out, torch.as_tensor(problem.train_labels), problem.task)
    metrics["margins"] = m.tolist()
    metrics["stalled_samples"] = stalled_samples(model, problem, loss_fn, dtype)
    metrics["param_count"] = model.param_count()
    metrics["param_norm_sq"] = float(sum((p.detach().double() ** 2).sum() for p in model.parameters()))
    if with_certificate:
        metrics["certificate"] = certify(model, recipe, problem, decay_left)
        model.to(dtype)
    return TrainResult(model=model, metrics=metrics, history=history)
