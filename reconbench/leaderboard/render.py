"""The whole build of a leaderboard: collect the cells, compute the tables, write results.json and the README
(``readme.py``), draw the figures, sample candidates for the re-scoring test."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

from reconbench.bench.runner import STATUS_OK
from reconbench.bench.suite import Suite
from reconbench.errors import ReconbenchError
from reconbench.leaderboard import outside
from reconbench.leaderboard.board_cards import write_board_card
from reconbench.leaderboard.figures import draw_all
from reconbench.leaderboard.manifest import write_manifest
from reconbench.leaderboard.privacy import privacy_section
from reconbench.leaderboard.readme import render_readme
from reconbench.leaderboard.results_file import write_results
from reconbench.leaderboard.slice_origins import PACK_PROBLEMS, cell_origins, publish_problems
from reconbench.leaderboard.slim import compact_figures, sample_size, store_sample, write_entry
from reconbench.leaderboard.tables import (
    LEADERBOARD_FORMAT,
    SELECTIONS,
    Published,
    collect,
    column_record,
    comparison_rows,
    header_info,
    main_rows,
    resolve_columns,
    target_rows,
)
from reconbench.provenance import git_commit, write_json, write_text_atomic
from reconbench.records import BoardResults, Figure
from reconbench.safe_paths import member

#: a sampled cell whose candidates file is larger is skipped for the next one (keeps published folders small)
MAX_SAMPLED_CANDIDATE_BYTES = 1 << 20


def sample_for_candidates(ok_ids: list[str], k: int | None) -> list[str]:
    """All ids (k None), or every id in a deterministic order (the hash of the id) to draw a sample of k from."""
    if k is None:
        return sorted(ok_ids)
    return sorted(ok_ids, key=lambda c: hashlib.sha256(c.encode()).hexdigest())


def check_publishable(pub: Published, tree_commit: str | None) -> None:
    """A published leaderboard is rendered at a clean commit; the cells run in its results folder ran there too, and
    the cells merged from slice packs ran at clean commits, one per pack (``slice_origins.publish_problems``; a cell
    no pack brought counts as run in the folder, at the commit its record names)."""
    problems = publish_problems(pub.records, cell_origins(pub.records, pub.packs), tree_commit)
    if problems and all(p.startswith(PACK_PROBLEMS) for p in problems):   # each names its own fix
        raise ReconbenchError("refusing to publish: " + "; ".join(problems) + " (docs/slices.md)")
    if problems:
        raise ReconbenchError("refusing to publish: " + "; ".join(problems) + ". Commit, re-run `reconbench bench "
                              "SUITE` from the clean checkout into an empty results folder (--resume would keep the "
                              "cells finished elsewhere), then publish from the same commit; cells merged with "
                              "`bench --unpack` from slices at clean commits may stay (docs/slices.md)")


def build_leaderboard(
    suite: Suite,
    results: Path,
    out: Path,
    *,
    command: str = "",
    data_root: str | None = None,
    figures: bool | None = None,
    publish: bool = False,
    note: str | None = None,
) -> dict[str, Any]:
    """Render ``out``/README.md, results.json, cells/, targets/, candidates/ and figures/ from ``results``; the outside
    submissions ``out`` took in are kept when they still fit (``leaderboard/outside.py``; the returned results name
    those dropped in ``dropped_submissions``, one line each).

    ``note``: why the numbers moved since the board's last publication (kept in the header and shown in the README).

    ``publish``: refuse unless this checkout is clean and every cell ran at its commit, or came from a slice pack
    run at a clean commit (``check_publishable``).
    """
    if not (results / "cells").is_dir():
        raise ReconbenchError(
            f"{results} holds no cell results; run `reconbench bench {suite.name}` first (or pass --results FOLDER)"
        )
    pub = collect(suite, results)
    if publish:
        check_publishable(pub, git_commit())
    ok = pub.ok()
    columns = resolve_columns(suite, ok)
    tables = {sel: main_rows(suite, pub, columns, sel) for sel in SELECTIONS}
    comparisons = comparison_rows(suite, pub, columns)
    targets = target_rows(pub, suite.max_stationarity_ratio, suite.max_learned_ratio)
    info = header_info(suite, results, pub, command)
    if note:
        info = info.updated(note=" ".join(note.split()))

    out.mkdir(parents=True, exist_ok=True)
    kept_outside = outside.snapshot(out)   # outside submissions the board took in: put back below when they fit
    for sub in ("cells", "targets", "candidates", "figures", "protocols"):
        shutil.rmtree(out / sub, ignore_errors=True)
        (out / sub).mkdir()
    shutil.rmtree(out / "figure_pairs", ignore_errors=True)   # made again where the figure keeps a cell's pairs
    for cid, rec in pub.records.items():
        key = rec.target.recipe_key
        src = member(results / "targets", str(key), ".json", "recipe key") if key else results / "targets"
        if key and src.exists() and not (out / "targets" / src.name).exists():
            if publish:  # a published board keeps compact model cards (leaderboard/board_cards.py)
                write_board_card(out / "targets" / src.name, json.loads(src.read_text()))
            else:
                shutil.copyfile(src, out / "targets" / src.name)
        if publish:  # a published board keeps slim entries (bench/entries.py)
            write_entry(out / "cells" / f"{cid}.json", json.loads((results / "cells" / f"{cid}.json").read_text()),
                        suite, out)
        else:
            shutil.copyfile(results / "cells" / f"{cid}.json", out / "cells" / f"{cid}.json")
    stored: list[str] = []
    k = suite.leaderboard.store_candidates
    if publish:  # the re-scoring sample, in the attack's precision (leaderboard/slim.py)
        files = {r.cell_id: src for r in ok if (src := results / r.work_dir / "candidates.safetensors").exists()}
        stored = store_sample(files, pub.records, out / "candidates", sample_size(suite), suite.leaderboard.sample_cells,
                              suite.leaderboard.candidates_max_bytes)
    for cid in [] if publish else sample_for_candidates([r.cell_id for r in ok], k):
        if k is not None and len(stored) >= k:
            break
        src = results / pub.records[cid].work_dir / "candidates.safetensors"
        if src.exists() and (k is None or src.stat().st_size <= MAX_SAMPLED_CANDIDATE_BYTES):
            shutil.copyfile(src, out / "candidates" / f"{cid}.safetensors")
            stored.append(cid)
    stored.sort()

    figure_info: dict[str, Figure] = {}
    if suite.leaderboard.figures if figures is None else figures:

        figure_info = draw_all(suite, pub, tables, columns, results, out, data_root=data_root)

    privacy, sections = privacy_section(suite, pub, out, suite.leaderboard.figures if figures is None else figures)
    if publish:
        compact_figures(out)
    board = BoardResults(
        format=LEADERBOARD_FORMAT,
        header=info,
        columns=[column_record(c) for c in columns],
        targets=targets,
        tables=tables,
        comparisons=comparisons,
        privacy=privacy,
        figures=figure_info,
        stored_candidates=stored,
        failures=[
            {"cell_id": r.cell_id, "status": r.status, "error": r.error}
            for r in pub.records.values()
            if r.status != STATUS_OK
        ],
        not_run=pub.not_run,
        stale=pub.stale,
    )
    data = board.to_dict()   # the file's JSON: every field of the record, in its order
    if publish:  # compact: a published board is read by tools, and kept small (docs/leaderboard-entries.md)
        write_results(out, data)
    else:
        write_json(out / "results.json", data)
    write_text_atomic(out / "README.md", render_readme(suite, board, pub, sections))
    merged, dropped = outside.restore(kept_outside, suite, out)
    write_manifest(out)  # last: every file the board holds now (leaderboard/manifest.py)
    return {**(merged or data), "dropped_submissions": dropped}
