"""How far a claims board the page reads has grown, and which commits its cells ran at: a board of the papers' sizes
(``claims-gpu``) is published while it grows over slices, "k of N cells" from several commits (docs/slices.md,
"Publishing a board that grows over slices"). The page states that for such a board, and tells a claim whose cells
the board has not run yet (:data:`NOT_RUN_YET`) from one that is not run for another reason (a failed, stale or
unplanned cell). A complete board of one folder (every CPU claims board) has neither line nor mark.

A published board's own header says it (``results.json``: ``progress``, ``cells``, ``cell_commits``, ``not_run``);
a results folder that is not a published board (``runs/bench/claims-gpu``, after ``bench --unpack``) is read the
same way the board would be published from it: its planned cells against its finished ones, and each cell's
commit from the merges' invocation records (``reconbench.leaderboard.slice_origins``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from reconbench.bench.suite import Suite
from reconbench.claims.measure import Point
from reconbench.claims.verdicts import NOT_RUN, NOT_RUN_YET, Decision
from reconbench.leaderboard.board_progress import commit_shares
from reconbench.leaderboard.tables import collect, header_info
from reconbench.records import BOARD_RESULTS_FILE, BoardHeader, BoardResults


@dataclass(frozen=True)
class BoardState:
    """A claims suite's board as the page reads it: its header (read, or made as publishing would make it) and its
    planned cells that have no record at all (not run; a failed or stale cell has one)."""

    suite: str
    header: BoardHeader
    not_run: frozenset[str]

    @property
    def partial(self) -> bool:
        return bool(self.header.progress)

    def line(self) -> str:
        """``claims-gpu: 2 of 224 cells, from commits 0123456789ab (1 cell(s)), ...`` (the commits left out where
        the cells name none): empty for a complete board of one folder (no ``progress``, no ``cell_commits``), whose
        page is as it was before slices."""
        header = self.header
        if not header.progress and not header.cell_commits:
            return ""
        cells = header.cells or {}
        held = header.progress or f"all {cells.get('planned', '?')} cells"
        shares = [s for s in commit_shares(header) if s.commit not in ("", "None")]
        commits = ", ".join(f"`{s.commit[:12]}`" + ("" if s.cells is None else f" ({s.cells} cell(s))")
                            for s in shares)
        return f"`{self.suite}`: {held}" + (f", from commit{'s' if len(shares) != 1 else ''} {commits}"
                                            if shares else "") + "."


def board_state(suite: Suite, folder: Path) -> BoardState:
    """The state of ``suite``'s board in ``folder``: a published board's header, or the header publishing the
    results folder would write (``tables.collect`` and ``tables.header_info``, so that the two cannot disagree); a
    folder holding no cell of the suite is no board yet, not a partial one (its claims read "not run")."""
    path = folder / "results.json"
    if path.is_file():
        data: BoardResults = BOARD_RESULTS_FILE.read(path)
        return BoardState(suite.name, data.header, frozenset(data.not_run))
    pub = collect(suite, folder)
    header = header_info(suite, folder, pub, command="") if pub.records else BoardHeader(suite=suite.name)
    return BoardState(suite.name, header, frozenset(pub.not_run))


def as_board_grows(decision: Decision, points: list[Point], state: BoardState | None) -> Decision:
    """A claim not run because its board is partial reads :data:`NOT_RUN_YET`: the board is partial, the claim
    lacks cells, and every cell it lacks is one the board has not run (none failed, none stale), so it gets a
    verdict as the board grows. Any other decision is returned as it is."""
    if decision.verdict != NOT_RUN or state is None or not state.partial:
        return decision
    missing = [cid for p in points for cid in p.missing]
    if not missing or any(p.failed for p in points) or not set(missing) <= state.not_run:
        return decision
    return Decision(NOT_RUN_YET, decision.reason, decision.test, decision.p)
