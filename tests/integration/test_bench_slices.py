"""Slices: cells that fit a deadline, packed into a few files, merged on another machine, resumed from there.

The end-to-end checks run a tiny suite on the embedded `digits` (``benchmarks/gpu/tiny.toml``, ``--device cpu``) and
compare against one uninterrupted run of the same suite; the planning checks size the paper's suite from its
recipes alone (no data, nothing trained) and recompute each slice's cost from the cost table's closed form.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from _helpers.cli import run_cli
from _helpers.slicekit import deterministic, digits_sizes, paper_works

from reconbench.bench import slice_pack
from reconbench.bench.cells import expand, select
from reconbench.bench.runner import load_cells, run_suite
from reconbench.bench.slice_costs import (
    SAFETY_FACTOR,
    SAFETY_SECONDS,
    CellWork,
    CostModel,
    cell_work,
    plan_slices,
    read_costs,
)
from reconbench.bench.slice_executor import DeadlineExecutor
from reconbench.bench.slice_pack import PackError, unpack, verify_pack, write_pack
from reconbench.bench.suite import load_suite
from reconbench.cli.bench_slices import SlicePacker
from reconbench.errors import ReconbenchError
from reconbench.records.slice_manifest import SliceManifest

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "benchmarks" / "gpu" / "tiny.toml"
def cheap_table(seconds: float = 1.0) -> dict[str, dict[str, float]]:
    return {p: {"fixed": seconds, "rate": 0.0} for p in ("train", "attack", "evaluate")}


class StepClock:
    """A clock that reads 0 until ``jump()``, then ``after`` (the executor's only view of time)."""

    def __init__(self, after: float) -> None:
        self.now, self.after = 0.0, after

    def __call__(self) -> float:
        return self.now

    def jump(self) -> None:
        self.now = self.after


#: digits: 8x8 images; the tiny suite's MLP 64-32-32-1 on 10 images
tiny_sizes = digits_sizes


def first_slice(tmp_path: Path, cells: int) -> tuple[Path, SliceManifest, DeadlineExecutor]:
    """A slice on its own machine (results folder and target cache of its own) that runs ``cells`` cells: the clock
    jumps past the deadline once they ran. The pack is rewritten after each cell, as the command does; a copy of it
    after cell k is kept in ``snapshot-k``. Returns the pack folder, its final manifest and the executor."""
    suite = load_suite(str(TINY))
    clock = StepClock(after=1e6)
    # a deadline far above any measured cell (the cost model learns from real seconds, which a loaded machine
    # stretches), far below the clock's jump
    ex = DeadlineExecutor(1e5, CostModel.for_device("cpu", cheap_table()), tiny_sizes(suite), start=0.0, clock=clock)
    device_out = tmp_path / "device1"
    pack = tmp_path / "pack1"
    packer = SlicePacker(pack, suite, device_out, ex, "cpu", None, 0.0, {})

    def each(rec: dict[str, Any]) -> None:
        packer.cell(rec)
        shutil.copytree(pack, tmp_path / f"snapshot-{len(packer.ran)}")
        if len(packer.ran) == cells:
            clock.jump()

    report = run_suite(suite, device_out, cache=str(tmp_path / "cache1"), quiet=True, executor=ex, on_cell=each)
    return pack, packer.write(report.ran, complete=True), ex


def pack_file(pack: Path, stem: str) -> Path:
    """The pack's file named ``<stem>-<sha>...`` (its manifest names it)."""
    manifest = json.loads((pack / "manifest.json").read_text())
    return pack / next(f["name"] for f in manifest["files"] if f["name"].startswith(stem + "-"))


# -- planning, from a cost table alone ---------------------------------------------------------------------------
def test_cost_model_uses_the_prior_until_measured_then_scales_the_measurement():
    table = {"train": {"fixed": 3.0, "rate": 0.5}, "attack": {"fixed": 1.0, "rate": 2.0},
             "evaluate": {"fixed": 0.0, "rate": 0.0}}
    model = CostModel.for_device("cpu", table)
    w = CellWork("c", "t", train=10.0, attack=4.0, evaluate=0.0)
    assert model.estimate(w, trains=True) == pytest.approx(SAFETY_FACTOR * ((3 + 5) + (1 + 8)) + SAFETY_SECONDS)
    assert model.estimate(w, trains=False) == pytest.approx(SAFETY_FACTOR * 9 + SAFETY_SECONDS)
    rec = {"status": "ok", "wall_seconds": 20.0, "attack_seconds": 6.0, "target": {"load_or_train_seconds": 10.0}}
    model.observe(w, True, rec)
    assert model.phase_seconds("attack", 2.0) == 6.0            # a smaller cell: what the measured one took
    assert model.phase_seconds("attack", 8.0) == 12.0           # a larger one: proportionally more
    assert model.phase_seconds("train", 10.0) == 10.0
    assert model.phase_seconds("evaluate", 0.0) == 0.0         # no work: no time
    failed = CostModel.for_device("cpu", table)
    failed.observe(w, True, {"status": "failed", "wall_seconds": 0.0})
    assert failed.measured == {}                                # a failed cell measures nothing


def test_cost_table_file_is_checked(tmp_path):
    path = tmp_path / "costs.json"
    path.write_text(json.dumps({**cheap_table(), "device": "NVIDIA H100"}))
    table = read_costs(path)
    assert (table.attack.fixed, table.attack.rate) == (1.0, 0.0) and table.about == {"device": "NVIDIA H100"}
    path.write_text(json.dumps({**cheap_table(), "train": {"fixed": 1, "rate": -1}}))
    with pytest.raises(ReconbenchError, match=r"\$\.train: a phase cost needs finite non-negative"):
        read_costs(path)
    path.write_text(json.dumps({"train": {"fixed": 1, "rate": 0}}))
    with pytest.raises(ReconbenchError, match=r"no 'attack', 'evaluate' phase; every phase is required"):
        read_costs(path)
    with pytest.raises(ReconbenchError, match="is missing"):
        read_costs(tmp_path / "none.json")


def test_paper_suite_loads_and_its_work_is_the_papers_arithmetic():
    suite, works, sizes = paper_works()
    haim = next(w for w in works if w.cell_id == "cifar-binary--haim_binary_kkt--gaussian--s0")
    p = sizes[haim.target_key].parameters
    assert p is not None and 3072 * 1000 + 1000 * 1000 + 1000 <= p <= 3072 * 1001 + 1000 * 1001 + 1001
    assert haim.train == 10**6 * 500 * p                 # 10^6 full-batch steps over n = 500
    assert haim.attack == 16 * 50_000 * 1000 * p         # 16 runs x 50,000 steps x m = 2n = 1000
    assert haim.evaluate == 16 * 1000 * 500 * 3072     # the pooled 16 x 1000 candidates against n = 500 images
    assert len(works) == len(expand(suite)) == len({w.cell_id for w in works})


def test_paper_suite_without_checkpointed_training_fits_no_slice_on_the_cuda_prior():
    """10^6 steps of a 4-million-parameter MLP over 500 images is about 2e15 units, an hour at the prior's rate:
    no slice of 9 minutes can train a paper target, so no cell is planned and each says what it would take."""
    _, works, _ = paper_works()
    plan = plan_slices(works, CostModel.for_device("cuda"), 540.0)
    assert plan.slices == [] and set(plan.unfit) == {w.cell_id for w in works}
    assert min(plan.unfit.values()) > 540.0


def test_paper_kkt_cells_are_planned_into_slices_that_each_fit():
    """A probe-like table: a paper target trains in T seconds, one KKT cell's 16 runs take A seconds. Each slice
    re-trains its target (a bare machine), so a slice of one target holds k cells with
    est(first) + (k - 1) est(next) <= budget; the slice count follows, computed here from that closed form."""
    suite, works, sizes = paper_works()
    ids = [c.cell_id for c in select(expand(suite), ["cifar-binary--haim_binary_kkt--*"])]
    kkt = [w for w in works if w.cell_id in ids]
    target = sizes[kkt[0].target_key]
    assert target.parameters is not None
    t_seconds, a_seconds, budget = 20.0, 60.0, 540.0
    table = {"train": {"fixed": 0.0, "rate": t_seconds / kkt[0].train},
             "attack": {"fixed": 0.0, "rate": a_seconds / kkt[0].attack},
             "evaluate": {"fixed": 0.0, "rate": 0.0}}
    plan = plan_slices(kkt, CostModel.for_device("cuda", table), budget)
    first = SAFETY_FACTOR * (t_seconds + a_seconds) + SAFETY_SECONDS
    nxt = SAFETY_FACTOR * a_seconds + SAFETY_SECONDS
    per_slice = 1 + int((budget - first) // nxt)
    assert [len(s) for s in plan.slices] == [min(per_slice, len(kkt) - i) for i in range(0, len(kkt), per_slice)]
    assert [c for s in plan.slices for c in s] == ids and plan.unfit == {}
    for ids_in, seconds in zip(plan.slices, plan.seconds, strict=True):
        assert seconds == pytest.approx(first + (len(ids_in) - 1) * nxt) and seconds <= budget


def test_every_paper_cell_is_planned_once_within_the_budget():
    _, works, _ = paper_works()
    table = {"train": {"fixed": 10.0, "rate": 2e-14}, "attack": {"fixed": 5.0, "rate": 1.5e-13},
             "evaluate": {"fixed": 10.0, "rate": 1e-9}}
    plan = plan_slices(works, CostModel.for_device("cuda", table), 540.0)
    planned = [c for s in plan.slices for c in s]
    # cells longer than a slice in groups of their runs: each run once, the cell in no slice whole
    runs: dict[str, list[int]] = {}
    for groups in plan.groups:
        for g in groups:
            runs.setdefault(g.cell_id, []).extend(g.runs)
    by_id = {w.cell_id: w for w in works}
    assert all(sorted(r) == list(range(by_id[c].runs)) for c, r in runs.items()) and not set(runs) & set(planned)
    assert sorted(planned + list(runs) + list(plan.unfit)) == sorted(w.cell_id for w in works)
    assert len(planned) == len(set(planned)) and all(s <= 540.0 for s in plan.seconds)
    assert all(v > 540.0 for v in plan.unfit.values())


# -- slices on the CPU, end to end -------------------------------------------------------------------------------
@pytest.mark.slow
def test_pack_fresh_machine_unpack_resume_equals_one_uninterrupted_run(tmp_path, capsys):
    suite = load_suite(str(TINY))
    whole = tmp_path / "whole"
    run_suite(suite, whole, cache=str(tmp_path / "cache0"), quiet=True)
    # slice 1 on a bare machine: one cell, then the deadline
    pack1, manifest1, ex = first_slice(tmp_path, cells=1)
    assert manifest1.to_dict() == json.loads((pack1 / "manifest.json").read_text())   # the record, as written
    assert len(manifest1.cells) == 1 and len(manifest1.cells_remaining) == 2
    assert [d.cell_id for d in ex.deferred] == manifest1.cells_remaining
    assert len(manifest1.files) + 1 <= slice_pack.MAX_FILES
    assert all(f.bytes <= slice_pack.MAX_FILE_BYTES for f in manifest1.files)
    # merged here
    local = tmp_path / "local"
    code, text, err = run_cli(["bench", str(TINY), "--unpack", str(pack1), "--out", str(local)], capsys)
    assert code == 0, err
    assert "1 cell(s) merged" in text and "2 cell(s) remain" in text
    ledger = json.loads((local / "finished.json").read_text())
    assert ledger["cells"] == {c: {"cell_key": load_cells(local)[c]["cell_key"], "status": "ok"}
                               for c in manifest1.cells}
    # slice 2 on another bare machine (its own results folder and target cache) given only the ledger: runs the rest
    code, text, err = run_cli(["bench", str(TINY), "--device", "cpu", "--deadline", "600", "--pack",
                               str(tmp_path / "pack2"), "--out", str(tmp_path / "device2"), "--cache",
                               str(tmp_path / "cache2"), "--finished", str(local / "finished.json"), "-q"], capsys)
    assert code == 0, err
    assert "2 cell(s) ran" in text and "1 already finished" in text and "0 cell(s) of the suite remain" in text
    manifest2 = json.loads((tmp_path / "pack2" / "manifest.json").read_text())
    assert sorted(manifest2["cells"]) == sorted(manifest1.cells_remaining)
    code, text, err = run_cli(["bench", str(TINY), "--unpack", str(tmp_path / "pack2"), "--out", str(local)], capsys)
    assert code == 0, err
    assert "every cell of suite gpu-tiny" in text
    assert sorted(json.loads((local / "finished.json").read_text())["cells"]) == sorted(load_cells(local))
    # a resume here has nothing left to do, and the cells are the uninterrupted run's
    report = run_suite(suite, local, resume=True, cache=str(tmp_path / "cache3"), quiet=True)
    assert report.ran == [] and len(report.skipped) == 3
    a, b = load_cells(whole), load_cells(local)
    assert sorted(a) == sorted(b)
    for cid in a:
        assert deterministic(b[cid]) == deterministic(a[cid]), cid
    # the candidates that travelled are the sampled cell's, float16 values of the device's float64 ones
    from safetensors.torch import load_file

    sampled = manifest1.candidates.cells + manifest2["candidates"]["cells"]
    assert len(sampled) == 1
    here = load_file(str(local / "work" / sampled[0] / "candidates.safetensors"))
    there = load_file(str(whole / "work" / sampled[0] / "candidates.safetensors"))
    assert set(here) == set(there)
    assert (here["candidates"].double() == there["candidates"].half().double()).all()
    assert (here["labels"] == there["labels"]).all()
    unsampled = [c for c in a if c not in sampled]
    from reconbench.leaderboard.figure_pairs import PAIRS_FILE

    for c in unsampled:   # their candidates stayed on the device; only their figure pairs travelled
        assert sorted(p.name for p in (local / "work" / c).iterdir()) == [PAIRS_FILE], c


def test_a_deadline_too_short_runs_nothing_and_says_so(tmp_path, capsys):
    out, pack = tmp_path / "res", tmp_path / "pack"
    code, text, err = run_cli(["bench", str(TINY), "--device", "cpu", "--deadline", "1", "--pack", str(pack),
                               "--out", str(out), "--cache", str(tmp_path / "cache"), "-q"], capsys)
    assert code == 1, err
    assert "nothing ran; no cell fits" in text and "pass a longer --deadline" in text
    assert load_cells(out) == {}
    manifest = json.loads((pack / "manifest.json").read_text())
    assert manifest["cells"] == [] and len(manifest["cells_remaining"]) == 3 and len(manifest["deferred"]) == 3


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    """One slice of the tiny suite that ran two cells, packed (shared by the refusal tests; copy before editing)."""
    tmp = tmp_path_factory.mktemp("packed")
    pack, manifest, _ = first_slice(tmp, cells=2)
    return pack, manifest


def copy_pack(packed: tuple[Path, dict[str, Any]], tmp_path: Path) -> Path:
    return Path(shutil.copytree(packed[0], tmp_path / "pack"))


@pytest.mark.parametrize("stem", ["records", "candidates"])
def test_a_tampered_packed_file_is_refused_and_nothing_is_merged(packed, tmp_path, capsys, stem):
    pack = copy_pack(packed, tmp_path)
    path = pack_file(pack, stem)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    out = tmp_path / "res"
    code, _, err = run_cli(["bench", str(TINY), "--unpack", str(pack), "--out", str(out)], capsys)
    assert code == 2 and f"{path} does not match the sha256" in err and "Nothing was merged" in err
    assert err.count("\n") == 1
    assert load_cells(out) == {}


def test_a_pack_with_a_missing_or_extra_file_or_another_suite_is_refused(packed, tmp_path):
    suite = load_suite(str(TINY))
    pack = copy_pack(packed, tmp_path)
    (pack / "notes.txt").write_text("x")
    with pytest.raises(PackError, match="notes.txt is not named in the pack's manifest"):
        verify_pack(pack, suite)
    (pack / "notes.txt").unlink()
    gone = pack_file(pack, "candidates")
    gone.unlink()
    with pytest.raises(PackError, match=f"{gone.name} is missing"):
        verify_pack(pack, suite)
    edited = tmp_path / "tiny.toml"
    edited.write_text(TINY.read_text().replace("steps = 100", "steps = 101"))
    with pytest.raises(PackError, match="check out the suite file of commit"):
        verify_pack(packed[0], load_suite(str(edited)))
    edited_manifest = {**json.loads((pack / "manifest.json").read_text()), "cell": []}
    (pack / "manifest.json").write_text(json.dumps(edited_manifest))
    with pytest.raises(PackError, match=r"manifest.json \(a SliceManifest\): unknown key \$.cell; rename it to 'cells'"):
        verify_pack(pack, suite)
    (pack / "manifest.json").write_text("{")
    with pytest.raises(PackError, match="manifest.json is not valid JSON"):
        verify_pack(pack, suite)


def test_a_conflicting_cell_is_refused_and_an_identical_one_is_merged_already(packed, tmp_path):
    suite = load_suite(str(TINY))
    keys = {c.cell_id: c.key(suite) for c in expand(suite)}
    out = tmp_path / "res"
    first = unpack(packed[0], suite, out, keys)
    assert sorted(first.merged) == sorted(packed[1].cells) and len(first.remaining) == 1
    again = unpack(packed[0], suite, out, keys)
    assert again.merged == [] and sorted(again.already) == sorted(packed[1].cells)
    cid = packed[1].cells[0]
    path = out / "cells" / f"{cid}.json"
    rec = json.loads(path.read_text())
    rec["selections"]["pool"]["attack_loss"] = 123.0
    rec["record_sha256"] = "0" * 64
    path.write_text(json.dumps(rec))
    with pytest.raises(PackError, match=f"cell {cid} is already in .* with other numbers"):
        unpack(packed[0], suite, out, keys)
    assert json.loads(path.read_text())["selections"]["pool"]["attack_loss"] == 123.0
    # a stale record (its suite entry changed since) gives way, and its run's files go with it
    rec["cell_key"] = "0" * 16
    path.write_text(json.dumps(rec))
    (out / "work" / cid).mkdir(parents=True, exist_ok=True)
    (out / "work" / cid / "result.json").write_text("{}")
    report = unpack(packed[0], suite, out, keys)
    assert report.merged == [cid] and json.loads(path.read_text())["cell_key"] == keys[cid]
    assert not (out / "work" / cid / "result.json").exists()


def test_records_too_large_for_one_file_are_split_and_merge_the_same(packed, tmp_path, monkeypatch):
    """With a limit of 12 KiB per file, the records of two cells (about 70 KiB of JSON each) need several
    archives: each within the limit, all together merging the same cells."""
    suite = load_suite(str(TINY))
    device_out = packed[0].parent / "device1"
    monkeypatch.setattr(slice_pack, "MAX_FILE_BYTES", 12 * 1024)
    assert len(packed[1].files) == 2   # with the limit of 16 MiB: one archive, one candidates file
    pack = tmp_path / "split"
    manifest = write_pack(pack, suite, device_out, cells=packed[1].cells, remaining=[], invocation=0,
                          device="cpu", dtype="float64")
    archives = [f for f in manifest.files if f.name.startswith("records-")]
    assert len(archives) >= 2 and all(f.bytes <= 12 * 1024 for f in manifest.files)
    keys = {c.cell_id: c.key(suite) for c in expand(suite)}
    report = unpack(pack, suite, tmp_path / "res", keys)
    assert sorted(report.merged) == sorted(packed[1].cells)


def test_copy_data_copies_what_the_suite_reads_and_nothing_else(tmp_path):
    """A suite on an npz file under the data root: that file is copied to the same place; an unused file is not."""
    import sys

    import numpy as np

    sys_path = str(ROOT / "benchmarks" / "gpu")
    sys.path.insert(0, sys_path)
    try:
        import copy_data
    finally:
        sys.path.remove(sys_path)
    root = tmp_path / "data"
    (root / "sub").mkdir(parents=True)
    rng = np.random.default_rng(0)
    np.savez(root / "sub" / "x.npz", images=rng.random((40, 1, 4, 4)).astype(np.float32),
             labels=np.arange(40) % 2)
    (root / "unused.bin").write_bytes(b"0" * 100)
    suite = tmp_path / "s.toml"
    suite.write_text(TINY.read_text().replace('dataset = "digits"', 'dataset = "npz:sub/x.npz"'))
    assert copy_data.main([str(suite), "--from", str(root), "--to", str(tmp_path / "copy")]) == 0
    copied = sorted(p.relative_to(tmp_path / "copy") for p in (tmp_path / "copy").rglob("*") if p.is_file())
    assert copied == [Path("sub/x.npz")]
    assert (tmp_path / "copy" / "sub" / "x.npz").read_bytes() == (root / "sub" / "x.npz").read_bytes()
    assert copy_data.main([str(TINY), "--from", str(root), "--to", str(tmp_path / "none")]) == 0
    assert not (tmp_path / "none").exists()


def test_the_pack_rewritten_after_each_cell_is_whole_at_every_step(packed, tmp_path):
    """The pack as it stood after the first cell (what a slice killed then leaves) merges that cell; a rewrite
    interrupted before its manifest leaves the new data files beside the old manifest, which still merges; the final
    pack holds only the files its manifest names."""
    suite = load_suite(str(TINY))
    keys = {c.cell_id: c.key(suite) for c in expand(suite)}
    first = packed[0].parent / "snapshot-1"
    m1 = json.loads((first / "manifest.json").read_text())
    final = packed[1]
    assert final.costs is not None
    assert m1["complete"] is False and m1["cells"] == final.cells[:1] and final.complete is True
    assert set(final.costs.estimates) == set(final.cells)   # each started cell's estimate
    # the attack's measurements, keyed by its matrix-product precision (float64 on the CPU)
    assert len(final.costs.measured["attack@float64"]) == len(final.cells)
    interrupted = Path(shutil.copytree(first, tmp_path / "interrupted"))
    for f in final.files:   # the next version's data files, written before its manifest
        shutil.copyfile(packed[0] / f.name, interrupted / f.name)
    report = unpack(interrupted, suite, tmp_path / "res", keys)
    assert report.merged == m1["cells"]
    report = unpack(packed[0], suite, tmp_path / "res", keys)
    assert report.already == m1["cells"] and report.merged == final.cells[1:]
    assert sorted(p.name for p in packed[0].iterdir()) == sorted(["manifest.json", *(f.name for f in final.files)])


def test_plan_prints_the_slices_and_runs_nothing(tmp_path, capsys, no_work):
    """`--plan` sizes the targets from their data and plans from the cost table: the slices the API plans."""
    suite = load_suite(str(TINY))
    table = {"train": {"fixed": 4.0, "rate": 0.0}, "attack": {"fixed": 3.0, "rate": 0.0},
             "evaluate": {"fixed": 1.0, "rate": 0.0}}
    costs = tmp_path / "costs.json"
    costs.write_text(json.dumps(table))
    out = tmp_path / "res"
    code, text, err = run_cli(["bench", str(TINY), "--plan", "--deadline", "35", "--costs", str(costs), "--out",
                               str(out)], capsys)
    assert code == 0, err
    # 25 s after the pack's 10: the first cell 1.25 x (4 + 3 + 1) + 2 = 12 s, each next one 1.25 x 4 + 2 = 7 s
    works = [cell_work(c, tiny_sizes(suite)[c.recipe.key()]) for c in expand(suite)]
    plan = plan_slices(works, CostModel.for_device("cpu", table), 25.0)
    assert [len(s) for s in plan.slices] == [2, 1]
    assert "3 cell(s) in 2 slice(s), 0 that fit none" in text
    assert not out.exists() or load_cells(out) == {}
    code, _, err = run_cli(["bench", str(TINY), "--plan", "--out", str(out)], capsys)
    assert code == 2 and "--plan prints the slices of a deadline" in err
