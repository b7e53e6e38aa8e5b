"""A sampled cell whose candidates cannot travel (a paper cell's 16 x 1000 CIFAR-10 candidates are about 94 MiB in
float16, a pack file holds 16) stays out of the pack's candidates file: the slice says so in one ``slice:`` line,
once per cell, naming the cell and what its candidates would take, instead of leaving them out silently; its figure
pairs travel instead (tests/integration/test_slice_figure_pairs.py)."""

from __future__ import annotations

from pathlib import Path

import torch
from _helpers.cli import run_cli
from safetensors.torch import save_file

from reconbench.bench import slice_pack

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "benchmarks" / "gpu" / "tiny.toml"


def test_the_note_names_each_cell_once_with_its_float16_size(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(slice_pack, "_LEFT_SAID", set())
    work = tmp_path / "work" / "big"
    work.mkdir(parents=True)
    save_file({"candidates": torch.zeros(1000, 3, 32, 32, dtype=torch.float64),
               "labels": torch.zeros(1000, dtype=torch.long)}, str(work / "candidates.safetensors"))
    slice_pack._say_candidates_left(["big", "gone"], tmp_path)
    slice_pack._say_candidates_left(["big", "gone"], tmp_path)   # the pack is rewritten after every cell
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln]
    mib = (1000 * 3072 * 2 + 1000 * 8) / 2**20   # float16 candidates, int64 labels as they are
    assert lines == [f"slice: the candidates of 2 sampled cell(s) stay on this machine (a pack file holds 16 MiB, "
                     f"shared with the other sampled cells): big ({mib:.1f} MiB in float16), gone; their figure "
                     "pairs travel instead"]


def test_a_slice_whose_sampled_candidates_do_not_fit_says_so(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(slice_pack, "_LEFT_SAID", set())
    monkeypatch.setattr(slice_pack, "_candidates_file", lambda out, cells, limit: (None, []))   # as if none fitted a file
    code, text, err = run_cli(["bench", str(TINY), "--device", "cpu", "--deadline", "600", "--pack",
                               str(tmp_path / "pack"), "--out", str(tmp_path / "device"), "--cache",
                               str(tmp_path / "cache"), "-q"], capsys)
    assert code == 0, text + err
    notes = [ln for ln in err.splitlines() if "sampled cell(s) stay on this machine" in ln]
    assert len(notes) == 1 and "MiB in float16" in notes[0], err
