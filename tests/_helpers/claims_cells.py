"""Synthetic claims cells: a results folder holding one finished cell per planned cell of a claims suite, with
random numbers and nulls (tests/unit/claims/)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from reconbench.bench.cells import CELL_FORMAT, expand
from reconbench.bench.suite import load_suite


def write_cells(folder: Path, suite_name: str, rng: np.random.Generator) -> dict[str, dict[str, Any]]:
    """A results folder with one finished cell per planned cell of the suite, with random numbers and nulls."""
    suite = load_suite(suite_name)
    (folder / "cells").mkdir(parents=True)
    written = {}
    for cell in expand(suite):
        n = cell.recipe.problem.n_per_class * (cell.recipe.problem.num_classes or 2)
        summary: dict[str, Any] = {"reconstructed_calibrated": int(rng.integers(0, 3)), "n_train": n}
        spread = {"reconstructed_calibrated": {"mean": 0.0, "max": 0.0, "min": 0.0, "draws": 19}}
        for key in ("top_k_mean_ssim", "top_k_mean_corr", "membership_auc", "max_candidates_per_image",
                    "distinct_share", "init_copy_share", "candidates_nearer_decoy_share", "margin_near_min_share"):
            summary[key] = float(rng.uniform())
            spread[key] = {"mean": 0.5, "max": 0.7, "min": 0.3, "draws": 19}
        summary["margin_score_spearman"] = float(rng.uniform(-1, 1))
        rec = {"format": CELL_FORMAT, "cell_id": cell.cell_id, "cell_key": cell.key(suite), "status": "ok",
               "spec": {"dtype": suite.dtype}, "protocol": cell.protocol(suite),
               "target": {"name": cell.target, "n_train": n, "train_metrics": {"param_norm_sq": 4.0}},
               "attack": {"label": cell.attack.label, "name": cell.attack.attack},
               "init": {"label": cell.init.label, "regime": cell.init.regime, "is_oracle": False},
               "runs": [{"run": 0, "steps": 10, "stopped": "completed", "config": {"steps": 10},
                         "candidates_finite": True, "initial_loss": 2.0, "final_loss": float(rng.uniform(0, 1))}],
               "selections": {"pool": {"summary": summary, "attack_loss": float(rng.uniform(0, 0.1)),
                                       "null": {"available": True, "spread": spread}}}}
        (folder / "cells" / f"{cell.cell_id}.json").write_text(json.dumps(rec))
        written[cell.cell_id] = rec
    return written
