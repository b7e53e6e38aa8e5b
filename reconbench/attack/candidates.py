"""The candidate-label rule of the papers and the knowledge filter applied before an attack sees anything."""

from __future__ import annotations

from dataclasses import replace

import torch

from reconbench.errors import IncompatibleError
from reconbench.interfaces import KNOWLEDGE_ITEMS, LABEL_ITEMS, Attack, Knowledge, ThreatModel


def candidate_labels(task: str, num_classes: int, m: int) -> torch.Tensor:
    """Fixed labels of m candidates: halves for binary/regression (first half class 0), class blocks for multiclass.

    Blocks are as equal as possible (the reference uses m_c = m / K exactly).
    """
    k = 2 if task in ("binary", "regression") else num_classes
    if m < k:
        raise IncompatibleError(f"{m} candidates cannot cover {k} classes; use at least {k}")
    return torch.div(torch.arange(m) * k, m, rounding_mode="floor").long()


def default_m(knowledge: Knowledge, factor: int = 2) -> int:
    """m = 2n by default (the papers' m_c = 2 n_c)."""
    if knowledge.n_train is None:
        raise IncompatibleError("the number of candidates defaults to 2n, but the class balance is not known; "
                                "pass --candidates M")
    return factor * knowledge.n_train


def check_threat_model(attack: Attack) -> ThreatModel:
    """The attack's declared threat model, refused when it is not a :class:`ThreatModel`, when ``needs`` asks for
    more than it declares, or when the harness cannot hand it over yet."""
    threat = attack.threat
    if not isinstance(threat, ThreatModel):
        raise IncompatibleError(f"attack {attack.name!r} declares threat = {threat!r}; declare a "
                                "reconbench.interfaces.ThreatModel, e.g. ThreatModel(labels=True)")
    if LABEL_ITEMS & set(attack.needs) and not threat.labels:
        raise IncompatibleError(f"attack {attack.name!r} needs {', '.join(sorted(LABEL_ITEMS & set(attack.needs)))} "
                                f"but its threat model ({threat.label}) does not read the training labels; declare "
                                "threat = ThreatModel(labels=True)")
    if threat.all_but_one:
        raise IncompatibleError(f"attack {attack.name!r} reads all training points but one, which the harness does "
                                "not hand over yet (its evaluation would score the withheld point only); run it on "
                                "your own problem, or declare a threat model without all_but_one")
    return threat


def restrict_knowledge(knowledge: Knowledge, attack: Attack) -> Knowledge:
    """Hand the attack only what it declares in ``needs`` and its threat model (task, classes and shapes are always
    public)."""
    unknown = set(attack.needs) - set(KNOWLEDGE_ITEMS)
    if unknown:
        raise IncompatibleError(f"attack {attack.name!r} declares unknown knowledge {sorted(unknown)}; "
                                f"known items: {', '.join(KNOWLEDGE_ITEMS)}")
    threat = check_threat_model(attack)
    missing = [item for item in attack.needs if _value(knowledge, item) is None]
    if missing:
        raise IncompatibleError(f"attack {attack.name!r} needs {', '.join(missing)}, which the model card does not "
                                f"provide; add it to the card or choose an attack that does not need it "
                                f"({_attacks_without(missing, knowledge.task)})")
    needs = set(attack.needs)
    n = knowledge.n_train if threat.n or threat.labels else None
    return replace(
        knowledge,
        n=n,
        class_counts=knowledge.class_counts if LABEL_ITEMS & needs else None,
        loss=knowledge.loss if "loss" in needs else None,
        weight_decay=knowledge.weight_decay if "weight_decay" in needs else None,
        mean_image=knowledge.mean_image if "mean_image" in needs else None,
    )


def _attacks_without(missing: list[str], task: str) -> str:
    """Registered attacks for ``task`` that need none of ``missing`` (named in the error)."""
    from reconbench import plugins

    attacks = {n: plugins.attack(n) for n in plugins.names("attacks")}
    names = [n for n, a in attacks.items() if task in a.tasks and not set(missing) & set(a.needs)]
    return f"for {task} targets: {', '.join(names)}" if names else f"none is registered for {task} targets"


def _value(k: Knowledge, item: str) -> object:
    mapping = {"task": k.task, "labels": k.class_counts, "class_balance": k.class_counts, "loss": k.loss,
               "weight_decay": k.weight_decay, "mean_image": k.mean_image}
    return mapping[item]


