"""A card of a target trained in pieces says how it was trained (docs/slices.md, "Training that does not finish in
one slice"): each piece that advanced the training is recorded in the state (device, device name, steps, seconds,
machine) and carried forward, and the card made from the state, at the end of training or rebuilt from the final
state in a process that trained nothing, names the pieces' devices, the last piece's machine and the loss the
trainer last read. A state written before pieces were recorded still continues; its card says "unknown" for what
the state does not know."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from test_slice_training import STEPS, SUITE, TickClock

from reconbench.bench.cells import expand
from reconbench.bench.suite import load_suite
from reconbench.records.training_checkpoint import PieceNotes
from reconbench.targets import resumable
from reconbench.targets.batched_training import read_checkpoint
from reconbench.targets.cards import load_card, training_machine
from reconbench.targets.recipe import TargetRecipe
from reconbench.targets.resumable import state_path, train_piece

pytestmark = pytest.mark.usefixtures("one_torch_thread")

GPU = ("cuda", "NVIDIA H100 80GB HBM3")


def other_machine(name: str) -> dict[str, Any]:
    """This machine's ``training_machine`` with another processor: a machine that is not the one the test runs on."""
    return {**training_machine(), "processor": name, "torch_version": f"0.0-{name}"}


@pytest.fixture
def recipe(tmp_path: Path) -> TargetRecipe:
    path = tmp_path / "train-pieces.toml"
    path.write_text(SUITE)
    return expand(load_suite(str(path)))[0].recipe


def on_machine(monkeypatch: pytest.MonkeyPatch, device: tuple[str, str], machine: dict[str, Any]) -> None:
    """The pieces this process trains from now on look as if they ran on ``device`` of ``machine``."""
    monkeypatch.setattr(resumable, "device_of", lambda _device: device)
    monkeypatch.setattr(resumable, "training_machine", lambda: machine)


def notes_of(state: Path) -> PieceNotes:
    return PieceNotes.from_dict(read_checkpoint(state).notes)


def card_json(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "card.json").read_text())


def as_written_before(state: Path) -> None:
    """Rewrite ``state``'s notes as the code before piece runs wrote them: seconds and pieces only."""
    with safe_open(str(state), framework="pt") as fh:
        meta = json.loads((fh.metadata() or {})["reconbench"])
    meta["extra"] = {k: v for k, v in meta["extra"].items() if k in ("seconds", "pieces")}
    save_file(load_file(str(state)), str(state), metadata={"reconbench": json.dumps(meta)})


def test_two_pieces_on_two_machines_are_recorded_and_the_card_names_the_last(recipe, tmp_path, monkeypatch):
    states = tmp_path / "states"
    first_machine, last_machine = other_machine("First Machine"), other_machine("Last Machine")
    with monkeypatch.context() as m:
        on_machine(m, GPU, first_machine)
        first = train_piece(recipe, tmp_path / "card1", states, seconds=5.0, clock=TickClock())
    middle = first.step
    assert 0 < middle < STEPS and not first.finished
    runs = notes_of(state_path(states, recipe)).runs
    assert runs is not None and [(r.device, r.device_name, r.steps) for r in runs] == [(*GPU, [0, middle])]
    assert runs[0].machine is not None and runs[0].machine.processor == "First Machine"

    with monkeypatch.context() as m:
        on_machine(m, ("cpu", "Last CPU"), last_machine)
        done = train_piece(recipe, tmp_path / "card2", states, seconds=1e9)
    assert done.finished
    notes = notes_of(state_path(states, recipe))
    assert notes.pieces == 2 and notes.runs is not None
    assert [(r.device, r.device_name, r.steps) for r in notes.runs] == [(*GPU, [0, middle]),
                                                                        ("cpu", "Last CPU", [middle, STEPS])]
    assert sum(r.seconds or 0.0 for r in notes.runs) == pytest.approx(notes.seconds, rel=1e-12)
    card = card_json(tmp_path / "card2")
    metrics = card["metrics"]
    assert metrics["train_device"] == "cuda+cpu" and metrics["training_pieces"] == 2
    assert [(p["device"], p["device_name"], p["steps"]) for p in metrics["trained_in"]] == \
        [(*GPU, [0, middle]), ("cpu", "Last CPU", [middle, STEPS])]
    assert card["training_machine"] == {**last_machine, "device": "cpu", "device_name": "Last CPU"}
    # the card reads strictly through its door, the new fields typed
    record = load_card(tmp_path / "card2").record
    assert record.training_machine is not None and record.training_machine.processor == "Last Machine"
    assert record.metrics.trained_in is not None and record.metrics.trained_in[0].device_name == GPU[1]


def test_a_card_rebuilt_from_a_final_state_keeps_how_it_was_trained(recipe, tmp_path, monkeypatch):
    states = tmp_path / "states"
    gpu_machine = other_machine("GPU Host")
    with monkeypatch.context() as m:
        on_machine(m, GPU, gpu_machine)
        done = train_piece(recipe, tmp_path / "finished", states, seconds=1e9)
    assert done.finished
    finished = card_json(tmp_path / "finished")
    # rebuilt here (this machine's CPU, nothing patched) from the final state: no step taken in this process
    again = train_piece(recipe, tmp_path / "rebuilt", states, seconds=0.0)
    assert again.finished and again.step == STEPS
    rebuilt = card_json(tmp_path / "rebuilt")
    assert rebuilt["metrics"]["train_device"] == "cuda" and rebuilt["metrics"]["training_pieces"] == 1
    assert rebuilt["metrics"]["trained_in"] == finished["metrics"]["trained_in"]
    assert rebuilt["training_machine"] == {**gpu_machine, "device": GPU[0], "device_name": GPU[1]}
    assert rebuilt["training_machine"]["processor"] != training_machine()["processor"]
    # the final loss is the last one the state recorded (read every 100 steps), not the 0.0 of a trainer that
    # took no step
    history = read_checkpoint(state_path(states, recipe)).history
    assert history[-1].step == STEPS - 100
    assert rebuilt["metrics"]["final_loss"] == history[-1].loss[0] > 0.0
    assert rebuilt["content_sha256"] == finished["content_sha256"]


def test_a_state_written_before_pieces_were_recorded_continues_and_says_unknown(recipe, tmp_path, monkeypatch):
    states = tmp_path / "states"
    first = train_piece(recipe, tmp_path / "card1", states, seconds=5.0, clock=TickClock())
    middle = first.step
    state = state_path(states, recipe)
    as_written_before(state)
    spent = notes_of(state).seconds
    assert notes_of(state).runs is None and spent > 0
    here = other_machine("This Machine")
    with monkeypatch.context() as m:
        on_machine(m, ("cpu", "This CPU"), here)
        done = train_piece(recipe, tmp_path / "card2", states, seconds=1e9)
    assert done.finished
    metrics = card_json(tmp_path / "card2")["metrics"]
    assert metrics["train_device"] == "unknown+cpu"
    assert [(p["device"], p["device_name"], p["steps"]) for p in metrics["trained_in"]] == \
        [("unknown", "unknown", [0, middle]), ("cpu", "This CPU", [middle, STEPS])]
    assert metrics["trained_in"][0]["seconds"] == spent   # the seconds the old notes recorded
    assert card_json(tmp_path / "card2")["training_machine"]["processor"] == "This Machine"   # it trained the last

    # a final state of the old code rebuilt here: nothing about its training is known, and nothing of this process
    # is passed off as its training
    as_written_before(state)
    again = train_piece(recipe, tmp_path / "card3", states, seconds=0.0)
    assert again.finished
    rebuilt = card_json(tmp_path / "card3")
    assert rebuilt["metrics"]["train_device"] == "unknown"
    assert [(p["device"], p["steps"]) for p in rebuilt["metrics"]["trained_in"]] == [("unknown", [0, STEPS])]
    assert "training_machine" not in rebuilt
    record = load_card(tmp_path / "card3").record
    assert record.training_machine is None and record.training_path is None
    assert rebuilt["metrics"]["final_loss"] == read_checkpoint(state).history[-1].loss[0] > 0.0
