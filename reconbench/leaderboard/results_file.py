"""A published board's ``results.json``, written compactly and read back whole.

Every statistic of the tables (a row's metric over seeds, a null, a privacy-utility point) is written by
:class:`~reconbench.leaderboard.tables.Stat` as ``mean``, ``sd``, ``n``, ``values``, ``ci95`` and ``value_range``;
the first four but ``values`` follow from ``values`` and ``value_range``. The compact form
(:data:`COMPACT_FORMAT`) leaves ``mean``, ``sd``, ``n`` and ``ci95`` out wherever :class:`Stat` gives them back
exactly, and has no spaces; :func:`read_results` puts them back, so every reader sees the full form. A
``results.json`` of the earlier format (:data:`~reconbench.leaderboard.tables.LEADERBOARD_FORMAT`, every number
written) is read unchanged.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from reconbench.errors import ReconbenchError
from reconbench.leaderboard.tables import Stat
from reconbench.provenance import json_default, read_json, write_text_atomic
from reconbench.records import MetricStat

#: format of a results.json whose statistics may leave out what their values give
COMPACT_FORMAT = "reconbench-leaderboard/2"
#: the fields of a statistic that its ``values`` and ``value_range`` give (:class:`Stat`)
DERIVED = ("mean", "sd", "n", "ci95")


def _is_stat(d: dict[str, Any]) -> bool:
    return isinstance(d.get("values"), list) and isinstance(d.get("value_range"), list) and len(d["value_range"]) == 2


def _derived(d: dict[str, Any]) -> dict[str, Any] | None:
    try:
        full = Stat.from_metric(MetricStat.from_dict(d)).to_dict()
    except (TypeError, ValueError):
        return None
    return {k: full[k] for k in DERIVED}


def _same(a: Any, b: Any) -> bool:
    """Equal, exactly (NaN equal to NaN; an int equal to the same float is not the same JSON)."""
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and a == b


def compact(value: Any) -> Any:
    """``value`` with each statistic's derived fields left out where :class:`Stat` gives them back exactly."""
    if isinstance(value, list):
        return [compact(v) for v in value]
    if not isinstance(value, dict):
        return value
    out = {k: compact(v) for k, v in value.items()}
    if _is_stat(value) and all(k in value for k in DERIVED):
        derived = _derived(value)
        if derived is not None and all(_same(value[k], derived[k]) for k in DERIVED):
            out = {k: v for k, v in out.items() if k not in DERIVED}
    return out


def expand(value: Any) -> Any:
    """``value`` with each statistic's derived fields put back (a statistic that has them is left as it is)."""
    if isinstance(value, list):
        return [expand(v) for v in value]
    if not isinstance(value, dict):
        return value
    out = {k: expand(v) for k, v in value.items()}
    if _is_stat(value) and not any(k in value for k in DERIVED) and (derived := _derived(value)) is not None:
        out = {**derived, **out}
    return out


def results_text(data: dict[str, Any]) -> str:
    """The compact text of a board's results.json."""
    return json.dumps({**compact(data), "format": COMPACT_FORMAT}, default=json_default, separators=(",", ":"),
                      allow_nan=True)


def write_results(board: Path, data: dict[str, Any]) -> None:
    write_text_atomic(board / "results.json", results_text(data))


def read_results(board: Path) -> dict[str, Any]:
    """A board's results.json in the full form, or a one-line error naming the file."""
    path = board / "results.json"
    data = read_json(path, missing="render the leaderboard again (or pass the board's folder)",
                     damaged="the leaderboard is damaged, render it again")
    if not isinstance(data, dict):
        raise ReconbenchError(f"{path} is not a leaderboard's results.json (a {type(data).__name__}); render it again")
    return expand(data) if data.get("format") == COMPACT_FORMAT else data
