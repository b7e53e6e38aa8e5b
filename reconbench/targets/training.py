"""The full-batch gradient-descent trainer of the papers (recipes: :mod:`reconbench.targets.recipe`)."""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from reconbench import plugins
from reconbench.data import Problem
from reconbench.errors import DivergedError
from reconbench.nets import TargetNet
from reconbench.precision import training_precision
from reconbench.progress import Progress
from reconbench.targets.certificate import certificate, gate_value
from reconbench.targets.chain_gd import ChainGD, chain_layers
from reconbench.targets.defended import DefenseSession
from reconbench.targets.losses import error_rate, get_loss, margins
from reconbench.targets.recipe import DTYPES, TargetRecipe
from reconbench.targets.regime import regime_residuals

#: a training loss: outputs and targets -> the scalar loss
LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

#: where no step needs the loss on the host, it is read every this many steps (and at every recorded step)
READ_EVERY = 100


@dataclass
class TrainResult:
    model: TargetNet
    metrics: dict[str, Any]
    history: list[dict[str, Any]]


def build_model(recipe: TargetRecipe, problem: Problem) -> TargetNet:
    family = plugins.model(recipe.family)
    gen = torch.Generator().manual_seed(recipe.train.seed)
    return family.build(problem.image_shape, problem.out_dim, dict(recipe.model), generator=gen)


def apply_defense(recipe: TargetRecipe, model: TargetNet, problem: Problem) -> None:
    """The recipe's defense before release only (training-time hooks run inside :func:`train`)."""
    DefenseSession(recipe).release(model, problem)


def evaluate_model(model: TargetNet, problem: Problem, loss_fn: LossFn, dtype: torch.dtype,
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


def stalled_samples(model: TargetNet, problem: Problem, loss_fn: LossFn, dtype: torch.dtype) -> int:
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


def unwrapped_copy(model: TargetNet, recipe: TargetRecipe, problem: Problem, dtype: torch.dtype,
                   device: torch.device | str) -> TargetNet:
    """A copy of ``model``'s weights in a newly built network of the recipe, for computing on it in the middle of a
    training run in which a defense wraps ``model`` (DP-SGD's per-sample gradient hooks sit on the network's own
    layers and fire on any forward pass with gradients, the certificate's included; a deep copy would carry them)."""
    fresh = build_model(recipe, problem).to(dtype=dtype, device=device)
    fresh.load_state_dict(model.state_dict())
    return fresh.train(model.training)


def certify(model: TargetNet, recipe: TargetRecipe, problem: Problem, init_decay: float | None,
            weight_decay: float | None = None, with_regime: bool = True) -> dict[str, Any]:
    """The certificate of ``model`` (converted to float64 in place) at the training data, with the learned part
    measured from the recipe's initial weights, of which weight decay left ``init_decay`` (None: unknown, no
    learned part); ``weight_decay`` is the decay training applied (None: the recipe's)."""
    wd = recipe.train.weight_decay if weight_decay is None else weight_decay
    x, labels = problem.x_train(torch.float64), torch.as_tensor(problem.train_labels)
    init = None if init_decay is None else build_model(recipe, problem)
    decay = 1.0 if init_decay is None else init_decay
    cert = certificate(model, x, labels, problem.task, init=init, init_decay=decay)
    if not with_regime:  # the checks during training read the gate only
        return cert
    # the residual of each threat model (docs/regime.md#the-regime-test-of-each-threat-model)
    cert["regime"] = regime_residuals(model, x, labels, problem.task, weight_decay=wd, loss_name=recipe.train.loss,
                                      init=init, init_decay=decay)
    return cert


def train(recipe: TargetRecipe, problem: Problem, quiet: bool = False, with_certificate: bool = True,
          device: str = "cpu") -> TrainResult:
    """Train a target by full-batch GD (on ``device``; the weights come back on the CPU); stop on NaN."""
    recipe.validate()
    spec = recipe.train
    dtype = DTYPES[spec.dtype]
    loss_name, loss_fn = get_loss(spec.loss, problem.task, spec.loss_form)
    model = build_model(recipe, problem).to(dtype).to(device)
    x = problem.x_train(dtype).to(device)
    y = problem.targets(problem.train_labels, dtype).to(device)
    session = DefenseSession(recipe)
    # the closed-form loop for linear chains; the autograd loop (and its optimizer, whose construction imports
    # torch's compiler stack) for other families and for defenses that act during training
    # (float32 recipes train by the autograd loop unless they ask for the closed-form one: float32 targets trained
    # before it existed keep their weights; the float32 closed-form loop applies the first layer's update instead
    # of factorising it, see chain_gd.py)
    closed_form = dtype == torch.float64 or spec.float32_trainer == "closed_form"
    layers = chain_layers(model) if session.release_only() and closed_form else None
    net: torch.nn.Module = model
    train_loss = loss_fn
    if layers is None:
        opt: torch.optim.Optimizer = torch.optim.SGD(model.parameters(), lr=spec.lr, weight_decay=spec.weight_decay)
        run = session.start(model, opt, loss_fn, x, y, problem, spec.steps)  # a training-time defense may swap these
        net, opt, train_loss, y = run.model, run.optimizer, run.loss_fn, run.targets
    model.train()
    reused = session.recall(recipe, device)  # the same loop already ran here for a release-only defense's recipe
    if reused is not None:
        model.load_state_dict(reused.state)
    history: list[dict[str, Any]] = []
    chain = (ChainGD(layers, x, y, train_loss, spec.weight_decay, factorise_first=dtype == torch.float64)
             if layers is not None and reused is None else None)

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

    # Where no step needs the loss on the host (constant lr, no early stop, no training-time defense), the loop
    # leaves it on the device: each step folds its finiteness into a flag, and the host reads the loss and the flag
    # every READ_EVERY steps and wherever a record needs it. The steps' arithmetic is the same either way.
    deferred = spec.schedule == "constant" and spec.stop_loss == 0 and session.release_only()
    finite = torch.ones((), dtype=torch.bool, device=device)
    if deferred and layers is None:
        for g in opt.param_groups:
            g["lr"] = spec.lr

    def gd_step_deferred() -> torch.Tensor:
        """One full-batch GD step at the constant lr; returns the loss before it, on the device."""
        if chain is not None:
            loss_t, dz = chain.loss_and_grad()
            finite.logical_and_(torch.isfinite(loss_t))
            chain.step(dz, spec.lr)
            return loss_t
        loss = train_loss(net(x), y)
        finite.logical_and_(torch.isfinite(loss.detach()))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.detach()

    t0 = time.perf_counter()
    lr_mult = 1.0
    loss_value = math.nan

    init_decay = 1.0  # what coupled weight decay leaves of the initial weights: prod_t (1 - lr_t wd)
    # the decay the optimizer applies, a training-time defense's included (the weight_decay defense adds its own)
    decay = spec.weight_decay if layers is not None else float(opt.param_groups[0].get("weight_decay", 0.0))

    def step_size(loss_now: float) -> float:
        nonlocal lr_mult, init_decay
        if spec.schedule == "inverse_loss":
            lr_mult = min(spec.schedule_cap, spec.schedule_threshold / loss_now) \
                if 0 < loss_now < spec.schedule_threshold else 1.0
        init_decay *= 1.0 - spec.lr * lr_mult * decay
        return spec.lr * lr_mult

    step = 0
    stopped_by = "steps"
    last_read = -1
    with Progress(spec.steps, f"train {recipe.family} on {problem.spec.dataset}", quiet=quiet) as bar:
        for step in range(0 if reused is not None else spec.steps):
            recorded = step % spec.eval_every == 0 or step == spec.steps - 1
            certified = bool(spec.certify_every) and (step + 1) % spec.certify_every == 0
            if deferred:
                loss_t = gd_step_deferred()
                step_size(math.nan)   # the constant schedule: lr and the initial weights' decay need no loss
                if not (recorded or certified or (step + 1) % READ_EVERY == 0):
                    continue   # nothing below runs on a step without a read
                loss_value = loss_t.item()
                if not bool(finite):
                    where = f"at step {step}" if step == last_read + 1 else f"between steps {last_read + 1} and {step}"
                    raise DivergedError(f"training diverged {where} (loss {loss_value}); lower --lr (now {spec.lr})")
                last_read = step
            else:
                loss_value = gd_step(step_size)
            if not math.isfinite(loss_value):
                if spec.lr * lr_mult * decay >= 1.0:  # the decay term alone flips or zeroes the weights each step
                    raise DivergedError(
                        f"training diverged at step {step} (loss {loss_value}): the weight decay {decay:g} times the "
                        f"step size {spec.lr * lr_mult:g} is at least 1; lower --weight-decay")
                raise DivergedError(
                    f"training diverged at step {step} (loss {loss_value}); lower --lr (now {spec.lr}) "
                    f"or use the constant schedule")
            if recorded:
                if chain is not None:
                    chain.sync()
                rec = {"step": float(step), "loss": loss_value, "lr_multiplier": lr_mult}
                rec.update(evaluate_model(model, problem, loss_fn, dtype, device))
                history.append(rec)
            bar.update(step + 1, {"loss": loss_value})
            if (spec.stop_loss > 0 and loss_value < spec.stop_loss) or session.after_step(step, loss_value):
                stopped_by = "stop_loss" if spec.stop_loss > 0 and loss_value < spec.stop_loss else "defense"
                break
            if certified and step + 1 < spec.steps:
                if chain is not None:
                    chain.sync()
                # a network a training-time defense wrapped is copied without the wrapper's hooks
                snapshot = copy.deepcopy(model) if net is model else unwrapped_copy(model, recipe, problem, dtype, device)
                check = certify(snapshot, recipe, problem, init_decay, decay, with_regime=False)
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
        step, loss_value, history, wall = reused.step, reused.loss, reused.history, reused.wall
        decay_left = reused.init_decay if reused.init_decay is not None else 1.0 if spec.weight_decay == 0 else None
    else:
        session.remember(recipe, device, model, step=step, loss=loss_value, history=history, wall=wall,
                         init_decay=init_decay)
    model = model.cpu()
    metrics: dict[str, Any] = {"loss_name": loss_name, "steps_run": step + 1, "final_loss": loss_value,
                               "train_seconds": wall, "train_device": str(device),
                               "precision": training_precision(spec.dtype).to_dict()}
    if spec.certify_every:
        metrics["stopped_by"] = stopped_by
    if reused is not None:
        metrics["training_reused"] = "weights of the undefended recipe trained earlier in this process"
    if recipe.defense is not None:
        metrics["before_defense"] = evaluate_model(model, problem, loss_fn, dtype)
        session.release(model, problem)
        metrics["defense"] = session.card_record()
    metrics.update(release_metrics(model, recipe, problem, loss_fn, dtype, decay_left, decay, with_certificate))
    return TrainResult(model=model, metrics=metrics, history=history)


def release_metrics(model: TargetNet, recipe: TargetRecipe, problem: Problem,
                    loss_fn: Callable[..., torch.Tensor], dtype: torch.dtype,
                    decay_left: float | None, decay: float, with_certificate: bool = True) -> dict[str, Any]:
    """What a card records of the released ``model`` (on the CPU, in ``dtype``): train/test loss and error, margins,
    stalled samples, size and the certificate (``decay_left``, ``decay``: see :func:`certify`)."""
    metrics: dict[str, Any] = dict(evaluate_model(model, problem, loss_fn, dtype))
    with torch.no_grad():
        out = model(problem.x_train(dtype))
        m = margins(out, torch.as_tensor(problem.train_labels), problem.task)
    metrics["margins"] = m.tolist()
    metrics["stalled_samples"] = stalled_samples(model, problem, loss_fn, dtype)
    metrics["param_count"] = model.param_count()
    metrics["param_norm_sq"] = float(sum((p.detach().double() ** 2).sum() for p in model.parameters()))
    if with_certificate:
        metrics["certificate"] = certify(model, recipe, problem, decay_left, decay)
        model.to(dtype)
    return metrics
