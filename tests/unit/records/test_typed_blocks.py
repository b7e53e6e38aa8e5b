"""The blocks that readers used to pick from dicts are read as records: what a writer stores decodes, and a
hand-edited block with an unknown key or a wrong type is refused in one line naming the file, the field and the
fix (open records keep the keys they do not name)."""

from __future__ import annotations

import json

import pytest

from reconbench.claims import records as claims_records
from reconbench.errors import ReconbenchError
from reconbench.leaderboard.manifest import manifest_text, read_manifest
from reconbench.records import CellRecord, SearchRun
from reconbench.records.board_manifest import BOARD_MANIFEST_FILE
from reconbench.records.claims_data import ClaimsData
from reconbench.records.parameter_ratio import ParameterRatio
from reconbench.records.recorded_protocol import RecordedProtocol
from reconbench.records.rendered_with import RenderedWith
from reconbench.runs.seconds import attack_seconds


def _refused(read, match: str) -> str:
    with pytest.raises(ReconbenchError, match=match) as err:
        read()
    line = str(err.value)
    assert "\n" not in line
    return line


def test_strict_blocks_refuse_an_unknown_key_and_a_wrong_type():
    _refused(lambda: RenderedWith.from_dict({"git_comit": "abc"}, "results.json"), "rename it to 'git_commit'")
    _refused(lambda: ParameterRatio.from_dict({"p": 1, "d": 2, "n": 3, "ratio": "big"}, "cell.json"),
             r"\$\.ratio is the text 'big'")
    _refused(lambda: ClaimsData.from_dict({"suites": {"claims-a": {"costs": "1 min"}}}, "claims.toml"),
             r"claims\.toml.*rename it to 'cost'")


def test_open_blocks_keep_the_keys_they_do_not_name_and_write_them_back():
    protocol = {"distance": "ncc", "calibration": {"score": "corr", "calibration_draws": 19, "rule": "r"},
                "metrics": {"ssim": {"description": "d", "config": {"window": 7}}}}
    rec = RecordedProtocol.from_dict(protocol, "result.json")
    assert rec.calibrated.score == "corr" and rec.calibrated.calibration_draws == 19
    assert rec.metric_configs() == {"ssim": {"window": 7}}
    assert rec.to_dict() == protocol
    _refused(lambda: RecordedProtocol.from_dict({"calibration": {"calibration_draws": "19"}}, "result.json"),
             r"\$\.calibration\.calibration_draws is the text")


def test_a_cells_provenance_and_spec_read_by_name():
    cell = CellRecord.from_dict({"cell_id": "c", "spec": {"dtype": "float32", "seed": 3, "future_option": 1},
                                 "provenance": {"git_commit": "abc", "device": "cuda:0", "host": "h",
                                                "precision": {"attack_matmul": "tf32",
                                                              "loss_accumulation_dtype": "float32"}}})
    assert cell.dtype == "float32" and cell.recorded_spec.seed == 3
    assert cell.ran.device == "cuda:0" and cell.ran.policy is not None and cell.ran.policy.attack_matmul == "tf32"
    assert cell.git_commit == "abc"
    bad = CellRecord.from_dict({"cell_id": "c", "provenance": {"device": 0}})
    _refused(lambda: bad.ran, r"cell c, its provenance.*\$\.device is an integer")


def test_a_batch_of_runs_counts_once_from_records_and_from_dicts():
    runs = [{"run": 0, "seconds": 4.0, "batch": {"runs": [0, 1], "cuda_graph": True}},
            {"run": 1, "seconds": 5.0, "batch": {"runs": [0, 1]}}, {"run": 2, "seconds": 2.5}]
    assert attack_seconds(runs) == attack_seconds([SearchRun.from_dict(r) for r in runs]) == 7.5
    assert SearchRun.from_dict(runs[0]).to_dict() == runs[0]   # the batch's other keys written back
    _refused(lambda: attack_seconds([{"run": 0, "seconds": 1.0, "batch": {"runs": "0,1"}}]), r"\$\.batch\.runs")


def test_a_manifest_is_read_through_its_door(tmp_path):
    (tmp_path / "MANIFEST.json").write_text(manifest_text({}))
    assert read_manifest(tmp_path) == {}
    entry = {"format": "reconbench-board-manifest/1", "files": {"README.md": {"sha256": "0" * 64, "byte": 3}}}
    (tmp_path / "MANIFEST.json").write_text(json.dumps(entry))
    _refused(lambda: read_manifest(tmp_path), r"MANIFEST\.json.*files\['README\.md'\]\.byte; rename it to 'bytes'")
    _refused(lambda: BOARD_MANIFEST_FILE.decode({"format": "reconbench-board-manifest/0"}, "MANIFEST.json"),
             "not a version this reconbench reads")


def test_the_claims_file_papers_are_read_strictly(tmp_path):
    path = tmp_path / "claims.toml"
    path.write_text('[papers.p]\ntitle = "T"\nshort = "S"\n\n[[claims]]\nid = "x"\n')
    _refused(lambda: claims_records.load(path), r"\[papers\.p\]: missing text")
    path.write_text('[papers.p]\ntitle = "T"\nshort = "S"\ntext = 3\n')
    _refused(lambda: claims_records.load(path), r"\$\.papers\['p'\]\.text is an integer")
