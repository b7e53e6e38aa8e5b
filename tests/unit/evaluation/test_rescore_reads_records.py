"""Re-scoring reads what it stores through typed records: a hand-edited stored protocol or candidates file is
refused with one line naming the field; a stored evaluation compares part by part, absent parts included."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from reconbench.errors import ReconbenchError
from reconbench.evaluation.rescore import compare_evaluation, pinned_protocol, read_pooled
from reconbench.records import StoredEvaluation


def test_a_stored_protocol_with_a_wrong_metric_config_is_refused_naming_the_field():
    edited = {"metrics": {"ssim": {"config": ["window_size", 11]}}}
    with pytest.raises(ReconbenchError, match=r"metrics.*ssim.*config") as info:
        pinned_protocol({}, edited)
    assert "\n" not in str(info.value)


def test_a_stored_protocol_keeps_the_keys_it_does_not_name_and_pins_its_metrics():
    stored = {"name": "paper", "distance": "ncc", "metrics": {"corr": {"config": {}, "headline": "x"},
                                                               "ssim": {"higher_is_better": True}}}
    assert pinned_protocol({"figures": False}, stored)["metrics"] == ["corr", "ssim"]
    assert pinned_protocol({"figures": False}, {"name": "paper"}) == {"figures": False}
    assert pinned_protocol({"figures": False}, None) == {"figures": False}


def test_candidates_with_a_tensor_no_run_writes_are_refused(tmp_path: Path):
    save_file({"candidates": torch.zeros(2, 3), "lables": torch.zeros(2)}, str(tmp_path / "candidates.safetensors"))
    with pytest.raises(ReconbenchError, match="lables"):
        read_pooled(tmp_path)


def test_candidates_without_labels_read_as_none(tmp_path: Path):
    save_file({"candidates": torch.ones(2, 3)}, str(tmp_path / "candidates.safetensors"))
    pooled = read_pooled(tmp_path)
    assert pooled.labels is None and pooled.run_ids is None and pooled.x0 is None
    assert torch.equal(pooled.candidates, torch.ones(2, 3))


def _fresh() -> dict[str, object]:
    return {"summary": {"reconstructed": 2, "top_k_ssim": 0.5}, "per_image": [{"index": 0, "ssim": 0.5}],
            "candidates": {"total": 4, "valid": 4}, "null": {"kind": "held_out", "available": True, "draws": 2}}


def test_a_stored_evaluation_record_compares_as_its_json():
    fresh = _fresh()
    assert compare_evaluation(fresh, fresh, 0.0) == []
    assert compare_evaluation(StoredEvaluation.from_dict(fresh), fresh, 0.0) == []
    moved = {**fresh, "summary": {"reconstructed": 3, "top_k_ssim": 0.5}}
    assert [m.where for m in compare_evaluation(StoredEvaluation.from_dict(moved), fresh, 0.0)] == \
        ["summary.reconstructed"]


def test_a_summary_key_on_one_side_only_is_a_mismatch_naming_the_missing_side():
    fresh = _fresh()
    fewer = {**fresh, "summary": {"reconstructed": 2}}
    (m,) = compare_evaluation(fewer, fresh, 0.0)
    assert (m.where, m.stored, m.fresh) == ("summary.top_k_ssim", "<missing>", 0.5)
    (m,) = compare_evaluation(fresh, {**fresh, "summary": {"reconstructed": 2}}, 0.0)
    assert (m.where, m.stored, m.fresh) == ("summary.top_k_ssim", 0.5, "<missing>")


def test_a_stored_evaluation_without_a_null_differs_from_one_with_it():
    fresh = _fresh()
    without = {k: v for k, v in fresh.items() if k != "null"}
    assert [m.where for m in compare_evaluation(without, fresh, 0.0)] == ["null"]
