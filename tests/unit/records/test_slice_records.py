"""The files a slice writes and reads (a pack's manifest, the ledger of finished cells, a training state's metadata)
read strictly at their doors: what the writers write reads back and writes the same JSON, a file written before
the optional fields existed reads with their defaults, and a hand-edited file is refused with one line naming the
file, the field and the fix."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
import torch
from safetensors.torch import save_file

from reconbench.errors import ReconbenchError
from reconbench.precision import PrecisionPolicy, attack_precision, training_precision
from reconbench.records.finished_ledger import FINISHED_LEDGER_FILE, FinishedLedger
from reconbench.records.slice_manifest import SLICE_MANIFEST_FILE, SliceManifest
from reconbench.records.training_checkpoint import TRAINING_CHECKPOINT, PieceNotes
from reconbench.targets.batched_training import read_checkpoint

SHA = "ab" * 32
#: a measured row as a slice writes it (its schema is what the planner reads)
ROW = {"cell": "a", "phase": "attack", "precision": "tf32", "runs": 16, "m": 1000, "weights": 4_073_001,
       "steps": 50_000, "seconds": 555.5, "device": "cuda"}


def manifest_json() -> dict[str, Any]:
    """A manifest as ``write_pack`` writes it, with a split state, a state left out and the costs."""
    return {
        "format": "reconbench-slice-pack/4", "suite": "tiny", "suite_sha256": SHA, "commit": None, "device": "cpu",
        "dtype": "float64", "created": "2026-01-01T00:00:00Z", "complete": False, "deadline_seconds": 60.0,
        "elapsed_seconds": 12.5, "invocation": 0,
        "files": [{"name": "records-0123456789ab.tar.xz", "bytes": 1000, "sha256": SHA}],
        "cells": ["a"], "candidates": {"cells": [], "dtype": "float16"}, "cells_remaining": ["b"],
        "deferred": [{"cell_id": "b", "estimate_seconds": 30, "seconds_left": 2.5}],
        "training": [{"recipe_key": "0123456789abcdef", "step": 100, "dtype": "torch.float64",
                      "parts": ["training-0123456789ab.part", "training-ba9876543210.part"], "bytes": 20,
                      "sha256": SHA},
                     {"recipe_key": "fedcba9876543210", "step": 50, "dtype": "torch.float64",
                      "name": "training-aaaaaaaaaaaa.safetensors",
                      "card": {"member": "training/fedcba9876543210.card.json", "sha256": SHA}}],
        "training_left_out": [{"recipe_key": "1111111111111111", "bytes": 99, "reason": "no file left"}],
        "costs": {"estimates": {"a": 3.5}, "measured": {"train": [[1, 0.5], [2.0, 1.25]]}},
        "measured": [ROW, {**ROW, "cell": "b", "steps": 41, "seconds": 0.75}],
        "stopped": [{"cell_id": "b", "step": 41, "steps": 100, "seconds": 0.75}],
        "groups": [{"cell_id": "c", "cell_key": "k", "search_runs": 16, "runs": [0, 1],
                    "starts": {"000": SHA, "001": SHA}, "start_dtype": "float32"}],
        "torch": "2.11.0",
    }


def ledger_json() -> dict[str, Any]:
    return {"format": "reconbench-finished-cells/3", "suite": "tiny", "suite_sha256": SHA,
            "cells": {"a": {"cell_key": "k", "status": "ok"}},
            "training": {"0123456789abcdef": {"file": "training/0123456789abcdef.safetensors", "sha256": SHA,
                                              "step": 100, "dtype": "torch.float64",
                                              "card": {"file": "training/0123456789abcdef.card.json",
                                                       "sha256": SHA}}},
            "measured": [ROW]}


@pytest.mark.parametrize(("door", "make", "old", "added"), [
    (SLICE_MANIFEST_FILE, manifest_json, "reconbench-slice-pack/1", ("measured", "stopped", "groups", "torch")),
    (FINISHED_LEDGER_FILE, ledger_json, "reconbench-finished-cells/1", ("measured",))])
def test_a_version_1_file_reads_as_version_2_without_the_measured_rows(door, make, old, added):
    """Version 2 added the measured rows (and a pack's stopped cells): a version-1 file reads with none, and writes
    back stamped with the current version; a version-1 reader refuses a version-2 file by its stamp."""
    data = {k: v for k, v in without_cards(make()).items() if k not in added} | {"format": old}
    record = door.decode(copy.deepcopy(data), "x.json")
    assert all(getattr(record, k) in ([], None) for k in added)
    assert record.to_dict() == data | {"format": make()["format"]}


def test_a_version_2_manifest_reads_as_version_3_with_every_start_carried():
    """Version 3 added the sha256 of starts that do not travel: a version-2 pack's groups carry theirs."""
    group = {k: v for k, v in manifest_json()["groups"][0].items() if k not in ("starts", "start_dtype")}
    data = {k: v for k, v in without_cards(manifest_json()).items() if k != "torch"} | {
        "format": "reconbench-slice-pack/2", "groups": [group]}
    m = SLICE_MANIFEST_FILE.decode(copy.deepcopy(data), "x.json")
    assert m.groups[0].starts == {} and m.groups[0].start_dtype is None and m.torch is None
    assert m.to_dict() == data | {"format": "reconbench-slice-pack/4"}


def without_cards(data: dict[str, Any]) -> dict[str, Any]:
    """A manifest's or a ledger's JSON without the cards beside its states (as written before cards travelled)."""
    data = copy.deepcopy(data)
    states = data.get("training", [])
    for state in states.values() if isinstance(states, dict) else states:
        state.pop("card", None)
    return data


@pytest.mark.parametrize(("door", "make", "old"), [
    (SLICE_MANIFEST_FILE, manifest_json, "reconbench-slice-pack/3"),
    (FINISHED_LEDGER_FILE, ledger_json, "reconbench-finished-cells/2")])
def test_a_file_written_before_cards_travelled_reads_with_no_card_beside_its_states(door, make, old):
    """The manifest's version 4 and the ledger's version 3 added the card beside a final state: an older file reads
    with no card (a slice rebuilds those cards), writes back stamped with the current version, and a reader of the
    older version refuses the newer one by its stamp."""
    data = without_cards(make()) | {"format": old}
    record = door.decode(copy.deepcopy(data), "x.json")
    states = record.training.values() if isinstance(record.training, dict) else record.training
    assert [s.card for s in states] == [None] * len(states)
    assert record.to_dict() == data | {"format": make()["format"]}
    card = [s.card for s in (door.decode(make(), "x.json").training.values() if door is FINISHED_LEDGER_FILE
                             else door.decode(make(), "x.json").training)]
    assert any(c is not None and c.sha256 == SHA for c in card)


@pytest.mark.parametrize(("door", "make"), [(SLICE_MANIFEST_FILE, manifest_json),
                                            (FINISHED_LEDGER_FILE, ledger_json)])
def test_a_written_file_reads_back_and_writes_the_same_json(door, make):
    data = make()
    assert door.decode(copy.deepcopy(data), "x.json").to_dict() == data


def test_the_manifest_reads_typed():
    m = SLICE_MANIFEST_FILE.decode(manifest_json(), "manifest.json")
    assert isinstance(m, SliceManifest) and m.complete is False and m.files[0].bytes == 1000
    assert m.training[0].files == ["training-0123456789ab.part", "training-ba9876543210.part"]
    assert m.training[1].files == ["training-aaaaaaaaaaaa.safetensors"]
    assert m.deferred[0].cell_id == "b" and m.costs is not None and m.costs.estimates == {"a": 3.5}


def test_a_manifest_without_the_later_fields_reads_with_their_defaults():
    """The fields a slice's manifest gained over time (dtype, deferred cells, training states, costs) are absent in
    an earlier one: they read as nothing deferred, no state, a slice that ended."""
    data = {k: v for k, v in manifest_json().items()
            if k not in ("dtype", "complete", "deferred", "training", "training_left_out", "costs")}
    m = SLICE_MANIFEST_FILE.decode(data, "manifest.json")
    assert (m.dtype, m.complete, m.deferred, m.training, m.training_left_out, m.costs) == (None, True, [], [], [],
                                                                                          None)
    assert m.to_dict() == data   # and it writes back as it was


@pytest.mark.parametrize(("edit", "message"), [
    (lambda d: d.update(cell=[]), r"pack/manifest.json \(a SliceManifest\): unknown key \$.cell; rename it to "
                                  r"'cells'"),
    (lambda d: d.update(complete="yes"), r"\$.complete is the text 'yes', expected a boolean; correct the value"),
    (lambda d: d["files"][0].update(bytes="1000"), r"\$.files\[0\].bytes is the text '1000', expected an integer"),
    (lambda d: d["training"][1].update(stepp=3), r"unknown key \$.training\[1\].stepp; rename it to 'step'"),
    (lambda d: d.update(format="reconbench-slice-pack/9"), r"format 'reconbench-slice-pack/9' is not a version "
                                                           r"this reconbench reads"),
])
def test_a_hand_edited_manifest_is_refused_in_one_line(edit, message):
    data = manifest_json()
    edit(data)
    with pytest.raises(ReconbenchError, match=message) as err:
        SLICE_MANIFEST_FILE.decode(data, "pack/manifest.json")
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(("edit", "message"), [
    (lambda d: d["cells"].update(b="ok"), r"\$.cells\['b'\] is the text 'ok', expected an object"),
    (lambda d: d["training"]["0123456789abcdef"].pop("sha256"), r"sha256"),
    (lambda d: d.pop("format"), r"format None is not a version"),
])
def test_a_hand_edited_ledger_is_refused_in_one_line(edit, message):
    data = ledger_json()
    edit(data)
    with pytest.raises(ReconbenchError, match=message):
        FINISHED_LEDGER_FILE.decode(data, "results/finished.json")


def test_the_ledger_reads_typed():
    ledger = FINISHED_LEDGER_FILE.decode(ledger_json(), "finished.json")
    assert isinstance(ledger, FinishedLedger) and ledger.cells["a"].status == "ok"
    assert ledger.training["0123456789abcdef"].step == 100


def checkpoint_meta(**changes: Any) -> dict[str, Any]:
    meta = {"format": "reconbench-batched-training/1", "targets": 1, "n": 4, "loss": "logistic", "lr": 0.1,
            "weight_decay": 0.0, "loss_every": 10, "dtype": "torch.float64", "widths": [8], "input_dims": [3],
            "data_sha256": SHA, "step": 20, "history": [{"step": 0, "loss": [0.7]}, {"step": 10, "loss": [0.5]}],
            "diverged": [None], "base_sha256": SHA, "extra": {"seconds": 1.5, "pieces": 2}}
    meta.update(changes)
    return {k: v for k, v in meta.items() if v is not ...}


def test_a_checkpoints_notes_read_from_its_extra_key(tmp_path):
    path = tmp_path / "state.safetensors"
    save_file({"x": torch.zeros(1)}, str(path), metadata={"reconbench": json.dumps(checkpoint_meta())})
    meta = read_checkpoint(path)
    assert (meta.step, meta.dtype, meta.notes) == (20, "torch.float64", {"seconds": 1.5, "pieces": 2})
    assert [h.loss for h in meta.history] == [[0.7], [0.5]]
    assert PieceNotes.from_dict(meta.notes) == PieceNotes(seconds=1.5, pieces=2)


def test_an_early_checkpoint_without_notes_or_base_sha256_reads_with_their_defaults():
    meta = TRAINING_CHECKPOINT.decode(checkpoint_meta(extra=..., base_sha256=...), "state.safetensors")
    assert meta.notes == {} and meta.base_sha256 is None
    assert PieceNotes.from_dict(meta.notes) == PieceNotes(seconds=0.0, pieces=0)


def test_a_checkpoint_that_lacks_a_setting_or_is_no_checkpoint_is_refused(tmp_path):
    with pytest.raises(ReconbenchError, match=r"state.safetensors.*data_sha256"):
        TRAINING_CHECKPOINT.decode(checkpoint_meta(data_sha256=...), "state.safetensors")
    path = tmp_path / "plain.safetensors"
    save_file({"x": torch.zeros(1)}, str(path))
    with pytest.raises(ReconbenchError, match="is not a batched-training checkpoint"):
        read_checkpoint(path)


def test_a_precision_record_reads_its_absent_fields_as_none():
    assert PrecisionPolicy.from_dict({"training_dtype": "float32", "loss_accumulation_dtype": "float32"}) == \
        training_precision("float32")
    for policy in (training_precision("float64"), attack_precision("float32", True, "cuda")):
        assert PrecisionPolicy.from_dict(policy.to_dict()) == policy
    with pytest.raises(ReconbenchError, match="unknown field 'tf32'"):
        PrecisionPolicy.from_dict({"attack_matmul": "float32", "loss_accumulation_dtype": "float32", "tf32": True})
