"""Model cards round-trip, refuse tampered or mismatched weights, and legacy checkpoints load safely."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from reconbench import plugins
from reconbench.data import ProblemSpec
from reconbench.errors import ModelCardError
from reconbench.targets.cache import get_or_train, train_target
from reconbench.targets.cards import load_card, load_legacy_checkpoint
from reconbench.targets.recipe import TargetRecipe, TrainSpec

RECIPE = TargetRecipe(problem=ProblemSpec(task="binary", n_per_class=4), model={"widths": [16, 16]},
                      train=TrainSpec(lr=0.05, steps=50))


@pytest.fixture
def card(tmp_path):
    return train_target(RECIPE, tmp_path / "card", quiet=True)


def test_roundtrip(card):
    loaded = load_card(card.path)
    assert loaded.recipe == RECIPE
    model = loaded.load_model()
    x = loaded.problem().x_train()
    torch.testing.assert_close(model(x).reshape(-1),
                               torch.tensor(loaded.data["metrics"]["margins"], dtype=torch.float64)
                               * (2 * torch.as_tensor(loaded.problem().train_labels) - 1.0))
    k = loaded.knowledge()
    assert k.class_counts == [4, 4] and k.task == "binary" and k.mean_image.shape == (1, 8, 8)


def test_cache_reuses_the_same_recipe(tmp_path):
    a = get_or_train(RECIPE, tmp_path, quiet=True)
    mtime = (a.path / "weights.safetensors").stat().st_mtime_ns
    b = get_or_train(RECIPE, tmp_path, quiet=True)
    assert a.path == b.path and (b.path / "weights.safetensors").stat().st_mtime_ns == mtime


def test_tampered_weights_are_refused(card):
    state = {k: v + 1 for k, v in card.load_model().state_dict().items()}
    save_file(state, str(card.path / "weights.safetensors"))
    with pytest.raises(ModelCardError, match="sha256"):
        load_card(card.path).load_model()


def test_card_that_does_not_match_its_weights(card):
    data = json.loads((card.path / "card.json").read_text())
    data["model_spec"]["widths"] = [16, 17]
    del data["content_sha256"]  # a card without the hash (older format): the shape check still catches it
    (card.path / "card.json").write_text(json.dumps(data))
    with pytest.raises(ModelCardError, match="shape"):
        load_card(card.path).load_model()


def test_not_a_card(tmp_path):
    with pytest.raises(ModelCardError, match="no model card"):
        load_card(tmp_path)
    (tmp_path / "card.json").write_text("{not json")
    with pytest.raises(ModelCardError, match="not valid JSON"):
        load_card(tmp_path)


def test_legacy_checkpoint_prefixes_are_stripped(tmp_path):
    fam = plugins.get("models", "mlp")
    src = fam.build((1, 8, 8), 1, {"widths": [5, 5]}, generator=torch.Generator().manual_seed(1))
    wrapped = {"state_dict": {f"module._orig_mod.{k}": v for k, v in src.state_dict().items()}, "epoch": None}
    torch.save(wrapped, tmp_path / "w.pth")
    dst = fam.build((1, 8, 8), 1, {"widths": [5, 5]}, generator=torch.Generator().manual_seed(2))
    load_legacy_checkpoint(tmp_path / "w.pth", dst)
    for k, v in src.state_dict().items():
        torch.testing.assert_close(dst.state_dict()[k], v)


class _Payload:
    def __reduce__(self):
        return (print, ("code ran",))


def test_legacy_checkpoint_with_objects_is_refused(tmp_path):
    torch.save({"state_dict": {"x": _Payload()}}, tmp_path / "evil.pth")
    fam = plugins.get("models", "mlp")
    with pytest.raises(ModelCardError, match="weights_only"):
        load_legacy_checkpoint(tmp_path / "evil.pth", fam.build((1, 8, 8), 1, {"widths": [5, 5]}))
