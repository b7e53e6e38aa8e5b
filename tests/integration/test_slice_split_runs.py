"""A cell's search runs split across slices: each slice runs a group of them (written, not evaluated), the runs
travel in its pack, ``--unpack`` keeps them with the ledger, the next slice (a fresh machine given only the ledger)
runs the others, and the merge that brings the last of them evaluates the cell, from its card and the data (no
weights). The cell equals one unsplit run's field by field, exactly (tolerance zero), outside timings, dates,
machine, seal and each run's ``batch`` record (which slice's computation it advanced in). Exactly because each group
is whole chunks of the cell's own batching (its ``max_batch``): every run advances beside the same runs as in the
unsplit run, through the same products, and the evaluation reads the same float64 values. (Without that, a run alone
and the same run in a batch of three get different rounding from the BLAS here, 6e-17 in the candidates, which 100
chaotic steps amplify to different numbers: docs/slices.md.)"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from _helpers.cli import run_cli
from _helpers.slicekit import deterministic
from safetensors.torch import load_file

from reconbench.bench.runner import load_cells, run_suite
from reconbench.bench.suite import load_suite
from reconbench.leaderboard.slice_origins import cell_origins, packed_cells
from reconbench.records import CellRecord
from reconbench.records.finished_ledger import FINISHED_LEDGER_FILE

ROOT = Path(__file__).resolve().parents[2]
RUNS = 3


def split_suite(tmp_path: Path, max_batch: int) -> Path:
    """benchmarks/gpu/tiny.toml with one init and three search runs (one cell), advanced ``max_batch`` at a time."""
    text = (ROOT / "benchmarks" / "gpu" / "tiny.toml").read_text()
    text = text.replace('name = "gpu-tiny"', 'name = "split-runs"').replace("search_runs = 2", f"search_runs = {RUNS}")
    text = text.replace('inits = ["gaussian", "uniform", "partition"]', 'inits = ["gaussian"]')
    text = text.replace("config = { steps = 100 }", f"config = {{ steps = 100, max_batch = {max_batch} }}")
    path = tmp_path / "split-runs.toml"
    path.write_text(text)
    return path


@pytest.fixture
def suite_file(tmp_path: Path) -> Path:
    return split_suite(tmp_path, 2)


def without_batches(rec: dict[str, Any]) -> dict[str, Any]:
    """A cell record without its runs' ``batch`` records (which runs advanced together)."""
    rec = json.loads(json.dumps(rec))
    for run in rec.get("runs", []):
        run.pop("batch", None)
    return rec


@pytest.mark.slow
@pytest.mark.parametrize(("per_slice", "extra"), [(2, []), (1, ["--cross-target"])])
def test_runs_split_over_slices_merge_into_the_cell_of_one_unsplit_run(tmp_path, capsys, per_slice, extra):
    suite_file = split_suite(tmp_path, per_slice)   # the groups are whole chunks of the cell's own batching
    suite = load_suite(str(suite_file))
    whole = tmp_path / "whole"
    run_suite(suite, whole, cache=str(tmp_path / "cache0"), quiet=True)
    (cid,) = load_cells(whole)
    local = tmp_path / "local"
    groups = [list(range(RUNS))[i:i + per_slice] for i in range(0, RUNS, per_slice)]
    for i, group in enumerate(groups, start=1):
        # a bare machine each time (its own results folder and cache), given only the ledger
        ledger = ["--finished", str(local / "finished.json")] if i > 1 else []
        code, text, err = run_cli(["bench", str(suite_file), "--device", "cpu", "--deadline", "600", "--pack",
                                   str(tmp_path / f"pack{i}"), "--out", str(tmp_path / f"device{i}"), "--cache",
                                   str(tmp_path / f"cache{i}"), "--runs-per-slice", str(per_slice), "-q",
                                   *ledger, *extra], capsys)
        assert code == 0, text + err
        assert f"slice: {cid}: started: search runs" in err and "as a group" in err
        manifest = json.loads((tmp_path / f"pack{i}" / "manifest.json").read_text())
        assert manifest["cells"] == [] and manifest["cells_remaining"] == [cid]
        assert [(g["cell_id"], g["runs"], g["search_runs"]) for g in manifest["groups"]] == [(cid, group, RUNS)]
        assert any(f["name"].startswith("runs-") for f in manifest["files"])
        assert {r["phase"] for r in manifest["measured"]} == {"setup", "attack"}   # no evaluation on the device
        # the gaussian starts stay on the device: the pack holds their sha256, the merge draws them again
        assert sorted(manifest["groups"][0]["starts"]) == [f"{k:03d}" for k in group]
        assert manifest["groups"][0]["start_dtype"] == "float64" and manifest["torch"]
        keys = [k for f in manifest["files"] if f["name"].startswith("runs-")
                for k in load_file(str(tmp_path / f"pack{i}" / f["name"]))]
        assert keys and not [k for k in keys if k.endswith("/x0")]
        code, text, err = run_cli(["bench", str(suite_file), "--unpack", str(tmp_path / f"pack{i}"), "--out",
                                   str(local)], capsys)
        assert code == 0, err
        held = sum(len(g) for g in groups[:i])
        partial = FINISHED_LEDGER_FILE.read(local / "finished.json").partial
        if held < RUNS:
            assert f"{held} of {RUNS} held" in text
            assert list(partial) == [cid] and partial[cid].runs == list(range(held))
    # the last merge gathered every run: the cell was evaluated here, from its card alone (no weights, no cache)
    assert f"all {RUNS} are here: the cell was evaluated from them and merged" in text
    assert not (local / "cache").exists() and not list(local.glob("**/weights.safetensors"))
    # the last merge's invocation lists the cell evaluated there by its seal: a board takes it at the commit its record
    # names (the merging checkout's), not as a cell run in the folder
    seal = load_cells(local)[cid]["record_sha256"]
    evaluated = [inv["slice_pack"].get("evaluated") for inv in
                 (json.loads(p.read_text()) for p in sorted((local / "invocations").glob("*.json")))]
    assert [e for e in evaluated if e] == [{cid: seal}]
    records = {cid: CellRecord.from_dict(load_cells(local)[cid])}
    (origin,) = cell_origins(records, packed_cells(records, local)).values()
    assert origin.pack is not None and origin.pack.evaluated and origin.commit == records[cid].git_commit
    # merging a pack again changes nothing
    assert run_cli(["bench", str(suite_file), "--unpack", str(tmp_path / "pack1"), "--out", str(local)], capsys)[0] == 0
    ledger = FINISHED_LEDGER_FILE.read(local / "finished.json")
    assert list(ledger.cells) == [cid] and not ledger.partial
    a, b = load_cells(whole)[cid], load_cells(local)[cid]
    assert deterministic(without_batches(b)) == deterministic(without_batches(a))
    assert [r["batch"]["runs"] for r in b["runs"]] == [g for g in groups for _ in g]
    pooled_a = load_file(str(whole / "work" / cid / "candidates.safetensors"))
    pooled_b = load_file(str(local / "work" / cid / "candidates.safetensors"))
    assert pooled_a.keys() == pooled_b.keys() and all((pooled_a[k] == pooled_b[k]).all() for k in pooled_a)


def test_a_run_held_with_other_contents_is_refused_and_nothing_is_merged(suite_file, tmp_path, capsys):
    code, text, err = run_cli(["bench", str(suite_file), "--device", "cpu", "--deadline", "600", "--pack",
                               str(tmp_path / "pack"), "--out", str(tmp_path / "device"), "--cache",
                               str(tmp_path / "cache"), "--runs-per-slice", "2", "-q"], capsys)
    assert code == 0, text + err
    local = tmp_path / "local"
    (cid,) = json.loads((tmp_path / "pack" / "manifest.json").read_text())["cells_remaining"]
    held = local / "work" / cid / "runs" / "run-001.json"
    held.parent.mkdir(parents=True)
    held.write_text("{}")
    code, text, err = run_cli(["bench", str(suite_file), "--unpack", str(tmp_path / "pack"), "--out", str(local)],
                              capsys)
    assert code != 0 and "run 1 of cell" in err + text and "Nothing was merged" in err + text
    assert not (local / "work" / cid / "runs" / "run-000.json").exists() and not (local / "finished.json").exists()


def test_runs_per_slice_needs_a_deadline(suite_file, tmp_path, capsys):
    code, text, err = run_cli(["bench", str(suite_file), "--runs-per-slice", "2", "--out", str(tmp_path / "o")],
                              capsys)
    assert code == 2 and "--runs-per-slice sets how a slice splits its cells: pass --deadline" in err


def test_runs_that_find_no_file_are_left_out_and_the_estimate_agrees(suite_file, tmp_path, capsys, monkeypatch):
    """Each run's tensors in a file of their own, one file left to runs: the first run of the group travels, the
    second is named as left out (a later slice runs it), and ``runs_that_fit`` says 1 as the executor asks it."""
    from reconbench.bench import slice_pack
    from reconbench.records.slice_manifest import RunGroup

    code, text, err = run_cli(["bench", str(suite_file), "--device", "cpu", "--deadline", "600", "--pack",
                               str(tmp_path / "pack"), "--out", str(tmp_path / "device"), "--cache",
                               str(tmp_path / "cache"), "--runs-per-slice", "2", "-q"], capsys)
    assert code == 0, text + err
    (group,) = json.loads((tmp_path / "pack" / "manifest.json").read_text())["groups"]
    cid = group["cell_id"]
    run = load_file(str(tmp_path / "device" / "work" / cid / "runs" / "run-000.safetensors"))
    sizes = [slice_pack.travel_tensor(t).numel() * slice_pack.travel_tensor(t).element_size() for t in run.values()]
    monkeypatch.setattr(slice_pack, "MAX_FILE_BYTES", sum(sizes) + 64 * 1024)   # one run a file, header room
    assert slice_pack.runs_that_fit(sizes, 1) == 1 and slice_pack.runs_that_fit(sizes, 2) == 2
    manifest = slice_pack.write_pack(tmp_path / "small", load_suite(str(suite_file)), tmp_path / "device", cells=[],
                                     remaining=[cid], invocation=0, device="cpu", dtype="float64", max_files=3,
                                     groups=[RunGroup.from_dict(group, "group")])
    assert [(g.cell_id, g.runs) for g in manifest.groups] == [(cid, [0])]
    assert [(g.cell_id, g.runs) for g in manifest.groups_left_out] == [(cid, [1])]
    assert len(manifest.files) + 1 == 3


def test_a_failed_run_travels_as_its_record_alone(suite_file, tmp_path, capsys):
    """A run that failed (the attack writes its record and no tensors) travels and merges as such."""
    from reconbench.bench import slice_pack
    from reconbench.records.slice_manifest import RunGroup

    code, text, err = run_cli(["bench", str(suite_file), "--device", "cpu", "--deadline", "600", "--pack",
                               str(tmp_path / "pack"), "--out", str(tmp_path / "device"), "--cache",
                               str(tmp_path / "cache"), "--runs-per-slice", "2", "-q"], capsys)
    assert code == 0, text + err
    (group,) = json.loads((tmp_path / "pack" / "manifest.json").read_text())["groups"]
    runs = tmp_path / "device" / "work" / group["cell_id"] / "runs"
    record = json.loads((runs / "run-001.json").read_text()) | {"stopped": "failed", "message": "diverged"}
    (runs / "run-001.json").write_text(json.dumps(record))
    (runs / "run-001.safetensors").unlink()
    suite = load_suite(str(suite_file))
    slice_pack.write_pack(tmp_path / "again", suite, tmp_path / "device", cells=[], remaining=[group["cell_id"]],
                          invocation=0, device="cpu", dtype="float64", groups=[RunGroup.from_dict(group, "group")])
    code, text, err = run_cli(["bench", str(suite_file), "--unpack", str(tmp_path / "again"), "--out",
                               str(tmp_path / "local")], capsys)
    assert code == 0, text + err
    here = tmp_path / "local" / "work" / group["cell_id"] / "runs"
    assert json.loads((here / "run-001.json").read_text())["stopped"] == "failed"
    assert not (here / "run-001.safetensors").exists() and (here / "run-000.safetensors").exists()


def slice_of(suite_file: Path, tmp_path: Path, capsys: Any, i: int, *extra: str) -> dict[str, Any]:
    """Slice ``i`` on a bare machine (its own results folder and cache), two runs a group; its manifest."""
    code, text, err = run_cli(["bench", str(suite_file), "--device", "cpu", "--deadline", "600", "--pack",
                               str(tmp_path / f"pack{i}"), "--out", str(tmp_path / f"device{i}"), "--cache",
                               str(tmp_path / f"cache{i}"), "--runs-per-slice", "2", "-q", *extra], capsys)
    assert code == 0, text + err
    return json.loads((tmp_path / f"pack{i}" / "manifest.json").read_text())


def test_a_start_whose_sha256_does_not_match_is_refused_in_one_line_and_nothing_merged_is_lost(suite_file, tmp_path,
                                                                                                capsys):
    """The second pack's recorded sha256 of run 2's start altered (as a merge whose torch draws other numbers sees
    it): its unpack is refused in one line naming the cell, the run and the fix; the runs of the first pack stay
    merged with the ledger as it was, and the pack as written merges and evaluates the cell."""
    local = tmp_path / "local"
    slice_of(suite_file, tmp_path, capsys, 1)
    assert run_cli(["bench", str(suite_file), "--unpack", str(tmp_path / "pack1"), "--out", str(local)], capsys)[0] == 0
    ledger = (local / "finished.json").read_bytes()
    manifest = slice_of(suite_file, tmp_path, capsys, 2, "--finished", str(local / "finished.json"))
    (group,) = manifest["groups"]
    cid, sha = group["cell_id"], group["starts"]["002"]
    path = tmp_path / "pack2" / "manifest.json"
    path.write_text(json.dumps({**manifest, "groups": [{**group, "starts": {"002": f"{int(sha[0], 16) ^ 1:x}" +
                                                                            sha[1:]}}]}))
    code, text, err = run_cli(["bench", str(suite_file), "--unpack", str(tmp_path / "pack2"), "--out", str(local)],
                              capsys)
    message = (err + text).strip().splitlines()
    assert code != 0 and len(message) == 1, message
    assert f"search run 2 of cell {cid}" in message[0] and "sha256 differs" in message[0]
    assert "--carry-starts" in message[0] and "torch" in message[0] and "Nothing was merged" in message[0]
    runs = local / "work" / cid / "runs"
    assert sorted(p.name for p in runs.iterdir()) == ["run-000.json", "run-000.safetensors", "run-001.json",
                                                       "run-001.safetensors"]
    assert (local / "finished.json").read_bytes() == ledger and not (local / "cells").exists()
    path.write_text(json.dumps(manifest))
    code, text, err = run_cli(["bench", str(suite_file), "--unpack", str(tmp_path / "pack2"), "--out", str(local)],
                              capsys)
    assert code == 0 and "the cell was evaluated from them and merged" in text, text + err
    assert (runs / "run-002.safetensors").exists() and list(load_cells(local)) == [cid]


@pytest.mark.parametrize(("init", "extra"), [("partition", []), ("gaussian", ["--carry-starts"])])
def test_starts_travel_where_the_merge_does_not_draw_them_again(tmp_path, capsys, init, extra):
    """An init that reads decoy images (partition) is not drawn again, nor any with ``--carry-starts``: each run
    carries its start, the group records no sha256, and the merged run holds the slice's start."""
    suite_file = split_suite(tmp_path, 2)
    suite_file.write_text(suite_file.read_text().replace('inits = ["gaussian"]', f'inits = ["{init}"]'))
    manifest = slice_of(suite_file, tmp_path, capsys, 1, *extra)
    (group,) = manifest["groups"]
    assert not group["starts"] and "torch" not in manifest
    tensors: dict[str, Any] = {}
    for f in manifest["files"]:
        if f["name"].startswith("runs-"):
            tensors.update(load_file(str(tmp_path / "pack1" / f["name"])))
    assert sorted(k for k in tensors if k.endswith("/x0")) == [f"{group['cell_id']}/{k:03d}/x0" for k in (0, 1)]
    local = tmp_path / "local"
    assert run_cli(["bench", str(suite_file), "--unpack", str(tmp_path / "pack1"), "--out", str(local)], capsys)[0] == 0
    for k in (0, 1):
        here = load_file(str(local / "work" / group["cell_id"] / "runs" / f"run-{k:03d}.safetensors"))["x0"]
        there = load_file(str(tmp_path / "device1" / "work" / group["cell_id"] / "runs" / f"run-{k:03d}.safetensors"))
        assert torch.equal(here, there["x0"])


def test_carry_starts_needs_a_pack(suite_file, tmp_path, capsys):
    code, text, err = run_cli(["bench", str(suite_file), "--carry-starts", "--deadline", "60", "--out",
                               str(tmp_path / "o")], capsys)
    assert code == 2 and "--carry-starts sets what a slice's pack carries: pass --pack DIR (or --plan) too" in err


def test_the_plan_shows_the_groups_the_slice_then_runs(suite_file, tmp_path, capsys):
    """``--plan`` with ``--runs-per-slice 2`` lays the three-run cell out as runs 0-1, then run 2, with their pack
    bytes; the slice run with the same options runs the plan's first group."""
    code, text, err = run_cli(["bench", str(suite_file), "--device", "cpu", "--plan", "--deadline", "600",
                               "--runs-per-slice", "2", "--out", str(tmp_path / "o")], capsys)
    assert code == 0, text + err
    lines = [line for line in text.splitlines() if "runs in groups" in line]
    assert len(lines) == 2 and "runs 0-1 of 3" in lines[0] and "runs 2 of 3" in lines[1]
    # 8 x 8 candidates (m = 20) in float64: candidates 20 x 64 x 8 bytes, labels and multipliers 20 x 8 each; the
    # gaussian starts stay (drawn again at the merge)
    assert f"({2 * (20 * 64 * 8 + 2 * 20 * 8) / 1e3:.1f} kB" in lines[0]
    assert f"({(20 * 64 * 8 + 2 * 20 * 8) / 1e3:.1f} kB" in lines[1]
    assert "1 cell(s) in 2 slice(s) (1 of them in groups of their search runs" in text
    manifest = slice_of(suite_file, tmp_path, capsys, 1)
    assert [g["runs"] for g in manifest["groups"]] == [[0, 1]]


def test_speed_needs_a_plan(suite_file, tmp_path, capsys):
    code, text, err = run_cli(["bench", str(suite_file), "--speed", "2", "--deadline", "60", "--out",
                               str(tmp_path / "o")], capsys)
    assert code == 2 and "--speed prices a what-if plan: pass --plan too" in err
