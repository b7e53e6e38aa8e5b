"""Groups of runs of several cells on one target, advanced in one cross-target computation of a slice: two cells of
one `digits` target (gaussian and uniform starts), four search runs each, run two by two over two slices with
``--cross-target``; each slice's groups of both cells join one computation, travel, and the merges evaluate both
cells. Each merged cell equals one unsplit run of the suite (no slices, each cell on its own) field by field, exactly
(tolerance zero), outside timings, dates, machine, seal and the runs' ``batch`` records: the suite's ``max_batch``
is the group size, so each run advanced beside the runs it has in the unsplit run (the chunk rule,
docs/slices.md), and a chunk whose runs read one target takes that target's own products."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from _helpers.cli import run_cli
from _helpers.slicekit import deterministic
from safetensors.torch import load_file

from reconbench.bench.runner import load_cells, run_suite
from reconbench.bench.suite import load_suite

ROOT = Path(__file__).resolve().parents[2]
RUNS, GROUP = 4, 2


def pooled_suite(tmp_path: Path, max_batch: int | None, runs: int = RUNS) -> Path:
    """benchmarks/gpu/tiny.toml with two inits on its one target (two cells) and ``runs`` search runs each."""
    text = (ROOT / "benchmarks" / "gpu" / "tiny.toml").read_text()
    text = text.replace('name = "gpu-tiny"', 'name = "pooled-groups"').replace("search_runs = 2",
                                                                              f"search_runs = {runs}")
    text = text.replace('inits = ["gaussian", "uniform", "partition"]', 'inits = ["gaussian", "uniform"]')
    batch = f", max_batch = {max_batch}" if max_batch else ""
    text = text.replace("config = { steps = 100 }", f"config = {{ steps = 100{batch} }}")
    path = tmp_path / "pooled-groups.toml"
    path.write_text(text)
    return path


def without_batches(rec: dict[str, Any]) -> dict[str, Any]:
    rec = json.loads(json.dumps(rec))
    for run in rec.get("runs", []):
        run.pop("batch", None)
    return rec


def slices(suite_file: Path, tmp_path: Path, capsys: Any, runs: int = RUNS) -> tuple[Path, list[dict[str, Any]]]:
    """The suite in slices of two runs per cell, cross-target, each on a bare machine given the ledger, each pack
    merged; the results folder and the manifests."""
    local = tmp_path / "local"
    manifests = []
    for i in range(1, -(-runs // GROUP) + 1):
        ledger = ["--finished", str(local / "finished.json")] if i > 1 else []
        code, text, err = run_cli(["bench", str(suite_file), "--device", "cpu", "--deadline", "600", "--pack",
                                   str(tmp_path / f"pack{i}"), "--out", str(tmp_path / f"device{i}"), "--cache",
                                   str(tmp_path / f"cache{i}"), "--runs-per-slice", str(GROUP), "--cross-target",
                                   "-q", *ledger], capsys)
        assert code == 0, text + err
        assert "with the cells that run together" in err
        manifests.append(json.loads((tmp_path / f"pack{i}" / "manifest.json").read_text()))
        code, text, err = run_cli(["bench", str(suite_file), "--unpack", str(tmp_path / f"pack{i}"), "--out",
                                   str(local)], capsys)
        assert code == 0, text + err
    return local, manifests


@pytest.mark.slow
@pytest.mark.parametrize("runs", [RUNS, 3])
def test_groups_of_cells_of_one_target_pooled_equal_the_unsplit_cells_exactly(tmp_path, capsys, runs):
    """Also with three runs a cell: the last group of each is one run, which advances alone as in its cell's own
    batch (each cell's runs chunked on their own), not beside the other cell's last run."""
    suite_file = pooled_suite(tmp_path, GROUP, runs)
    whole = tmp_path / "whole"
    run_suite(load_suite(str(suite_file)), whole, cache=str(tmp_path / "cache0"), quiet=True)
    cells = sorted(load_cells(whole))
    assert len(cells) == 2
    local, manifests = slices(suite_file, tmp_path, capsys, runs)
    for i, manifest in enumerate(manifests):
        assert sorted((g["cell_id"], tuple(g["runs"])) for g in manifest["groups"]) == [
            (c, tuple(range(i * GROUP, min((i + 1) * GROUP, runs)))) for c in cells]
    merged = load_cells(local)
    assert sorted(merged) == cells
    for cid in cells:
        a, b = load_cells(whole)[cid], merged[cid]
        assert deterministic(without_batches(b)) == deterministic(without_batches(a))
        # every run advanced in the slice's joint computation of both cells, in its own cell's chunk
        assert [r["batch"]["cross_target"]["runs"] for r in b["runs"]] == [
            min(GROUP, runs - k // GROUP * GROUP) for k in range(runs)]
        pooled_a = load_file(str(whole / "work" / cid / "candidates.safetensors"))
        pooled_b = load_file(str(local / "work" / cid / "candidates.safetensors"))
        assert pooled_a.keys() == pooled_b.keys() and all((pooled_a[k] == pooled_b[k]).all() for k in pooled_a)


@pytest.mark.slow
def test_without_max_batch_the_groups_of_one_target_advance_in_one_chunk(tmp_path, capsys):
    """The paper suite's case (no ``max_batch``): both cells' groups share one batched chunk, four runs on one target,
    and each merged cell holds all its runs with the records an unsplit run writes."""
    suite_file = pooled_suite(tmp_path, None)
    local, manifests = slices(suite_file, tmp_path, capsys)
    merged = load_cells(local)
    assert len(merged) == 2 and all(rec["status"] == "ok" for rec in merged.values())
    for rec in merged.values():
        assert [r["run"] for r in rec["runs"]] == list(range(RUNS))
        assert all(r["batch"]["cross_target"] == {"runs": 2 * GROUP, "targets": 1, "cells": sorted(merged)}
                   for r in rec["runs"])


def test_the_plan_prices_the_pooled_groups_the_slice_then_runs(tmp_path, capsys):
    """``--plan --cross-target`` prices the two cells' first groups as one computation (its fixed seconds once) and
    lists them; the slice run with the same options runs those groups together, and prints that plan first."""
    suite_file = pooled_suite(tmp_path, GROUP)
    options = ["--device", "cpu", "--deadline", "600", "--runs-per-slice", str(GROUP), "--cross-target"]
    code, text, err = run_cli(["bench", str(suite_file), "--plan", *options, "--out", str(tmp_path / "o")], capsys)
    assert code == 0, text + err
    pooled = [line for line in text.splitlines() if "in one batched computation" in line]
    assert pooled and pooled[0].startswith("  slice 1 advances 4 ") and "search runs of 2 cells" in pooled[0]
    groups = [line for line in text.splitlines() if line.startswith("  slice 1 runs in groups")]
    assert len(groups) == 1 and groups[0].count("runs 0-1 of 4") == 2
    code, text, err = run_cli(["bench", str(suite_file), *options, "--pack", str(tmp_path / "pack"), "--out",
                               str(tmp_path / "device"), "--cache", str(tmp_path / "cache")], capsys)
    assert code == 0, text + err
    assert pooled[0] in text   # the plan the slice starts from
    manifest = json.loads((tmp_path / "pack" / "manifest.json").read_text())
    assert sorted(tuple(g["runs"]) for g in manifest["groups"]) == [(0, 1), (0, 1)]
    estimates = manifest["costs"]["estimates"]
    charged = {cid: sec for cid, _, _, sec in
               (part.rsplit(" ", 3) for part in pooled[0].split("charged: ")[1].split("; "))}
    assert len(charged) == 2 and {cid: f"{estimates[cid]:.0f}s" for cid in charged} == charged
