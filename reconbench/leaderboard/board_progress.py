"""How far a board has grown and which commits its cells ran at, as the exports and the site state it beside the
board's README (``readme.py``): a partial board (``header.progress``, "k of N cells") and a board whose cells came
from slice packs at several commits (``header.cell_commits``). A board rendered from one folder at one commit has no
``cell_commits``: its commits are ``header.git_commits``, as before slices."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from reconbench.records import BoardHeader, CellRecord


@dataclass(frozen=True)
class CommitShare:
    """One commit the board's cells ran at; ``cells`` and ``packs`` only where the board counts them (slices)."""

    commit: str
    cells: int | None = None
    packs: int | None = None

    def counts(self) -> str:
        """``(N cell(s), M slice pack(s))``, or ``run here`` for cells run in the folder; empty where not counted."""
        if self.cells is None:
            return ""
        packs = f"{self.packs} slice pack(s)" if self.packs else "run here"
        return f"({self.cells} cell(s), {packs})"

    def text(self, width: int = 40) -> str:
        """``commit`` cut to ``width`` characters, with its cells and slice packs where counted."""
        return " ".join(t for t in (self.commit[:width], self.counts()) if t)


def commit_shares(header: BoardHeader) -> list[CommitShare]:
    """The commits the board's cells ran at: from ``cell_commits`` where the board has them, else ``git_commits``."""
    if header.cell_commits:
        return [CommitShare(c.commit, c.cells, len(c.packs)) for c in header.cell_commits]
    return [CommitShare(str(c)) for c in header.git_commits]


def cell_commits(header: BoardHeader, records: Mapping[str, CellRecord]) -> dict[str, str]:
    """The commit each cell of the board ran at: the one ``header.cell_commits`` lists it under (a slice's cell,
    whose record names none), else its record's own, else the board's only commit where it has one; a cell whose
    commit none of these names is left out."""
    listed = {cid: c.commit for c in header.cell_commits or [] for cid in c.cell_ids}
    shares = commit_shares(header)
    only = shares[0].commit if len(shares) == 1 else None
    out: dict[str, str] = {}
    for cid, rec in records.items():
        own = rec.ran.git_commit
        commit = listed.get(cid) or (str(own) if own else None) or only
        if commit:
            out[cid] = commit
    return out


def row_commits(commits: Mapping[str, str], cells: Iterable[str]) -> list[str]:
    """The distinct commits of a table row's cells, in the cells' order (one for a board run at one commit)."""
    return list(dict.fromkeys(commits[c] for c in cells if c in commits))


def missing_cells(header: BoardHeader) -> int:
    """The planned cells without a result (not run, failed or stale): 0 on a complete board."""
    cells = header.cells or {}
    return max(0, int(cells.get("planned", 0)) - int(cells.get("ok", 0)))


def progress_line(header: BoardHeader) -> str:
    """One plain-text line for an export's title: how many planned cells the board holds when it is partial, and the
    commits its cells ran at when they came from slices (empty for a complete board of one folder)."""
    parts = []
    if header.progress:
        parts.append(f"partial board: {header.progress} ({missing_cells(header)} planned cell(s) without a result "
                     "yet; every number is over the cells it holds)")
    if header.cell_commits:
        parts.append("cells ran at commits " + "; ".join(s.text() for s in commit_shares(header)))
    return "; ".join(parts)
