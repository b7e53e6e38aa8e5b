"""The pooled candidates of a run's search runs, and the blind and oracle selection among them."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

from reconbench.attack.outcome import FINISHED_STOPS


def load_pooled(out: Path, runs: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
    cands, labels, ids, x0 = [], [], [], []
    for rec in runs:
        t = load_file(str(out / "runs" / f"run-{rec['run']:03d}.safetensors"))
        cands.append(t["candidates"])
        labels.append(t["labels"])
        x0.append(t["x0"])
        ids.append(torch.full((len(t["labels"]),), rec["run"], dtype=torch.long))
    return {"candidates": torch.cat(cands), "labels": torch.cat(labels), "run_ids": torch.cat(ids),
            "x0": torch.cat(x0)}


def select_runs(runs: list[dict[str, Any]]) -> tuple[int | None, int | None]:
    """Blind: the lowest final attack loss among runs that completed or converged (else among all with a finite loss).
    Oracle: the lowest extraction score, which reads the training images."""
    finite = [r for r in runs if math.isfinite(r["final_loss"])]
    completed = [r for r in finite if r["stopped"] in FINISHED_STOPS] or finite
    blind = min(completed, key=lambda r: r["final_loss"])["run"] if completed else None
    scored = [r for r in runs if math.isfinite(r["oracle_score"])]
    oracle = min(scored, key=lambda r: r["oracle_score"])["run"] if scored else None
    return blind, oracle
