"""The candidate-label rule of the papers and the knowledge filter applied before an attack sees anything."""

from __future__ import annotations

from dataclasses import replace

import torch

from reconbench.errors import IncompatibleError
from reconbench.interfaces import KNOWLEDGE_ITEMS, Attack, Knowledge


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


def restrict_knowledge(knowledge: Knowledge, attack: Attack) -> Knowledge:
    """Hand the attack only what it declares in ``needs`` (task, classes and shapes are always public)."""
    unknown = set(attack.needs) - set(KNOWLEDGE_ITEMS)
    if unknown:
        raise IncompatibleError(f"attack {attack.name!r} declares unknown knowledge {sorted(unknown)}; "
                                f"known items: {', '.join(KNOWLEDGE_ITEMS)}")
    missing = [item for item in attack.needs if _value(knowledge, item) is None]
    if missing:
        raise IncompatibleError(f"attack {attack.name!r} needs {', '.join(missing)}, which the model card does not "
                                f"provide; add it to the card or choose an attack that does not need it "
                                f"({_attacks_without(missing, knowledge.task)})")
    needs = set(attack.needs)
    return replace(
        knowledge,
        class_counts=knowledge.class_counts if {"labels", "class_balance"} & needs else None,
        loss=knowledge.loss if "loss" in needs else None,
        weight_decay=knowledge.weight_decay if "weight_decay" in needs else None,
        mean_image=knowledge.mean_image if "mean_image" in needs else None,
    )


def _attacks_without(missing: list[str], task: str) -> str:
    """Registered attacks for ``task`` that need none of ``missing`` (named in the error)."""
    from reconbench import plugins

    attacks = {n: plugins.get("attacks", n) for n in plugins.names("attacks")}
    names = [n for n, a in attacks.items() if task in a.tasks and not set(missing) & set(a.needs)]
    return f"for {task} targets: {', '.join(names)}" if names else f"none is registered for {task} targets"


def _value(k: Knowledge, item: str) -> object:
    mapping = {"task": k.task, "labels": k.class_counts, "class_balance": k.class_counts, "loss": k.loss,
               "weight_decay": k.weight_decay, "mean_image": k.mean_image}
    return mapping[item]


