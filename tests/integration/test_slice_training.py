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
from _helpers.slicekit import TickClock, cheap, deterministic
from safetensors.torch import load_file

from reconbench.bench.runner import load_cells, run_suite
from reconbench.bench.slice_executor import DeadlineExecutor
from reconbench.bench.slice_pack import LEDGER_FILE, MAX_FILE_BYTES, PackError, verify_pack
from reconbench.bench.suite import load_suite
from reconbench.cli.bench_slices import SlicePacker
from reconbench.records.measured_rate import MeasuredRate
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
    # CI's slices (benchmarks/gpu/ci_pieces.sh): two targets the resumable trainer takes, in one stack
    from reconbench.targets.resumable import batch_group
    pieces = load_suite(str(Path(__file__).resolve().parents[2] / "benchmarks" / "gpu" / "tiny-pieces.toml"))
    recipes = {c.recipe.key(): c.recipe for c in expand(pieces)}
    assert len(recipes) == 2 and {resumable_reason(r) for r in recipes.values()} == {None}
    assert len({batch_group(r) for r in recipes.values()}) == 1


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
    # the two targets share a shape and settings: one stack, stopped at one step, a state file each
    piece, other = ex.pieces
    assert 0 < piece.step < STEPS and not piece.finished and other.step == piece.step and not other.finished
    assert piece.stacked == other.stacked == 2 and piece.recipe_key != other.recipe_key
    assert sorted(t.recipe_key for t in manifest.training) == sorted([piece.recipe_key, other.recipe_key])
    for entry in manifest.training:
        assert entry.step == piece.step and entry.dtype == "torch.float64"
        assert (pack1 / str(entry.name)).stat().st_size < MAX_FILE_BYTES
    assert all("trained to step" in d.note for d in ex.deferred)
    verify_pack(pack1, suite)   # each state's sha256 is the manifest's

    # back here: unpack; the ledger names the state, kept beside it
    results = tmp_path / "results"
    code, out, _ = run_cli(["bench", str(suite_file), "--unpack", str(pack1), "--out", str(results)], capsys)
    assert code == 0 and "training state of target" in out
    ledger = json.loads((results / LEDGER_FILE).read_text())
    assert ledger["cells"] == {} and sorted(ledger["training"]) == sorted([piece.recipe_key, other.recipe_key])
    assert {v["step"] for v in ledger["training"].values()} == {piece.step}
    # the stack's piece travelled as a train row, as the slice measured it (pack manifest, then ledger)
    trained = [m for m in ledger["measured"] if m["phase"] == "train"]
    assert [(m["targets"], m["steps"]) for m in trained] == [(2, 2 * piece.step)]
    assert [m for m in manifest.measured if m.phase == "train"] == [MeasuredRate.from_dict(m) for m in trained]

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
    for cid in one:   # the same cells; the record of the pieces that trained the target aside
        a, b = deterministic(pieces[cid]), deterministic(one[cid])
        count = a["target"]["train_metrics"].pop("training_pieces")
        assert count in (1, 2) and b["target"]["train_metrics"].pop("training_pieces") == 1
        ran, whole_run = a["target"]["train_metrics"].pop("trained_in"), b["target"]["train_metrics"].pop("trained_in")
        assert len(ran) == count and ran[0]["steps"][0] == 0 and ran[-1]["steps"][1] == STEPS
        assert [p["steps"] for p in whole_run] == [[0, STEPS]]
        assert a == b, cid


def test_a_tampered_training_state_is_refused(suite_file, tmp_path, capsys):
    suite = load_suite(str(suite_file))
    ex = DeadlineExecutor(30.0, cheap(), sizes(suite), start=0.0, clock=TickClock(),
                          states=tmp_path / "cache1" / "training")
    pack = tmp_path / "pack"
    packer = SlicePacker(pack, suite, tmp_path / "device", ex, "cpu", None, 0.0, {})
    report = run_suite(suite, tmp_path / "device", cache=str(tmp_path / "cache1"), quiet=True, executor=ex)
    manifest = packer.write(report.ran, complete=True)
    state = pack / str(manifest.training[0].name)
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


def test_targets_trained_as_one_stack_in_pieces_equal_each_trained_alone(suite_file, tmp_path):
    """The slice's stack of two targets of one shape (each saved to its own state, stopped midway, resumed as a
    stack) against each target trained alone in one piece by the same trainer: the same weights, within the
    batched trainer's rounding tolerance (tests/unit/targets/test_batched_training.py; on the CPU they are in fact equal)."""
    from _helpers.slicekit import rounding_tolerance

    from reconbench.bench.cells import expand
    from reconbench.targets.resumable import train_piece, train_pieces

    suite = load_suite(str(suite_file))
    recipes = list({c.target: c.recipe for c in expand(suite)}.values())
    stack = tmp_path / "stack"
    first = train_pieces(recipes, [stack / "card" / r.key() for r in recipes], stack / "states", seconds=5.0,
                         clock=TickClock())
    assert [p.step for p in first] == [first[0].step] * 2 and 0 < first[0].step < STEPS
    assert not any(p.finished for p in first) and all(p.stacked == 2 for p in first)
    # each target's state resumes alone, too: the file is the one a one-target trainer writes
    from reconbench.targets.batched_training import from_recipes
    from reconbench.targets.problems import build_problem
    alone_trainer, _ = from_recipes([recipes[1]], [build_problem(recipes[1].problem)], loss_every=100)
    assert first[1].state is not None
    alone_trainer.load(first[1].state)
    assert alone_trainer.step_count == first[0].step
    done = train_pieces(recipes, [stack / "card" / r.key() for r in recipes], stack / "states", seconds=1e9)
    assert all(p.finished and p.step == STEPS for p in done)
    tol = rounding_tolerance(torch.float64, 64, STEPS)
    for recipe in recipes:
        alone = train_piece(recipe, tmp_path / "alone" / "card" / recipe.key(), tmp_path / "alone" / "states",
                            seconds=1e9)
        assert alone.finished and alone.stacked == 1
        a = load_file(str(stack / "card" / recipe.key() / "weights.safetensors"))
        b = load_file(str(tmp_path / "alone" / "card" / recipe.key() / "weights.safetensors"))
        assert a.keys() == b.keys()
        for name in a:
            assert not torch.equal(b[name], torch.zeros_like(b[name]))
            torch.testing.assert_close(a[name], b[name], rtol=tol, atol=tol * float(b[name].abs().max()))
        card_a = json.loads((stack / "card" / recipe.key() / "card.json").read_text())
        card_b = json.loads((tmp_path / "alone" / "card" / recipe.key() / "card.json").read_text())
        assert card_a["metrics"]["training_pieces"] == 2 and card_b["metrics"]["training_pieces"] == 1
        assert card_a["metrics"]["final_loss"] == pytest.approx(card_b["metrics"]["final_loss"], rel=tol)


def test_targets_at_different_steps_do_not_share_a_stack(suite_file, tmp_path):
    from reconbench.bench.cells import expand
    from reconbench.errors import ReconbenchError
    from reconbench.targets.resumable import train_piece, train_pieces

    suite = load_suite(str(suite_file))
    a, b = list({c.target: c.recipe for c in expand(suite)}.values())
    train_piece(a, tmp_path / "card", tmp_path / "states", seconds=5.0, clock=TickClock())
    with pytest.raises(ReconbenchError, match="different steps"):
        train_pieces([a, b], [tmp_path / "ca", tmp_path / "cb"], tmp_path / "states", seconds=5.0)


def test_a_state_larger_than_a_part_travels_split_and_joins_to_the_same_bytes(suite_file, tmp_path, monkeypatch):
    """A pack file holds at most 16 MiB; a larger training state travels in parts (each listed in the manifest
    with its sha256) and unpack joins them, checking the whole state's sha256. Here with parts of a third of the
    state's size (a paper-size float64 state of 49 MB would take 3 parts of 16 MiB)."""
    from reconbench.bench import slice_pack
    from reconbench.bench.cells import expand
    from reconbench.bench.slice_pack import unpack

    suite = load_suite(str(suite_file))
    states = tmp_path / "cache1" / "training"
    ex = DeadlineExecutor(30.0, cheap(), sizes(suite), start=0.0, clock=TickClock(), states=states)
    report = run_suite(suite, tmp_path / "device", cache=str(tmp_path / "cache1"), quiet=True, executor=ex)
    originals = {p.recipe_key: p.state.read_bytes() for p in ex.pieces if p.state is not None}
    assert len(originals) == 2
    part = max(len(b) for b in originals.values()) // 3 + 1
    monkeypatch.setattr(slice_pack, "STATE_PART_BYTES", part)
    pack = tmp_path / "pack"
    manifest = SlicePacker(pack, suite, tmp_path / "device", ex, "cpu", None, 0.0, {}).write(report.ran,
                                                                                             complete=True)
    assert manifest.to_dict() == json.loads((pack / "manifest.json").read_text())   # the record, as written
    assert len(manifest.files) + 1 <= slice_pack.MAX_FILES
    sizes_of = {f.name: f.bytes for f in manifest.files}
    for entry in manifest.training:
        assert "name" not in entry.to_dict() and entry.parts is not None and len(entry.parts) == 3
        assert all(sizes_of[n] <= part for n in entry.parts)
        assert entry.bytes == len(originals[entry.recipe_key])
    keys = {c.cell_id: c.key(suite, None) for c in expand(suite)}
    results = tmp_path / "results"
    rep = unpack(pack, suite, results, keys)
    assert sorted(rep.states) == sorted(originals)
    for key, data in originals.items():
        assert (results / "training" / f"{key}.safetensors").read_bytes() == data

    # parts listed out of order (each part's own sha256 still matches): the join is refused, nothing is merged
    entry = manifest.training[0]
    bad = json.loads((pack / "manifest.json").read_text())
    bad["training"][0]["parts"] = list(reversed(entry.files))
    (pack / "manifest.json").write_text(json.dumps(bad))
    with pytest.raises(PackError, match="do not join"):
        unpack(pack, suite, tmp_path / "other", keys)
    assert not (tmp_path / "other" / "training").exists()
    # a part missing: refused by the manifest's file list
    (pack / "manifest.json").write_text(json.dumps(manifest.to_dict()))
    (pack / entry.files[1]).unlink()
    with pytest.raises(PackError, match="is missing"):
        verify_pack(pack, suite)


def test_a_cross_target_slice_trains_its_stack_then_runs_every_cell_together(suite_file, tmp_path):
    """The GPU's default path on the CPU: with a deadline, training states and --cross-target, the slice trains the
    two targets as one stack, then chooses their four cells and runs their search runs in one computation."""
    suite = load_suite(str(suite_file))
    ex = DeadlineExecutor(1e5, cheap(), sizes(suite), start=0.0, states=tmp_path / "cache" / "training",
                          cross_target=True)
    report = run_suite(suite, tmp_path / "out", cache=str(tmp_path / "cache"), quiet=True, executor=ex)
    assert sorted(report.ran) == sorted(ex.started_cells) and len(report.ran) == 4 and not report.failed
    assert len(ex.pieces) == 2 and all(p.finished and p.stacked == 2 for p in ex.pieces)
    for rec in load_cells(tmp_path / "out").values():
        assert rec["status"] == "ok" and rec["target"]["train_metrics"]["training_pieces"] == 1
        assert all(run["batch"]["cross_target"]["targets"] == 2 for run in rec["runs"])


def test_a_finished_state_restored_elsewhere_gives_the_same_card_and_counts_no_piece(suite_file, tmp_path):
    from reconbench.bench.cells import expand
    from reconbench.targets.resumable import train_piece

    suite = load_suite(str(suite_file))
    recipe = expand(suite)[0].recipe
    done = train_piece(recipe, tmp_path / "card1", tmp_path / "states", seconds=1e9)
    again = train_piece(recipe, tmp_path / "card2", tmp_path / "states", seconds=0.0)
    assert done.finished and again.finished and again.step == STEPS
    cards = [json.loads((tmp_path / d / "card.json").read_text()) for d in ("card1", "card2")]
    assert [c["metrics"]["training_pieces"] for c in cards] == [1, 1]
    a, b = (load_file(str(tmp_path / d / "weights.safetensors")) for d in ("card1", "card2"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("cross_target", [False, True])
def test_a_slice_writes_a_train_row_per_piece_and_an_evaluation_row_with_its_units(suite_file, tmp_path,
                                                                                   cross_target):
    """A slice on the CPU that trains the suite's two targets as one stack and runs their four cells (one by one, or
    together): one ``train`` row of the stack (2 targets, 2 x STEPS target-steps, the units cell_work counts for
    both targets, seconds timed), and per cell an ``evaluation`` row with its whole evaluation's units."""
    from reconbench.bench.cells import expand
    from reconbench.bench.slice_costs import cell_work

    suite = load_suite(str(suite_file))
    size = sizes(suite)
    ex = DeadlineExecutor(1e5, cheap(), size, start=0.0, states=tmp_path / "cache" / "training",
                          cross_target=cross_target)
    report = run_suite(suite, tmp_path / "out", cache=str(tmp_path / "cache"), quiet=True, executor=ex)
    assert len(report.ran) == 4 and not report.failed
    works = {c.cell_id: cell_work(c, size[c.recipe.key()], pieces=True, dtype=suite.dtype) for c in expand(suite)}
    per_target = {w.target_key: w.train for w in works.values()}
    (row,) = [r for r in ex.measured if r.phase == "train"]
    assert row.targets == 2 and row.steps == 2 * STEPS and row.device == "cpu" and row.seconds > 0
    assert sorted(row.cell.split("+")) == sorted(per_target)
    assert row.units == pytest.approx(sum(per_target.values()), rel=1e-14) and row.rate == row.seconds / row.units
    evaluations = {r.cell: r for r in ex.measured if r.phase == "evaluation"}
    assert sorted(evaluations) == sorted(works)
    for cid, r in evaluations.items():
        assert r.units == works[cid].evaluate > 0 and r.rate is not None
