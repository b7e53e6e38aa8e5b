"""A call that carries the ledger but only some of the training states it lists (travel_size.py's carry list for a
selection of cells, or a state left out by hand): the slice says in one line which state was not carried, leaves
that target's cells for a slice that carries it, and never trains the target again from step 0; the other targets'
cells run from their states as usual. A state that is there but does not match its sha256 is still refused."""

from __future__ import annotations

import json
import shutil

import pytest
from _helpers.cli import run_cli
from test_slice_card_travel import travelled  # noqa: F401  (the fixture: two targets' final states and cards)

from reconbench.bench.cells import expand
from reconbench.bench.slice_pack import LEDGER_FILE, PackError, import_states, states_not_carried

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_a_state_not_carried_defers_its_targets_cells_and_is_not_trained_again(travelled, tmp_path,  # noqa: F811
                                                                               capsys):
    suite, results, _ = travelled
    merged = tmp_path / "merged"
    shutil.copytree(results, merged)
    keys = sorted({c.recipe.key() for c in expand(suite)})
    gone, kept = keys
    state = merged / "training" / f"{gone}.safetensors"
    state.unlink()
    (merged / "training" / f"{gone}.card.json").unlink()
    assert states_not_carried(merged / LEDGER_FILE) == {gone: str(state)}
    cache = tmp_path / "cache"
    code, out, err = run_cli(["bench", str(suite.path), "--device", "cpu", "--deadline", "3000", "--pack",
                              str(tmp_path / "pack"), "--out", str(tmp_path / "device"), "--cache", str(cache),
                              "--finished", str(merged / LEDGER_FILE), "-q"], capsys)
    assert code == 0, out + err
    said = [ln for ln in err.splitlines() if "not carried" in ln]
    assert len(said) == 1 and gone in said[0] and kept not in said[0], err
    manifest = json.loads((tmp_path / "pack" / "manifest.json").read_text())
    theirs = {c.cell_id for c in expand(suite) if c.recipe.key() == gone}
    others = {c.cell_id for c in expand(suite) if c.recipe.key() == kept}
    assert set(manifest["cells"]) == others and theirs <= set(manifest["cells_remaining"])
    assert manifest["training"] == []   # nothing trained, nothing to carry back
    assert not (cache / "training" / f"{gone}.safetensors").exists()   # never started again from step 0
    assert not (cache / "targets" / gone).exists()
    for cid in theirs:
        assert any(cid in ln and "its training state was not carried" in ln for ln in out.splitlines()), out
    # a slice of only that target's cells: nothing runs, and it says why (not "pass a longer --deadline")
    code, out, err = run_cli(["bench", str(suite.path), "--device", "cpu", "--deadline", "3000", "--pack",
                              str(tmp_path / "pack2"), "--out", str(tmp_path / "device2"), "--cache",
                              str(tmp_path / "cache2"), "--finished", str(merged / LEDGER_FILE), "-q",
                              *(a for cid in sorted(theirs) for a in ("--only", cid))], capsys)
    assert code == 1 and "were not carried" in out and "longer --deadline" not in out, out + err
    assert not (tmp_path / "cache2" / "training" / f"{gone}.safetensors").exists()
    # a slice of the other target's cells needs no state of this one: nothing said
    code, out, err = run_cli(["bench", str(suite.path), "--device", "cpu", "--deadline", "3000", "--pack",
                              str(tmp_path / "pack3"), "--out", str(tmp_path / "device3"), "--cache",
                              str(tmp_path / "cache3"), "--finished", str(merged / LEDGER_FILE), "-q",
                              *(a for cid in sorted(others) for a in ("--only", cid))], capsys)
    assert code == 0 and "not carried" not in out + err, out + err


def test_a_state_that_is_there_but_does_not_match_is_still_refused(travelled, tmp_path):  # noqa: F811
    _, results, _ = travelled
    copy = tmp_path / "results"
    shutil.copytree(results, copy)
    state = next(iter((copy / "training").glob("*.safetensors")))
    data = bytearray(state.read_bytes())
    data[-1] ^= 1
    state.write_bytes(bytes(data))
    assert states_not_carried(copy / LEDGER_FILE) == {}
    with pytest.raises(PackError, match="does not match the sha256"):
        import_states(copy / LEDGER_FILE, tmp_path / "cache" / "training")
