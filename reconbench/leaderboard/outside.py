"""Outside submissions across a re-publication: a board rendered again from its suite's results folder keeps the
submissions it took in (``leaderboard add``) whose cells still fit it.

:func:`snapshot` reads a board's submissions (header record, suite addition, entries, stored candidates, the
protocols they name) before the board is rendered again; :func:`restore` puts back every submission that still fits
the new board and renders its tables and README.md again with the suite extended by their additions, as ``add``
does. A submission is dropped, with a one-line reason, when the suite file changed (its cells ran with the
earlier one: the board's text with its addition no longer hashes to its ``suite_sha256``), when one of its cells is
now one of the suite's own, or when a cell's target is no longer on the board with the same recipe hash and model
card (content sha256).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reconbench.bench.cells import expand as expand_suite
from reconbench.bench.suite import Suite
from reconbench.errors import ReconbenchError
from reconbench.leaderboard.results_file import read_results, write_results
from reconbench.leaderboard.slim import candidates_file, stored_candidate_ids
from reconbench.leaderboard.submit import SUBMISSIONS_DIR, sha256_text, suite_from_text
from reconbench.provenance import write_text_atomic


@dataclass
class Snapshot:
    """A board's outside submissions as they were before it was rendered again."""

    records: list[dict[str, Any]] = field(default_factory=list)
    additions: dict[str, str] = field(default_factory=dict)
    entries: dict[str, dict[str, Any]] = field(default_factory=dict)
    texts: dict[str, str] = field(default_factory=dict)
    candidates: dict[str, tuple[str, bytes]] = field(default_factory=dict)
    protocols: dict[str, str] = field(default_factory=dict)


def snapshot(board: Path) -> Snapshot | None:
    """The outside submissions of ``board`` (None when it holds no board or none)."""
    if not (board / "results.json").exists():
        return None
    try:
        records = (read_results(board).get("header") or {}).get("submissions") or []
    except ReconbenchError:
        return None
    if not records:
        return None
    snap = Snapshot(records=[dict(r) for r in records])
    for rec in records:
        sid = str(rec.get("id"))
        path = board / SUBMISSIONS_DIR / f"{sid}.toml"
        if path.exists():
            snap.additions[sid] = path.read_text()
        for cid in rec.get("cells") or []:
            cell = board / "cells" / f"{cid}.json"
            if cell.exists():
                snap.texts[cid] = cell.read_text()
                entry = json.loads(snap.texts[cid])
                snap.entries[cid] = entry
                ref = (entry.get("evaluation") or {}).get("protocol_ref")
                if ref and (board / "protocols" / f"{ref}.json").exists():
                    snap.protocols[ref] = (board / "protocols" / f"{ref}.json").read_text()
            if (stored := candidates_file(board, cid)) is not None:
                snap.candidates[cid] = (stored.name, stored.read_bytes())
    return snap


def _card_sha256(board: Path, key: str) -> str | None:
    try:
        return json.loads((board / "targets" / f"{key}.json").read_text()).get("content_sha256")  # type: ignore[no-any-return]
    except (OSError, json.JSONDecodeError):
        return None


def _why_dropped(rec: dict[str, Any], snap: Snapshot, base: str, board: Path, own: set[str]) -> str | None:
    """Why a submission no longer fits the re-rendered board (None: it fits)."""
    sid = str(rec.get("id"))
    addition = snap.additions.get(sid)
    if addition is None:
        return f"its suite addition {SUBMISSIONS_DIR}/{sid}.toml is missing"
    if sha256_text(base + addition) != rec.get("suite_sha256"):
        return ("the suite file changed since it was taken in (its cells ran with the earlier one); run them again "
                "with the new file and submit them again")
    for cid in rec.get("cells") or []:
        entry = snap.entries.get(cid)
        if entry is None:
            return f"its cell {cid} was missing from the board"
        if cid in own:
            return f"its cell {cid} is now one of the suite's own cells"
        target = entry.get("target") or {}
        key = str(target.get("recipe_key"))
        if not (board / "targets" / f"{key}.json").exists():
            return f"the target of its cell {cid} (recipe hash {key}) is no longer on the board"
        want = target.get("card_sha256")
        if want is not None and want != _card_sha256(board, key):
            return (f"the board's target {key} now has another model card (content sha256) than the one its cell "
                    f"{cid} attacked")
    return None


def restore(snap: Snapshot | None, suite: Suite, board: Path) -> tuple[dict[str, Any] | None, list[str]]:
    """Put back into the re-rendered ``board`` the submissions of ``snap`` that still fit it; the new results.json
    (None when nothing was put back) and one line for each submission dropped, naming it and why."""
    if snap is None:
        return None, []
    from reconbench.leaderboard.accept import merge_tables, outside_cells
    from reconbench.leaderboard.verify import rerender_readme

    shutil.rmtree(board / SUBMISSIONS_DIR, ignore_errors=True)   # the kept ones are written again below
    base = suite.path.read_text()
    own = {c.cell_id for c in expand_suite(suite)}
    kept, dropped = [], []
    for rec in snap.records:
        why = _why_dropped(rec, snap, base, board, own)
        if why is None:
            kept.append(rec)
        else:
            dropped.append(f"outside submission {rec.get('id')} ({len(rec.get('cells') or [])} cell(s)) dropped: {why}")
    if not kept:
        return None, dropped
    for rec in kept:
        sid = str(rec["id"])
        (board / SUBMISSIONS_DIR).mkdir(exist_ok=True)
        write_text_atomic(board / SUBMISSIONS_DIR / f"{sid}.toml", snap.additions[sid])
        for cid in rec["cells"]:
            write_text_atomic(board / "cells" / f"{cid}.json", snap.texts[cid])
            ref = (snap.entries[cid].get("evaluation") or {}).get("protocol_ref")
            if ref in snap.protocols and not (board / "protocols" / f"{ref}.json").exists():
                write_text_atomic(board / "protocols" / f"{ref}.json", snap.protocols[ref])
            if cid in snap.candidates:
                name, raw = snap.candidates[cid]
                (board / "candidates").mkdir(exist_ok=True)
                (board / "candidates" / name).write_bytes(raw)
    data = read_results(board)
    data = {**data, "header": {**data["header"], "submissions": kept}}
    ext = suite_from_text(base + "".join(snap.additions[str(r["id"])] for r in kept), suite)
    merged = merge_tables(ext, board, data, outside_cells(board, data))
    merged["stored_candidates"] = stored_candidate_ids(board)
    write_results(board, merged)
    write_text_atomic(board / "README.md", rerender_readme(ext, board, merged))
    return merged, dropped
