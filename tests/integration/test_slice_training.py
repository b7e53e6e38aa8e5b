"""Training that does not finish in one slice travels to the next (reconbench/targets/resumable.py): slice 1 stops a
target's training at its deadline and packs the state, a fresh machine unpacks and continues it, and the finished
target and its cells equal one uninterrupted run exactly (CPU, float64). Also: the cross-target bench path
(``--cross-target``) against the per-cell path."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from _helpers.cli import run_cli
from safetensors.torch import load_file
from test_bench_slices import deterministic

from reconbench.bench.runner import load_cells, run_suite
from reconbench.bench.slice_costs import CostModel
from reconbench.bench.slice_executor import DeadlineExecutor
from reconbench.bench.slice_pack import LEDGER_FILE, MAX_FILE_BYTES, PackError, verify_pack
from reconbench.bench.suite import load_suite
from reconbench.cli.bench_slices import SlicePacker
from reconbench.targets.resumable import resumable_reason

pytestmark = pytest.mark.usefixtures("one_torch_thread")

STEPS = 1200
SUITE = f"""
[suite]
name = "train-pieces"
description = "Two digits targets of one shape trained at a constant lr; Haim et al.'s attack from two starts."
seeds = [0]
device = "cpu"
dtype = "float64"
search_runs = 2

[protocol]
figures = false

[leaderboard]
store_candidates = 1
sample_images = 4

[targets.a]
dataset = "digits"
task = "binary"
binary_rule = "parity"
n_per_class = 5
family = "mlp"
widths = [32, 32]
loss = "bce"
lr = 0.5
steps = {STEPS}
seed = 0

[targets.b]
dataset = "digits"
task = "binary"
binary_rule = "parity"
n_per_class = 5
family = "mlp"
widths = [32, 32]
loss = "bce"
lr = 0.5
steps = {STEPS}
seed = 1

[attacks.haim_binary_kkt]
config = {{ steps = 30 }}

[inits.gaussian]
[inits.uniform]

[[grid]]
targets = ["a", "b"]
attacks = ["haim_binary_kkt"]
inits = ["gaussian", "uniform"]
"""


class TickClock:
    """Advances one second at every read: the slice's only view of time, so where training stops is fixed."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def cheap() -> CostModel:
    return CostModel.for_device("cpu", {p: {"fixed": 1.0, "rate": 0.0} for p in ("train", "attack", "evaluate")})


@pytest.fixture
def suite_file(tmp_path: Path) -> Path:
    path = tmp_path / "train-pieces.toml"
    path.write_text(SUITE)
    return path


def sizes(suite: Any) -> dict[str, Any]:
    from test_bench_slices import tiny_sizes
    return tiny_sizes(suite)


def weights(cache: Path, key: str) -> dict[str, torch.Tensor]:
    return load_file(str(cache / "targets" / key / "weights.safetensors"))


def test_the_suites_recipes_train_in_pieces(suite_file):
    suite = load_suite(str(suite_file))
    from reconbench.bench.cells import expand
    assert {resumable_reason(c.recipe) for c in expand(suite)} == {None}
    tiny = load_suite(str(Path(__file__).resolve().parents[2] / "benchmarks" / "gpu" / "tiny.toml"))
    assert "schedule 'inverse_loss'" in str(resumable_reason(expand(tiny)[0].recipe))


def test_training_stopped_by_a_deadline_travels_and_ends_as_one_uninterrupted_run(suite_file, tmp_path, capsys):
    suite = load_suite(str(suite_file))
    # slice 1: a deadline that stops the first target's training midway (the clock ticks once per read)
    ex = DeadlineExecutor(30.0, cheap(), sizes(suite), start=0.0, clock=TickClock(), states=tmp_path / "cache1" /
                          "training")
    pack1 = tmp_path / "pack1"
    packer = SlicePacker(pack1, suite, tmp_path / "device1", ex, "cpu", None, 0.0, {})
    report = run_suite(suite, tmp_path / "device1", cache=str(tmp_path / "cache1"), quiet=True, executor=ex,
                       on_cell=packer.cell)
    manifest = packer.write(report.ran, complete=True)
    assert report.ran == [] and len(ex.deferred) == 4
    (piece,) = ex.pieces   # the second target is not started once the first one's training stopped the slice
    assert 0 < piece.step < STEPS and not piece.finished
    assert [t["recipe_key"] for t in manifest["training"]] == [piece.recipe_key]
    assert manifest["training"][0]["step"] == piece.step and manifest["training"][0]["dtype"] == "torch.float64"
    state_file = pack1 / manifest["training"][0]["name"]
    assert state_file.stat().st_size < MAX_FILE_BYTES
    verify_pack(pack1, suite)   # the state's sha256 is the manifest's

    # back here: unpack; the ledger names the state, kept beside it
    results = tmp_path / "results"
    code, out, _ = run_cli(["bench", str(suite_file), "--unpack", str(pack1), "--out", str(results)], capsys)
    assert code == 0 and "training state of target" in out
    ledger = json.loads((results / LEDGER_FILE).read_text())
    assert ledger["cells"] == {} and list(ledger["training"]) == [piece.recipe_key]
    assert ledger["training"][piece.recipe_key]["step"] == piece.step

    # slice 2 on a fresh machine (its own cache) with the ledger: training continues, every cell runs
    code, out, err = run_cli(["bench", str(suite_file), "--device", "cpu", "--deadline", "3000", "--pack",
                              str(tmp_path / "pack2"), "--out", str(tmp_path / "device2"), "--cache",
                              str(tmp_path / "cache2"), "--finished", str(results / LEDGER_FILE), "-q"], capsys)
    assert code == 0, out + err
    code, out, _ = run_cli(["bench", str(suite_file), "--unpack", str(tmp_path / "pack2"), "--out", str(results)],
                           capsys)
    assert code == 0 and "every cell of suite train-pieces" in out
    assert not (results / "training").exists() or not list((results / "training").glob("*.safetensors"))

    # one uninterrupted run on a third machine
    code, out, err = run_cli(["bench", str(suite_file), "--device", "cpu", "--deadline", "3000", "--pack",
                              str(tmp_path / "pack3"), "--out", str(tmp_path / "device3"), "--cache",
                              str(tmp_path / "cache3"), "-q"], capsys)
    assert code == 0, out + err
    whole = tmp_path / "whole"
    assert run_cli(["bench", str(suite_file), "--unpack", str(tmp_path / "pack3"), "--out", str(whole)], capsys)[0] == 0

    for key in {piece.recipe_key, *(c["target"]["recipe_key"] for c in load_cells(whole).values())}:
        a, b = weights(tmp_path / "cache2", key), weights(tmp_path / "cache3", key)
        assert a.keys() == b.keys()
        for name in a:
            assert torch.equal(a[name], b[name]), (key, name)   # exactly: the CPU's steps are the same operations
    card = json.loads((tmp_path / "cache2" / "targets" / piece.recipe_key / "card.json").read_text())
    assert card["metrics"]["training_pieces"] == 2 and card["metrics"]["steps_run"] == STEPS
    pieces = load_cells(results)
    one = load_cells(whole)
    assert sorted(pieces) == sorted(one) and len(one) == 4
    for cid in one:   # the same cells; the record of how many pieces trained the target aside
        a, b = deterministic(pieces[cid]), deterministic(one[cid])
        assert a["target"]["train_metrics"].pop("training_pieces") in (1, 2)
        assert b["target"]["train_metrics"].pop("training_pieces") == 1
        assert a == b, cid


def test_a_tampered_training_state_is_refused(suite_file, tmp_path, capsys):
    suite = load_suite(str(suite_file))
    ex = DeadlineExecutor(30.0, cheap(), sizes(suite), start=0.0, clock=TickClock(),
                          states=tmp_path / "cache1" / "training")
    pack = tmp_path / "pack"
    packer = SlicePacker(pack, suite, tmp_path / "device", ex, "cpu", None, 0.0, {})
    report = run_suite(suite, tmp_path / "device", cache=str(tmp_path / "cache1"), quiet=True, executor=ex)
    manifest = packer.write(report.ran, complete=True)
    state = pack / manifest["training"][0]["name"]
    data = bytearray(state.read_bytes())
    data[-1] ^= 1
    state.write_bytes(bytes(data))
    with pytest.raises(PackError, match="does not match the sha256"):
        verify_pack(pack, suite)


def close(a: Any, b: Any, rel: float, path: str = "") -> None:
    """Nested records equal, numbers to ``rel`` relative (what rounding of the attack may move)."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), path
        for k in a:
            close(a[k], b[k], rel, f"{path}.{k}")
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            close(x, y, rel, f"{path}[{i}]")
    elif isinstance(a, float) and not isinstance(a, bool):
        assert isinstance(b, float), path
        assert (math.isnan(a) and math.isnan(b)) or b == pytest.approx(a, rel=rel, abs=rel), path
    else:
        assert a == b, path


def test_cross_target_bench_equals_the_per_cell_bench(suite_file, tmp_path, capsys):
    """The two targets' four cells with their runs pooled (one batched computation: the targets share a shape)
    against the per-cell path; numbers to 1e-9 relative (the attack's candidates agree to about 1e-15, and the
    evaluation's distances, SSIM and nulls move with them by no more than a few orders of that)."""
    common = ["bench", str(suite_file), "--device", "cpu", "--cache", str(tmp_path / "cache"), "-q"]
    assert run_cli([*common, "--out", str(tmp_path / "plain")], capsys)[0] == 0
    code, out, err = run_cli([*common, "--cross-target", "--out", str(tmp_path / "cross")], capsys)
    assert code == 0, out + err
    plain, cross = load_cells(tmp_path / "plain"), load_cells(tmp_path / "cross")
    assert sorted(plain) == sorted(cross) and len(plain) == 4
    for cid in plain:
        for run in cross[cid]["runs"]:
            assert run["batch"]["cross_target"]["runs"] == 8 and run["batch"]["cross_target"]["targets"] == 2
            assert sorted(run["batch"]["cross_target"]["cells"]) == sorted(plain)
        strip = ("batch", "attack_seconds", "wall_seconds")
        a = {k: v for k, v in deterministic(plain[cid]).items() if k not in strip}
        b = {k: v for k, v in deterministic(cross[cid]).items() if k not in strip}
        for rec in (a, b):
            rec["runs"] = [{k: v for k, v in r.items() if k != "batch"} for r in rec["runs"]]
            rec.pop("spec", None)
        close(a, b, 1e-9, cid)


def test_a_state_without_its_initial_weights_resumes_only_the_recipe_it_came_from(suite_file, tmp_path):
    """The travelling state leaves out W_1(0) (rebuilt from the recipe's seed): a trainer of another seed, same data
    and shape, refuses it in one line instead of continuing from the wrong initial weights."""
    from reconbench.bench.cells import expand
    from reconbench.errors import ReconbenchError
    from reconbench.targets.batched_training import from_recipes
    from reconbench.targets.problems import build_problem
    from reconbench.targets.resumable import train_piece

    suite = load_suite(str(suite_file))
    a, b = {c.target: c.recipe for c in expand(suite)}.values()
    piece = train_piece(a, tmp_path / "card", tmp_path / "states", seconds=5.0, clock=TickClock())
    assert piece.state is not None and 0 < piece.step < STEPS and not piece.finished
    trainer, _ = from_recipes([b], [build_problem(b.problem)], loss_every=100)
    with pytest.raises(ReconbenchError, match="initial first-layer weights"):
        trainer.load(piece.state)
    again, _ = from_recipes([a], [build_problem(a.problem)], loss_every=100)
    again.load(piece.state)
    assert again.step_count == piece.step
