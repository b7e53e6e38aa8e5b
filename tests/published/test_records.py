"""The typed records read every file the project has published, and write each back unchanged."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from reconbench.bench.runner import read_cell
from reconbench.errors import ReconbenchError
from reconbench.leaderboard.results_file import read_results
from reconbench.records import BoardResults, CardData, CellRecord, Digest, RunResult, Selection, number

ROOT = Path(__file__).resolve().parents[2]
CELLS = sorted(ROOT.glob("leaderboards/*/cells/*.json"))
RESULTS = sorted(ROOT.glob("benchmarks/results/**/result.json"))
BOARDS = sorted(ROOT.glob("leaderboards/*/results.json"))
CARDS = sorted(ROOT.glob("leaderboards/*/targets/*.json"))


def _same(a, b) -> bool:
    """Equal JSON values, NaN equal to NaN (a stored NaN is a value like any other)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    return type(a) is type(b) and a == b


def test_there_are_published_files_to_read():
    assert len(CELLS) > 100 and len(RESULTS) > 10 and len(BOARDS) >= 6


@pytest.mark.parametrize("path", CELLS, ids=lambda p: f"{p.parent.parent.name}/{p.stem}")
def test_every_published_cell_reads_and_writes_back_unchanged(path):
    stored = json.loads(path.read_text())
    rec = CellRecord.from_dict(stored)
    assert _same(rec.to_dict(), stored)  # every key, in its order, with its value
    assert rec.cell_id == path.stem and rec.status == stored["status"]
    expanded = read_cell(path)  # the slim entry in the full record's shape, as the readers see it
    full = CellRecord.from_dict(expanded)
    assert _same(full.to_dict(), expanded)
    for name, sel in expanded.get("selections", {}).items():
        typed = full.selection(name)
        assert isinstance(typed, Selection)
        for key, value in (sel.get("summary") or {}).items():
            if isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isnan(value):
                assert typed.value(key) == float(value)


@pytest.mark.parametrize("path", RESULTS, ids=lambda p: str(p.parent.relative_to(ROOT / "benchmarks/results")))
def test_every_committed_run_result_reads_and_writes_back_unchanged(path):
    stored = json.loads(path.read_text())
    res = RunResult.from_dict(stored)
    assert _same(res.to_dict(), stored)
    assert res.kind == stored["kind"] and res.target.n_train == stored["target"]["n_train"]
    for name in ("blind", "oracle"):
        assert res.selected_run(name) == stored["selection"][name]["run"]


@pytest.mark.parametrize("path", BOARDS, ids=lambda p: p.parent.name)
def test_every_board_results_file_reads_and_writes_back_unchanged(path):
    assert _same(BoardResults.from_dict(json.loads(path.read_text())).to_dict(), json.loads(path.read_text()))
    stored = read_results(path.parent)  # the full form: a compact file's statistics expanded
    board = BoardResults.from_dict(stored)
    assert _same(board.to_dict(), stored)
    assert [c.name for c in board.column_list] == [c["name"] for c in stored["columns"]]
    for sel, rows in stored["tables"].items():
        for typed, raw in zip(board.table(sel), rows, strict=True):
            assert typed.cells == raw["cells"]
            for name, m in raw["metrics"].items():
                assert typed.metric(name).mean == m["mean"]


@pytest.mark.parametrize("path", CARDS, ids=lambda p: f"{p.parent.parent.name}/{p.stem[:12]}")
def test_every_published_model_card_reads_and_writes_back_unchanged(path):
    stored = json.loads(path.read_text())
    card = CardData.from_dict(stored)
    assert _same(card.to_dict(), stored)
    assert card.recipe_key == stored["recipe_key"] and card.content_sha256 == stored["content_sha256"]
    assert card.metrics.train_error == stored["metrics"]["train_error"]
    test = stored["problem"]["indices"]["test"]
    if "board_card" in stored:  # the compact form a board keeps: the test indices as a count and a digest
        assert card.is_board_card and card.history is None and card.board_card is not None
        assert isinstance(card.test_indices, Digest)
        assert (card.test_indices.count, card.test_indices.sha256) == (test["count"], test["sha256"])
    else:
        assert not card.is_board_card and card.test_indices == test


def test_a_card_as_train_writes_it_and_its_board_form_read_alike():
    from reconbench.leaderboard.board_cards import board_card, indices_sha256

    full = {"recipe_key": "k", "problem": {"spec": {}, "indices": {"train": [1, 2], "test": [5, 3, 9]}},
            "metrics": {"train_error": 0.0}, "history": [{"step": 1}], "content_sha256": "c"}
    card, slim = CardData.from_dict(full), CardData.from_dict(board_card(full))
    assert card.test_indices == [5, 3, 9] and not card.is_board_card and card.history == [{"step": 1}]
    assert slim.is_board_card and slim.history is None and slim.board_card is not None
    assert slim.board_card.history is not None and slim.board_card.history.points == 1
    assert slim.test_indices == Digest(count=3, sha256=indices_sha256([5, 3, 9]))
    assert (slim.recipe_key, slim.metrics, slim.content_sha256) == (card.recipe_key, card.metrics, card.content_sha256)


def test_absent_fields_read_as_their_defaults_and_stay_absent():
    rec = CellRecord.from_dict({"cell_id": "a", "selections": {"pool": {"summary": {"x": 3, "y": "unavailable"}}}})
    assert rec.target.name == "" and rec.selection("blind").summary == {} and rec.dtype is None
    assert rec.selection("pool").value("x") == 3.0 and rec.selection("pool").value("y") is None
    assert rec.to_dict() == {"cell_id": "a", "selections": {"pool": {"summary": {"x": 3, "y": "unavailable"}}}}


def test_a_field_set_after_reading_is_written():
    rec = CellRecord.from_dict({"cell_id": "a"})
    assert dataclasses.replace(rec, status="ok").to_dict() == {"cell_id": "a", "status": "ok"}
    assert rec.to_dict() == {"cell_id": "a"}


def test_a_record_built_in_code_writes_every_field_in_declared_order():
    written = CellRecord(cell_id="a", status="ok").to_dict()
    declared = [f.name for f in dataclasses.fields(CellRecord) if f.name not in ("extra", "key_order")]
    assert list(written) == declared and written["seed"] is None and written["groups"] == []
    assert CellRecord.from_dict(written) == CellRecord(cell_id="a", status="ok")


def test_a_written_record_writes_exactly_the_fields_given_in_their_order():
    rec = CellRecord.written(status=None, cell_id="a")
    assert list(rec.to_dict().items()) == [("status", None), ("cell_id", "a")]
    assert CellRecord.from_dict(rec.to_dict()).to_dict() == rec.to_dict()
    with pytest.raises(TypeError, match="cel_id"):
        CellRecord.written(cel_id="a")


def test_a_record_that_is_not_an_object_is_a_one_line_error():
    with pytest.raises(ReconbenchError, match=r"a CellRecord: \$ is a list, expected an object \(a CellRecord\)"):
        CellRecord.from_dict([1, 2])


@pytest.mark.parametrize(("raw", "want"), [(3, 3.0), (True, 1.0), ({"value": 0.5}, 0.5), (math.nan, None),
                                           ("unavailable", None), (None, None)])
def test_number_reads_what_cells_store(raw, want):
    assert number(raw) == want


def test_each_top_level_record_names_the_format_its_writer_stamps():
    from reconbench.bench.cells import CELL_FORMAT
    from reconbench.bench.entries import ENTRY_SCHEMA
    from reconbench.leaderboard.results_file import COMPACT_FORMAT
    from reconbench.leaderboard.submit import SUBMISSION_FORMAT
    from reconbench.records import EntryInfo, SubmissionFile

    assert (CellRecord.SCHEMA, EntryInfo.SCHEMA, BoardResults.SCHEMA, SubmissionFile.SCHEMA) == (
        CELL_FORMAT, ENTRY_SCHEMA, COMPACT_FORMAT, SUBMISSION_FORMAT)
    assert {json.loads(p.read_text())["kind"] for p in RESULTS} == {RunResult.SCHEMA}
    assert {json.loads(p.read_text())["format"] for p in BOARDS} == {BoardResults.SCHEMA}


CARDS = sorted(ROOT.glob("leaderboards/*/targets/*.json"))


def test_a_cards_recipe_is_the_class_targets_are_trained_from_and_keeps_its_key():
    """A record holds the trainer's own TargetRecipe (no look-alike): its key is the recipe key the card was trained
    under, and it writes back the recipe as the card stores it."""
    from reconbench.records import CARD_FILE, TargetRecipe
    from reconbench.targets import recipe

    assert TargetRecipe is recipe.TargetRecipe
    assert CARDS
    for path in CARDS:
        card = CARD_FILE.read(path)
        assert isinstance(card.recipe, recipe.TargetRecipe), path
        assert card.recipe.key() == card.recipe_key, path
        assert card.recipe.to_dict() == json.loads(path.read_text())["recipe"], path


#: classes of the package that share a record's name, each with what it is (a new one fails)
KNOWN_NAMESAKES = {"PrivacyTable": "leaderboard/site/board.py: the site's view of a privacy table"}


def test_no_record_class_shares_its_name_with_another_class_of_the_package():
    import ast
    import importlib
    import pkgutil

    import reconbench.records as records
    from reconbench.records.record import Record

    defined: dict[str, list[str]] = {}
    for path in sorted((ROOT / "reconbench").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                defined.setdefault(node.name, []).append(str(path.relative_to(ROOT)))
    # every record class of every module of reconbench/records, re-exported by the package or not
    names = {name for name in records.__all__ if isinstance(getattr(records, name), type)}
    for info in pkgutil.iter_modules(records.__path__):
        module = importlib.import_module(f"reconbench.records.{info.name}")
        names |= {name for name, obj in vars(module).items() if isinstance(obj, type) and issubclass(obj, Record)
                  and obj.__module__ == module.__name__}
    twins = {name: where for name in names if len(where := defined.get(name, [])) > 1}
    assert set(twins) == set(KNOWN_NAMESAKES), twins
