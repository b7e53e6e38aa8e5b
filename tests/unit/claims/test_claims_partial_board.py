"""The claims page of a board grown over slices (``python -m reconbench.claims --gpu FOLDER``): its header says
"claims-gpu: k of N cells, from commits A (x cell(s)), B (y cell(s))", and a claim whose missing cells the board has
not run yet reads "not run yet (the board is partial)", apart from one not run for another reason (a stale cell, a
suite the page does not read). Read from a published board (its header) and from a results folder after ``bench
--unpack`` (its merges' invocation records), on synthetic claims-gpu cells."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from _helpers.claims_cells import write_cells

from reconbench.bench.cells import expand
from reconbench.bench.suite import load_suite
from reconbench.claims import page as P
from reconbench.claims import verdicts as V
from reconbench.claims.measure import comparison, point_specs

REPO = Path(__file__).resolve().parents[3]
A, B = "a" * 40, "b" * 40
SUITE = load_suite(P.GPU_SUITE)
PLANNED = len(expand(SUITE))


def _claims():
    data = P.records.load(REPO / P.records.DEFAULT_FILE)
    return [c for c in data.claims if c.measured and c.suite in (*P.GPU_ROUTED, P.GPU_SUITE)]


def _cells_of(claim) -> list[str]:
    comp = comparison(SUITE, claim.comparison)
    return [f"{target}--{attack}--{init}--s{seed}" for _, target, attack, init in point_specs(claim, comp)
            for seed in comp.seeds]


def _first_point(claim) -> list[str]:
    """The cells of a claim's first point, every seed."""
    comp = comparison(SUITE, claim.comparison)
    _, target, attack, init = point_specs(claim, comp)[0]
    return [f"{target}--{attack}--{init}--s{seed}" for seed in comp.seeds]


def _partial_folder(folder: Path, *, published: bool) -> tuple[str, str, list[str], list[str], dict[str, list[str]]]:
    """Every claims-gpu cell but those of one claim's first point (not run); the first point of a claim that reads
    none of them stale; the other cells, half from each of two slice packs at commits A and B. The claim waiting on the
    board, the one not run for its stale cells, the cells not run, the stale cells and the cells of each pack."""
    cells = write_cells(folder, P.GPU_SUITE, np.random.default_rng(3))
    claims = _claims()
    waiting = claims[0]
    gone = _first_point(waiting)
    stale = next(c for c in claims if not set(_cells_of(c)) & set(gone))
    for cid in gone:
        (folder / "cells" / f"{cid}.json").unlink()
        cells.pop(cid)
    spoilt = _first_point(stale)
    for cid in spoilt:   # a cell whose suite entry changed since it ran
        rec = cells.pop(cid)
        (folder / "cells" / f"{cid}.json").write_text(json.dumps({**rec, "cell_key": "0" * 16}))
    held = sorted(cells)
    halves = {A: held[::2], B: held[1::2]}
    if published:   # the header a publish writes: the page reads it as it is
        ok = PLANNED - len(gone) - len(spoilt)
        header = {"suite": P.GPU_SUITE, "progress": f"{ok} of {PLANNED} cells",
                  "cells": {"planned": PLANNED, "ok": ok, "failed": 0, "not_run": len(gone), "stale": len(spoilt)},
                  "git_commits": [A, B],
                  "cell_commits": [{"commit": c, "cells": len(ids) + len(spoilt) * (c == B), "packs": [c[:1] * 64],
                                    "cell_ids": sorted(ids + (spoilt if c == B else []))}
                                   for c, ids in halves.items()]}
        (folder / "results.json").write_text(json.dumps({"format": "reconbench-leaderboard/2", "header": header,
                                                          "not_run": gone, "stale": spoilt}))
    else:   # a results folder: each merge's invocation record names the seals of the cells its pack brought
        (folder / "invocations").mkdir()
        for k, (commit, ids) in enumerate(halves.items()):
            seals = {}
            for cid in ids:
                path = folder / "cells" / f"{cid}.json"
                path.write_text(json.dumps({**json.loads(path.read_text()), "record_sha256": f"seal-{cid}"}))
                seals[cid] = f"seal-{cid}"
            (folder / "invocations" / f"{k:03d}.json").write_text(json.dumps(
                {"invocation": k, "slice_pack": {"commit": commit, "device": "cuda",
                                                 "manifest_sha256": commit[:1] * 64, "cells": seals}}))
    return waiting.id, stale.id, gone, spoilt, halves


@pytest.mark.parametrize("published", [True, False], ids=["published board", "results folder"])
def test_a_partial_board_says_k_of_n_cells_and_its_commits_and_which_claims_wait_on_it(tmp_path, published):
    folder = tmp_path / "claims-gpu"
    waiting, stale, gone, spoilt, halves = _partial_folder(folder, published=published)
    page = P.generate({P.GPU_SUITE: folder}, root=REPO, gpu=True)
    # the board holds its stale cells (counted at B, where they ran); a results folder counts only current cells
    at_b = len(halves[B]) + (len(spoilt) if published else 0)
    assert (f"**How far the boards have grown.** `{P.GPU_SUITE}`: {PLANNED - len(gone) - len(spoilt)} of {PLANNED} "
            f"cells, from commits `{A[:12]}` ({len(halves[A])} cell(s)), `{B[:12]}` ({at_b} cell(s)).") in page
    rows = {ln.split("`")[1]: ln for ln in page.splitlines() if ln.startswith("| `")}
    assert f"**{V.NOT_RUN_YET}**" in rows[waiting]
    assert f"**{V.NOT_RUN}**" in rows[stale] and V.NOT_RUN_YET not in rows[stale]   # stale: not what waits
    # only claims that read a cell not run can wait on the board (others of the same block may too)
    data = P.records.load(REPO / P.records.DEFAULT_FILE)
    marked = [c for c in data.claims if f"**{V.NOT_RUN_YET}**" in rows[c.id]]
    assert all(c in _claims() and set(_cells_of(c)) & set(gone) for c in marked)
    outside = [c for c in data.claims if c.measured and c.suite not in (*P.GPU_ROUTED, P.GPU_SUITE)]
    assert outside and all(f"**{V.NOT_RUN}**: runs only in the" in rows[c.id] for c in outside)
    summary = page.split("## Summary")[1].split("\n\n")[1]
    assert f"{V.NOT_RUN_YET} {len(marked)}" in summary
    assert f"{len(marked)} claim(s) read *{V.NOT_RUN_YET}*" in page


def test_a_complete_board_of_one_commit_adds_no_line_and_no_mark(tmp_path):
    """Every cell run in one folder: the page is as before boards grew over slices."""
    folder = tmp_path / "claims-gpu"
    write_cells(folder, P.GPU_SUITE, np.random.default_rng(3))
    page = P.generate({P.GPU_SUITE: folder}, root=REPO, gpu=True)
    assert "How far the boards have grown" not in page and V.NOT_RUN_YET not in page
    gone = _first_point(_claims()[0])
    for cid in gone:   # cells not run, no slice: partial all the same
        (folder / "cells" / f"{cid}.json").unlink()
    page = P.generate({P.GPU_SUITE: folder}, root=REPO, gpu=True)
    assert f"`{P.GPU_SUITE}`: {PLANNED - len(gone)} of {PLANNED} cells." in page   # its records name no commit
    assert f"**{V.NOT_RUN_YET}**" in page
