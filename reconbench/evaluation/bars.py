"""Calibrated counts that compare like with like: per search run, pooled, and per selection rule (docs/calibration.md).

The headline threshold depends on what is evaluated: it rises with the candidate count m, and picking the best of R
runs by a score that reads the training images (the oracle selection) is itself a search that chance profits from.
So each count here is taken against a threshold calibrated for exactly that evaluation, on held-out null draws with
the same candidate count, the same labels and the same selection rule:

* ``pool``: all usable runs pooled (m = R m_run), the bar of the pooled evaluation's ``reconstructed_calibrated``;
* ``runs``: each run alone (m = m_run), against the single-run bar (one threshold for all runs: same m, same labels);
* ``blind``: the run of lowest attack loss. Its choice reads no training image, so the null of a blind-selected run
  is one null run: the single-run bar;
* ``oracle``: the run of lowest extraction score. Its bar applies the same choice to null runs: each of the K
  calibration draws is R null runs of m_run candidates, the one of lowest extraction score is kept, and the
  threshold is the highest score any kept run reached on any training image (``null.calibrate_selected``).

The record is added beside the evaluations (``calibration_bars`` in result.json and in a cell); the evaluations'
own numbers are unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from reconbench.data import Problem
from reconbench.evaluation import null
from reconbench.evaluation.batched import column_scorer
from reconbench.evaluation.evaluate import extraction_score, score
from reconbench.evaluation.protocol import ResolvedProtocol, as_resolved

#: the format of the record (a change of rule or draws gets a new version)
BARS_FORMAT = "reconbench-calibration-bars/1"


def light_protocol(resolved: ResolvedProtocol) -> ResolvedProtocol:
    """The protocol restricted to the calibrated score's metric (and the primary one), without figures."""
    from reconbench.evaluation.evaluate import restricted

    column = null.calibrated_column(resolved)
    keep = {column, resolved.base.primary_metric} if column in resolved.metric_names else None
    return restricted(resolved, keep)


def light_scorer(problem: Problem, resolved: ResolvedProtocol,
                 labels: np.ndarray | None) -> Callable[[torch.Tensor], dict[str, Any]]:
    """Score candidates under :func:`light_protocol` (no ``protocol`` block)."""
    light = light_protocol(resolved)
    lab = None if labels is None else torch.as_tensor(labels)
    return lambda cand: score(problem, cand, light, labels=lab, with_protocol=False)


def _count(scores: np.ndarray, threshold: float) -> int:
    return int(null.calibrated_flags(scores, threshold).sum())


def calibration_bars(problem: Problem, pooled: dict[str, torch.Tensor], *, family: str,
                     protocol: dict[str, Any] | ResolvedProtocol,
                     evaluation: dict[str, Any], blind: int | None, oracle: int | None) -> dict[str, Any] | None:
    """Counts per run, pooled and per selection, each against its own bar; None without a calibrated headline.

    ``pooled``: the candidates, labels and run ids of the usable runs (as pooled for ``evaluation``, the pooled
    evaluation); ``blind``/``oracle``: the selected runs.
    """
    resolved = as_resolved(protocol, family)
    p = resolved.base
    pool_threshold = evaluation["summary"]["calibrated_threshold"]
    if not p.calibration_draws or pool_threshold is None:
        return None
    column = null.calibrated_column(resolved)
    run_ids = pooled["run_ids"]
    runs = sorted({int(r) for r in run_ids})
    masks = {r: run_ids == r for r in runs}
    sizes = {int(mask.sum()) for mask in masks.values()}
    first = masks[runs[0]]
    labels = pooled["labels"][first].numpy()
    if len(sizes) != 1 or any(not torch.equal(pooled["labels"][mask], pooled["labels"][first])
                              for mask in masks.values()):
        return None   # runs of different sizes or labels have no common single-run bar
    m_run = sizes.pop()
    scorer = light_scorer(problem, resolved, labels)
    columns = column_scorer(problem, light_protocol(resolved), labels, column)
    single = null.calibrate(problem, resolved, labels, m_run, scorer, columns=columns)
    if columns is not None:
        per_run_scores = dict(zip(runs, columns([pooled["candidates"][masks[r]] for r in runs]), strict=True))
    else:
        per_run_scores = {r: null.scores_of(scorer(pooled["candidates"][mask]), column) for r, mask in masks.items()}
    out: dict[str, Any] = {
        "format": BARS_FORMAT, "score": column, "calibration_draws": p.calibration_draws,
        "pool": {"runs": runs, "m": int(len(run_ids)), "count": int(evaluation["summary"]["reconstructed_calibrated"]),
                 "threshold": float(pool_threshold),
                 "bar": f"pooled: {len(runs)} run(s), m = {len(run_ids)}"},
        "run_bar": {"m": m_run, "threshold": float(single["threshold"]), "bar": f"one run, m = {m_run}"},
        "runs": [{"run": r, "count": _count(s, float(single["threshold"]))} for r, s in per_run_scores.items()],
    }
    if blind is not None and blind in per_run_scores:
        out["blind"] = {"run": blind, "count": _count(per_run_scores[blind], float(single["threshold"])),
                        "threshold": float(single["threshold"]),
                        "bar": f"one run, m = {m_run} (blind selection reads no training image)"}
    if oracle is not None and oracle in per_run_scores:
        def rank(cand: torch.Tensor) -> float:
            return extraction_score(problem, cand)

        # one usable run: nothing was selected, and the bar is the single-run one
        sel = (null.calibrate_selected(problem, resolved, labels, m_run, len(runs), scorer, rank,
                                         "lowest extraction score", columns=columns) if len(runs) > 1
               else {"threshold": single["threshold"], "draw_maxima": single["draw_maxima"]})
        out["oracle"] = {"run": oracle, "count": _count(per_run_scores[oracle], float(sel["threshold"])),
                         "threshold": float(sel["threshold"]), "draw_maxima": sel["draw_maxima"],
                         "bar": f"oracle-selected: best of {len(runs)} null runs by extraction score, m = {m_run}"}
    return out


def selection_record(bars: dict[str, Any] | None, name: str) -> dict[str, Any] | None:
    """What a cell's selection ``name`` (pool, blind, oracle) stores of the bars: count, threshold, bar."""
    if not bars or name not in bars:
        return None
    entry = bars[name]
    return {"count": entry["count"], "threshold": entry["threshold"], "bar": entry["bar"], "format": bars["format"]}


__all__ = ["BARS_FORMAT", "calibration_bars", "light_protocol", "light_scorer", "selection_record"]
