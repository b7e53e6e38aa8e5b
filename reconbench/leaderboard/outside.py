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
from reconbench.provenance import write_bytes_atomic, write_text_atomic
from reconbench.records import BoardResults, CardData, CellRecord, Submission
from reconbench.safe_paths import member


@dataclass
class Snapshot:
    """A board's outside submissions as they were before it was rendered again."""

    records: list[Submission] = field(default_factory=list)
    additions: dict[str, str] = field(default_factory=dict)
    entries: dict[str, CellRecord] = field(default_factory=dict)
    texts: dict[str, str] = field(default_factory=dict)
    candidates: dict[str, tuple[str, bytes]] = field(default_factory=dict)
    protocols: dict[str, str] = field(default_factory=dict)


def snapshot(board: Path) -> Snapshot | None:
    """The outside submissions of ``board`` (None when it holds no board or none)."""
    if not (board / "results.json").exists():
        return None
    try:
        records = [s for s in BoardResults.from_dict(read_results(board)).header.submissions or []
                   if isinstance(s, Submission)]
    except ReconbenchError:
        return None
    if not records:
        return None
    snap = Snapshot(records=records)
    for rec in records:
        sid = rec.id
        path = member(board / SUBMISSIONS_DIR, sid, ".toml", "submission id", source=board / "results.json")
        if path.exists():
            snap.additions[sid] = path.read_text()
        for cid in rec.cells:
            cell = member(board / "cells", cid, ".json", "cell id", source=board / "results.json")
            if cell.exists():
                snap.texts[cid] = cell.read_text()
                entry = CellRecord.from_dict(json.loads(snap.texts[cid]), cell)
                snap.entries[cid] = entry
                ref = entry.protocol_ref
                if ref and (protocol := member(board / "protocols", ref, ".json", "protocol hash", source=cell)).exists():
                    snap.protocols[ref] = protocol.read_text()
            if (stored := candidates_file(board, cid)) is not None:
                snap.candidates[cid] = (stored.name, stored.read_bytes())
    return snap


def _card_sha256(board: Path, key: str) -> str | None:
    try:
        return CardData.from_dict(json.loads((board / "targets" / f"{key}.json").read_text())).content_sha256
    except (OSError, json.JSONDecodeError, ReconbenchError):
        return None


def _why_dropped(rec: Submission, snap: Snapshot, base: str, board: Path, own: set[str]) -> str | None:
    """Why a submission no longer fits the re-rendered board (None: it fits)."""
    sid = rec.id
    if sid not in snap.additions:
        return f"its suite addition {SUBMISSIONS_DIR}/{sid}.toml is missing"
    if sha256_text(base + snap.additions[sid]) != rec.suite_sha256:
        return ("the suite file changed since it was taken in (its cells ran with the earlier one); run them again "
                "with the new file and submit them again")
    for cid in rec.cells:
        if cid not in snap.entries:
            return f"its cell {cid} was missing from the board"
        if cid in own:
            return f"its cell {cid} is now one of the suite's own cells"
        target = snap.entries[cid].target
        key = str(target.recipe_key)
        if not (board / "targets" / f"{key}.json").exists():
            return f"the target of its cell {cid} (recipe hash {key}) is no longer on the board"
        want = target.card_sha256
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
    from reconbench.leaderboard.readme import rerender_readme

    shutil.rmtree(board / SUBMISSIONS_DIR, ignore_errors=True)   # the kept ones are written again below
    base = suite.path.read_text()
    own = {c.cell_id for c in expand_suite(suite)}
    kept, dropped = [], []
    for rec in snap.records:
        why = _why_dropped(rec, snap, base, board, own)
        if why is None:
            kept.append(rec)
        else:
            dropped.append(f"outside submission {rec.id} ({len(rec.cells)} cell(s)) dropped: {why}")
    if not kept:
        return None, dropped
    for rec in kept:
        sid = rec.id
        (board / SUBMISSIONS_DIR).mkdir(exist_ok=True)
        write_text_atomic(board / SUBMISSIONS_DIR / f"{sid}.toml", snap.additions[sid])
        for cid in rec.cells:
            write_text_atomic(board / "cells" / f"{cid}.json", snap.texts[cid])
            ref = snap.entries[cid].protocol_ref
            if ref in snap.protocols and not (board / "protocols" / f"{ref}.json").exists():
                write_text_atomic(board / "protocols" / f"{ref}.json", snap.protocols[ref])
            if cid in snap.candidates:
                name, raw = snap.candidates[cid]
                (board / "candidates").mkdir(exist_ok=True)
                write_bytes_atomic(board / "candidates" / name, raw)
    data = read_results(board)
    data = {**data, "header": {**data["header"], "submissions": [r.to_dict() for r in kept]}}
    ext = suite_from_text(base + "".join(snap.additions[r.id] for r in kept), suite)
    merged = merge_tables(ext, board, data, outside_cells(board, data))
    merged["stored_candidates"] = stored_candidate_ids(board)
    write_results(board, merged)
    write_text_atomic(board / "README.md", rerender_readme(ext, board, merged))
    return merged, dropped
