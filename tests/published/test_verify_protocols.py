"""`--verify` checks each protocol a board stores once (``protocols/<ref>.json``) against the hash it is named by:
the entries' seals cover the name, so an edited protocol would otherwise change how their rows expand unnoticed."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from reconbench.leaderboard.verify import check_entries

ROOT = Path(__file__).resolve().parents[2]


def _ref(data: object) -> str:
    """The name a board gives a protocol, computed here from its definition (docs/leaderboard-entries.md): the first
    16 hex digits of the sha256 of its JSON with sorted keys and no spaces."""
    return hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


def test_every_published_protocol_is_named_by_its_hash():
    paths = sorted(ROOT.glob("leaderboards/*/protocols/*.json"))
    assert paths
    assert [p for p in paths if _ref(json.loads(p.read_text())) != p.stem] == []


def test_an_edited_protocol_is_refused(tmp_path):
    board = tmp_path / "precision-cpu"
    shutil.copytree(ROOT / "leaderboards" / "precision-cpu", board)
    assert check_entries(board).problems == []
    path = sorted((board / "protocols").glob("*.json"))[0]
    data = json.loads(path.read_text())
    data["protocol"]["metrics"]["ssim"]["config"]["window_size"] = 7
    path.write_text(json.dumps(data))
    problems = check_entries(board).problems
    assert len(problems) == 1 and problems[0].startswith(f"{path}: its contents do not hash to the name"), problems
