"""What a run reads of its target's model card (``CardRunFields``): the published cards' fields read as the JSON
holds them, an audit's in-memory card read alike, a wrong or missing field refused with one line."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from reconbench.errors import ReconbenchError
from reconbench.records.model_card import CardRunFields

ROOT = Path(__file__).resolve().parents[3]
CARDS = sorted(ROOT.glob("leaderboards/*/targets/*.json"))


def _audit_card_data() -> dict[str, Any]:
    """A card as ``reconbench audit`` builds it in memory (auditing/card.py): no format stamp, the audit's record
    for a recipe, no content hash."""
    return {"family": "mlp", "model_spec": {"width": 8}, "task": "binary", "num_classes": 2, "out_dim": 1,
            "input_shape": [1, 8, 8], "class_counts": [5, 5], "homogeneity_degree": 2,
            "recipe": {"model_set": {}, "preprocess": {"scale": 1}}, "metrics": {"loss_name": "logistic",
                                                                                "margins": [0.5, 1.5],
                                                                                "train_loss": 0.1,
                                                                                "param_count": 530},
            "recipe_key": "audit-0123456789ab", "content_sha256": None}


def test_every_published_card_reads_as_its_json_holds_it():
    assert CARDS, "no published model cards found"
    for path in CARDS:
        data = json.loads(path.read_text())
        fields = CardRunFields.from_dict(copy.deepcopy(data), path)
        assert fields.to_dict() == data, path   # open: the other fields are kept as read
        assert (fields.family, fields.recipe_key) == (data["family"], data["recipe_key"])
        assert fields.content_sha256 == data.get("content_sha256")
        assert fields.homogeneity_degree == data.get("homogeneity_degree")
        assert not fields.is_audit
        # what a run records of the training metrics: the card's, the per-point margins left out
        assert fields.run_metrics.to_dict() == {k: v for k, v in data["metrics"].items() if k != "margins"}, path
        if "p_over_dn" in data:
            assert fields.p_over_dn is not None and fields.p_over_dn.to_dict() == data["p_over_dn"]
        else:
            assert fields.p_over_dn is None


def test_an_audit_card_reads_with_its_recorded_inputs_in_place_of_a_recipe():
    data = _audit_card_data()
    fields = CardRunFields.from_dict(copy.deepcopy(data), "the audit's card")
    assert fields.is_audit and fields.recipe == data["recipe"] and fields.content_sha256 is None
    assert fields.run_metrics.to_dict() == {"loss_name": "logistic", "train_loss": 0.1, "param_count": 530}


@pytest.mark.parametrize(("edit", "words"), [
    (lambda d: d.update(family=3), "$.family is an integer, expected text; correct the value"),
    (lambda d: d.pop("recipe_key"), "field $.recipe_key is missing; add it"),
    (lambda d: d["metrics"].update(train_loss="low"), "$.metrics.train_loss is the text 'low', expected a number"),
    (lambda d: d.update(homogeneity_degree=2.5), "$.homogeneity_degree is a number, expected an integer or null"),
], ids=["family-type", "recipe_key-missing", "metric-type", "degree-type"])
def test_a_wrong_or_missing_field_a_run_reads_is_refused_with_one_line(edit, words):
    data = _audit_card_data()
    edit(data)
    with pytest.raises(ReconbenchError) as info:
        CardRunFields.from_dict(data, "out/card.json")
    message = str(info.value)
    assert "\n" not in message and message.startswith("out/card.json (a CardRunFields): ")
    assert words in message, message
