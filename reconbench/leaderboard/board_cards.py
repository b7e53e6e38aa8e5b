"""Model cards as a published board keeps them (``targets/<recipe key>.json``): compact, without what no reader of
a board uses.

A card as ``reconbench train`` writes it records the training curve (``history``, often half the card) and every
held-out test index of the training problem (``problem.indices.test``). A *board card* is the same card with

* ``history`` left out; ``board_card.history`` keeps its point count and the sha256 of its canonical JSON, so it can
  be compared with the card in a targets cache;
* ``problem.indices.test`` as ``{"count": n, "sha256": ...}`` (sha256 of the indices as little-endian int64): the
  indices are rebuilt with the problem from the recorded recipe (``ModelCard.problem``);
* ``board_card.schema`` (:data:`BOARD_CARD_SCHEMA`), written as compact JSON.

Everything else is kept: the recipe and its hash, the training subset, the weights' and mean image's hashes, the
metrics (with the per-image margins and the certificate), and ``content_sha256``. :func:`load_board_card` rebuilds
the problem, checks that its test indices are the recorded ones and puts them back, so the content hash is checked
over the whole card as for a card written by ``reconbench train``. A card without ``board_card`` is read as before.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from reconbench.errors import ModelCardError
from reconbench.provenance import read_json, write_text_atomic
from reconbench.records import CardData, Digest
from reconbench.safe_paths import member
from reconbench.targets.cards import ModelCard, check_card_data

#: schema of a card as a board keeps it (the ``board_card.schema`` field)
BOARD_CARD_SCHEMA = "reconbench-board-card/1"
BOARD_CARD_FIELD = "board_card"


def indices_sha256(indices: list[int]) -> str:
    """sha256 of a list of data-set indices as little-endian int64."""
    return hashlib.sha256(np.asarray(indices, dtype="<i8").tobytes()).hexdigest()


def json_sha256(value: object) -> str:
    """sha256 of a value's canonical JSON (sorted keys, no spaces)."""
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def is_board_card(data: object) -> bool:
    return isinstance(data, dict) and CardData.from_dict(data).is_board_card


def board_card(data: dict[str, Any]) -> dict[str, Any]:
    """The board form of a model card (a board card is returned unchanged)."""
    card = CardData.from_dict(data)
    if card.is_board_card:
        return data
    note: dict[str, Any] = {"schema": BOARD_CARD_SCHEMA}
    out = {k: v for k, v in data.items() if k != "history"}
    if isinstance(card.history, list):
        note["history"] = {"points": len(card.history), "sha256": json_sha256(card.history)}
    if isinstance(test := card.test_indices, list):
        problem, indices = data["problem"], data["problem"]["indices"]
        out["problem"] = {**problem, "indices": {**indices, "test": {"count": len(test),
                                                                      "sha256": indices_sha256(test)}}}
    out[BOARD_CARD_FIELD] = note
    return out


def card_text(data: dict[str, Any]) -> str:
    return json.dumps(data, separators=(",", ":")) + "\n"


def write_board_card(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` (a card in either form) to ``path`` in the board form."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, card_text(board_card(data)))


def restore_card(data: dict[str, Any], test_indices: list[int], where: Path | str) -> dict[str, Any]:
    """The card of the full form from a board card and the test indices of the problem rebuilt from its recipe
    (checked against the recorded count and sha256); ``history`` stays out (no score depends on it)."""
    card = CardData.from_dict(data)
    if not card.is_board_card:
        return data
    recorded = card.test_indices
    out = {k: v for k, v in data.items() if k != BOARD_CARD_FIELD}
    if not isinstance(recorded, Digest):
        return out
    if recorded.count != len(test_indices) or recorded.sha256 != indices_sha256(test_indices):
        raise ModelCardError(f"{where}: the held-out test images rebuilt from the recipe are not those the card "
                             f"records ({len(test_indices)} indices, sha256 {indices_sha256(test_indices)[:16]}; the "
                             f"card: {recorded.count}, {str(recorded.sha256)[:16]}); the data files "
                             "differ from those the target was trained on (point --data-root at the original files)")
    out["problem"] = {**out["problem"], "indices": {**out["problem"]["indices"], "test": list(test_indices)}}
    return out


def load_board_card(board: Path, key: str, data_root: str | None) -> tuple[Any, ModelCard]:
    """The training problem rebuilt from a board's model card and the card (in the full form, its schema and content
    hash checked), for re-scoring and drawing a cell of the board."""
    path = member(board / "targets", key, ".json", "recipe key")
    data = read_json(path, missing=f"the board has no model card of target {key}; render the leaderboard again",
                     damaged="the model card is damaged, render the leaderboard again", error=ModelCardError)
    slim = is_board_card(data)
    # a board card's content hash covers the test indices, which only the rebuilt problem gives back: checked below
    check_card_data({k: v for k, v in data.items() if k != "content_sha256"} if slim else data, path)
    card = ModelCard(path=board / "targets", data=data)
    problem = card.problem(data_root)
    if slim:
        full = restore_card(data, problem.test_indices.tolist(), path)
        check_card_data(full, path)
        card = ModelCard(path=board / "targets", data=full)
    return problem, card
