"""Whether an attack did its work: the outcome of each search run and of a cell, derived from what the run did.

A run's outcome is one of

    ok              it ran (all its planned steps, or stopped by its own criterion after at least half of them, or
                    ``converged``: the KKT attacks' recorded early stop, at any step)
    diverged        its loss became non-finite (the candidates are those of its last finite step, or its start)
    non_finite      it returned candidates with non-finite entries
    stopped_early   it stopped before its planned steps (a time budget, a line search that found no decrease, ...)
                    having done fewer than MIN_STEP_SHARE of them; 0 steps means the candidates are the start

with a one-line reason. The outcome is read from the run's record (``stopped``, ``steps``, ``message``, its config's
step budget and whether the candidates were finite), so records written before outcomes were stored get the same
outcome as new ones. A cell's outcome is ``ok`` when at least one of its runs is (or when its record lists no runs);
otherwise the most frequent failure of its runs. A failed cell is an attack that did not run, not a defended or
unreconstructable target: the leaderboards show it as such and never count it as 0 reconstructed.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from reconbench.records import CellRecord, SearchRun

OK, DIVERGED, NON_FINITE, STOPPED_EARLY = "ok", "diverged", "non_finite", "stopped_early"
#: the failures, most serious first (ties between counts of a cell's runs go to the earlier one)
FAILURES = (DIVERGED, NON_FINITE, STOPPED_EARLY)
#: a run that stopped before its planned steps counts as stopped early when it did fewer than this share of them
MIN_STEP_SHARE = 0.5
#: the config fields that hold an attack's planned number of steps (the built-in attacks' names for it); an attack
#: with none of them is never judged stopped early
STEP_BUDGET_FIELDS = ("steps", "outer_steps")
#: ``stopped`` values of a run that ended on its own before its planned steps (the harness' ``failed`` is a run
#: whose attack raised: a divergence)
_DIVERGED_STOPS = ("diverged", "failed")
#: ``stopped`` values of a run that did what it set out to do: all its steps, or converged by its recorded rule
FINISHED_STOPS = ("completed", "converged")


@dataclass(frozen=True)
class Outcome:
    status: str
    reason: str

    @property
    def ok(self) -> bool:
        return self.status == OK

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


def search_run(run: SearchRun | Mapping[str, Any]) -> SearchRun:
    """A run's record (one given as its JSON is read strictly)."""
    return run if isinstance(run, SearchRun) else SearchRun.from_dict(run, "a search run's record")


def planned_steps(run: SearchRun | Mapping[str, Any]) -> int | None:
    """The steps the run's config asked for (None: the attack declares no step budget)."""
    config = search_run(run).config or {}
    for name in STEP_BUDGET_FIELDS:
        value = config.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def _first_line(text: object, limit: int = 240) -> str:
    text = " ".join(str(text or "").split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def derive_run_outcome(record: SearchRun | Mapping[str, Any]) -> Outcome:
    """The outcome of one search run from its record (see the module docstring)."""
    run = search_run(record)
    stopped, steps = "completed" if run.stopped is None else run.stopped, int(run.steps or 0)
    message = _first_line(run.message)
    if stopped in _DIVERGED_STOPS:
        return Outcome(DIVERGED, f"diverged after {steps} step(s): {message}")
    finite = run.candidates_finite
    if finite is None:  # records without the flag: the pipeline scored non-finite candidates as +inf
        score = run.oracle_score
        finite = not (isinstance(score, (int, float)) and math.isinf(score))
    if not finite:
        return Outcome(NON_FINITE, f"returned non-finite candidates after {steps} step(s)")
    planned = planned_steps(run)
    if stopped not in FINISHED_STOPS and planned and steps < MIN_STEP_SHARE * planned:
        return Outcome(STOPPED_EARLY, f"stopped after {steps} of {planned} planned step(s) ({stopped}): {message}")
    return Outcome(OK, f"{steps} step(s) ({stopped})")


def run_outcome(record: SearchRun | Mapping[str, Any]) -> Outcome:
    """The stored outcome of a run record, else the one derived from it."""
    run = search_run(record)
    stored = run.outcome
    if stored is not None and stored.status is not None:
        return Outcome(stored.status, "" if stored.reason is None else stored.reason)
    return derive_run_outcome(run)


@dataclass(frozen=True)
class CellOutcome(Outcome):
    #: how many of the cell's runs ended with each status
    runs: dict[str, int]

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "reason": self.reason, "runs": dict(self.runs)}


def outcome_of_runs(runs: Sequence[SearchRun | Mapping[str, Any]]) -> CellOutcome:
    """A cell's outcome from its run records: ok if any run is ok, else its most frequent failure."""
    outcomes = [run_outcome(r) for r in runs]
    counts = Counter(o.status for o in outcomes)
    total = len(outcomes)
    if not total:  # a record that lists no runs cannot be judged (the pipeline always lists them)
        return CellOutcome(OK, "no run records to judge", {})
    if counts[OK]:
        failed = total - counts[OK]
        reason = f"{counts[OK]} of {total} run(s) ok" + (
            f"; {', '.join(f'{s} {c}' for s, c in sorted(counts.items()) if s != OK)}" if failed else "")
        return CellOutcome(OK, reason, dict(counts))
    status = max(FAILURES, key=lambda s: (counts[s], -FAILURES.index(s)))
    first = next(o for o in outcomes if o.status == status)
    return CellOutcome(status, f"{status} in {counts[status]} of {total} run(s); first: {first.reason}", dict(counts))


def cell_outcome(record: CellRecord | Mapping[str, Any]) -> CellOutcome | None:
    """The attack outcome of a cell record whose cell ran (None for a cell that failed before its attack finished):
    the stored one, else the one derived from its run records (a record given as its JSON is read strictly; a slim
    entry's once expanded)."""
    rec = record if isinstance(record, CellRecord) else CellRecord.from_dict(record, "a cell record")
    if rec.status != OK:
        return None
    stored = rec.outcome
    if stored is not None and stored.status is not None:
        return CellOutcome(stored.status, "" if stored.reason is None else stored.reason, dict(stored.runs or {}))
    return outcome_of_runs(rec.search_runs)


def failure_counts(outcomes: list[CellOutcome]) -> dict[str, int]:
    """How many of a row's cells failed, by status (ok cells left out)."""
    return dict(Counter(o.status for o in outcomes if not o.ok))


def failure_text(failed: dict[str, int], total: int) -> str:
    """``diverged 2/2`` (several statuses joined by ``, ``): failed cells out of a row's ``total`` finished cells."""
    return ", ".join(f"{status.replace('_', ' ')} {count}/{total}" for status, count in sorted(
        failed.items(), key=lambda kv: FAILURES.index(kv[0]) if kv[0] in FAILURES else len(FAILURES)))
