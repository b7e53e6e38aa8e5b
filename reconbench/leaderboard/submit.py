"""Outside submissions: a contributor's cells packed into one file that a board can check and take in.

A contributor copies the board's suite file, appends their own tables at its end (an ``[attacks.LABEL]`` table and
``[[grid]]`` blocks naming the board's targets and inits), runs it with their plugin (``reconbench bench FILE --only
'*LABEL*'``), and packs the new cells with :func:`pack` (``reconbench leaderboard submit``). The file
(:data:`SUBMISSION_FORMAT`) holds

* ``board``: the board's suite name and the sha256 of the suite file it was rendered from;
* ``suite_addition``: the text appended to that file, and ``suite_sha256``: the sha256 of the whole file the cells
  ran with (the board's text followed by the addition);
* ``entries``: each cell as a slim board entry (``bench/entries.py``, schema ``reconbench-board-entry/1``), with
  ``protocols`` (the evaluation protocols they name) and ``cards`` (the contributor's model cards, for the record);
* ``candidates``: each finished cell's pooled candidates (safetensors bytes in base64, in the attack's precision),
  which ``leaderboard add`` re-scores with the standard evaluation;
* ``provenance``: commits, versions, machines and commands of the run, and who submits;
* ``record_sha256``: the seal of the file (``bench/seal.py``).

``leaderboard/accept.py`` validates a submission against a board and merges it.
"""

from __future__ import annotations

import base64
import hashlib
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from safetensors.torch import load_file, save

from reconbench.bench import machine
from reconbench.bench.cells import expand
from reconbench.bench.entries import make_entry
from reconbench.bench.runner import STATUS_OK, card_reader, load_cells
from reconbench.bench.seal import sealed
from reconbench.bench.suite import Suite, load_suite
from reconbench.errors import ReconbenchError
from reconbench.leaderboard.plain_text import check_contributor
from reconbench.leaderboard.slim import in_attack_precision, shown_keys
from reconbench.leaderboard.tables import read_invocations
from reconbench.records import BoardResults, CellRecord, Invocation

#: schema of a submission file
SUBMISSION_FORMAT = "reconbench-submission/1"
#: where a board keeps the suite additions of the submissions it took in (``<id>.toml``)
SUBMISSIONS_DIR = "submissions"


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def board_results(board: Path) -> dict[str, Any]:
    """A published board's results.json, or a one-line error naming the folder."""
    from reconbench.leaderboard.results_file import read_results

    path = board / "results.json"
    if not path.exists():
        raise ReconbenchError(f"{board} holds no leaderboard (no results.json); pass --board with a published "
                              "board folder, e.g. leaderboards/ci")
    data = read_results(board)
    if "header" not in data:   # read strictly by its version: the header, when there, is an object
        raise ReconbenchError(f"{path} is not a leaderboard's results.json; restore the board")
    return data


def split_suite_text(text: str, board_sha256: str) -> tuple[str, str] | None:
    """The board's suite text and what follows it, when ``text`` begins (at a line start) with a text whose sha256
    is ``board_sha256``; else None."""
    cuts = [0] + [i + 1 for i, ch in enumerate(text) if ch == "\n"] + [len(text)]
    for cut in sorted(set(cuts), reverse=True):
        if sha256_text(text[:cut]) == board_sha256:
            return text[:cut], text[cut:]
    return None


def suite_from_text(text: str, like: Suite) -> Suite:
    """A suite read from ``text`` (written to a temporary file), with the name, path and sha256 of ``like``: a board's
    suite with the additions of its outside submissions keeps the identity of the file it was rendered from."""
    import dataclasses

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / like.path.name
        path.write_text(text)
        ext = load_suite(path)
    return dataclasses.replace(ext, path=like.path, text_sha256=like.text_sha256)


def board_additions(board: Path, data: dict[str, Any] | None = None) -> list[str]:
    """The suite additions of the submissions a board took in, in the order it took them."""
    data = data if data is not None else board_results(board)
    out = []
    for sub in BoardResults.from_dict(data).header.submissions or []:
        path = board / SUBMISSIONS_DIR / f"{sub.id}.toml"
        try:
            out.append(path.read_text())
        except OSError:
            raise ReconbenchError(f"{path} is missing: the board names outside submission {sub.id}; restore "
                                  "the file from the board's history") from None
    return out


def board_suite(suite: Suite, board: Path) -> Suite:
    """The suite a board is rendered from: ``suite`` itself, or with the additions of the board's outside
    submissions appended when it took any in."""
    if not (board / "results.json").exists():
        return suite
    additions = board_additions(board)
    if not additions:
        return suite
    return suite_from_text(suite.path.read_text() + "".join(additions), suite)


def _candidates_b64(path: Path, dtype: str | None) -> str:
    tensors = in_attack_precision(load_file(str(path)), dtype)
    return base64.b64encode(save({k: v.contiguous() for k, v in tensors.items()})).decode()


def pack(run_dir: Path, board: Path, contributor: str | None = None) -> dict[str, Any]:
    """The submission of the cells in ``run_dir`` (a ``reconbench bench`` results folder) that ``board`` does not
    hold; refuses, naming the fix, when the run's suite is not the board's with tables appended."""
    contributor = check_contributor(contributor)
    header = BoardResults.from_dict(board_results(board)).header
    text_path = run_dir / "suite.toml"
    if not text_path.is_file():
        raise ReconbenchError(f"{run_dir} holds no suite.toml; pass the results folder `reconbench bench` wrote "
                              "(its --out)")
    text = text_path.read_text()
    parts = split_suite_text(text, str(header.suite_sha256))
    if parts is None:
        rendered_at = header.rendered_commit or "?"
        raise ReconbenchError(f"{text_path} does not begin with the suite file {board} was rendered from (sha256 "
                              f"{str(header.suite_sha256)[:16]}, {header.suite_file} at commit "
                              f"{rendered_at[:12]}); copy that "
                              "file unchanged, append your tables at its end and run the cells again")
    addition = parts[1]
    if not addition.strip():
        raise ReconbenchError(f"{text_path} is the board's suite file with nothing appended: a submission adds an "
                              "[attacks.LABEL] table and [[grid]] blocks at its end")
    suite = load_suite(text_path)
    plan = {c.cell_id: c for c in expand(suite)}
    on_board = {p.stem for p in (board / "cells").glob("*.json")}
    raw = {cid: rec for cid, rec in load_cells(run_dir).items() if cid in plan and cid not in on_board}
    records = {cid: CellRecord.from_dict(rec) for cid, rec in raw.items()}
    if not records:
        raise ReconbenchError(f"{run_dir} holds no cell that {board} lacks; run the cells your appended tables add "
                              f"(reconbench bench {text_path} --only '*LABEL*' --out {run_dir})")
    cards = card_reader(board)
    own_cards = card_reader(run_dir)
    protocols: dict[str, dict[str, Any]] = {}
    entries, candidates, contributed_cards = [], {}, {}
    for cid, rec in sorted(records.items()):
        key = str(rec.target.recipe_key)
        entries.append(make_entry(raw[cid], shown_keys(suite), cards(key), protocols))
        if (card := own_cards(key)) is not None:
            contributed_cards[key] = card
        src = run_dir / rec.work_dir / "candidates.safetensors"
        if rec.status == STATUS_OK and src.exists():
            candidates[cid] = _candidates_b64(src, rec.dtype)
    invocations = [Invocation.from_dict(i) for i in read_invocations(run_dir)]
    sub = {
        "format": SUBMISSION_FORMAT,
        "board": {"suite": header.suite, "suite_sha256": header.suite_sha256},
        "suite_sha256": sha256_text(text),
        "suite_addition": addition,
        "entries": entries,
        "protocols": protocols,
        "cards": contributed_cards,
        "candidates": candidates,
        "provenance": {
            "contributor": contributor,
            "git_commits": sorted({r.git_commit for r in records.values()}),
            "reconbench_versions": sorted({r.reconbench_version for r in records.values()}),
            "machines": sorted({machine.one_line(dict(i.machine)) for i in invocations if i.machine}),
            "commands": [i.command for i in invocations],
            "packed": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        },
    }
    return sealed(sub)


def submission_text(sub: dict[str, Any]) -> str:
    return json.dumps(sub, separators=(",", ":"), allow_nan=True) + "\n"
