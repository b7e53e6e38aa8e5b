"""The typed blocks of a model card (its weights and mean image files, p / (d n), the learned part of its
certificate) and an audit's ``audit.json`` record: published files decode, a hand edit is refused with one line
naming the file, the field and the fix, and readers get the numbers the JSON holds."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import pytest

from reconbench.errors import ModelCardError, ReconbenchError
from reconbench.records import CARD_FILE
from reconbench.records.audit import AUDIT_FILE, AuditRecord
from reconbench.targets.cards import card_p_over_dn, check_card_data
from reconbench.targets.regime import residual_for

ROOT = Path(__file__).resolve().parents[3]
CARDS = sorted(ROOT.glob("leaderboards/*/targets/*.json"))


def _card_with_certificate() -> dict[str, Any]:
    for path in CARDS:
        data = json.loads(path.read_text())
        cert = data["metrics"].get("certificate")
        if isinstance(cert, dict) and isinstance(cert.get("learned"), dict) and "p_over_dn" in data:
            return data
    pytest.skip("no published card with a learned-part certificate and p / (d n)")


@pytest.mark.parametrize(("path", "value", "words"), [
    (("metrics", "certificate", "learned", "colour"), 1, ["unknown key $.metrics.certificate.learned.colour"]),
    (("metrics", "certificate", "learned", "init_decay"), "1", ["$.metrics.certificate.learned.init_decay is the text"]),
    (("weights", "sha256"), 7, ["$.weights.sha256 is an integer, expected text"]),
    (("mean_image", "fil"), "x", ["unknown key $.mean_image.fil", "rename it to 'file'"]),
    (("p_over_dn", "p"), "many", ["$.p_over_dn.p is the text 'many', expected an integer"]),
], ids=["learned-unknown", "learned-type", "weights-type", "mean-misspelt", "p_over_dn-type"])
def test_a_hand_edited_card_block_is_refused_with_one_line(tmp_path, path, value, words):
    data = _card_with_certificate()
    CARD_FILE.decode(copy.deepcopy(data), "unedited.json")
    d = data
    for k in path[:-1]:
        d = d[k]
    d[path[-1]] = value
    where = tmp_path / "card.json"
    with pytest.raises(ReconbenchError) as info:
        CARD_FILE.decode(data, where)
    message = str(info.value)
    assert "\n" not in message and str(where) in message
    for w in words:
        assert w in message, message


def test_check_card_data_refuses_a_card_block_edit_as_a_model_card_error(tmp_path):
    data = _card_with_certificate()
    data["weights"]["sha256"] = 7
    with pytest.raises(ModelCardError, match=r"\$\.weights\.sha256 is an integer"):
        check_card_data(data, tmp_path / "card.json")
    data = _card_with_certificate()
    del data["mean_image"]
    with pytest.raises(ModelCardError, match="field mean_image is missing"):
        check_card_data(data, tmp_path / "card.json")


def test_p_over_dn_of_a_card_without_it_is_counted_from_its_fields():
    """The fallback counts p, d and n from the card's own fields (d: the product of the input shape, n: the sum of
    the class counts), the same numbers the card records."""
    data = _card_with_certificate()
    recorded = card_p_over_dn(data)
    old = {k: v for k, v in data.items() if k != "p_over_dn"}
    d, n = math.prod(data["input_shape"]), sum(data["class_counts"])
    assert recorded == data["p_over_dn"]
    assert card_p_over_dn(old) == {"p": data["metrics"]["param_count"], "d": d, "n": n,
                                   "ratio": data["metrics"]["param_count"] / (d * n)}


def test_the_regime_residual_reads_the_typed_certificate_as_its_json():
    """The learned part's residual without a regime block is the square root of its squared NNLS residual."""
    cert = _card_with_certificate()["metrics"]["certificate"]
    old = {k: v for k, v in cert.items() if k != "regime"}
    value, how = residual_for(old, "learned")
    assert value == pytest.approx(math.sqrt(cert["learned"]["residual_at_train"]), rel=1e-14)
    assert how == "learned fit from the certificate"
    value, how = residual_for(cert, "theta")
    assert value == cert["regime"]["theta"]["residual"] and how == "theta"


def _audit() -> dict[str, Any]:
    """An audit.json as ``reconbench audit`` writes it (one attack, one refused), numbers made up."""
    number = {"value": 3, "null_mean": 0.25, "null_sd": 0.5, "null_max": 1}
    return {
        "kind": "reconbench-audit/1", "command": "reconbench audit w.safetensors --family mlp --out o",
        "inputs": {"weights": "w.safetensors", "weights_sha256": "a" * 64, "family": "mlp", "model_spec": {"widths": [8]},
                   "train": "t.npz", "held_out": "h.npz", "model_set": {}, "task": "binary", "binary_rule": None,
                   "preprocess": {"scale": 1.0, "mean": "train", "std": [1.0]}, "loss": None,
                   "train_sha256": "b" * 64, "held_out_sha256": "c" * 64, "n_train": 10, "class_counts": [5, 5],
                   "image_shape": [1, 8, 8], "held_out_images": 40, "decoys": 20, "held_out_pool": 20,
                   "init_weights": None},
        "model": {"param_count": 530, "train_loss": 0.01, "loss": "logistic", "train_error": 0.0,
                  "held_out_error": 0.2, "held_out_scored": 20},
        "regime": {"stationarity_ratio": 0.1, "residual_at_train": 0.01, "residual_at_random": 0.1, "method": "nnls",
                   "seconds": 0.5, "theta0_available": False, "learned_ratio": None, "gate": 0.5,
                   "gate_verdict": "unavailable", "gate_reason": "the initial weights theta0 are not known"},
        "attacks": [{"attack": "binary_kkt", "config": {"steps": 10}, "search_runs": 2, "seed": 0,
                     "result": "attacks/binary_kkt/result.json", "figure": None,
                     "outcome": {"status": "ok", "reason": None}, "n_train": 10, "calibrated_threshold": 0.8,
                     "calibration": 19, "null_draws": 19, "null_available": True, "null_reason": None,
                     "numbers": {k: dict(number) for k in ("reconstructed_calibrated", "reconstructed", "membership_auc",
                                                            "membership_tpr_at_fpr", "membership_precision")},
                     "wall_seconds": 2.5, "membership_non_members": 10}],
        "refused": [{"attack": "weight_rows", "reason": "handles multiclass models, not binary"}],
        "headline": {"available": True, "attack": "binary_kkt", "reconstructed": 3, "n_train": 10, "null_mean": 0.25,
                     "null_max": 1, "threshold": 0.8, "membership_auc": 0.9, "membership_auc_null_mean": 0.5},
        "seconds": 4.0,
        "provenance": {"reconbench_version": "0.0", "git_commit": "abc", "seed": 0},
    }


def test_an_audit_record_reads_back_unchanged_and_its_report_renders_from_it(tmp_path):
    from reconbench.auditing.report import render

    data = _audit()
    rec = AUDIT_FILE.decode(copy.deepcopy(data), "audit.json")
    assert isinstance(rec, AuditRecord) and rec.to_dict() == data
    assert rec.provenance.extra == {"seed": 0}   # the provenance block is open: the report names two of its keys
    page = render(rec, tmp_path)
    assert "<b id='headline-count'>3 of 10</b>" in page
    assert "Not run: <b>weight_rows</b>" in page and "the initial weights theta0 are not known." in page


@pytest.mark.parametrize(("edit", "words"), [
    (lambda d: d["headline"].update(colour=1), ["unknown key $.headline.colour", "remove it"]),
    (lambda d: d["attacks"][0].update(serch_runs=d["attacks"][0].pop("search_runs")),
     ["unknown key $.attacks[0].serch_runs; rename it to 'search_runs';"]),   # the rename fixes the missing field
    (lambda d: d["model"].update(param_count="530"), ["$.model.param_count is the text '530', expected an integer"]),
    (lambda d: d.pop("seconds"), ["field $.seconds is missing; add it;", "run the `reconbench audit` command"]),
    (lambda d: d["headline"].pop("available"), ["field $.headline.available is missing; add it;"]),
], ids=["unknown", "misspelt", "type", "missing", "missing-nested"])
def test_a_hand_edited_audit_record_is_refused_with_one_line(tmp_path, edit, words):
    data = _audit()
    edit(data)
    path = tmp_path / "audit.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ReconbenchError) as info:
        AUDIT_FILE.read(path)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{path} (a AuditRecord): ")
    assert "KeyError" not in message and "': '" not in message   # the codec's own wording stays out
    for w in words:
        assert w in message, message


def test_a_misspelt_required_field_counts_once_beside_other_problems():
    """The rename fixes both the unknown key and the field it leaves missing: one problem, counted once beside a
    wrong type elsewhere; a field missing with no key near its name is told to be added."""
    data = _audit()
    data["attacks"][0]["serch_runs"] = data["attacks"][0].pop("search_runs")
    data["model"]["param_count"] = "530"
    with pytest.raises(ReconbenchError) as info:
        AUDIT_FILE.decode(data, "audit.json")
    assert "unknown key $.attacks[0].serch_runs; rename it to 'search_runs' (and 1 more);" in str(info.value)
    data = _audit()
    data["regime"]["gtae"] = data["regime"].pop("seconds")   # no field's name is near it: two problems
    with pytest.raises(ReconbenchError) as info:
        AUDIT_FILE.decode(data, "audit.json")
    assert "field $.regime.seconds is missing; add it (and 1 more);" in str(info.value), str(info.value)
