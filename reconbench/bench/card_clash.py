"""A slice's model card for a target whose card the results folder already holds (``bench --unpack``).

Two slices that each trained the same target, with no training state travelling between them, each bring a card
of it. Where both describe the same weights (same weights' and mean image's sha256, same training images) they
differ only in what was measured while making them (seconds, the time written): the folder keeps its own and the
merge goes on, saying so in one note. Where the weights differ (another kind of machine, another trainer), the
slice's cells attacked other weights than the folder's cells of that target, and the folder's card would stand for
both on the board: its target row, margins and regime gate describe one of the two, and ``--verify`` compares every
cell's training metrics with it. So such a pack is **refused**, naming both cards, before anything is merged: the
pack stays as it came, and one of the two sets of cells is run again from a shared training state (a warning would
let a board mix two trained models under one target, which no later check can separate again).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from reconbench.errors import ReconbenchError
from reconbench.records.model_card import CardData

#: the members of a pack's records archive that hold model cards
CARDS_FOLDER = "targets/"


class CardClash(ReconbenchError):
    """A slice's card describes other weights than the results folder's card of the same recipe key."""


@dataclass(frozen=True)
class CardIdentity:
    """What tells two trainings of one recipe apart: the weights' and the mean image's sha256 and the training
    images' hash; ``made``: when and on which device the card was made (to name it, not compared)."""

    weights: str | None
    mean_image: str | None
    train_images: str | None
    made: str

    def same_model(self, other: CardIdentity) -> bool:
        return (self.weights, self.mean_image, self.train_images) == (other.weights, other.mean_image,
                                                                     other.train_images)

    def text(self) -> str:
        return f"weights sha256 {(self.weights or 'not recorded')[:16]}, {self.made}"


def card_identity(data: bytes) -> CardIdentity | None:
    """The identity of a card's JSON; None when it does not read as a card (the merge's own checks name that)."""
    try:
        card = CardData.from_dict(json.loads(data))
    except (UnicodeDecodeError, ValueError, ReconbenchError):
        return None
    weights = card.weights.sha256 if card.weights is not None else None
    mean = card.mean_image.sha256 if card.mean_image is not None else None
    made = f"made {card.created or 'at an unrecorded time'} on {card.metrics.train_device or 'an unrecorded device'}"
    return CardIdentity(weights, mean, card.problem.train_sha256, made)


def refuse_other_weights(out: Path, members: Mapping[str, bytes], pack: Path) -> None:
    """Refuse, in one line naming both cards, a pack whose card of a target describes other weights than the card
    the results folder ``out`` holds of it; ``members``: the pack's records archive (name -> bytes). A card that
    differs only in what was measured while making it passes (the folder keeps its own)."""
    for name, data in sorted(members.items()):
        if not name.startswith(CARDS_FOLDER):
            continue
        kept_path = out / name
        if not kept_path.is_file() or (kept := kept_path.read_bytes()) == data:
            continue
        ours, theirs = card_identity(kept), card_identity(data)
        if ours is None or theirs is None or ours.same_model(theirs):
            continue
        key = Path(name).stem
        cells = _cells_of_target(out, key)
        raise CardClash(f"{pack}: its model card of target {key} ({theirs.text()}) describes other weights than "
                        f"{kept_path} ({ours.text()}): the slice trained the target again without its training "
                        f"state. Nothing was merged; keep the folder's card by running the slice's cells again from the "
                        f"folder's training state (--finished, with its training/), or take the slice's by removing "
                        f"{kept_path} and the folder's {cells} cell(s) of that target, then --unpack again")


def _cells_of_target(out: Path, key: str) -> int:
    """How many cell records of the results folder name the target of recipe key ``key``."""
    count = 0
    for path in (out / "cells").glob("*.json") if (out / "cells").is_dir() else []:
        try:
            target = json.loads(path.read_text()).get("target") or {}
        except (OSError, UnicodeDecodeError, ValueError):
            continue
        count += isinstance(target, dict) and target.get("recipe_key") == key
    return count
