"""benchmarks/gpu/tracked_ledger.py: the tracked home of a suite's GPU results. `keep` writes the ledger, the states
of targets with cells left in the suite's cell order within the cap (one line naming each left out), and the records a
publication reads; `restore` rebuilds an absent results folder from it, byte for byte where it copies and through
xz where it compresses; no absolute path goes into the home."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _helpers.examples import load_module

from reconbench.bench.cells import expand
from reconbench.bench.suite import load_suite

ROOT = Path(__file__).resolve().parents[3]
tl = load_module("gpu_tracked_ledger", ROOT / "benchmarks" / "gpu" / "tracked_ledger.py")
#: the recipe keys of paper's targets, in the order of its cells
KEYS = list(dict.fromkeys(c.recipe.key() for c in expand(load_suite("paper"))))


def write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def results_folder(root: Path, sizes: dict[str, int], *, partial: bool = False, measured: object = None) -> Path:
    """A `paper` results folder: a state of ``sizes`` bytes (and a 100-byte card) per key, one finished cell's record
    and figure pairs, a target record, an invocation and the suite's copy."""
    r = root / "runs" / "bench" / "paper"
    training: dict[str, object] = {}
    for key, n in sizes.items():
        write(r / "training" / f"{key}.safetensors", bytes([len(training)]) * n)
        write(r / "training" / f"{key}.card.json", b"{" + b" " * 98 + b"}")
        training[key] = {"file": f"training/{key}.safetensors", "sha256": "0" * 64, "step": 7, "dtype": "torch.float32",
                         "card": {"file": f"training/{key}.card.json", "sha256": "1" * 64}}
    ledger: dict[str, object] = {"format": "reconbench-finished-cells/3", "suite": "paper", "cells": {
        "c1": {"cell_key": "k", "status": "ok"}}, "training": training, "measured": measured or []}
    if partial:
        ledger["partial"] = {"c2": {"cell_key": "k2", "search_runs": 16, "runs": [0, 1]}}
    (r / "finished.json").write_text(json.dumps(ledger))
    write(r / "cells" / "c1.json", json.dumps({"cell_id": "c1", "evaluation": list(range(2000))}).encode())
    write(r / "targets" / "t1.json", json.dumps({"card": "x" * 5000}).encode())
    write(r / "invocations" / "000.json", b'{"invocation": 0}')
    write(r / "work" / "c1" / "figure_pairs.safetensors", b"\x00\x01" * 300)
    write(r / "work" / "c1" / "runs" / "run-0.safetensors", b"big" * 100)   # a cell's own runs: not a record
    write(r / "suite.toml", b"[suite]\nname = 'paper'\n")
    return r


def files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_keep_then_restore_gives_back_the_results_folder(tmp_path):
    results = results_folder(tmp_path, {KEYS[0]: 1000, KEYS[1]: 2000})
    home = tmp_path / "home"
    kept = tl.keep("paper", results, home, cap=10**6)
    assert kept.states == KEYS[:2] and kept.left_out == []
    assert (home / "records" / "cells" / "c1.json.xz").stat().st_size < (results / "cells" / "c1.json").stat().st_size
    before = files(results)
    results.rename(tmp_path / "gone")   # a new checkout
    assert tl.restore(home, results) > 0
    after = files(results)
    del before["work/c1/runs/run-0.safetensors"]   # a cell's search runs are no record a publication reads
    assert json.loads(after.pop("finished.json")) == json.loads(before.pop("finished.json"))
    assert after == before
    write(results / "cells" / "new.json", b"{}")   # an existing results folder is left as it is
    assert tl.restore(home, results) == 0 and (results / "cells" / "new.json").is_file()


def test_the_cap_keeps_states_in_the_suites_cell_order_and_names_what_it_leaves_out(tmp_path):
    sizes = {KEYS[2]: 500, KEYS[0]: 700, KEYS[1]: 900}   # listed out of the cells' order
    results = results_folder(tmp_path, sizes, partial=True)
    home = tmp_path / "home"
    kept = tl.keep("paper", results, home, cap=700 + 100 + 500 + 100)   # KEYS[1] after KEYS[0] passes it
    assert kept.states == [KEYS[0], KEYS[2]]
    assert len(kept.left_out) == 2 and all("\n" not in line for line in kept.left_out)
    assert kept.left_out[0].startswith(f"training state {KEYS[1]} (0.0 MiB) not kept: ")
    assert "c2" in kept.left_out[1] and "not kept" in kept.left_out[1]
    ledger = json.loads((home / "finished.json").read_text())
    assert sorted(ledger["training"]) == sorted([KEYS[0], KEYS[2]]) and "partial" not in ledger
    assert sorted(p.name for p in (home / "training").iterdir()) == sorted(
        f"{k}{suffix}" for k in (KEYS[0], KEYS[2]) for suffix in (".safetensors", ".card.json"))
    tl.keep("paper", results, home, cap=0)   # kept again: what the home held before is replaced
    assert not list((home / "training").iterdir())


#: the two paper-size states and cards the H200 occasion brought back (CIFAR-10 binary, MNIST binary): bytes of each
H200_STATES = ((8_560_680, 690_234), (8_560_752, 689_830))


def test_the_default_cap_keeps_both_binary_states_with_their_cards_and_not_a_third(tmp_path, capsys):
    """`keep` without --cap-mib: the state (its card included) of the H200's size of the first target in the cells'
    order is kept; the second and third, of the same sizes, are left out, one line each."""
    (state0, card0), (state1, card1) = H200_STATES
    # results_folder writes a 100-byte card beside each state: the state files carry the rest of the card's bytes
    sizes = {KEYS[0]: state0 + card0 - 100, KEYS[1]: state1 + card1 - 100, KEYS[2]: state0 + card0 - 100}
    results = results_folder(tmp_path, sizes)
    home = tmp_path / "home"
    assert tl.main(["keep", "paper", "--results", str(results), "--home", str(home)]) == 0
    out, err = capsys.readouterr()
    assert f"1 training state(s) ({KEYS[0]})" in out
    lines = err.strip().splitlines()
    assert len(lines) == 2 and all("not kept" in line for line in lines)
    assert lines[0].startswith(f"note: training state {KEYS[1]} ") and lines[1].startswith(f"note: training state {KEYS[2]} ")
    kept = sum(p.stat().st_size for p in (home / "training").iterdir())
    assert kept == state0 + card0 <= tl.CAP_MIB * 2**20 < state0 + card0 + state1 + card1


def test_an_absolute_path_never_enters_the_home_and_bad_input_is_one_line(tmp_path, capsys):
    results = results_folder(tmp_path, {KEYS[0]: 10}, measured=[{"cell": "/" + "root/out/pack", "phase": "train"}])
    with pytest.raises(tl.LedgerError, match="absolute paths"):
        tl.keep("paper", results, tmp_path / "home", cap=10**6)
    assert not (tmp_path / "home").exists()
    assert tl.main(["keep", "paper", "--results", str(tmp_path / "nowhere"), "--home", str(tmp_path / "h")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "finished.json does not exist" in err and "--results" in err
    assert tl.main(["restore", "paper", "--results", str(tmp_path / "r"), "--home", str(tmp_path / "h")]) == 2
    assert "nothing to restore" in capsys.readouterr().err
