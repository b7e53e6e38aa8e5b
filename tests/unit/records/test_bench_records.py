"""The records the bench side reads its files through: a board's stored protocols (``protocols/<ref>.json``), a
cell's status, a machine description and a slim search run. Every published file decodes strictly and writes back
unchanged; a hand-edited one (an unknown key, a wrong type) is refused with one line naming the file and the field."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from reconbench.bench import machine
from reconbench.bench.entries import expand, is_entry
from reconbench.bench.runner import is_finished, protocol_reader
from reconbench.errors import ReconbenchError
from reconbench.records.board_protocol import BoardProtocol, SlimRun
from reconbench.records.cell_status import CellStatus
from reconbench.records.machine import MachineInfo
from reconbench.records.recorded_protocol import RecordedProtocol

ROOT = Path(__file__).resolve().parents[3]
PROTOCOLS = sorted(ROOT.glob("leaderboards/*/protocols/*.json"))
CELLS = sorted(ROOT.glob("leaderboards/*/cells/*.json"))


def _load(path: Path) -> Any:
    return json.loads(path.read_text())


def _one_line_naming(exc: pytest.ExceptionInfo[ReconbenchError], *words: str) -> None:
    msg = str(exc.value)
    assert "\n" not in msg
    for w in words:
        assert w in msg, (w, msg)


def test_every_published_board_protocol_decodes_strictly_and_writes_back_unchanged():
    assert len(PROTOCOLS) > 5
    for path in PROTOCOLS:
        data = _load(path)
        rec = BoardProtocol.from_dict(data, path)
        assert rec.to_dict() == data and list(rec.to_dict()) == list(data)
        described = RecordedProtocol.from_dict(rec.protocol or {}, path)
        assert described.to_dict() == data["protocol"]


def test_a_board_protocol_with_an_unknown_key_or_a_wrong_type_is_refused_in_one_line():
    data = _load(PROTOCOLS[0])
    with pytest.raises(ReconbenchError) as exc:
        BoardProtocol.from_dict({**data, "metrix": {}}, "protocols/x.json")
    _one_line_naming(exc, "protocols/x.json", "metrix", "metrics")
    bad = copy.deepcopy(data)
    bad["protocol"]["top_k"] = "ten"
    with pytest.raises(ReconbenchError) as exc:
        RecordedProtocol.from_dict(bad["protocol"], "protocols/x.json")
    _one_line_naming(exc, "protocols/x.json", "top_k")


def test_expanding_an_entry_whose_stored_protocol_was_edited_by_hand_is_a_one_line_error(tmp_path: Path):
    cell = next(p for p in CELLS if is_entry(_load(p)) and "protocol_ref" in _load(p).get("evaluation", {}))
    entry = _load(cell)
    ref = entry["evaluation"]["protocol_ref"]
    stored = _load(cell.parent.parent / "protocols" / f"{ref}.json")
    (tmp_path / "protocols").mkdir()
    (tmp_path / "protocols" / f"{ref}.json").write_text(json.dumps({**stored, "extra": 1}))
    with pytest.raises(ReconbenchError) as exc:
        expand(entry, None, protocol_reader(tmp_path))
    _one_line_naming(exc, ref, "extra")


def test_cell_status_reads_key_and_status_and_refuses_a_wrong_type():
    rec = {"format": "reconbench-bench-cell/1", "cell_key": "k", "status": "ok", "anything": [1]}
    assert is_finished(rec, "k", retry_failed=False)
    assert not is_finished(rec, "other", retry_failed=False)
    assert not is_finished({**rec, "status": "failed"}, "k", retry_failed=True)
    assert is_finished({**rec, "status": "failed"}, "k", retry_failed=False)
    assert not is_finished({**rec, "status": "unavailable"}, "k", retry_failed=False)
    assert CellStatus.from_dict(rec).to_dict() == rec
    with pytest.raises(ReconbenchError) as exc:
        is_finished({**rec, "status": 3}, "k", retry_failed=False)
    _one_line_naming(exc, "cell record", "status")


def test_machine_line_reads_the_record_and_refuses_a_misspelt_key():
    m = {"cpu_model": "X", "cores": 2, "memory_gib": 7.6, "gpu": None, "torch_threads": 1}
    assert machine.one_line(m) == "2 cores (X), 8 GiB RAM, torch threads 1"
    assert MachineInfo.from_dict(m).to_dict() == m
    with pytest.raises(ReconbenchError) as exc:
        machine.one_line({**m, "coers": 2})
    _one_line_naming(exc, "machine record", "coers", "cores")
    described = machine.describe()
    assert MachineInfo.from_dict(described).to_dict() == described   # what the runner writes decodes


def test_a_slim_run_reads_its_reference_and_refuses_a_wrong_type():
    run = {"run": 1, "config": {"lr": 0.1}, "config_from": 0, "init_overrides": "init_config", "init_config": {}}
    rec = SlimRun.from_dict(run)
    assert (rec.config_from, rec.init_overrides) == (0, "init_config") and rec.to_dict() == run
    with pytest.raises(ReconbenchError) as exc:
        SlimRun.from_dict({**run, "config_from": "first"}, "cells/c.json")
    _one_line_naming(exc, "cells/c.json", "config_from")
