"""Taking an outside submission (``leaderboard/submit.py``) into a published board: ``reconbench leaderboard add``.

Every entry is checked before anything is merged; one refused entry refuses the submission, each refusal a line
naming the cell, the problem and the fix:

* the submission's file: its format and seal; the board's suite file (sha256) is the one the cells ran with, with
  the submission's addition appended, and this checkout's suite file is that one too;
* each entry: a slim entry whose seal holds, of a cell the extended suite plans and the board does not hold, with
  the settings of that cell (``cell_key``) and a target recipe whose hash is a model card of the board, run from a
  commit of a clean checkout (no ``-dirty``);
* on a staging copy of the board holding the entries: the records' bindings (attack time against its runs, the
  target's metrics against the board's card), the counts and means re-derived from the per-image rows, and each
  finished cell's candidates re-scored with the standard evaluation (``verify.check_cell``) to the submitted numbers.

Then the tables, results.json and README.md are computed again from all the board's cells with the extended suite;
rows holding outside cells are marked (``outside``: the submissions' ids), the board's ``submissions/<id>.toml``
keeps each addition and ``header.submissions`` lists them, so ``--verify`` renders the same README.
"""

from __future__ import annotations

import base64
import json
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from safetensors.torch import load

from reconbench.bench.cells import expand
from reconbench.bench.entries import ENTRY_SCHEMA, check_entry, entry_text, is_entry, protocol_ref
from reconbench.bench.runner import STATUS_OK, protocol_reader
from reconbench.bench.seal import SEAL_FIELD, seal_problem
from reconbench.bench.suite import Suite
from reconbench.errors import ReconbenchError
from reconbench.leaderboard.manifest import MANIFEST_NAME, check_manifest, write_manifest
from reconbench.leaderboard.plain_text import MAX_CONTRIBUTOR, text_problem
from reconbench.leaderboard.readme import rerender_readme
from reconbench.leaderboard.results_file import write_results
from reconbench.leaderboard.slim import (
    CANDIDATES_SUFFIX,
    RERUN_RTOL,
    pick_sample,
    sample_size,
    store_candidates,
    stored_candidate_ids,
)
from reconbench.leaderboard.submit import (
    SUBMISSIONS_DIR,
    board_additions,
    board_results,
    sha256_text,
    suite_from_text,
)
from reconbench.leaderboard.tables import (
    cell_outcome_of,
    collect,
    column_record,
    comparison_rows,
    main_rows,
    resolve_columns,
    target_rows,
)
from reconbench.leaderboard.verify import check_cell, check_records
from reconbench.provenance import read_json, write_bytes_atomic, write_text_atomic
from reconbench.records import (
    SUBMISSION_FILE,
    BoardResults,
    CardData,
    CellRecord,
    EntryInfo,
    SubmissionFile,
    SubmissionProvenance,
    plain,
)
from reconbench.safe_paths import check_name, member


@dataclass
class AddReport:
    """What ``add`` did: the submission's id, the cells it took in, the cells re-scored; or why it refused."""

    submission: str = ""
    cells: list[str] = field(default_factory=list)
    rescored: list[str] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)


def read_submission(path: Path) -> dict[str, Any]:
    sub = read_json(path, missing="pass the file `reconbench leaderboard submit` wrote",
                    damaged="pack it again with `reconbench leaderboard submit`")
    # its format stamp (a file of another kind or version is refused in one line naming it), then every field of
    # its version, strictly: a one-line error naming the field
    SUBMISSION_FILE.decode(sub, path)
    return sub


def submission_id(sub: dict[str, Any]) -> str:
    packed = SubmissionFile.from_dict(sub)
    attacks = sorted({CellRecord.from_dict(e).attack.label or "None" for e in packed.entries if isinstance(e, dict)})
    return f"{'+'.join(attacks)[:60]}-{str(packed.record_sha256)[:12]}"


def _suite_problems(sub: dict[str, Any], suite: Suite, board: Path, data: dict[str, Any]) -> tuple[list[str], str]:
    """Refusals of the submission as a whole, and the text of the board's suite extended by it."""
    header, packed = BoardResults.from_dict(data).header, SubmissionFile.from_dict(sub)
    board_sha = str(header.suite_sha256)
    theirs = str(packed.board.suite_sha256)
    if seal_problem(sub) is not None or packed.record_sha256 is None:
        return ["the submission file was edited after it was packed (its record_sha256 does not match); pack it "
                "again with `reconbench leaderboard submit`"], ""
    taken = [t.id for t in header.submissions or [] if t.submission_sha256 == packed.record_sha256]
    if taken:
        return [f"the board already took in this submission ({taken[0]}); nothing to add"], ""
    if theirs != board_sha:
        return [f"the cells ran with another version of the {header.suite} suite file (sha256 {theirs[:16]}) "
                f"than the board's ({board_sha[:16]}, {header.suite_file}); copy the board's suite file, "
                "append your tables, run the cells again and pack them again"], ""
    if suite.text_sha256 != board_sha:
        return [f"this checkout's {suite.path.name} (sha256 {suite.text_sha256[:16]}) is not the file {board} was "
                f"rendered from ({board_sha[:16]}); add the submission from the checkout the board was published "
                "at"], ""
    base = suite.path.read_text()
    addition = str(packed.suite_addition or "")
    if sha256_text(base + addition) != packed.suite_sha256:
        return ["the suite addition is not the text the cells ran with (the sha256 of the board's suite file with "
                "it appended differs from suite_sha256); pack the submission again"], ""
    return [], base + "".join(board_additions(board, data)) + addition


def _entry_problems(entry: dict[str, Any], plan: dict[str, Any], ext: Suite, board: Path, sub: dict[str, Any]) -> list[str]:
    rec = CellRecord.from_dict(entry) if isinstance(entry, dict) else None
    if rec is None or not is_entry(entry) or not isinstance(rec.entry, EntryInfo) or rec.entry.schema != ENTRY_SCHEMA:
        return [f"an entry is not a board entry of schema {ENTRY_SCHEMA}; pack it with `reconbench leaderboard "
                "submit`"]
    packed = SubmissionFile.from_dict(sub)
    cid = rec.cell_id or "None"
    try:
        check_name(cid, "cell id", suffix=".json")
    except ReconbenchError as exc:
        return [f"{exc} (in the submission)"]
    if (why := seal_problem(entry)) is not None:
        return [f"cell {cid}: {why.replace('restore the cell file or run the cell again', 'pack it again')}"]
    if rec.suite_sha256 != packed.suite_sha256:
        return [f"cell {cid}: ran with another suite file (sha256 {str(rec.suite_sha256)[:16]}) than the "
                "submission's; run every submitted cell with the same suite file"]
    if (board / "cells" / f"{cid}.json").exists():
        return [f"cell {cid}: the board already holds this cell; submit only cells of your appended tables"]
    if cid not in plan:
        return [f"cell {cid}: not a cell of the board's suite with the submission's addition; name it in the "
                "appended [[grid]] blocks"]
    cell = plan[cid]
    problems = []
    if rec.cell_key != cell.key(ext, rec.dtype):
        problems.append(f"cell {cid}: its settings (cell_key {rec.cell_key}) are not the suite's for this "
                        "cell; run it again with the submitted suite file")
    key = str(rec.target.recipe_key)
    if key != cell.recipe.key():
        problems.append(f"cell {cid}: its target recipe hash {key} is not the suite's ({cell.recipe.key()}); run it "
                        "again with the submitted suite file")
    elif not (board / "targets" / f"{key}.json").exists():
        problems.append(f"cell {cid}: the board has no target with recipe hash {key}; attack the board's targets "
                        "(name them in your [[grid]] blocks) only")
    elif (why := weights_problem(board, key, packed)) is not None:
        problems.append(f"cell {cid}: {why}")
    commit = rec.git_commit
    if commit == "None" or commit.endswith("-dirty"):
        problems.append(f"cell {cid}: ran from {'no git checkout' if commit == 'None' else 'a dirty checkout'} "
                        f"(git commit {commit}); commit your changes and run the cells again from the clean checkout")
    ref = rec.protocol_ref
    if ref is not None and ref not in packed.protocols:
        problems.append(f"cell {cid}: its evaluation protocol {ref} is not in the submission; pack it again")
    if rec.status == STATUS_OK and cid not in packed.candidates:
        problems.append(f"cell {cid}: its candidates are not in the submission, so its numbers cannot be re-scored; "
                        "pack it again from the results folder that holds them")
    return problems


def weights_problem(board: Path, key: str, packed: SubmissionFile) -> str | None:
    """Why the target the contributor attacked is not the board's (its weights' sha256 differs, or its card is not
    in the submission), compared on what training reproduces, never on its seconds; None when it is."""
    if key not in packed.cards:
        return (f"its target's model card ({key}) is not in the submission; pack it again from the results folder "
                "that holds targets/")
    theirs = CardData.from_dict(dict(packed.cards[key])).weights
    ours = CardData.from_dict(read_json(board / "targets" / f"{key}.json", missing="restore the board",
                                        damaged="restore the board")).weights
    got, want = (None if w is None else w.sha256 for w in (theirs, ours))
    if got != want:
        return (f"its target {key} has weights sha256 {str(got)[:16]}, the board's {str(want)[:16]}: train it from "
                "the recipe with the board's reconbench, torch, processor kind and torch thread count (README's "
                "Machine line; OMP_NUM_THREADS sets the count), or re-run the cell where it trains to the board's "
                "weights")
    return None


def _stage(stage: Path, sub: dict[str, Any], entries: list[dict[str, Any]]) -> list[str]:
    """Write the entries, protocols and candidates into the staging board; refusals of malformed parts."""
    problems = []
    packed = SubmissionFile.from_dict(sub)
    for ref, shared in packed.protocols.items():
        if protocol_ref(shared) != ref:
            problems.append(f"protocol {ref}: its content does not hash to its name; pack the submission again")
            continue
        path = member(stage / "protocols", ref, ".json", "protocol hash")
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            write_text_atomic(path, json.dumps(shared, indent=1, sort_keys=True) + "\n")
    (stage / "candidates").mkdir(exist_ok=True)
    for entry in entries:
        cid = entry["cell_id"]
        write_text_atomic(stage / "cells" / f"{cid}.json", entry_text(entry))
        if (blob := packed.candidates_of(cid)) is None:
            continue
        try:
            raw = base64.b64decode(str(blob), validate=True)
            load(raw)
        except Exception as exc:  # noqa: BLE001 (any decoding failure is the same refusal)
            problems.append(f"cell {cid}: its candidates are not base64 safetensors ({type(exc).__name__}); pack it "
                            "again")
            continue
        write_bytes_atomic(stage / "candidates" / f"{cid}.safetensors", raw)
    return problems


def _check_staged(stage: Path, ids: list[str], data_root: str | None, report: AddReport) -> list[str]:
    # the target's weights are the board's (weights_problem); what training computed from them (the certificate,
    # the margins) agrees to rounding, as a re-run's does, where the target was trained again
    records = check_records(stage, metrics_rtol=RERUN_RTOL)
    problems = [p.replace("restore the cell or the card", "the cell's target is not the board's: train it from "
                          "the recorded recipe with the board's reconbench and libraries, run the cell again and "
                          "pack it again") for p in records.problems if any(f"cell {cid}:" in p for cid in ids)]
    for cid in ids:
        entry = json.loads((stage / "cells" / f"{cid}.json").read_text())
        problems += check_entry(entry, protocol=protocol_reader(stage)).problems
        if (stage / "candidates" / f"{cid}.safetensors").exists():
            problems += [f"{p}; the candidates do not give the submitted number: run the cell again and pack it "
                         "again" for p in check_cell(stage, cid, data_root=data_root).problems]
            report.rescored.append(cid)
    return problems


def merge_tables(ext: Suite, board: Path, data: dict[str, Any], outside: dict[str, str]) -> dict[str, Any]:
    """results.json's tables, comparisons, targets and cell counts computed again from every cell of ``board`` with
    the extended suite; rows holding an outside cell name its submission (``outside``)."""
    pub = collect(ext, board)
    ok = pub.ok()
    columns = resolve_columns(ext, ok)
    tables = {sel: [row.updated(outside=ids) if (ids := sorted({outside[c] for c in row.cells if c in outside}))
                    else row for row in main_rows(ext, pub, columns, sel)] for sel in data["tables"]}
    header = dict(data["header"])
    header["cells"] = {
        "planned": len(pub.plan), "ok": len(ok),
        "failed": sum(1 for r in pub.records.values() if r.status != STATUS_OK),
        "not_run": len(pub.not_run), "stale": len(pub.stale),
    }
    header["attack_failed"] = [{"cell_id": r.cell_id, **cell_outcome_of(r).to_dict()} for r in pub.attack_failed()]
    return {
        **data,
        "header": header,
        "columns": [column_record(c).to_dict() for c in columns],
        "targets": plain(target_rows(pub, ext.max_stationarity_ratio, ext.max_learned_ratio)),
        "tables": plain(tables),
        "comparisons": plain(comparison_rows(ext, pub, columns)),
        "failures": [{"cell_id": r.cell_id, "status": r.status, "error": r.error}
                     for r in pub.records.values() if r.status != STATUS_OK],
        "not_run": pub.not_run,
        "stale": pub.stale,
    }


def outside_cells(board: Path, data: dict[str, Any]) -> dict[str, str]:
    """The cells of a board that came from outside submissions, with their submission's id."""
    return {cid: s.id for s in BoardResults.from_dict(data).header.submissions or [] for cid in s.cells}


def add_submission(path: Path, suite: Suite, board: Path, *, data_root: str | None = None) -> AddReport:
    """Validate the submission at ``path`` against ``board`` and merge it (nothing is merged when any entry is
    refused: the report's ``refusals`` say why)."""
    if (board / MANIFEST_NAME).exists() and (changed := check_manifest(board)):  # merging would list them as valid
        raise ReconbenchError(f"{board} differs from its {MANIFEST_NAME}, restore the board before adding a submission "
                              f"to it: {changed[0]}")
    sub = read_submission(path)
    data = board_results(board)
    report = AddReport(submission=submission_id(sub))
    contributor = SubmissionFile.from_dict(sub).provenance.contributor
    if contributor is not None and (why := text_problem(contributor, MAX_CONTRIBUTOR)) is not None:
        report.refusals = [f"the submission's contributor {why}; pack it again with a --contributor of one line of at "
                           f"most {MAX_CONTRIBUTOR} characters"]
        return report
    problems, ext_text = _suite_problems(sub, suite, board, data)
    if problems:
        report.refusals = problems
        return report
    try:
        ext = suite_from_text(ext_text, suite)
    except ReconbenchError as exc:
        report.refusals = [f"the board's suite with the submission's addition does not load ({exc}); append only "
                           "new [attacks.*] tables and [[grid]] blocks"]
        return report
    plan = {c.cell_id: c for c in expand(ext)}
    entries = SubmissionFile.from_dict(sub).entries
    if not entries:
        report.refusals = ["the submission holds no entry; pack the results folder of your cells"]
        return report
    for entry in entries:
        problems += _entry_problems(entry, plan, ext, board, sub)
    if problems:
        report.refusals = problems
        return report
    ids = [str(e["cell_id"]) for e in entries]
    with tempfile.TemporaryDirectory() as tmp:
        stage = Path(tmp) / board.name
        shutil.copytree(board, stage)
        problems = _stage(stage, sub, entries)
        problems += [] if problems else _check_staged(stage, ids, data_root, report)
        if problems:
            report.refusals = problems
            return report
        _merge(stage, board, sub, ext, data, ids, report.submission, suite)
    report.cells = ids
    return report


def _provenance_fields(p: SubmissionProvenance) -> dict[str, Any]:
    """What a board records of a submission's provenance (None where the submission has none)."""
    return {"contributor": p.contributor, "git_commits": p.git_commits, "reconbench_versions": p.reconbench_versions,
            "machines": p.machines, "packed": p.packed}


def _merge(stage: Path, board: Path, sub: dict[str, Any], ext: Suite, data: dict[str, Any], ids: list[str],
           sid: str, suite: Suite) -> None:
    """Write the merged board in the staging copy, then move its changed files into ``board``."""
    # the board keeps candidates for its re-scoring sample: of the submitted cells, a sample as the suite asks
    files = {cid: stage / "candidates" / f"{cid}.safetensors" for cid in ids
             if (stage / "candidates" / f"{cid}.safetensors").exists()}
    kept = pick_sample(files, sample_size(ext))
    for cid, p in files.items():
        if cid in kept:
            entry = CellRecord.from_dict(next(e for e in sub["entries"] if e["cell_id"] == cid))
            store_candidates(p, entry.dtype, stage / "candidates" / f"{cid}{CANDIDATES_SUFFIX}")
        p.unlink()
    (stage / SUBMISSIONS_DIR).mkdir(exist_ok=True)
    write_text_atomic(stage / SUBMISSIONS_DIR / f"{sid}.toml", str(sub["suite_addition"]))
    record = {"id": sid, "cells": ids, "suite_sha256": sub["suite_sha256"],
              "submission_sha256": sub[SEAL_FIELD], **_provenance_fields(SubmissionFile.from_dict(sub).provenance)}
    earlier = [plain(s) for s in BoardResults.from_dict(data).header.submissions or []]
    data = {**data, "header": {**data["header"], "submissions": [*earlier, record]}}
    merged = merge_tables(ext, stage, data, outside_cells(stage, data))
    merged["stored_candidates"] = stored_candidate_ids(stage)
    write_results(stage, merged)
    write_text_atomic(stage / "README.md", rerender_readme(ext, stage, merged))
    for rel in ["results.json", "README.md", f"{SUBMISSIONS_DIR}/{sid}.toml",
                *(f"cells/{cid}.json" for cid in ids), *(f"candidates/{cid}{CANDIDATES_SUFFIX}" for cid in kept),
                *(f"protocols/{p.name}" for p in (stage / "protocols").glob("*.json")
                  if not (board / "protocols" / p.name).exists())]:
        (board / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(stage / rel, board / rel)
    write_manifest(board)  # last: the board's files with the submission's
