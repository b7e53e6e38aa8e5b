"""RobustBench-style checks of a published leaderboard: re-score stored candidates, re-aggregate the tables.

``rescore_cell`` rebuilds the training problem from the recipe, loads the cell's stored pooled candidates, scores
the pooled, blind and oracle selections with ``runs.result.score_selection`` (the standard evaluation, the function a
run scores its own selections with) and compares every stored summary number.
``check_tables`` recomputes every table entry of ``results.json`` from the cell JSONs, ``check_readme`` renders the
README again from ``results.json`` and the cells and compares it line by line, and ``corrupt_cells`` names every cell
file that cannot be read.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reconbench.bench.cells import CELL_FORMAT
from reconbench.bench.entries import EntryCheck, check_entry, expand, is_entry, protocol_ref
from reconbench.bench.runner import STATUS_OK, card_reader, null_record, protocol_reader
from reconbench.bench.seal import seal_problem
from reconbench.bench.suite import Suite
from reconbench.errors import ReconbenchError
from reconbench.evaluation import decisions, float16_bounds
from reconbench.evaluation.protocol import resolve_protocol
from reconbench.evaluation.rescore import Mismatch, close, evaluation_terms, margin_note, pinned_protocol, reproduce
from reconbench.leaderboard.board_cards import load_board_card
from reconbench.leaderboard.deterministic import first_difference, short_repr, without_timings
from reconbench.leaderboard.readme import rerender_readme
from reconbench.leaderboard.results_file import read_results
from reconbench.leaderboard.slim import RERUN_RTOL, candidates_file, read_candidates, stored_candidate_ids
from reconbench.leaderboard.tables import (
    SELECTIONS,
    Published,
    cell_outcome_of,
    collect,
    comparison_rows,
    main_rows,
    progress_text,
    resolve_columns,
    target_rows,
)
from reconbench.provenance import read_json
from reconbench.records import (
    BoardResults,
    CardData,
    CellRecord,
    CommitCells,
    SearchRun,
    Selection,
    StoredEvaluation,
    number,
    plain,
)
from reconbench.records.target_quantities import target_value
from reconbench.runs.result import score_selection
from reconbench.runs.seconds import attack_seconds, search_run, summed_seconds
from reconbench.safe_paths import member
from reconbench.targets.cards import ModelCard


def read_board_json(path: Path, what: str) -> Any:
    """A JSON file of a leaderboard, or a one-line error naming the file."""
    return read_json(path, missing=f"the {what} cannot be checked; render the leaderboard again",
                     damaged=f"the {what} is damaged, render the leaderboard again")


def read_record(leaderboard: Path, path: Path) -> tuple[dict[str, Any], CellRecord]:
    """A cell file of a board as stored, and in the full record's shape (a slim entry expanded, ``entries.py``)."""
    raw = read_board_json(path, f"cell {path.stem}")
    if not isinstance(raw, dict):
        raise ReconbenchError(f"{path}: a cell record is a JSON object, got a {type(raw).__name__}; restore it")
    try:
        full = expand(raw, card_reader(leaderboard), protocol_reader(leaderboard)) if is_entry(raw) else raw
        return raw, CellRecord.from_dict(full, path)
    except (KeyError, TypeError, AttributeError, IndexError, ValueError) as exc:
        raise _malformed(path, exc) from None


def _malformed(path: Path, exc: BaseException) -> ReconbenchError:
    return ReconbenchError(f"{path} is malformed ({type(exc).__name__}: {exc}); render the leaderboard again")


def corrupt_cells(folder: Path) -> list[str]:
    """Cell files of ``folder``/cells that cannot be read as cell records, each with the reason."""
    bad = []
    for p in sorted((folder / "cells").glob("*.json")):
        try:
            rec = json.loads(p.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            bad.append(f"{p}: not valid JSON ({exc})")
            continue
        if not isinstance(rec, dict):
            bad.append(f"{p}: a cell record is a JSON object, got a {type(rec).__name__}")
            continue
        try:
            typed = CellRecord.from_dict(rec, p)
        except ReconbenchError as exc:
            bad.append(str(exc))
            continue
        if typed.format != CELL_FORMAT or typed.cell_id != p.stem:
            bad.append(f"{p}: not a cell record of this file name (format {typed.format!r}, cell_id "
                       f"{typed.cell_id or None!r})")
    return bad


def check_readme(suite: Suite, leaderboard: Path) -> list[str]:
    """Render README.md again from results.json and the cells; each differing line is a problem."""
    data = read_results(leaderboard)
    recorded = BoardResults.from_dict(data).header.suite_sha256
    if recorded and recorded != suite.text_sha256:  # the suite's text is part of the README (description, plan)
        return [f"{leaderboard}/README.md was rendered from another version of the suite file (sha256 "
                f"{recorded[:16]}, now {suite.text_sha256[:16]}); verify with the suite file it was rendered from, or "
                "render and publish it again"]
    try:
        text = rerender_readme(suite, leaderboard, data)
    except (KeyError, TypeError, AttributeError, IndexError, ValueError) as exc:
        raise _malformed(leaderboard / "results.json", exc) from None
    readme = leaderboard / "README.md"
    try:
        old = readme.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        return [f"{readme}: cannot be read ({exc})"]
    problems = []
    new_lines, old_lines = text.splitlines(), old.splitlines()
    for i, (a, b) in enumerate(zip(old_lines, new_lines, strict=False)):
        if a != b:
            problems.append(f"{readme} line {i + 1} differs from the re-rendered one: {_around(a, b)}")
    if len(old_lines) != len(new_lines):
        problems.append(f"{readme}: {len(old_lines)} lines, re-rendered {len(new_lines)}")
    return problems


def _around(old: str, new: str, width: int = 30) -> str:
    """Where two lines first differ: ``...old part...`` vs ``...new part...``."""
    i = next((k for k, (x, y) in enumerate(zip(old, new, strict=False)) if x != y), min(len(old), len(new)))
    lo = max(0, i - width)
    return f"{old[lo:i + width]!r} vs {new[lo:i + width]!r} (column {i + 1})"


def _close(a: object, b: object, rtol: float, atol: float) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k], rtol, atol) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_close(x, y, rtol, atol) for x, y in zip(a, b, strict=True))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        fa, fb = float(a), float(b)
        if math.isnan(fa) or math.isnan(fb):
            return math.isnan(fa) and math.isnan(fb)
        return fa == fb or math.isclose(fa, fb, rel_tol=rtol, abs_tol=atol)
    return bool(a == b)


def stored_cells(leaderboard: Path) -> list[str]:
    """Cells whose candidates are published (these can be re-scored)."""
    return stored_candidate_ids(leaderboard)


def check_stored(leaderboard: Path) -> list[str]:
    """Each cell that results.json says the board stores candidates of but whose candidates file is missing, and
    each candidates file results.json does not name: re-scoring checks only what is there, so a board whose stored
    candidates were deleted must fail here rather than re-score nothing."""
    recorded = BoardResults.from_dict(read_results(leaderboard)).stored_candidates
    present = set(stored_candidate_ids(leaderboard))
    problems = [f"{leaderboard}/candidates holds no candidates of cell {cid}, which results.json says the board "
                "stores; restore the board's candidates/ folder (or publish it again)"
                for cid in sorted(set(recorded) - present)]
    problems += [f"{candidates_file(leaderboard, cid)} is a candidates file results.json does not name; remove it, "
                 "or publish the board again" for cid in sorted(present - set(recorded))]
    return problems


@dataclass
class CellCheck:
    """The re-scoring of one stored cell: failures, borderline decisions seen, stored numbers that differ only
    through them, and the tolerance used."""

    problems: list[str] = field(default_factory=list)
    borderline: list[str] = field(default_factory=list)
    explained: list[str] = field(default_factory=list)
    rtol: float = 0.0


def rescore_cell(leaderboard: Path, cell_id: str, *, data_root: str | None = None) -> list[str]:
    """Mismatches between a cell JSON and a fresh evaluation (empty: every stored number reproduced, counts exactly
    or through decisions within rounding of their thresholds)."""
    return check_cell(leaderboard, cell_id, data_root=data_root).problems


def check_cell(leaderboard: Path, cell_id: str, *, data_root: str | None = None) -> CellCheck:
    """Re-score a stored cell's selections and compare every stored number (see :func:`rescore_cell`)."""
    path = leaderboard / "cells" / f"{cell_id}.json"
    raw, rec = read_record(leaderboard, path)
    try:
        return _rescore(leaderboard, cell_id, rec, data_root, every_key=not is_entry(raw))
    except (KeyError, TypeError, AttributeError, IndexError) as exc:
        raise _malformed(path, exc) from None


def _rescore(leaderboard: Path, cell_id: str, rec: CellRecord, data_root: str | None,
             every_key: bool = True) -> CellCheck:
    if rec.status != STATUS_OK:
        return CellCheck(problems=[f"{cell_id}: status {rec.status}, nothing to re-score"])
    problem, pooled, protocol, family, card = rescore_inputs(leaderboard, rec, data_root)
    out = CellCheck()
    # a GPU slice's sample travels in float16 (docs/slices.md): its re-scoring carries float16's rounding too
    travelled = decisions.holds_float16_values(pooled["candidates"]) if "candidates" in pooled else False
    # ... and min-max scaling (the SSIMs) or centring (the correlation) stretches it by each candidate's own contrast
    stretched = float16_bounds.candidates_tolerance(
        pooled["candidates"], problem.mean_tensor(), resolve_protocol(protocol, family).base.constant_tol,
        evaluation_terms(problem, 1)) if travelled else None
    if stretched is not None and stretched.flat:
        out.borderline.append(f"{cell_id}: {stretched.flat} float16 candidate(s) too flat (low contrast) for float16 "
                              f"to bound their SSIM and correlation within {float16_bounds.CELL_TOLERANCE_CEILING}; "
                              "scores of them are held to the cell's tolerance, a move past it reported")
    for name, sel in (rec.selections or {}).items():
        run = None if name == "pool" else sel.run
        if name != "pool" and run is None:
            continue
        n_candidates = int(len(pooled["run_ids"]) if run is None else (pooled["run_ids"] == run).sum())
        n_terms = evaluation_terms(problem, n_candidates)
        f16 = decisions.float16_tolerance(n_terms) if travelled else 0.0
        if stretched is not None:
            f16 = max(f16, stretched.tolerance)
        rtol = max(decisions.score_tolerance(n_terms), f16)
        out.rtol = max(out.rtol, rtol)

        def run_selection(run: int | None = run) -> dict[str, Any]:
            return score_selection(problem, pooled, run, family=family, protocol=protocol, card=card)

        def compare(ev: dict[str, Any], name: str = name, sel: Selection = sel,
                    rtol: float = rtol) -> list[Mismatch]:
            return compare_selection(f"{cell_id} [{name}]", sel, ev, rtol, every_key=every_key)

        outcome = reproduce(run_selection, compare, n_terms, min_score_tol=f16)
        out.problems += [m.describe() for m in outcome.mismatches]
        out.borderline += [f"{cell_id} [{name}] {b.describe()}" for b in outcome.borderline]
        out.explained += [m.describe() for m in outcome.explained]
    return out


def rescore_inputs(leaderboard: Path, rec: CellRecord, data_root: str | None
                   ) -> tuple[Any, dict[str, Any], dict[str, Any], str, ModelCard]:
    """What re-scoring a stored cell needs: the problem rebuilt from the published card, the stored candidates, the
    protocol the cell computed, the model family and the card."""
    problem, card = load_board_card(leaderboard, str(rec.target.recipe_key), data_root)
    path = candidates_file(leaderboard, rec.cell_id)
    if path is None:
        raise ReconbenchError(f"{leaderboard}/candidates holds no candidates of {rec.cell_id}; re-score a cell "
                              "the board stores candidates of")
    stored = read_candidates(path)
    # a board may store them in the attack's precision (float32): every float32 is a float64 exactly
    pooled = {k: v.double() if v.is_floating_point() else v for k, v in stored.items()}
    recorded = rec.evaluation.protocol if rec.evaluation is not None else None
    protocol = pinned_protocol(dict(rec.protocol or {}), recorded)  # the metrics the cell computed
    return problem, pooled, protocol, str(rec.target.trained_from.family), card


def compare_selection(where: str, sel: Selection | dict[str, Any], evaluation: dict[str, Any], rtol: float,
                      every_key: bool = True) -> list[Mismatch]:
    """The stored numbers of one selection (summary, held-out null) that a fresh evaluation does not reproduce
    (``every_key``: a number the evaluation produces that the selection does not store is a mismatch too; a slim
    entry stores the keys its board shows, ``entries.py``)."""
    if isinstance(sel, dict):
        sel = Selection.from_dict(sel)
    fresh = evaluation["summary"]
    stored = dict(sel.summary)
    problems: list[Mismatch] = []
    if sel.null is not None:
        null_now = _flat(null_record(StoredEvaluation.from_dict(evaluation, "the fresh evaluation")).to_dict())
        for key, value in _flat(sel.null.to_dict()).items():
            new = null_now[key] if key in null_now else "<missing>"
            if not close(value, new, rtol):
                problems.append(Mismatch(f"{where} null.{key}", value, new, margin_note(evaluation, key, value, new,
                                                                                         rtol)))
    # A metric that is unavailable here or was unavailable there (LPIPS without its backbone weights or package)
    # depends on the environment, not on the candidates: it is not a stored number to check.
    env_dependent = {k for d in (stored, fresh) for k, v in d.items() if v == "unavailable"}
    env_dependent |= {f"{k}_unavailable_reason" for k in env_dependent}
    stored = {k: v for k, v in stored.items() if k not in env_dependent}
    fresh = {k: v for k, v in fresh.items() if k not in env_dependent}
    for key, value in stored.items():
        if key not in fresh:
            problems.append(Mismatch(f"{where} {key}", value, "<not produced by the evaluation now>"))
        elif not close(value, fresh[key], rtol):
            problems.append(Mismatch(f"{where} {key}", value, fresh[key],
                                     margin_note(evaluation, key, value, fresh[key], rtol)))
    # a cell scored before the held-out null existed stores fewer keys: its stored numbers are still checked
    if sel.null is not None and every_key:
        for key in fresh.keys() - stored.keys():
            problems.append(Mismatch(f"{where} {key}", "<not stored>", fresh[key]))
    return problems


def _flat(d: object, prefix: str = "") -> dict[str, Any]:
    """A nested record as ``{"a.b.c": value}`` (lists kept whole)."""
    if not isinstance(d, dict):
        return {prefix: d}
    out: dict[str, Any] = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


@dataclass
class RecordCheck:
    """Fields shown on a board that re-scoring cannot re-derive, checked against what binds them."""

    problems: list[str] = field(default_factory=list)
    sealed: int = 0
    unsealed: int = 0


def _attack_seconds_problem(recorded: float | None, runs: list[Any], *, slim: bool) -> str | None:
    """Whether a cell's attack time agrees with its runs' (runs/seconds.py): each batch counted once, or (cells
    written before that) every run's seconds summed. A slim entry keeps no batch record, so there it is checked to be
    the sum of some of its runs' seconds (the runs alone and one per batch), within float rounding."""
    counted, summed = attack_seconds(runs), summed_seconds(runs)
    if recorded in (counted, summed):
        return None
    if slim and recorded is not None and len(runs) <= 16:
        seconds = [float(run.seconds or 0.0) for run in map(search_run, runs)]
        for mask in range(1, 2 ** len(seconds)):
            part = sum(x for i, x in enumerate(seconds) if mask >> i & 1)
            if math.isclose(recorded, part, rel_tol=1e-12, abs_tol=1e-12):
                return None
    return (f"attack_seconds {recorded!r} is neither its runs' seconds with each batch counted once ({counted!r}) "
            f"nor their plain sum ({summed!r})" + (" nor the sum of some of them" if slim else ""))


def check_records(leaderboard: Path, metrics_rtol: float = 0.0, trained_elsewhere: Collection[str] = ()
                  ) -> RecordCheck:
    """Every cell's seal (when it has one), its attack time against its runs' times (runs/seconds.py), and its target's
    training metrics against the published model card (``bench/seal.py`` says what each binding guarantees), exactly
    unless ``metrics_rtol`` allows their rounding; the cells ``trained_elsewhere`` (an outside submission's, whose
    target was trained again to the board's weights) to a re-run's rounding."""
    out = RecordCheck()
    for path in sorted((leaderboard / "cells").glob("*.json")):
        raw, rec = read_record(leaderboard, path)
        rtol = RERUN_RTOL if path.stem in trained_elsewhere else metrics_rtol
        try:
            out.problems += _record_problems(leaderboard, path.stem, raw, rec, rtol)
        except (KeyError, TypeError, AttributeError) as exc:
            raise _malformed(path, exc) from None
        if CellRecord.from_dict(raw).record_sha256 is None:  # the seal (bench/seal.py)
            out.unsealed += 1
        else:
            out.sealed += 1
    return out


def _record_problems(leaderboard: Path, cell_id: str, raw: dict[str, Any], rec: CellRecord,
                     metrics_rtol: float = 0.0) -> list[str]:
    problems = []
    if (why := seal_problem(raw)) is not None:  # a slim entry's seal is over the entry as stored
        problems.append(f"cell {cell_id}: {why}")
    if rec.status != STATUS_OK:
        return problems
    runs = [r for r in rec.runs or [] if SearchRun.from_dict(r)]   # each read strictly
    if (why := _attack_seconds_problem(rec.attack_seconds, runs, slim=is_entry(raw))) is not None:
        problems.append(f"cell {cell_id}: {why}; the cell was edited, restore it or run it again")
    card_path = member(leaderboard / "targets", str(rec.target.recipe_key), ".json", "recipe key",
                       source=leaderboard / "cells" / f"{cell_id}.json")
    if card_path.exists():
        card = CardData.from_dict(read_board_json(card_path, "model card"), card_path)
        # what training produced, not how long it took or where (deterministic.py): a target trained again
        # elsewhere to the same weights agrees on every one of these
        stored = without_timings({k: v for k, v in card.metrics.to_dict().items() if k != "margins"})
        diff = first_difference(stored, without_timings(rec.target.metrics.to_dict()),
                                lambda a, b: close(a, b, metrics_rtol))
        if diff is not None:
            k, want, shown = diff
            problems.append(f"cell {cell_id}: target train_metrics.{k} is {short_repr(shown)}, its model card "
                            f"{card_path.name} records {short_repr(want)}; restore the cell or the card")
        problems += margin_problems(cell_id, rec, card.metrics.margins, card_path.name, metrics_rtol)
    return problems


def margin_problems(cell_id: str, rec: CellRecord, margins: list[float] | None, card_name: str,
                    rtol: float = 0.0) -> list[str]:
    """The least and largest margin a cell shows against the card's margins (cells that record them)."""
    values = [float(m) for m in margins or []]
    problems = []
    for field_name, pick in (("margin_min", min), ("margin_max", max)):
        shown = getattr(rec.target, field_name)
        if shown is not None and (not values or not close(shown, pick(values), rtol)):
            problems.append(f"cell {cell_id}: target {field_name} is {shown!r}, its model card {card_name} gives "
                            f"{pick(values) if values else 'no margins'}; restore the cell or the card")
    return problems


def check_tables(leaderboard: Path) -> list[str]:
    """Recompute each table entry of results.json (mean, sd, n) from the values of the cells it names."""
    data = read_results(leaderboard)
    cells = {p.stem: read_record(leaderboard, p)[1] for p in (leaderboard / "cells").glob("*.json")}
    try:
        return _check_tables(BoardResults.from_dict(data, leaderboard / "results.json"), cells)
    except (KeyError, TypeError, AttributeError, IndexError, ValueError) as exc:
        raise _malformed(leaderboard / "results.json", exc) from None


def _check_tables(data: BoardResults, cells: dict[str, CellRecord]) -> list[str]:
    cols = {c.name: c for c in data.column_list}
    problems = []
    for sel, rows in (data.tables or {}).items():
        for row in rows:
            for name, m in (row.metrics or {}).items():
                col = cols[name]
                values = []
                for cid in row.cells:
                    if cid not in cells:
                        problems.append(f"{sel} row {row.attack}/{row.init}/{row.target}: cell {cid} missing")
                        continue
                    rec, s = cells[cid], cells[cid].selection(sel)
                    if col.source == "attack_loss":
                        v = number(s.attack_loss)
                    elif col.source == "wall_seconds":
                        v = number(rec.attack_seconds)
                    elif col.source == "calibrated":
                        v = s.calibrated_count
                    elif col.source == "target":
                        v = target_value(rec.target, m.key) if m.key else None
                    else:
                        v = s.value(m.key) if m.key else None
                    if v is not None:
                        values.append(v)
                mean = statistics.fmean(values) if values else None
                if not _close(values, m.values, 1e-12, 0.0) or not _close(mean, m.mean, 1e-12, 0.0):
                    problems.append(
                        f"{sel} row {row.attack}/{row.init}/{row.target} {name}: "
                        f"results.json says {m.values}, the cells give {values}"
                    )
    return problems


def check_aggregates(suite: Suite, leaderboard: Path) -> list[str]:
    """Each table of results.json against the rows the suite's plan and the board's cells give (``tables.main_rows``,
    the function the board was rendered with): the same rows, each naming exactly the cells it averages, and each
    summary column's held-out null (mean of the cells' null means, largest draw, cells) re-derived from them.
    :func:`check_tables` re-aggregates the cells a row names, so a row that left out a finished seed, or a null
    edited beside its number, would agree with itself there. Then the comparison tables and the targets table,
    which the README shows from results.json, against the same functions over the cells; and the header's numbers
    the cells give (:func:`_header_problems`)."""
    data = BoardResults.from_dict(read_results(leaderboard), leaderboard / "results.json")
    pub = collect(suite, leaderboard)
    columns = resolve_columns(suite, pub.ok())
    problems = []
    for sel in SELECTIONS:
        want = {(r.target, r.attack, r.init): r for r in main_rows(suite, pub, columns, sel)}
        have = {(r.target, r.attack, r.init): r for r in data.table(sel)}
        for key in [k for k in want if k not in have]:
            problems.append(f"{sel} table: no row {'/'.join(key)}, which the suite's plan and the cells give "
                            f"({len(want[key].cells)} cell(s)); publish the board again")
        for key in [k for k in have if k not in want]:
            problems.append(f"{sel} table: row {'/'.join(key)} is not one the suite's plan and the cells give; "
                            "publish the board again")
        for key in [k for k in have if k in want]:
            row, fresh = have[key], want[key]
            where = f"{sel} row {'/'.join(key)}"
            if list(row.cells) != list(fresh.cells):
                problems.append(f"{where}: results.json averages cells {list(row.cells)}, the cells give "
                                f"{list(fresh.cells)}; publish the board again")
                continue
            for name, m in (row.metrics or {}).items():
                null = (fresh.metrics or {}).get(name)
                stored = None if m.null is None else m.null.to_dict()
                derived = None if null is None or null.null is None else null.null.to_dict()
                if not _close(stored, derived, 1e-12, 0.0):
                    problems.append(f"{where} {name}: results.json gives the held-out null {stored}, its cells "
                                    f"give {derived}; publish the board again")
    targets = target_rows(pub, suite.max_stationarity_ratio, suite.max_learned_ratio)
    rebuilt = _indexed({"comparisons": {k: t.to_dict() for k, t in comparison_rows(suite, pub, columns).items()},
                        "targets": [t.to_dict() for t in targets]})
    published = _indexed({"comparisons": {k: t.to_dict() for k, t in (data.comparisons or {}).items()},
                          "targets": [t.to_dict() for t in data.targets or []]})
    for part, again in rebuilt.items():
        if (diff := first_difference(published.get(part), again, lambda a, b: _close(a, b, 1e-12, 0.0))) is not None:
            at, stored, derived = diff
            problems.append(f"results.json {part}.{at} is {short_repr(stored)}, the cells give "
                            f"{short_repr(derived)}; publish the board again")
    return problems + _header_problems(data, pub)


def _cell_ids_problems(shares: list[CommitCells], records: list[CellRecord]) -> list[str]:
    """``header.cell_commits``' cell ids (where listed: a board published before they were names none) against the
    board's cells: each listed once, as many under a commit as its count, and under its record's commit where the
    record names one."""
    if not any(c.cell_ids for c in shares):
        return []
    listed = [cid for c in shares for cid in c.cell_ids]
    held = {r.cell_id: r for r in records}
    found = [f"{len(listed) - len(set(listed))} listed twice" if len(listed) != len(set(listed)) else ""]
    if extra := sorted(set(listed) - set(held)):
        found.append(f"{len(extra)} not on the board (first: {extra[0]})")
    if unlisted := sorted(set(held) - set(listed)):
        found.append(f"{len(unlisted)} of the board's not listed (first: {unlisted[0]})")
    if counted := [c.commit[:12] for c in shares if len(c.cell_ids) != c.cells]:
        found.append(f"a count that is not its ids' at {', '.join(counted)}")
    if wrong := sorted({cid for c in shares for cid in c.cell_ids
                        if cid in held and held[cid].ran.git_commit not in (None, c.commit)}):
        found.append(f"{len(wrong)} under another commit than their record's (first: {wrong[0]})")
    found = [f for f in found if f]
    return [f"results.json header.cell_commits does not list the board's cells ({'; '.join(found)}); publish the "
            "board again"] if found else []


def _header_problems(data: BoardResults, pub: Published) -> list[str]:
    """The header's numbers that the board's cells give (``tables.header_info``): the counts of cells, the cells
    whose attack failed, the cells' summed seconds, their versions and commits; and the lists of failed, not-run
    and stale cells. (The commands, machines and wall time come from the run's invocation records, which a board
    does not keep: they are bound by the manifest only.) A board that took in outside submissions keeps its own
    run's header beside cells that ran elsewhere: not checked here."""
    if data.header.submissions:
        return []
    records = list(pub.records.values())
    header = data.header
    failed = [r for r in records if r.status != STATUS_OK]
    fresh: dict[str, Any] = {
        "header.cells": {"planned": len(pub.plan), "ok": len(pub.ok()), "failed": len(failed),
                         "not_run": len(pub.not_run), "stale": len(pub.stale)},
        "header.attack_failed": [{"cell_id": r.cell_id, **cell_outcome_of(r).to_dict()} for r in pub.attack_failed()],
        "header.cell_seconds": float(sum(r.wall_seconds or 0.0 for r in records)),
        "header.reconbench_versions": sorted({r.reconbench_version for r in records}),
        # cells from slice packs ran at their packs' commits, which cell_commits lists (checked below)
        "header.git_commits": sorted({c.commit for c in header.cell_commits} if header.cell_commits is not None
                                     else {r.git_commit for r in records}),
        "failures": [{"cell_id": r.cell_id, "status": r.status, "error": r.error} for r in failed],
        "not_run": list(pub.not_run),
        "stale": list(pub.stale),
        "header.progress": progress_text(len(pub.ok()), len(pub.plan)) if len(pub.ok()) < len(pub.plan) else None,
    }
    stored: dict[str, Any] = {
        "header.cells": header.cells, "header.attack_failed": header.attack_failed,
        "header.cell_seconds": header.cell_seconds, "header.reconbench_versions": header.reconbench_versions,
        "header.git_commits": header.git_commits, "failures": data.failures, "not_run": data.not_run,
        "stale": data.stale, "header.progress": header.progress,
    }
    problems = []
    if header.cell_commits is not None:   # the pack of each cell is not kept: its count and own commit are checked
        listed = {c.commit for c in header.cell_commits}
        own = sorted({r.git_commit for r in records} - listed - {"None"})
        if sum(c.cells for c in header.cell_commits) != len(records) or own:
            problems.append(f"results.json header.cell_commits counts {sum(c.cells for c in header.cell_commits)} "
                            f"cells at {', '.join(sorted(listed))}, the board holds {len(records)}"
                            + (f" and cells of {', '.join(own)}" if own else "") + "; publish the board again")
        problems += _cell_ids_problems(header.cell_commits, records)
    for key, value in fresh.items():
        if not _close(plain(stored[key]), plain(value), 1e-12, 0.0):
            problems.append(f"results.json {key} is {short_repr(plain(stored[key]))}, the cells give "
                            f"{short_repr(plain(value))}; publish the board again")
    return problems


def _indexed(value: Any) -> Any:
    """JSON with each list of objects as an object keyed by position, so that a difference is named down to its
    field (``rows.0.values.1.papers' protocol.values``); lists of plain values are kept whole."""
    if isinstance(value, dict):
        return {k: _indexed(v) for k, v in value.items()}
    if isinstance(value, list) and any(isinstance(v, dict) for v in value):
        return {str(i): _indexed(v) for i, v in enumerate(value)}
    return value


def check_entries(leaderboard: Path) -> EntryCheck:
    """Every slim entry's pooled counts and score means re-derived from its stored per-image scores and thresholds
    (``entries.check_entry``); full records are left to re-scoring. First, each stored protocol against the hash it
    is named by (``protocols/<ref>.json``: the entries name it, and their seals cover the name, not the file)."""
    out = EntryCheck()
    for path in sorted((leaderboard / "protocols").glob("*.json")):
        if protocol_ref(read_board_json(path, f"protocol {path.stem}")) != path.stem:
            out.problems.append(f"{path}: its contents do not hash to the name the entries use ({path.stem}); the "
                                "protocol was edited, restore it or publish the board again")
    protocols = protocol_reader(leaderboard)
    for path in sorted((leaderboard / "cells").glob("*.json")):
        raw = read_board_json(path, f"cell {path.stem}")
        if not is_entry(raw):
            continue
        try:
            one = check_entry(raw, protocol=protocols)
        except (KeyError, TypeError, AttributeError, IndexError, ValueError) as exc:
            raise _malformed(path, exc) from None
        out.problems += one.problems
        out.borderline += one.borderline
        out.explained += one.explained
        out.checked += one.checked
    return out
