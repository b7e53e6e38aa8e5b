"""A model card records the machine side of its training (``training_machine``: BLAS, MKL's fast path or not, torch,
processor) outside its content hash and recipe key; cards written before it (every published board's) read as
"unknown" and keep checking."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from reconbench import fast_blas
from reconbench.data import ProblemSpec
from reconbench.errors import ReconbenchError
from reconbench.leaderboard.board_cards import board_card
from reconbench.records.model_card import CARD_FILE, CardData, TrainingMachine
from reconbench.targets.cache import train_target
from reconbench.targets.cards import check_card_data, content_sha256, load_card, metrics_sha256
from reconbench.targets.recipe import TargetRecipe, TrainSpec

RECIPE = TargetRecipe(problem=ProblemSpec(task="binary", n_per_class=3), model={"widths": [8]},
                      train=TrainSpec(lr=0.05, steps=10))
BOARDS = Path(__file__).resolve().parents[3] / "leaderboards"


@pytest.fixture(scope="module")
def card_data(tmp_path_factory):
    return train_target(RECIPE, tmp_path_factory.mktemp("card") / "card", quiet=True).data


def _config_value(name: str) -> str | None:
    """``NAME=value`` of torch's build configuration, read here without reconbench's BLAS helpers."""
    found = re.search(rf"{name}=(\w+)", torch.__config__.show())
    return found.group(1) if found else None


def test_a_trained_card_records_the_machine_it_was_trained_on(card_data):
    machine = card_data["training_machine"]
    assert machine["fast_path"] is fast_blas.active()
    assert machine["torch_version"] == torch.__version__
    assert machine["blas"] == _config_value("BLAS_INFO")
    model_lines = [ln for ln in Path("/proc/cpuinfo").read_text().splitlines() if ln.lower().startswith("model name")] \
        if Path("/proc/cpuinfo").exists() else []
    if model_lines:
        assert machine["processor"] == model_lines[0].split(":", 1)[1].strip()
    record = CardData.from_dict(card_data)
    assert record.training_path == ("fast" if fast_blas.active() else "stock")


def test_the_field_changes_neither_hash_nor_recipe_key(card_data):
    without = {k: v for k, v in card_data.items() if k != "training_machine"}
    assert content_sha256(without) == content_sha256(card_data) == card_data["content_sha256"]
    assert metrics_sha256(without) == card_data["metrics_sha256"]
    assert card_data["recipe_key"] == RECIPE.key()
    other = {**card_data, "training_machine": {**card_data["training_machine"], "fast_path": not fast_blas.active()}}
    assert check_card_data(other, "a card trained on the other path").training_path != \
        CardData.from_dict(card_data).training_path


def test_a_card_without_the_field_reads_as_unknown(card_data, tmp_path):
    old = {k: v for k, v in card_data.items() if k != "training_machine"}
    (tmp_path / "card.json").write_text(json.dumps(old))
    card = load_card(tmp_path)   # its door: the fields, the content hash, the recipe key
    assert card.record.training_machine is None and card.record.training_path is None


@pytest.mark.parametrize(("fast", "path"), [(True, "fast"), (False, "stock"), (None, None)])
def test_the_recorded_flag_names_the_path(fast, path):
    assert TrainingMachine(fast_path=fast).blas_path == path
    assert CardData.from_dict({"training_machine": {"fast_path": fast}}).training_path == path


def test_a_misspelt_key_of_the_field_is_refused():
    with pytest.raises(ReconbenchError, match="fast_path"):
        CARD_FILE.decode({"format": CardData.SCHEMA, "training_machine": {"fast_pth": True}}, "a card")


def test_a_board_card_keeps_the_field(card_data):
    kept = board_card(card_data)
    assert kept["training_machine"] == card_data["training_machine"]
    assert CardData.from_dict(kept).training_path == CardData.from_dict(card_data).training_path


def test_every_published_card_reads_with_the_field():
    cards = sorted(BOARDS.glob("*/targets/*.json"))
    assert cards
    for path in cards:
        record = CardData.from_dict(json.loads(path.read_text()), path)
        assert record.training_path in (None, "stock", "fast"), path


@pytest.mark.parametrize("recorded", [True, False])
def test_a_release_only_defense_records_the_machine_of_the_weights_it_starts_from(tmp_path, recorded):
    """A defended target whose weights are its undefended target's (a defense acting only before release) records
    the undefended card's training machine, which may be another process's: here one edited to the other path."""
    import dataclasses

    from reconbench.targets import defended
    from reconbench.targets.cache import get_or_train

    defended._TRAINED.clear()
    base = get_or_train(RECIPE, tmp_path, quiet=True)
    data = json.loads((base.path / "card.json").read_text())
    other = {**data["training_machine"], "fast_path": not fast_blas.active(), "processor": "another processor"}
    if recorded:
        data["training_machine"] = other
    else:
        del data["training_machine"]
    (base.path / "card.json").write_text(json.dumps(data))
    defended._TRAINED.clear()
    card = get_or_train(dataclasses.replace(RECIPE, defense="int8_quantise", defense_config={"bits": 4}), tmp_path,
                        quiet=True)
    assert "training_reused" in card.data["metrics"]
    assert card.data.get("training_machine") == (other if recorded else None)
