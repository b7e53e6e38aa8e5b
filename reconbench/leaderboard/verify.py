"""RobustBench-style checks of a published leaderboard: re-score stored candidates, re-aggregate the tables.

``rescore_cell`` rebuilds the training problem from the recipe, loads the cell's stored pooled
candidates, runs the standard evaluation function (``reconbench.evaluation.evaluate`` via the runner's
``score_selection``) for the pooled, blind and oracle selections, and compares every stored summary number.
``check_tables`` recomputes every table entry of ``results.json`` from the cell JSONs.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any

from safetensors.torch import load_file

from reconbench.bench.runner import STATUS_OK, null_record, score_selection
from reconbench.targets.cards import ModelCard


def _close(a: Any, b: Any, rtol: float, atol: float) -> bool:
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
    return sorted(p.stem for p in (leaderboard / "candidates").glob("*.safetensors"))


def rescore_cell(
    leaderboard: Path, cell_id: str, *, data_root: str | None = None, rtol: float = 1e-9, atol: float = 1e-12
) -> list[str]:
    """Mismatches between a cell JSON and a fresh evaluation (empty: every stored number reproduced)."""
    rec = json.loads((leaderboard / "cells" / f"{cell_id}.json").read_text())
    if rec["status"] != STATUS_OK:
        return [f"{cell_id}: status {rec['status']}, nothing to re-score"]
    card_data = json.loads((leaderboard / "targets" / f"{rec['target']['recipe_key']}.json").read_text())
    card = ModelCard(path=leaderboard / "targets", data=card_data)
    problem = card.problem(data_root)
    pooled = load_file(str(leaderboard / "candidates" / f"{cell_id}.safetensors"))
    protocol = rec["protocol"]
    family = rec["target"]["recipe"]["family"]
    problems: list[str] = []
    for name, sel in rec["selections"].items():
        run = None if name == "pool" else sel.get("run")
        if name != "pool" and run is None:
            continue
        evaluation = score_selection(problem, pooled, run, family=family, protocol=protocol, card=card)
        fresh = evaluation["summary"]
        stored = sel.get("summary") or {}
        if "null" in sel and not _close(sel["null"], null_record(evaluation), rtol, atol):
            problems.append(f"{cell_id} [{name}] null: the stored held-out null differs from a fresh one")
        # A metric that is unavailable here or was unavailable there (LPIPS without its backbone weights or package)
        # depends on the environment, not on the candidates: it is not a stored number to check.
        env_dependent = {k for d in (stored, fresh) for k, v in d.items() if v == "unavailable"}
        env_dependent |= {f"{k}_unavailable_reason" for k in env_dependent}
        stored = {k: v for k, v in stored.items() if k not in env_dependent}
        fresh = {k: v for k, v in fresh.items() if k not in env_dependent}
        for key, value in stored.items():
            if key not in fresh:
                problems.append(f"{cell_id} [{name}] {key}: stored {value!r}, not produced by the evaluation now")
            elif not _close(value, fresh[key], rtol, atol):
                problems.append(f"{cell_id} [{name}] {key}: stored {value!r}, re-scored {fresh[key]!r}")
        # a cell scored before the held-out null existed stores fewer keys: its stored numbers are still checked
        if "null" in sel:
            for key in fresh.keys() - stored.keys():
                problems.append(f"{cell_id} [{name}] {key}: produced by the evaluation now but not stored")
    return problems


def check_tables(leaderboard: Path) -> list[str]:
    """Recompute each table entry of results.json (mean, sd, n) from the values of the cells it names."""
    data = json.loads((leaderboard / "results.json").read_text())
    cols = {c["name"]: c for c in data["columns"]}
    cells = {p.stem: json.loads(p.read_text()) for p in (leaderboard / "cells").glob("*.json")}
    problems = []
    for sel, rows in data["tables"].items():
        for row in rows:
            for name, m in row["metrics"].items():
                col = cols[name]
                values = []
                for cid in row["cells"]:
                    rec = cells.get(cid)
                    if rec is None:
                        problems.append(f"{sel} row {row['attack']}/{row['init']}/{row['target']}: cell {cid} missing")
                        continue
                    s = rec["selections"][sel]
                    if col["source"] == "attack_loss":
                        v = s.get("attack_loss")
                    elif col["source"] == "wall_seconds":
                        v = rec.get("attack_seconds")
                    else:
                        v = (s.get("summary") or {}).get(m["key"]) if m["key"] else None
                    if isinstance(v, dict):
                        v = v.get("value")
                    if isinstance(v, (int, float)) and not (isinstance(v, float) and math.isnan(v)):
                        values.append(float(v))
                mean = statistics.fmean(values) if values else None
                if not _close(values, m["values"], 1e-12, 0.0) or not _close(mean, m["mean"], 1e-12, 0.0):
                    problems.append(
                        f"{sel} row {row['attack']}/{row['init']}/{row['target']} {name}: "
                        f"results.json says {m['values']}, the cells give {values}"
                    )
    return problems
