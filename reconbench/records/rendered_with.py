"""What rendered a board (``header.rendered_with`` of a board's ``results.json``; ``leaderboard/tables.py`` writes
it): the reconbench version and the git commit of the checkout (None outside a git checkout)."""

from __future__ import annotations

from dataclasses import dataclass

from reconbench.records.record import Record


@dataclass(frozen=True)
class RenderedWith(Record):
    """The version and commit a board was rendered with."""

    reconbench_version: str | None = None
    git_commit: str | None = None
