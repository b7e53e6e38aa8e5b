"""The commit a slice names is the one its code ran at: ``RECONBENCH_SLICE_COMMIT`` where the caller gives it, over
the git metadata beside the code. A lent device machine's copy of the working tree can carry git metadata of an
older commit, clean (the one its session began at), while its files are a later commit's: the pack's manifest, its
cells' records and its invocation record must name the commit given, not that one, and a second slice continuing
from the ledger of a first one names its own commit, not the first's."""

from __future__ import annotations

import json
from collections import OrderedDict
from pathlib import Path

import pytest
from _helpers.cli import run_cli

from reconbench import provenance
from reconbench.bench.slice_commit import COMMIT_ENV, ran_commit
from reconbench.targets import defended

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TINY = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu" / "tiny.toml"
#: the clean commit the device's stale git metadata names, and the commits of the code of two slices
STALE, FIRST, SECOND = "e" * 40, "a" * 40, "b" * 40
CELLS = [f"digits-binary--haim_binary_kkt--{init}--s0" for init in ("gaussian", "uniform")]


def slice_at(tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch, commit: str, cell: str) -> Path:
    """One slice of the tiny suite on a bare device machine whose git metadata says ``STALE``, told its code's
    commit through the environment as ``benchmarks/gpu/slice.sh`` passes it; it continues from the ledger of
    ``tmp_path/local`` where there is one. Its pack."""
    monkeypatch.setattr(provenance, "_git_commit_once", lambda where: STALE)
    monkeypatch.setattr(defended, "_TRAINED", OrderedDict())   # a bare machine remembers no weights
    monkeypatch.setenv(COMMIT_ENV, commit)
    pack = tmp_path / f"pack-{commit[0]}"
    ledger = tmp_path / "local" / "finished.json"
    code, out, err = run_cli(["bench", str(TINY), "--device", "cpu", "--deadline", "600", "--pack", str(pack),
                              "--out", str(tmp_path / f"device-{commit[0]}"), "--cache",
                              str(tmp_path / f"cache-{commit[0]}"), "--only", cell, "-q",
                              *(["--finished", str(ledger)] if ledger.exists() else [])], capsys)
    assert code == 0, out + err
    monkeypatch.delenv(COMMIT_ENV)
    code, out, err = run_cli(["bench", str(TINY), "--unpack", str(pack), "--out", str(tmp_path / "local")], capsys)
    assert code == 0, out + err
    return pack


def test_the_commit_given_wins_over_the_git_metadata_beside_the_code(monkeypatch):
    monkeypatch.setattr(provenance, "_git_commit_once", lambda where: STALE)
    monkeypatch.delenv(COMMIT_ENV, raising=False)
    assert ran_commit() == STALE
    monkeypatch.setenv(COMMIT_ENV, f" {FIRST}\n")
    assert ran_commit() == FIRST
    monkeypatch.setenv(COMMIT_ENV, "  ")   # blank: not a commit
    assert ran_commit() == STALE


def test_a_second_slice_from_the_ledger_of_a_first_records_its_own_commit(tmp_path, capsys, monkeypatch):
    first = slice_at(tmp_path, capsys, monkeypatch, FIRST, CELLS[0])
    ledger = json.loads((tmp_path / "local" / "finished.json").read_text())
    assert sorted(ledger["cells"]) == [CELLS[0]]
    second = slice_at(tmp_path, capsys, monkeypatch, SECOND, CELLS[1])
    manifests = [json.loads((p / "manifest.json").read_text()) for p in (first, second)]
    assert [(m["commit"], m["cells"]) for m in manifests] == [(FIRST, [CELLS[0]]), (SECOND, [CELLS[1]])]
    local = tmp_path / "local"
    cells = {c["cell_id"]: c for c in (json.loads(p.read_text()) for p in (local / "cells").glob("*.json"))}
    assert {cid: c["provenance"]["git_commit"] for cid, c in cells.items()} == {CELLS[0]: FIRST, CELLS[1]: SECOND}
    invocations = [json.loads(p.read_text()) for p in sorted((local / "invocations").glob("*.json"))]
    # each merged invocation record: the slice's own record of its run, and the pack it came in
    assert sorted((i["git_commit"], i["slice_pack"]["commit"]) for i in invocations) == [(FIRST, FIRST),
                                                                                         (SECOND, SECOND)]
