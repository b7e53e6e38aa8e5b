"""A finished run evaluated and persisted: pooled and selected evaluations, calibration bars, the loss figure,
result.json and candidates.safetensors."""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any

import torch

from reconbench import plugins
from reconbench.attack.outcome import outcome_of_runs
from reconbench.attack.search import search_record
from reconbench.data import Problem
from reconbench.evaluation import evaluate, resolve_protocol
from reconbench.evaluation.bars import calibration_bars
from reconbench.evaluation.evaluate import evaluate_many
from reconbench.evaluation.protocol import ResolvedProtocol
from reconbench.provenance import portable_path, provenance, save_tensors_atomic, write_json
from reconbench.records import (
    PickedRun,
    RunResult,
    RunTarget,
    SearchRun,
    StoredEvaluation,
    StoredOutcome,
)
from reconbench.records.model_card import CardRunFields
from reconbench.runs.pool import load_pooled, select_runs
from reconbench.runs.spec import RunSpec
from reconbench.runs.traces import plot_traces
from reconbench.targets.cards import ModelCard


def score_selection(
    problem: Problem,
    pooled: dict[str, torch.Tensor],
    run: int | None,
    *,
    family: str,
    protocol: dict[str, Any] | ResolvedProtocol,
    card: ModelCard | None,
    out_dir: Path | None = None,
    quiet: bool = True,
) -> dict[str, Any]:
    """The standard evaluation of one search run's candidates (``run=None``: the whole pool): how a run scores its
    selections here, and how ``leaderboard --verify`` scores a published cell's stored candidates again."""
    chosen = selection_set(pooled, run)
    return evaluate(problem, chosen["candidates"], family=family, protocol=protocol, labels=chosen["labels"],
                    run_ids=chosen["run_ids"], x0=chosen["x0"], card=card, out_dir=out_dir, quiet=quiet)


def selection_set(pooled: dict[str, torch.Tensor], run: int | None) -> dict[str, torch.Tensor]:
    """The candidates, labels, run ids and starting candidates of one search run (``run=None``: the whole pool)."""
    mask = torch.ones(len(pooled["run_ids"]), dtype=torch.bool) if run is None else pooled["run_ids"] == run
    return {key: pooled[key][mask] for key in ("candidates", "labels", "run_ids", "x0")}


def finish(card: ModelCard, spec: RunSpec, out: Path, problem: Problem, runs: list[dict[str, Any]],
           wall: float, *, oracle_init: bool, init_config: dict[str, Any], quiet: bool,
           protocol: ResolvedProtocol | None = None) -> dict[str, Any]:
    """Pool the runs, evaluate, select blind and oracle runs, and write result.json + candidates (``protocol``: the
    spec's protocol as the run resolved it, else resolved here)."""
    card_fields = CardRunFields.from_dict(card.data, card.path)   # what a run reads of its card, typed
    family = card_fields.family
    resolved = protocol or resolve_protocol(spec.protocol, family)
    usable = [r for r in runs if r["stopped"] != "failed"]
    pooled = load_pooled(out, usable)
    save_tensors_atomic(pooled, out / "candidates.safetensors")
    blind, oracle = select_runs(runs)
    # the selected runs alone as well as the pool the papers evaluate (with more than one usable run), all scored in
    # one pass (evaluate_many: each record equals its own evaluation); a run both rules pick is scored once
    picks = list(dict.fromkeys(r for r in (blind, oracle) if r is not None)) if len(usable) > 1 else []
    evaluations = evaluate_many(problem, [selection_set(pooled, r) for r in [None, *picks]], family=family,
                                protocol=resolved, card=card, out_dirs=[out] + [None] * len(picks))
    evaluation = evaluations[0]
    scored = dict(zip(picks, evaluations[1:], strict=True))
    selected: dict[str, Any] = {}
    for label, run in (("blind", blind), ("oracle", oracle)):
        if run not in scored:
            continue
        t0 = time.perf_counter()
        if any(selected[other] is scored[run] for other in selected):   # each selection keeps its own copy
            selected[label] = {**copy.deepcopy(scored[run]), "seconds": time.perf_counter() - t0}
        else:
            selected[label] = scored[run]
    bars = calibration_bars(problem, pooled, family=family, protocol=resolved,
                            evaluation=evaluation, blind=blind, oracle=oracle)
    draw = resolved.base.figures   # figures = false: no PNG at all
    figure = plot_traces(runs, out / "figures" / "attack_loss.png", f"{spec.attack}: attack loss per run") if draw \
        else None
    result = RunResult(
        kind=RunResult.SCHEMA,
        attack=spec.attack,
        threat_model=_threat_record(spec.attack),
        init=spec.init,
        init_config=init_config,
        init_is_oracle=oracle_init,
        spec=spec.to_dict(),
        search=search_record(spec.search, spec.search_config),
        target=RunTarget(card=portable_path(card.path), **_recipe_fields(card, card_fields),
                         recipe_key=card_fields.recipe_key, card_sha256=card_fields.content_sha256, family=family,
                         task=card.task, n_train=problem.n, p_over_dn=card_fields.p_over_dn,
                         train_metrics=card_fields.run_metrics),
        selection={
            "blind": PickedRun(run=blind,
                               rule="lowest final attack loss among completed runs (reads no training images)"),
            "oracle": PickedRun(run=oracle, rule="lowest extraction score (mean NCC distance of the 10 best "
                                                 "distinct training matches): reads training images"),
        },
        runs=[SearchRun.from_dict({k: v for k, v in r.items() if k != "trace"}, f"search run {r['run']}") for r in runs],
        failed_runs=[r["run"] for r in runs if r["stopped"] == "failed"],
        outcome=StoredOutcome.from_dict(outcome_of_runs(runs).to_dict(), "the cell's outcome"),
        evaluation=StoredEvaluation.from_dict(evaluation, "the pooled evaluation"),
        evaluation_selected={k: StoredEvaluation.from_dict(v, f"the {k} evaluation") for k, v in selected.items()},
        calibration_bars=bars,
        figures=[str(figure.relative_to(out))] if figure else [],
        wall_seconds=wall,
        provenance=provenance(spec.to_dict(), spec.device, spec.dtype, spec.seed),
    )
    data = result.to_dict()   # the file's JSON: every field of the record, in its order
    write_json(out / "result.json", data)
    return data


def _threat_record(attack: str) -> dict[str, Any]:
    """What the attack read besides the final weights (its declared threat model), with its short name."""
    threat = plugins.attack(attack).threat
    return {"label": threat.label, **threat.to_dict()}


def _recipe_fields(card: ModelCard, card_fields: CardRunFields) -> dict[str, Any]:
    """The card's training recipe, or for a model brought by `reconbench audit` (recipe key ``audit-...``) what the
    audit recorded of it."""
    if card_fields.is_audit:
        return {"audit": dict(card_fields.recipe or {})}
    return {"recipe": card.recipe}
