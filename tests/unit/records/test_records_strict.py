"""Strict reading at each file format's door: every published and committed file of each format version decodes,
and a hand-edited file (an unknown key, a misspelt field, a wrong type) is refused with one line naming the file,
the field and the fix."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from reconbench.errors import ReconbenchError
from reconbench.records import (
    BOARD_RESULTS_FILE,
    CARD_FILE,
    CELL_FILE,
    INVOCATION_FILE,
    RUN_RESULT_FILE,
    SUBMISSION_FILE,
    BoardResults,
    CardData,
    CellRecord,
    EntryInfo,
    FileFormat,
    Invocation,
    RunResult,
    SubmissionFile,
)
from reconbench.records.board_results import compact, expand

ROOT = Path(__file__).resolve().parents[3]
CELLS = sorted(ROOT.glob("leaderboards/*/cells/*.json"))
RESULTS = sorted(ROOT.glob("benchmarks/results/**/result.json"))
BOARDS = sorted(ROOT.glob("leaderboards/*/results.json"))
CARDS = sorted(ROOT.glob("leaderboards/*/targets/*.json"))


def _load(path: Path) -> Any:
    return json.loads(path.read_text())


# -- every file of each format version decodes strictly ---------------------------------------------------
def test_result_v1_every_committed_run_result_decodes_strictly():
    assert len(RESULTS) > 10
    for path in RESULTS:
        data = _load(path)
        assert data["kind"] == "reconbench-result/1"
        rec = RUN_RESULT_FILE.decode(data, path)
        assert isinstance(rec, RunResult) and rec.to_dict() == data


def test_cell_v1_and_board_entry_v1_every_published_entry_decodes_strictly():
    assert len(CELLS) > 100
    for path in CELLS:
        data = _load(path)
        assert (data["format"], data["entry"]["schema"]) == ("reconbench-bench-cell/1", "reconbench-board-entry/1")
        rec = CELL_FILE.decode(data, path)
        assert isinstance(rec.entry, EntryInfo) and rec.entry.schema in EntryInfo.READS
        assert rec.cell_id == path.stem and json.dumps(rec.to_dict()) == json.dumps(data)


def test_board_entry_v1_expanded_to_the_full_record_decodes_strictly():
    from reconbench.bench.runner import read_cell

    for path in CELLS[::7]:
        full = read_cell(path)
        assert CellRecord.from_dict(full, path).to_dict() == full


def test_leaderboard_v2_every_published_board_decodes_strictly_in_both_forms():
    assert len(BOARDS) >= 6
    for path in BOARDS:
        stored = _load(path)
        assert stored["format"] == "reconbench-leaderboard/2"
        full = BOARD_RESULTS_FILE.decode(stored, path)  # the upgrade expands every statistic
        assert full.to_dict() == expand(stored)
        assert json.dumps(BoardResults.from_dict(stored, path).to_dict()) == json.dumps(stored)


def test_leaderboard_v1_the_full_form_is_read_as_it_is_and_compacts_to_the_published_file():
    for path in BOARDS:
        stored = _load(path)
        full = {**expand(stored), "format": BoardResults.FULL_SCHEMA}
        assert BOARD_RESULTS_FILE.upgrade(full, path) is full  # nothing to do for the full form
        assert BOARD_RESULTS_FILE.decode(full, path).to_dict() == full
        assert json.dumps({**compact(full), "format": BoardResults.SCHEMA}) == json.dumps(stored)


def test_card_v1_and_board_card_v1_every_published_card_decodes_strictly():
    assert len(CARDS) > 10
    for path in CARDS:
        data = _load(path)
        assert (data["format"], data["board_card"]["schema"]) == ("reconbench-card/1", "reconbench-board-card/1")
        card = CARD_FILE.decode(data, path)
        assert isinstance(card, CardData) and card.is_board_card and card.to_dict() == data


def _submission() -> dict[str, Any]:
    """A submission of one published entry, with the keys ``leaderboard submit`` writes (``submit.pack``)."""
    entry = _load(CELLS[0])
    return {"format": "reconbench-submission/1", "board": {"suite": "ci", "suite_sha256": "a" * 64},
            "suite_sha256": "b" * 64, "suite_addition": "[attacks.x]\n", "entries": [entry], "protocols": {},
            "cards": {}, "candidates": {entry["cell_id"]: "eJw="},
            "provenance": {"contributor": "someone", "git_commits": ["c" * 40], "reconbench_versions": ["0.1.0"],
                           "machines": ["cpu"], "commands": ["reconbench bench x.toml"], "packed": "2026-01-01T00:00:00Z"},
            "record_sha256": "d" * 64}


def test_submission_v1_a_submission_decodes_strictly():
    sub = _submission()
    packed = SUBMISSION_FILE.decode(sub, "sub.json")
    assert isinstance(packed, SubmissionFile) and packed.to_dict() == sub
    assert packed.candidates_of(sub["entries"][0]["cell_id"]) == "eJw="


def _invocation() -> dict[str, Any]:
    """An invocation file with the keys ``reconbench bench`` writes (``bench/runner.InvocationLog``)."""
    return {"invocation": 0, "command": "reconbench bench ci", "started": "2026-01-01T00:00:00Z", "status": "done",
            "elapsed_seconds": 12.5, "suite": "ci", "suite_sha256": "a" * 64, "only": [], "device": "cpu",
            "dtype": "float64", "executor": {"name": "serial"}, "reconbench_version": "0.1.0", "git_commit": "c" * 40,
            "torch_version": "2.4.0", "machine": {"cpu": "x"}, "cells_run": ["a"], "cells_skipped": 0,
            "cells_lost": ["b"]}


def test_invocation_unstamped_an_invocation_decodes_strictly():
    inv = _invocation()
    rec = INVOCATION_FILE.decode(inv, "invocations/000.json")
    assert isinstance(rec, Invocation) and rec.to_dict() == inv and rec.cells_lost == ["b"]


def test_batched_training_v1_and_v2_a_checkpoints_settings_decode_strictly():
    """Version 1 holds one loss, lr and weight decay; version 2 one per target (a stack of mixed settings); both read
    through one door, and each writes back as read."""
    from reconbench.records.training_checkpoint import TRAINING_CHECKPOINT

    v1 = {"format": "reconbench-batched-training/1", "targets": 2, "n": 4, "loss": "bce", "lr": 0.1,
          "weight_decay": 0, "loss_every": 10, "dtype": "torch.float64", "widths": [8, 1], "input_dims": [3, 5],
          "data_sha256": "0" * 64, "step": 20, "history": [{"step": 0, "loss": [0.7, 0.6]}], "diverged": [None, None]}
    v2 = {**v1, "format": "reconbench-batched-training/2", "loss": ["bce", "mse"], "lr": [0.1, 0.05],
          "weight_decay": [0, 1e-3]}
    one, two = TRAINING_CHECKPOINT.decode(v1, "v1"), TRAINING_CHECKPOINT.decode(v2, "v2")
    assert (one.loss, one.lr, one.weight_decay) == ("bce", 0.1, 0)
    assert (two.loss, two.lr, two.weight_decay) == (["bce", "mse"], [0.1, 0.05], [0, 1e-3])
    assert one.to_dict() == v1 and two.to_dict() == v2
    with pytest.raises(ReconbenchError, match=r"^v3 .*lr is the text .fast., expected a number or a list"):
        TRAINING_CHECKPOINT.decode({**v2, "lr": "fast"}, "v3")


# -- the door refuses what it does not read ---------------------------------------------------------------
def test_an_unknown_version_stamp_is_refused_naming_the_versions_read():
    data = {**_load(RESULTS[0]), "kind": "reconbench-result/9"}
    with pytest.raises(ReconbenchError, match=r"^r\.json: kind 'reconbench-result/9' is not a version this "
                                              r"reconbench reads \('reconbench-result/1'\); upgrade reconbench"):
        RUN_RESULT_FILE.decode(data, "r.json")


def test_a_file_that_is_not_an_object_is_a_one_line_error():
    with pytest.raises(ReconbenchError, match=r"^x\.json is not a CellRecord \(a JSON a list, expected an object\)"):
        CELL_FILE.decode([1, 2], "x.json")


Edit = Callable[[dict[str, Any]], None]


def _set(path: tuple[Any, ...], value: Any) -> Edit:
    def edit(d: dict[str, Any]) -> None:
        for k in path[:-1]:
            d = d[k]
        d[path[-1]] = value
    return edit


def _rename(path: tuple[Any, ...], new: str) -> Edit:
    def edit(d: dict[str, Any]) -> None:
        for k in path[:-1]:
            d = d[k]
        d[new] = d.pop(path[-1])
    return edit


def _published_board() -> dict[str, Any]:
    return _load(BOARDS[0])


#: (format, a file of it, an edit, the words the one-line error must hold)
CASES: list[tuple[str, FileFormat[Any], Callable[[], dict[str, Any]], Edit, list[str]]] = [
    ("result-unknown", RUN_RESULT_FILE, lambda: _load(RESULTS[0]), _set(("colour",), 1),
     ["unknown key $.colour", "remove it"]),
    ("result-misspelt", RUN_RESULT_FILE, lambda: _load(RESULTS[0]), _rename(("evaluation",), "evalution"),
     ["unknown key $.evalution", "rename it to 'evaluation'"]),
    ("result-type", RUN_RESULT_FILE, lambda: _load(RESULTS[0]), _set(("target", "n_train"), "20"),
     ["$.target.n_train is the text '20', expected an integer or null"]),
    ("cell-unknown", CELL_FILE, lambda: _load(CELLS[0]), _set(("target", "colour"), "red"),
     ["unknown key $.target.colour", "remove it"]),
    ("cell-misspelt", CELL_FILE, lambda: _load(CELLS[0]), _rename(("selections",), "selectons"),
     ["unknown key $.selectons", "rename it to 'selections'"]),
    ("cell-type", CELL_FILE, lambda: _load(CELLS[0]), _set(("seed",), "zero"),
     ["$.seed is the text 'zero', expected an integer or null"]),
    ("cell-id-type", CELL_FILE, lambda: _load(CELLS[0]), _set(("cell_id",), 42),
     ["$.cell_id is an integer, expected text"]),
    ("cell-null-misspelt", CELL_FILE, lambda: _load(CELLS[0]), _rename(("selections", "pool", "null", "spread"), "sprad"),
     ["unknown key $.selections['pool'].null.sprad", "rename it to 'spread'"]),
    ("cell-calibrated-type", CELL_FILE, lambda: _load(CELLS[0]), _set(("selections", "pool", "calibrated", "count"), "3"),
     ["$.selections['pool'].calibrated.count is the text '3', expected a number or null"]),
    ("cell-evaluation-misspelt", CELL_FILE, lambda: _load(CELLS[0]), _rename(("evaluation", "candidates", "total"), "totl"),
     ["unknown key $.evaluation.candidates.totl", "rename it to 'total'"]),
    ("result-evaluation-type", RUN_RESULT_FILE, lambda: _load(RESULTS[0]), _set(("evaluation", "candidates", "valid"), "all"),
     ["$.evaluation.candidates.valid is the text 'all', expected an integer or null"]),
    ("result-run-unknown", RUN_RESULT_FILE, lambda: _load(RESULTS[0]), _set(("runs", 0, "colour"), 1),
     ["unknown key $.runs[0].colour", "remove it"]),
    ("entry-misspelt", CELL_FILE, lambda: _load(CELLS[0]), _rename(("entry", "row_digits"), "row_digit"),
     ["unknown key $.entry.row_digit", "rename it to 'row_digits'"]),
    ("entry-type", CELL_FILE, lambda: _load(CELLS[0]), _set(("entry", "row_digits"), "6"),
     ["$.entry.row_digits is the text '6', expected an integer or null"]),
    ("board-unknown", BOARD_RESULTS_FILE, _published_board, _set(("header", "colour"), 1),
     ["unknown key $.header.colour", "remove it"]),
    ("board-misspelt", BOARD_RESULTS_FILE, _published_board, _rename(("columns",), "colums"),
     ["unknown key $.colums", "rename it to 'columns'"]),
    ("board-type", BOARD_RESULTS_FILE, _published_board, _set(("tables", "pool", 0, "cells"), "all"),
     ["$.tables['pool'][0].cells is the text 'all', expected a list"]),
    ("card-unknown", CARD_FILE, lambda: _load(CARDS[0]), _set(("metrics", "colour"), 1),
     ["unknown key $.metrics.colour", "remove it"]),
    ("card-misspelt", CARD_FILE, lambda: _load(CARDS[0]), _rename(("metrics", "train_error"), "train_eror"),
     ["unknown key $.metrics.train_eror", "rename it to 'train_error'"]),
    ("card-type", CARD_FILE, lambda: _load(CARDS[0]), _set(("metrics", "train_error"), "0"),
     ["$.metrics.train_error is the text '0', expected a number or null"]),
    ("submission-unknown", SUBMISSION_FILE, _submission, _set(("provenance", "colour"), 1),
     ["unknown key $.provenance.colour", "remove it"]),
    ("submission-misspelt", SUBMISSION_FILE, _submission, _rename(("candidates",), "candidate"),
     ["unknown key $.candidate", "rename it to 'candidates'"]),
    ("submission-type", SUBMISSION_FILE, _submission, _set(("entries",), {}),
     ["$.entries is an object, expected a list"]),
    ("invocation-unknown", INVOCATION_FILE, _invocation, _set(("colour",), 1),
     ["unknown key $.colour", "remove it"]),
    ("invocation-misspelt", INVOCATION_FILE, _invocation, _rename(("elapsed_seconds",), "elapsed_second"),
     ["unknown key $.elapsed_second", "rename it to 'elapsed_seconds'"]),
    ("invocation-type", INVOCATION_FILE, _invocation, _set(("cells_skipped",), "none"),
     ["$.cells_skipped is the text 'none', expected an integer or null"]),
]


@pytest.mark.parametrize(("fmt", "original", "edit", "words"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_hand_edited_file_is_refused_with_one_line_naming_the_file_the_field_and_the_fix(
        tmp_path, fmt, original, edit, words):
    data = original()
    fmt.decode(copy.deepcopy(data), "unedited.json")  # the file as written is read
    edit(data)
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ReconbenchError) as info:
        fmt.read(path)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{path} (a {fmt.record.__name__}): ")
    for w in words:
        assert w in message, message


def test_several_problems_are_counted_in_the_one_line():
    data = _load(CELLS[0])
    data.update(seed="zero", cell_id=1)
    with pytest.raises(ReconbenchError, match=r"\(and 1 more\)") as info:
        CELL_FILE.decode(data, "c.json")
    assert "\n" not in str(info.value)


def test_numbers_are_kept_as_written():
    """A float field holding an int keeps the int (so the file is written back byte for byte); a boolean is not a
    number."""
    rec = RunResult.from_dict({"wall_seconds": 3})
    assert rec.wall_seconds == 3 and type(rec.wall_seconds) is int and rec.to_dict() == {"wall_seconds": 3}
    with pytest.raises(ReconbenchError, match=r"\$\.wall_seconds is a boolean, expected a number or null"):
        RunResult.from_dict({"wall_seconds": True})
    with pytest.raises(ReconbenchError, match=r"\$\.seed is a number, expected an integer or null"):
        CellRecord.from_dict({"seed": 1.5})


def test_several_unknown_keys_of_one_object_are_named_together():
    with pytest.raises(ReconbenchError, match=r"unknown keys \$\.target\.a, \$\.target\.b; remove or rename them "
                                              r"\(a TargetInfo has "):
        CellRecord.from_dict({"target": {"name": "t", "a": 1, "b": 2}})


def test_a_key_with_a_line_break_stays_on_one_line():
    with pytest.raises(ReconbenchError) as info:
        CellRecord.from_dict({"a\nb": 1}, "c.json")
    assert "\n" not in str(info.value) and "$.a\\nb" in str(info.value)
