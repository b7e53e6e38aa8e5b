"""Before any attack work: resolve the attack, check it against the target, fix the candidate labels, and draw
the configs of the search runs with their init configs."""

from __future__ import annotations

from typing import Any

import torch

from reconbench import plugins
from reconbench.attack.candidates import candidate_labels, default_m, restrict_knowledge
from reconbench.attack.search import start_search
from reconbench.config import build_config
from reconbench.errors import IncompatibleError, ReconbenchError
from reconbench.interfaces import Attack, AttackTarget, InitRegime
from reconbench.records.model_card import CardRunFields
from reconbench.runs.resolved import init_config_for
from reconbench.runs.spec import RunSpec
from reconbench.targets.cards import ModelCard
from reconbench.targets.recipe import DTYPES


def prepare(card: ModelCard, spec: RunSpec, attack: Attack[Any] | None = None) -> tuple[Attack[Any], AttackTarget,
                                                                                        torch.Tensor]:
    """Resolve the attack (unless the resolved ``attack`` is given), check it against the target before any work, and
    fix the candidate labels."""
    attack = attack or plugins.attack(spec.attack)
    if spec.dtype not in DTYPES:
        raise ReconbenchError(f"unknown dtype {spec.dtype!r}; choose one of {', '.join(DTYPES)}")
    knowledge = card.knowledge()
    if knowledge.task not in attack.tasks:
        raise IncompatibleError(
            f"attack {attack.name!r} handles {', '.join(sorted(attack.tasks))} targets, but this target is "
            f"{knowledge.task}. Attacks for {knowledge.task} targets: "
            f"{', '.join(n for n in plugins.names('attacks') if knowledge.task in plugins.attack(n).tasks)}")
    card_fields = CardRunFields.from_dict(card.data, card.path)   # what a run reads of its card, typed
    family = plugins.model(card_fields.family)
    dtype, device = DTYPES[spec.dtype], torch.device(spec.device)
    restricted = restrict_knowledge(knowledge, attack)  # also refuses a threat model that cannot be served
    initial = card.initial_model(dtype).to(device) if attack.threat.initial_weights else None
    target = AttackTarget(model=card.load_model(dtype).to(device), family=family.name,
                          homogeneity_degree=card_fields.homogeneity_degree,
                          knowledge=restricted, dtype=dtype, device=device, initial_model=initial)
    attack.check(target)
    m = spec.candidates or default_m(knowledge, attack.candidate_factor)
    labels = candidate_labels(knowledge.task, knowledge.num_classes, m)
    return attack, target, labels


def sample_configs(attack: Attack[Any], spec: RunSpec) -> list[dict[str, Any]]:
    """The configs of the strategy's first round (random search: all R runs) with the user's overrides fixed; one
    run: the given config."""
    session = start_search(attack, spec.attack_config, spec.search_runs, spec.seed, spec.search, spec.search_config)
    if session is None:
        return [dict(spec.attack_config)]
    return [{**values, **spec.attack_config} for values in session.ask()]


def init_config_for_run(init: InitRegime[Any], spec: RunSpec, attack: Attack[Any],
                        cfg: object) -> tuple[object, dict[str, Any]]:
    """The init config of one run from a spec (:func:`reconbench.runs.resolved.init_config_for`)."""
    base = build_config(init.config_cls, spec.init_config, f"init {init.name}")
    return init_config_for(init, base, spec.init_config, attack, cfg)
