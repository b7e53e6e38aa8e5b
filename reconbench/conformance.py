"""A conformance suite that any plugin can be run against (ours are, parametrised over the registries).

A contributor tests an external plugin with::

    from reconbench import conformance

    def test_my_attack_conforms():
        conformance.check_attack(MyAttack())

Each check uses a tiny target trained on the embedded ``digits`` data set (seconds on a laptop CPU). An attack may
declare ``smoke_config`` (a dict of option overrides that make it run in a second or two) for these checks.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import re
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import torch

from reconbench.attack.candidates import candidate_labels
from reconbench.config import Choice, Distribution, LogUniform, Uniform, build_config
from reconbench.data import TASKS, Problem, ProblemSpec
from reconbench.errors import IncompatibleError
from reconbench.interfaces import (
    KNOWLEDGE_ITEMS,
    LABEL_ITEMS,
    Attack,
    AttackOutput,
    Defense,
    InitRegime,
    Metric,
    ModelFamily,
    Plugin,
    SearchStrategy,
    ThreatModel,
    Trial,
    acts_during_training,
)
from reconbench.targets.cache import train_target
from reconbench.targets.cards import ModelCard
from reconbench.targets.problems import build_problem
from reconbench.targets.recipe import TargetRecipe, TrainSpec

_TMP = Path(tempfile.mkdtemp(prefix="reconbench-conformance-"))
FAMILY_FOR_TASK_CHECK = "mlp"


@cache
def tiny_card(task: str = "binary", family: str = "mlp") -> ModelCard:
    """A tiny target: digits, 3 images per class (2 classes for binary/regression, 3 for multiclass)."""
    model = {"widths": [16]} if family in ("mlp", "mlp_bias") else (
        {"channels": 2, "hidden": 16} if family == "conv" else {})
    recipe = TargetRecipe(
        problem=ProblemSpec(dataset="digits", task=task, n_per_class=3, num_classes=3 if task == "multiclass" else None,
                            n_test_per_class=5),
        family=family, model=model,
        train=TrainSpec(lr=0.05 if task != "multiclass" else 0.2, steps=200,
                        weight_decay=1e-3 if task == "regression" else 0.0))
    return train_target(recipe, _TMP / f"{task}-{family}", quiet=True)


def _check_config_cls(obj: Plugin[Any]) -> None:
    cls = obj.config_cls
    assert isinstance(cls, type) and dataclasses.is_dataclass(cls), f"{obj.name}: config_cls must be a dataclass"
    build_config(cls, {}, obj.name)  # every option has a default
    for f in dataclasses.fields(cls):
        assert f.metadata.get("help"), f"{obj.name}: option {f.name!r} has no help text (use reconbench.config.option)"


def _check_named(obj: Plugin[Any]) -> None:
    assert isinstance(obj.name, str) and obj.name and obj.name == obj.name.strip(), "name must be a non-empty string"
    assert isinstance(obj.description, str) and obj.description.strip(), f"{obj.name}: needs a one-line description"


def check_attack(attack: Attack[Any], tasks: list[str] | None = None) -> dict[str, AttackOutput]:
    """Interface, knowledge and output checks, and a smoke run on a tiny target of each supported task."""
    from reconbench.runs.prepare import prepare
    from reconbench.runs.spec import RunSpec

    _check_named(attack)
    _check_config_cls(attack)
    assert set(attack.needs) <= set(KNOWLEDGE_ITEMS), f"{attack.name}: unknown knowledge in needs"
    assert isinstance(attack.threat, ThreatModel), f"{attack.name}: threat must be a reconbench.interfaces.ThreatModel"
    assert attack.threat.labels or not LABEL_ITEMS & set(attack.needs), \
        f"{attack.name}: needs the labels but its threat model does not read them (ThreatModel(labels=True))"
    assert set(attack.tasks) and set(attack.tasks) <= set(TASKS), f"{attack.name}: tasks must be a subset of {TASKS}"
    assert attack.paper is None or (isinstance(attack.paper, str) and re.match(r"\s*@\w+\{[^,\s]+,", attack.paper)
                                    and "title" in attack.paper), \
        f"{attack.name}: paper must be None or one BibTeX entry (@type{{key, title = {{...}}, ...}})"
    rng = np.random.default_rng(0)
    space = attack.search_space()
    fields = {f.name for f in dataclasses.fields(attack.config_cls)}
    assert set(space) <= fields, f"{attack.name}: search space names unknown options {set(space) - fields}"
    build_config(attack.config_cls, {k: d.sample(rng) for k, d in space.items()}, attack.name)

    outputs = {}
    for task in tasks or sorted(attack.tasks):
        card = tiny_card(task, attack.conformance_family or FAMILY_FOR_TASK_CHECK)
        _, target, labels = prepare(card, RunSpec(attack=attack.name))
        assert (target.initial_model is not None) == attack.threat.initial_weights, \
            f"{attack.name}: handed initial weights against its threat model"
        before = copy.deepcopy(target.model.state_dict())
        cfg = build_config(attack.config_cls, attack.smoke_config or {}, attack.name)
        x0 = torch.randn((len(labels), *card.data["input_shape"]), dtype=target.dtype,
                         generator=torch.Generator().manual_seed(0)) * 1e-2
        out = attack.run(target, x0.clone(), labels, cfg, generator=torch.Generator().manual_seed(1))
        assert isinstance(out, AttackOutput), f"{attack.name}: run() must return an AttackOutput"
        assert tuple(out.candidates.shape) == tuple(x0.shape), f"{attack.name}: candidates shape {out.candidates.shape}"
        # Labels come back unchanged, except from attacks that use none (they may report the model's own decision).
        assert out.labels.shape == labels.shape, f"{attack.name}: one label per candidate"
        k = 2 if task != "multiclass" else card.data["num_classes"]
        assert bool(((out.labels >= 0) & (out.labels < k)).all()), f"{attack.name}: labels must be class ids"
        if {"labels", "class_balance"} & set(attack.needs) and task != "regression":
            assert torch.equal(out.labels.cpu().long(), labels), f"{attack.name}: labels must be returned unchanged"
        assert isinstance(out.final_loss, float), f"{attack.name}: final_loss must be a float"
        assert out.stopped != "completed" or bool(torch.isfinite(out.candidates).all()), \
            f"{attack.name}: completed with non-finite candidates"
        after = target.model.state_dict()
        assert all(torch.equal(before[k], after[k]) for k in before), f"{attack.name}: modified the target's weights"
        outputs[task] = out
    for task in set(TASKS) - set(attack.tasks):  # unsupported tasks fail before any work, with a clear error
        card = tiny_card(task)
        try:
            prepare(card, RunSpec(attack=attack.name))
        except IncompatibleError as exc:
            assert attack.name in str(exc)
        else:
            raise AssertionError(f"{attack.name}: accepted a {task} target it does not declare")
    return outputs


def _with_other_training_images(problem: Problem) -> Problem:
    other = copy.copy(problem)
    other.train_images = np.random.default_rng(123).random(problem.train_images.shape)
    return other


def check_init(init: InitRegime[Any]) -> None:
    """Shape/dtype checks, determinism, and: a non-oracle configuration must not depend on training images."""
    _check_named(init)
    _check_config_cls(init)
    for task in ("binary", "multiclass"):
        problem = build_problem(ProblemSpec(task=task, n_per_class=3, num_classes=3 if task == "multiclass" else None,
                                            n_test_per_class=2))
        labels = candidate_labels(task, problem.num_classes, 2 * problem.n)
        cfg = build_config(init.config_cls, {}, init.name)
        x = init.make(problem, labels, cfg, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
        assert tuple(x.shape) == (len(labels), *problem.image_shape), f"{init.name}: shape {tuple(x.shape)}"
        assert x.dtype == torch.float64 and bool(torch.isfinite(x).all())
        again = init.make(problem, labels, cfg, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
        assert torch.equal(x, again), f"{init.name}: not deterministic under a fixed generator"
        if not init.is_oracle(cfg):
            swapped = init.make(_with_other_training_images(problem), labels, cfg,
                                generator=torch.Generator().manual_seed(0), dtype=torch.float64)
            assert torch.equal(x, swapped), f"{init.name}: claims not to be an oracle but reads training images"


#: the space a search strategy is checked on: every kind of distribution the attacks declare
SEARCH_CHECK_SPACE: dict[str, Distribution] = {"lr": LogUniform(1e-5, 1.0), "alpha": Uniform(10.0, 500.0),
                                               "mode": Choice(("a", "b", "c"))}


def _search_proposals(strategy: SearchStrategy[Any], runs: int, seed: int) -> list[dict[str, Any]]:
    """Every proposal of a session over SEARCH_CHECK_SPACE, told a fixed objective (a run's own index, or a failure)."""
    session = strategy.start(dict(SEARCH_CHECK_SPACE), runs, seed, build_config(strategy.config_cls, {}, strategy.name))
    proposed: list[dict[str, Any]] = []
    while len(proposed) < runs:
        asked = session.ask()
        assert 1 <= len(asked) <= runs - len(proposed), f"{strategy.name}: ask() proposed {len(asked)} run(s)"
        trials = [Trial(run=len(proposed) + i, params=p, objective=None if (len(proposed) + i) % 3 == 2
                        else float(len(proposed) + i)) for i, p in enumerate(asked)]
        proposed.extend(asked)
        session.tell(trials)
    return proposed


def check_search(strategy: SearchStrategy[Any], runs: int = 6) -> list[dict[str, Any]]:
    """A search strategy proposes exactly ``runs`` configurations inside the space, in batches of at least one,
    deterministically given the seed and what it is told, and differently under another seed."""
    _check_named(strategy)
    _check_config_cls(strategy)
    assert isinstance(strategy.oracle, bool), f"{strategy.name}: oracle must be True or False"
    strategy.check()
    proposed = _search_proposals(strategy, runs, seed=0)
    if strategy.from_default:   # run 0 is the attack's default configuration: nothing drawn
        assert proposed[0] == {}, f"{strategy.name}: declares from_default but proposes {proposed[0]} as run 0"
    for values in proposed[1:] if strategy.from_default else proposed:
        assert set(values) == set(SEARCH_CHECK_SPACE), f"{strategy.name}: proposed options {sorted(values)}"
        for key, dist in SEARCH_CHECK_SPACE.items():
            v = values[key]
            if isinstance(dist, Choice):
                assert v in dist.values, f"{strategy.name}: {key} = {v!r} is not one of {dist.values}"
            else:
                assert dist.low <= v <= dist.high, f"{strategy.name}: {key} = {v!r} is outside {dist}"
    assert _search_proposals(strategy, runs, seed=0) == proposed, f"{strategy.name}: not deterministic given the seed"
    assert _search_proposals(strategy, runs, seed=1) != proposed, f"{strategy.name}: ignores the seed"
    return proposed


def check_defense(defense: Defense[Any]) -> None:
    _check_named(defense)
    _check_config_cls(defense)
    card = tiny_card("binary")
    model = card.load_model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    cfg = build_config(defense.config_cls, {}, defense.name)
    defense.apply(model, card.problem(), cfg, generator=torch.Generator().manual_seed(0))
    after = model.state_dict()
    assert {k: v.shape for k, v in before.items()} == {k: v.shape for k, v in after.items()}
    assert all(torch.isfinite(v).all() for v in after.values()), f"{defense.name}: produced non-finite weights"
    if acts_during_training(defense):
        _check_training_defense(defense, card)


def _check_training_defense(defense: Defense[Any], card: ModelCard, steps: int = 20) -> None:
    """A short run of the trainer's loop with the defense's hooks: the released model must be the plain network,
    finite, with the architecture's parameter shapes, and the records JSON values."""
    import json

    from reconbench.nets import TargetNet
    from reconbench.targets.defended import DefenseSession
    from reconbench.targets.losses import get_loss
    from reconbench.targets.training import build_model

    recipe = card.recipe
    problem = card.problem()
    model = build_model(recipe, problem).double()
    shapes = {k: v.shape for k, v in model.state_dict().items()}
    _, loss_fn = get_loss(recipe.train.loss, problem.task)
    x, y = problem.x_train(torch.float64), problem.targets(problem.train_labels)
    session = DefenseSession(recipe, defense=defense)
    run = session.start(model, torch.optim.SGD(model.parameters(), lr=0.05), loss_fn, x, y, problem, steps)
    for step in range(steps):
        loss = run.loss_fn(run.model(run.x), run.targets)
        run.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        run.optimizer.step()
        if session.after_step(step, float(loss)):
            break
    released = session.end(model)
    assert isinstance(released, TargetNet), f"{defense.name}: end_training left a {type(released).__name__}"
    assert {k: v.shape for k, v in released.state_dict().items()} == shapes, f"{defense.name}: changed the architecture"
    assert all(torch.isfinite(p).all() for p in released.parameters()), f"{defense.name}: non-finite weights"
    session.release(released, problem)
    json.dumps(session.card_record(), allow_nan=False)  # records must be plain JSON values


def check_metric(metric: Metric[Any]) -> dict[str, Any]:
    """Interface checks and a smoke evaluation: planted copies, noise, a NaN candidate and starting points.

    The metric need not be registered: it is computed directly on an evaluation context whose primary metric
    (``ssim``) has been computed. Its output must be JSON-safe (no NaN: None where undefined), its per-image
    columns must have one value per training image, and its ``headline`` must be in its summary when available.
    """
    import json

    from reconbench import plugins
    from reconbench.evaluation import resolve_protocol
    from reconbench.evaluation.context import build_context

    _check_named(metric)
    _check_config_cls(metric)
    assert isinstance(metric.higher_is_better, bool), f"{metric.name}: higher_is_better must be a bool"
    problem = build_problem(ProblemSpec(task="binary", n_per_class=3, n_test_per_class=2))
    g = torch.Generator().manual_seed(0)
    x = problem.x_train(torch.float64)
    cands = torch.cat([x[:4] + 0.01 * torch.randn(x[:4].shape, generator=g, dtype=torch.float64),
                       0.1 * torch.randn((2, *x.shape[1:]), generator=g, dtype=torch.float64),
                       torch.full((1, *x.shape[1:]), float("nan"), dtype=torch.float64)])
    x0 = 1e-3 * torch.randn(cands.shape, generator=g, dtype=torch.float64)
    proto = resolve_protocol({"figures": False, "metrics": ["ssim"]}, "mlp")
    ev = build_context(problem, cands, proto, labels=torch.arange(len(cands)) % 2, run_ids=torch.zeros(len(cands)),
                       x0=x0)
    ev.results["ssim"] = dict(plugins.metric("ssim").compute(ev, proto.metric_configs["ssim"]))
    out = metric.compute(ev, build_config(metric.config_cls, {}, metric.name))
    assert isinstance(out, dict), f"{metric.name}: compute() must return a dict"
    assert set(out) <= {"summary", "per_image", "details", "available", "reason"}, \
        f"{metric.name}: unexpected keys {set(out) - {'summary', 'per_image', 'details', 'available', 'reason'}}"
    summary, per_image = out.get("summary", {}), out.get("per_image", {})
    for key, value in summary.items():
        assert value is None or isinstance(value, (bool, int, float, str)), \
            f"{metric.name}: summary[{key!r}] must be a scalar, got {type(value).__name__}"
    for col, values in per_image.items():
        assert len(values) == problem.n, f"{metric.name}: column {col!r} has {len(values)} values for {problem.n} images"
    json.dumps({"summary": summary, "per_image": per_image, "details": out.get("details", {})}, allow_nan=False)
    if out.get("available", True):
        headline = metric.headline_key
        assert headline in summary, f"{metric.name}: its headline {headline!r} is not in its summary"
    else:
        assert isinstance(out.get("reason"), str) and out["reason"], f"{metric.name}: unavailable without a reason"
    return dict(out)


def check_model_family(family: ModelFamily) -> None:
    _check_named(family)
    spec = family.default_spec()
    net = family.build((1, 8, 8), 3, {}, generator=torch.Generator().manual_seed(0)).double()
    x = torch.randn(4, 1, 8, 8, dtype=torch.float64)
    out = net(x)
    assert tuple(out.shape) == (4, 3), f"{family.name}: output shape {tuple(out.shape)}"
    again = family.build((1, 8, 8), 3, {}, generator=torch.Generator().manual_seed(0)).double()
    assert torch.equal(again(x), out), f"{family.name}: init not deterministic under a fixed generator"
    k = family.homogeneity_degree(spec)
    if k is not None:
        scaled = copy.deepcopy(net)
        with torch.no_grad():
            for p in scaled.parameters():
                p.mul_(1.5)
        assert torch.allclose(scaled(x), 1.5**k * out, rtol=1e-9, atol=1e-12), \
            f"{family.name}: not homogeneous of degree {k}"
    if family.swappable_activation:
        with net.use_activation(lambda z: z):
            linear_out = net(x)
        assert math.isfinite(float(linear_out.sum()))
