"""benchmarks/gpu/card_from_state.py: a finished training state's card, built again from the state alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _helpers.examples import load_module

from reconbench.bench.cells import expand
from reconbench.bench.suite import load_suite
from reconbench.targets.resumable import train_piece

pytestmark = pytest.mark.usefixtures("one_torch_thread")

GPU = Path(__file__).resolve().parents[3] / "benchmarks" / "gpu"
CELL = "digits-a--haim_binary_kkt--gaussian--s0"


def short_suite(tmp_path: Path) -> Path:
    """tiny-pieces.toml with 200 training steps (its targets train in seconds)."""
    path = tmp_path / "pieces.toml"
    path.write_text((GPU / "tiny-pieces.toml").read_text().replace("steps = 150000", "steps = 200"))
    return path


def test_the_card_built_from_a_state_is_the_card_its_training_wrote(tmp_path):
    suite_file = short_suite(tmp_path)
    recipe = next(c.recipe for c in expand(load_suite(suite_file)) if c.cell_id == CELL)
    piece = train_piece(recipe, tmp_path / "card", tmp_path / "results" / "training", seconds=600.0)
    assert piece.card is not None
    trained = json.loads((tmp_path / "card" / "card.json").read_text())["metrics"]
    script = load_module("gpu_card_from_state", GPU / "card_from_state.py")
    out = tmp_path / "summary.json"
    assert script.main([str(suite_file), CELL, str(out), "--results", str(tmp_path / "results")]) == 0
    summary = json.loads(out.read_text())
    got = summary["metrics"]
    for key in ("steps_run", "train_loss", "train_error", "test_loss", "stalled_samples", "param_norm_sq"):
        assert got[key] == trained[key], key
    assert got["certificate"]["ratio"] == trained["certificate"]["ratio"]
    margins = trained["margins"]
    assert summary["margins"]["n"] == len(margins)
    assert summary["margins"]["min"] == min(margins) and summary["margins"]["max"] == max(margins)


def test_it_refuses_a_cell_the_suite_lacks_and_a_missing_state(tmp_path, capsys):
    script = load_module("gpu_card_from_state", GPU / "card_from_state.py")
    suite_file = short_suite(tmp_path)
    assert script.main([str(suite_file), "no-such-cell", str(tmp_path / "x.json")]) == 2
    assert "has no cell 'no-such-cell'" in capsys.readouterr().err
    assert script.main([str(suite_file), CELL, str(tmp_path / "x.json"), "--results", str(tmp_path)]) == 2
    assert "unpack the slice's pack first" in capsys.readouterr().err
    assert not (tmp_path / "x.json").exists()
