"""A slice's model card of a target the results folder already has a card of (``reconbench/bench/card_clash.py``),
on the real packs of two slices that each trained the tiny suite's target on a bare machine: their cards differ
only in the seconds measured while making them (same weights), which passes; a folder card of other weights is
refused in one line naming both cards and the fix."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest
import torch
from _helpers.partial_board import build_partial_board

from reconbench.bench.card_clash import CardClash, card_identity, refuse_other_weights


def _members(pack: Path) -> dict[str, bytes]:
    """Every member of the pack's records archives, read with tarfile."""
    out = {}
    for archive in pack.glob("*.tar.xz"):
        with tarfile.open(archive, mode="r:xz") as tar:
            for info in tar.getmembers():
                fh = tar.extractfile(info)
                if fh is not None:
                    out[info.name] = fh.read()
    return out


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder of the two slices' packs (``pack-a``, ``pack-b``) and of the results folder they merged into."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        folder = tmp_path_factory.mktemp("clash")
        build_partial_board(folder, figures=False)
        return folder
    finally:
        torch.set_num_threads(before)


def test_a_second_slices_card_of_the_same_weights_passes_and_one_of_other_weights_is_refused(root, tmp_path):
    members = _members(root / "pack-b")
    (name,) = [n for n in members if n.startswith("targets/")]
    kept = (root / "local" / name).read_bytes()
    assert kept != members[name]   # the second slice trained the target again: its card is another file
    ours, theirs = card_identity(kept), card_identity(members[name])
    assert ours is not None and theirs is not None and ours.weights == theirs.weights and ours.same_model(theirs)
    refuse_other_weights(root / "local", members, root / "pack-b")   # same weights: the folder keeps its own

    folder = tmp_path / "local"
    (folder / "targets").mkdir(parents=True)
    (folder / "cells").mkdir()
    for cell in (root / "local" / "cells").glob("*.json"):
        (folder / "cells" / cell.name).write_bytes(cell.read_bytes())
    card = json.loads(kept)
    card["weights"]["sha256"] = "f" * 64   # a training of other weights
    (folder / name).write_text(json.dumps(card))
    with pytest.raises(CardClash) as caught:
        refuse_other_weights(folder, members, root / "pack-b")
    message = str(caught.value)
    assert "\n" not in message and "Nothing was merged" in message
    assert f"weights sha256 {'f' * 16}" in message and f"weights sha256 {theirs.weights[:16]}" in message
    assert str(folder / name) in message and "2 cell(s) of that target" in message   # both cells of the folder
    assert "--unpack again" in message


def test_cards_that_do_not_read_or_are_absent_are_left_to_the_merge(tmp_path):
    folder = tmp_path / "local"
    (folder / "targets").mkdir(parents=True)
    card = {"format": "reconbench-card/1", "weights": {"sha256": "a" * 64}}
    members = {"targets/0123456789abcdef.json": json.dumps(card).encode(), "cells/x.json": b"{}"}
    refuse_other_weights(folder, members, tmp_path / "pack")   # the folder has no card of it: added by the merge
    (folder / "targets" / "0123456789abcdef.json").write_bytes(b"not json")
    refuse_other_weights(folder, members, tmp_path / "pack")   # unreadable: the merge's own checks name it
    other = {**card, "problem": {"train_sha256": "b" * 64}}   # the same weights' hash, other training images
    (folder / "targets" / "0123456789abcdef.json").write_text(json.dumps(other))
    with pytest.raises(CardClash, match="0 cell\\(s\\) of that target"):
        refuse_other_weights(folder, members, tmp_path / "pack")


def test_bench_unpack_refuses_a_pack_whose_card_is_of_other_weights_and_merges_nothing(root, tmp_path):
    """Through the command: the folder's card altered to other weights, ``bench --unpack`` of the second pack stops
    in one line and leaves the folder's cells as they were."""
    from _helpers.cli import run_cli_redirected as cli
    from _helpers.partial_board import TINY

    folder = tmp_path / "local"
    (folder / "targets").mkdir(parents=True)
    (folder / "cells").mkdir()
    for sub in ("cells", "targets"):
        for f in (root / "local" / sub).glob("*.json"):
            (folder / sub / f.name).write_bytes(f.read_bytes())
    name = next(n for n in _members(root / "pack-b") if n.startswith("targets/"))
    card = json.loads((folder / name).read_text())
    card["weights"]["sha256"] = "f" * 64
    (folder / name).write_text(json.dumps(card))
    b_cells = json.loads((root / "pack-b" / "manifest.json").read_text())["cells"]
    for cid in b_cells:   # the second slice's cell not yet merged here
        (folder / "cells" / f"{cid}.json").unlink(missing_ok=True)
    cells_before = sorted(p.name for p in (folder / "cells").glob("*.json"))
    code, out, err = cli(["bench", str(TINY), "--unpack", str(root / "pack-b"), "--out", str(folder)])
    assert code != 0
    line = [x for x in (out + err).splitlines() if "weights sha256" in x]
    assert len(line) == 1 and "Nothing was merged" in line[0], out + err
    assert sorted(p.name for p in (folder / "cells").glob("*.json")) == cells_before
