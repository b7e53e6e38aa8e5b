"""A published board's ``results.json``, written compactly and read back whole.

Every statistic of the tables (a row's metric over seeds, a null, a privacy-utility point) is written by
:class:`~reconbench.records.board_results.Stat` as ``mean``, ``sd``, ``n``, ``values``, ``ci95`` and ``value_range``;
the first four but ``values`` follow from ``values`` and ``value_range``. The compact form
(:data:`COMPACT_FORMAT`) leaves ``mean``, ``sd``, ``n`` and ``ci95`` out wherever :class:`Stat` gives them back
exactly, and has no spaces; :func:`read_results` puts them back (the upgrade step of the format's door,
:data:`~reconbench.records.board_results.BOARD_RESULTS_FILE`), so every reader sees the full form. A
``results.json`` of the earlier format (:data:`~reconbench.leaderboard.tables.LEADERBOARD_FORMAT`, every number
written) is read unchanged.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from reconbench.errors import ReconbenchError
from reconbench.provenance import json_default, read_json, write_text_atomic
from reconbench.records import BOARD_RESULTS_FILE, BoardResults
from reconbench.records.board_results import compact, expand

#: format of a results.json whose statistics may leave out what their values give
COMPACT_FORMAT = BoardResults.SCHEMA

__all__ = ["COMPACT_FORMAT", "compact", "expand", "read_results", "results_text", "write_results"]


def results_text(data: dict[str, Any]) -> str:
    """The compact text of a board's results.json."""
    return json.dumps({**compact(data), "format": COMPACT_FORMAT}, default=json_default, separators=(",", ":"),
                      allow_nan=True)


def write_results(board: Path, data: dict[str, Any]) -> None:
    write_text_atomic(board / "results.json", results_text(data))


def read_results(board: Path) -> dict[str, Any]:
    """A board's results.json in the full form (upgraded by its version, read strictly), or a one-line error
    naming the file."""
    path = board / "results.json"
    data = read_json(path, missing="render the leaderboard again (or pass the board's folder)",
                     damaged="the leaderboard is damaged, render it again")
    if not isinstance(data, dict):
        raise ReconbenchError(f"{path} is not a leaderboard's results.json (a {type(data).__name__}); render it again")
    full = BOARD_RESULTS_FILE.upgrade(data, path)
    BoardResults.from_dict(full, path)  # strictly, here where the file is known: a refusal names it
    return full
