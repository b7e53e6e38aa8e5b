"""The evaluation function: match candidates to training images, score them with metric plugins, draw figures.

``evaluate(problem, candidates, ...)`` scores candidates (centred space, (M, C, H, W)) against a problem and returns a
JSON-serialisable dict:

* ``protocol``: every parameter with defaults resolved (matching, B and where it came from, each metric's config,
  ``higher_is_better`` and fixed choices, library versions);
* ``summary``: flat headline numbers (reconstructed count, top-k mean SSIM, both SSIM variants, membership
  precision, collapse, init-copy share, LPIPS or the reason it is unavailable, ...);
* ``per_image``: one row per training image (index, label, margin, best distance, matched candidate ids, each
  metric's columns); unmatched images carry ``matched: false`` and nulls, never NaN;
* ``candidates``: counts of valid, non-finite and constant candidates (the latter two are never matched);
* ``metrics``: per metric plugin its summary and details; ``figures``: files written under ``out_dir/figures``.

The steps follow the papers' protocol (``protocol.py``): features (``distances.py``), best-buddy matching and the
B-vote (``matching.py``), SSIM (``ssim.py``), then every metric plugin registered under ``metrics``
(``plugins/metrics.py``). ``oracle_score`` is the reference's in-run extraction score, used to pick runs
with the training images (an oracle): docs/method/evaluation-protocol.md#in-run-extraction-score.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.metadata
import math
import time
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from reconbench import plugins
from reconbench.data import Problem
from reconbench.errors import ReconbenchError
from reconbench.evaluation import decisions, null
from reconbench.evaluation.batched import column_scorer
from reconbench.evaluation.context import (
    CandidateError,
    Evaluation,
    as_vector,
    build_context,
    train_features,
    validity,
)
from reconbench.evaluation.distances import features, paired, pairwise
from reconbench.evaluation.protocol import Protocol, ResolvedProtocol, as_resolved, resolve_protocol
from reconbench.evaluation.scores import column_values, jsonable

__all__ = ["CandidateError", "Evaluation", "Protocol", "ResolvedProtocol", "evaluate", "extraction_score",
           "extraction_score_from_features", "oracle_score", "resolve_protocol"]


#: the NCC epsilon of the extraction score
EXTRACTION_EPS = 1e-10


def extraction_score(problem: Problem, candidates: torch.Tensor, k: int = 10, eps: float = EXTRACTION_EPS,
                     constant_tol: float = 1e-10) -> float:
    """The reference's in-run "extraction score" (docs/method/evaluation-protocol.md#in-run-extraction-score), lower is better.

    NCC (per-image, per-channel standardisation with the unbiased std, plus ``eps``) squared L2 distance in the
    centred space, not divided by the dimension; every candidate goes to its nearest training image, each training
    image keeps its best candidate, and the score is the mean distance of the k best such pairs. Non-finite and
    constant candidates are ignored; with none left the score is +inf.
    """
    c = candidates.detach().to("cpu", torch.float64)
    valid, _ = validity(c, problem.mean_tensor(torch.float64), constant_tol)
    ids = np.flatnonzero(valid)
    if len(ids) == 0:
        return math.inf
    train = train_features(problem, "ncc", eps)
    return extraction_score_from_features(train, features(c[torch.as_tensor(ids)], "ncc", eps), k)


def extraction_score_from_features(train: torch.Tensor, cand: torch.Tensor, k: int = 10,
                                   dist: torch.Tensor | None = None) -> float:
    """:func:`extraction_score` from NCC features (and, optionally, their raw (n, M) distance matrix)."""
    from reconbench.evaluation.matching import match

    if cand.shape[0] == 0:
        return math.inf
    ids = np.arange(cand.shape[0])
    m = match(train, cand, ids, len(ids), best_buddy=True, vote="min", avg_threshold=1.0, per_dimension=False,
              dist=dist)
    best = np.sort(m.best_dist[m.matched])
    return float(best[:k].mean())


def oracle_score(problem: Problem, candidates: torch.Tensor) -> float:
    """The reference "extraction score": mean NCC distance of the 10 best distinct training matches (lower is better)."""
    return extraction_score(problem, candidates)


def _versions() -> dict[str, str | None]:
    """The scoring libraries' versions (a fresh dict each call: callers may extend it)."""
    return dict(_installed_versions())


@functools.cache
def _installed_versions() -> dict[str, str | None]:
    """Read once per process: each metadata lookup parses the package's METADATA file, and a suite scores
    hundreds of candidate sets."""
    out: dict[str, str | None] = {"torch": torch.__version__}
    for dist in ("kornia", "scikit-image", "lpips", "torchvision", "reconbench"):
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[dist] = None
    return out


def evaluate(problem: Problem, candidates: torch.Tensor, *, family: str,
             protocol: dict[str, Any] | ResolvedProtocol | None = None,
             labels: torch.Tensor | None = None, run_ids: torch.Tensor | None = None,
             x0: torch.Tensor | None = None, card: object = None, out_dir: str | Path | None = None,
             quiet: bool = False) -> dict[str, Any]:
    """Score pooled candidates against the problem's training images under the (resolved) protocol, with the
    held-out null and the calibrated headline (``null.py``). ``protocol``: options, or a protocol already resolved."""
    t0 = time.perf_counter()
    resolved = as_resolved(protocol, family)
    out, ev = _score(problem, candidates, resolved, labels=labels, run_ids=run_ids, x0=x0, card=card)
    lab = as_vector(labels, int(out["candidates"]["total"]), "labels")
    _add_null_and_figures(out, ev, problem, resolved, lab, card, out_dir)
    out["seconds"] = time.perf_counter() - t0
    return jsonable(out)


def _add_null_and_figures(out: dict[str, Any], ev: Evaluation, problem: Problem, resolved: ResolvedProtocol,
                          labels: np.ndarray | None, card: object, out_dir: str | Path | None) -> None:
    """The held-out null and the calibrated headline into ``out``, then its figures into ``out_dir`` (after the
    null: the figure shows the calibrated headline)."""
    add_null(out, problem, resolved, labels, card)
    if out_dir is not None and resolved.base.figures:
        threshold, column = out["summary"]["calibrated_threshold"], null.calibrated_column(resolved)
        calibrated = None if threshold is None else (column, null.scores_of(out, column), float(threshold))
        out["figures"] = _figures(ev, Path(out_dir), calibrated)


def evaluate_many(problem: Problem, sets: list[dict[str, Any]], *, family: str,
                  protocol: dict[str, Any] | ResolvedProtocol | None = None, card: object = None,
                  out_dirs: list[str | Path | None] | None = None) -> list[dict[str, Any]]:
    """:func:`evaluate` of several candidate sets of one problem (each a dict of ``candidates`` and optionally
    ``labels``, ``run_ids``, ``x0``; ``out_dirs``: each set's figure folder or None), scored in one pass as
    :func:`score_many` scores them; each record equals the set's own :func:`evaluate` but for its ``seconds`` (the
    shared pass divided among the sets, plus the set's own null and figures). Under a decision guide the sets are
    evaluated one by one."""
    dirs = out_dirs if out_dirs is not None else [None] * len(sets)
    if decisions.current() is not None or len(sets) < 2:
        return [evaluate(problem, s["candidates"], family=family, protocol=protocol, labels=s.get("labels"),
                         run_ids=s.get("run_ids"), x0=s.get("x0"), card=card, out_dir=d)
                for s, d in zip(sets, dirs, strict=True)]
    from reconbench.evaluation.batched import contexts

    t0 = time.perf_counter()
    resolved = as_resolved(protocol, family)
    evs = contexts(problem, [s["candidates"] for s in sets], resolved, card=card,
                   per_set=[{k: s.get(k) for k in ("labels", "run_ids", "x0")} for s in sets])
    metric_outs = _compute_metrics(evs, resolved)
    shared_seconds = (time.perf_counter() - t0) / len(sets)
    results = []
    for ev, metric_out, d in zip(evs, metric_outs, dirs, strict=True):
        t1 = time.perf_counter()
        out = _assemble(ev, resolved, metric_out, True)
        _add_null_and_figures(out, ev, problem, resolved, ev.labels, card, d)
        out["seconds"] = shared_seconds + time.perf_counter() - t1
        results.append(jsonable(out))
    return results


def with_result_defaults(result: Mapping[str, Any]) -> dict[str, Any]:
    """A metric's result with every key of :class:`reconbench.interfaces.MetricResult` (each optional there) set:
    available unless it says otherwise, no reason, empty summary, columns and details."""
    return {"available": True, "reason": None, "summary": {}, "per_image": {}, "details": {}, **result}


def score(problem: Problem, candidates: torch.Tensor, resolved: ResolvedProtocol, *,
          labels: torch.Tensor | None = None, run_ids: torch.Tensor | None = None, x0: torch.Tensor | None = None,
          card: object = None, out_dir: str | Path | None = None, with_protocol: bool = True) -> dict[str, Any]:
    """The protocol's numbers for one set of candidates (no null, no calibration). ``with_protocol=False`` leaves
    out the ``protocol`` block (every parameter in words): a null draw's scores are read and its record dropped."""
    out, ev = _score(problem, candidates, resolved, labels=labels, run_ids=run_ids, x0=x0, card=card,
                     with_protocol=with_protocol)
    if out_dir is not None and resolved.base.figures:
        out["figures"] = _figures(ev, Path(out_dir), None)
    return out


def _score(problem: Problem, candidates: torch.Tensor, resolved: ResolvedProtocol, *,
           labels: torch.Tensor | None = None, run_ids: torch.Tensor | None = None, x0: torch.Tensor | None = None,
           card: object = None, with_protocol: bool = True) -> tuple[dict[str, Any], Evaluation]:
    ev = build_context(problem, candidates, resolved, labels=labels, run_ids=run_ids, x0=x0, card=card)
    metric_out = _compute_metrics([ev], resolved)[0]
    return _assemble(ev, resolved, metric_out, with_protocol), ev


def score_many(problem: Problem, sets: list[torch.Tensor], resolved: ResolvedProtocol, *,
               labels: np.ndarray | None = None, card: object = None) -> list[dict[str, Any]]:
    """``score(problem, cand, resolved, labels=labels, card=card, with_protocol=False)`` of every candidate set, the
    sets' contexts built over their stack and each metric that offers ``compute_many`` run once over all contexts
    (the others context by context); each set's numbers equal its own scoring's
    (tests/unit/evaluation/test_batched_scores.py). Outside a decision guide only: under one, score set by set in
    each set's scope."""
    from reconbench.evaluation.batched import contexts

    if decisions.current() is not None:
        raise RuntimeError("score_many was called under a decision guide; score set by set")
    evs = contexts(problem, sets, resolved, labels, card=card)
    outs = _compute_metrics(evs, resolved)
    return [_assemble(ev, resolved, metric_out, False) for ev, metric_out in zip(evs, outs, strict=True)]


def _compute_one(metric: Any, name: str, ev: Evaluation, cfg: Any) -> dict[str, Any]:
    try:
        return with_result_defaults(metric.compute(ev, cfg))
    except ReconbenchError:
        raise
    except Exception as exc:  # a third-party metric's bug must not lose the other numbers
        reason = f"metric {name!r} failed: {type(exc).__name__}: {exc}"
        warnings.warn(f"reconbench: {reason}; its numbers are reported unavailable", stacklevel=3)
        return with_result_defaults({"available": False, "reason": reason})


def _compute_metrics(evs: list[Evaluation], resolved: ResolvedProtocol) -> list[dict[str, Any]]:
    """Every metric of the protocol on every context (``compute_many`` where a metric offers it and there are
    several contexts; should it raise, context by context, so that each gets what ``compute`` gives it); per
    context the ``metrics`` block of its record."""
    metric_outs: list[dict[str, Any]] = [{} for _ in evs]
    for name in resolved.metric_names:
        metric = plugins.metric(name)
        cfg = resolved.metric_configs[name]
        many = getattr(metric, "compute_many", None)
        results: list[dict[str, Any]] | None = None
        if many is not None and len(evs) > 1:
            try:
                results = [with_result_defaults(r) for r in many(evs, cfg)]
            except ReconbenchError:
                raise
            except Exception:   # scored context by context below, with compute's own handling
                results = None
        if results is None:
            results = [_compute_one(metric, name, ev, cfg) for ev in evs]
        for ev, res, metric_out in zip(evs, results, metric_outs, strict=True):
            for col, values in res["per_image"].items():
                if len(values) != ev.problem.n:
                    raise ReconbenchError(f"metric {name!r} returned {len(values)} values of {col!r} for "
                                          f"{ev.problem.n} training images")
            ev.results[name] = res
            metric_out[name] = {"higher_is_better": bool(metric.higher_is_better),
                                "headline": metric.headline_key,
                                "available": res["available"], "reason": res["reason"],
                                "summary": res["summary"], "details": res["details"]}
    return metric_outs


def _assemble(ev: Evaluation, resolved: ResolvedProtocol, metric_out: dict[str, Any],
              with_protocol: bool) -> dict[str, Any]:
    return {
        **({"protocol": {**resolved.to_dict(), "libraries": _versions()}} if with_protocol else {}),
        "summary": _summary(ev),
        "per_image": _per_image(ev),
        "candidates": {"total": int(ev.candidates.shape[0]), "valid": int(ev.valid.sum()),
                       "nonfinite": len(ev.invalid["nonfinite"]), "constant": len(ev.invalid["constant"]),
                       "nonfinite_ids": ev.invalid["nonfinite"], "constant_ids": ev.invalid["constant"],
                       "runs": None if ev.run_ids is None else sorted({int(r) for r in ev.run_ids})},
        "metrics": metric_out,
        "figures": {},
    }


def restricted(resolved: ResolvedProtocol, keep: set[str] | None) -> ResolvedProtocol:
    """The same protocol without figures and, if ``keep`` is given, with only those metrics and what they need."""
    names = list(resolved.metric_names)
    if keep is not None:
        need = set(keep)
        for name in reversed(names):
            if name in need:
                need |= set(plugins.metric(name).requires)
        names = [n for n in names if n in need]
    base = dataclasses.replace(resolved.base, figures=False)
    return dataclasses.replace(resolved, base=base, metric_names=names,
                               metric_configs={n: resolved.metric_configs[n] for n in names})


def add_null(out: dict[str, Any], problem: Problem, resolved: ResolvedProtocol, labels: np.ndarray | None,
             card: Any) -> None:
    """Add the calibrated headline (summary and per-image ``reconstructed_calibrated``) and the ``null`` record."""
    p = resolved.base
    m = int(out["candidates"]["total"])
    column = null.calibrated_column(resolved)
    reason = null.unavailable_reason(problem, labels)
    calibration = out["protocol"]["calibration"]
    if reason is not None:
        out["summary"].update(reconstructed_calibrated=None, calibrated_threshold=None)
        out["null"] = {"kind": "held_out", "available": False, "reason": reason}
        calibration["unavailable"] = reason
        return
    if p.calibration_draws and column not in out["per_image"][0]:
        raise ReconbenchError(f"protocol: calibrated_score {column!r} is not a per-image column of this evaluation; "
                              "name a computed metric's score column (e.g. ssim, corr)")
    metric_of_column = {column} if column in resolved.metric_names else None
    light = restricted(resolved, metric_of_column | {p.primary_metric} if metric_of_column else None)
    full = restricted(resolved, None)

    def score_light(cand: torch.Tensor) -> dict[str, Any]:
        return score(problem, cand, light, labels=None if labels is None else torch.as_tensor(labels),
                     with_protocol=False)

    threshold = None
    if p.calibration_draws:
        cal = null.calibrate(problem, resolved, labels, m, score_light,
                             columns=column_scorer(problem, light, labels, column))
        threshold = float(cal["threshold"])
        calibration.update({k: cal[k] for k in ("threshold", "null_max", "draw_maxima", "pool_size",
                                                 "prior_draw_maxima") if k in cal})
        flags = null.calibrated_flags(null.scores_of(out, column), threshold)
        out["summary"].update(reconstructed_calibrated=int(flags.sum()), calibrated_threshold=threshold)
        margins = column_values(null.scores_of(out, column) - threshold)
        for row, flag, margin in zip(out["per_image"], flags, margins, strict=True):
            row["reconstructed_calibrated"] = bool(flag)
            row["reconstructed_calibrated_margin"] = margin
    else:
        out["summary"].update(reconstructed_calibrated=None, calibrated_threshold=None)

    def numbers_of(ev: dict[str, Any]) -> dict[str, float]:
        numbers = null.numeric_summary(ev["summary"])
        if threshold is not None:
            numbers["reconstructed_calibrated"] = float(null.calibrated_flags(null.scores_of(ev, column),
                                                                               threshold).sum())
        return numbers

    def reported() -> list[dict[str, float]]:
        makers = [functools.partial(null.draw, problem, labels, m, p.null_seed, null.REPORT_STREAM, k)
                  for k in range(p.null_draws)]
        if decisions.current() is None:   # no decision is noted or flipped: the draws scored a batch at a time
            return [numbers_of(ev) for batch in null.in_batches(makers)
                    for ev in score_many(problem, batch, full, labels=labels, card=card)]
        draws = []
        for k, make in enumerate(makers):
            with decisions.scope(f"null draw {k}"):
                draws.append(numbers_of(score(problem, make(), full, labels=None if labels is None
                                              else torch.as_tensor(labels), card=card, with_protocol=False)))
        return draws

    # the reported draws depend on the evaluation's problem, protocol, m, labels, threshold and card only (the
    # blind and oracle runs of a cell share them): scored once per process
    card_key = None if card is None else (str(getattr(card, "path", "")), str(card.data["recipe_key"]))
    key = f"{null.cache_key(problem, resolved, labels, m)}-{threshold!r}-{card_key}-{resolved.metric_names}"
    draws = null.reported_draws(key, reported)
    spread = null.aggregate(draws) if draws else {}
    out["null"] = {"kind": "held_out", "available": True, "draws": len(draws), "threshold": threshold,
                   "summary": {k: v["mean"] for k, v in spread.items()}, "spread": spread,
                   "per_draw": draws}


def _summary(ev: Evaluation) -> dict[str, Any]:
    m = ev.matching
    primary = ev.protocol.base.primary_metric
    s: dict[str, Any] = dict(ev.results[primary]["summary"])
    s.update({
        "n_train": ev.n,
        "n_candidates": int(ev.candidates.shape[0]),
        "invalid_candidates": int((~ev.valid).sum()),
        "matched_images": int(m.matched.sum()),
        "mean_best_distance": float(np.mean(m.best_dist[m.matched])) if m.matched.any() else None,
    })
    if ev.labels is not None:
        rec = ev.reconstructed() & m.matched
        if rec.any():
            agree = ev.labels[m.best[rec]] == ev.problem.train_labels[rec]
            s["label_agreement_reconstructed"] = float(agree.mean())
        else:
            s["label_agreement_reconstructed"] = None
    for name, res in ev.results.items():
        if name == primary:
            continue
        for key, value in res["summary"].items():
            if key in s:
                raise ReconbenchError(f"metric {name!r} reports summary key {key!r}, which another metric or the "
                                      "core already reports; rename it")
            s[key] = value
    return s


def _per_image(ev: Evaluation) -> list[dict[str, Any]]:
    m, p = ev.matching, ev.problem
    best_dist = column_values(m.best_dist)
    rows = []
    for i in range(ev.n):
        ids = [int(j) for j in m.members[i]]
        row: dict[str, Any] = {
            "index": i,
            "dataset_index": int(p.train_indices[i]),
            "label": int(p.train_labels[i]),
            "margin": None if ev.margins is None else float(ev.margins[i]),
            "matched": bool(m.matched[i]),
            "best_distance": best_dist[i],
            "best_candidate": int(m.best[i]) if m.best[i] >= 0 else None,
            "candidate_ids": ids,
            "n_averaged": len(ids),
        }
        if ev.run_ids is not None:
            row["candidate_runs"] = [int(ev.run_ids[j]) for j in ids]
        if ev.labels is not None:
            row["best_candidate_label"] = int(ev.labels[m.best[i]]) if m.best[i] >= 0 else None
        rows.append(row)
    for name, res in ev.results.items():
        for col, values in res["per_image"].items():
            for i, v in enumerate(values):
                if col in rows[i] and name != ev.protocol.base.primary_metric:
                    raise ReconbenchError(f"metric {name!r} reports column {col!r}, which is already in the table")
                rows[i][col] = v
    return rows


def _figures(ev: Evaluation, out_dir: Path, calibrated: tuple[str, np.ndarray, float] | None) -> dict[str, Any]:
    """Write the figures under ``out_dir/figures``; paths are recorded relative to ``out_dir``.

    With a calibrated threshold the reconstructions are sorted and marked by the calibrated headline (its score, e.g.
    corr, against the threshold the null draws set), the papers' score written beside it; without one (no null
    drawn), by the papers' score and threshold.
    """
    from reconbench.evaluation.figures import Headline, boundary_figure, reconstructions_figure

    folder = out_dir / "figures"
    folder.mkdir(parents=True, exist_ok=True)
    p = ev.protocol.base
    scores = ev.primary_scores()
    matched = ev.matching.matched & ~np.isnan(scores)
    papers = Headline(p.primary_metric.upper(), scores, p.good_threshold, "the papers' protocol")
    headline = papers if calibrated is None else Headline(calibrated[0], calibrated[1], calibrated[2],
                                                          "the calibrated headline")
    written: dict[str, Any] = {}
    path = reconstructions_figure(folder / "reconstructions.png", ev.recon_display.numpy(), ev.originals.numpy(),
                                  matched, p.figure_max_images, headline, papers,
                                  distances=np.asarray(ev.matching.best_dist, dtype=np.float64))
    written["reconstructions"] = str(path.relative_to(out_dir)) if path else {"skipped": "no training image matched"}
    if ev.margins is not None:
        boundary_figure(folder / "score_vs_boundary.png", ev.problem.task, ev.margins,
                        np.asarray(ev.problem.train_labels), scores, matched, p.good_threshold,
                        p.primary_metric.upper())
        written["score_vs_boundary"] = "figures/score_vs_boundary.png"
    else:
        written["score_vs_boundary"] = {"skipped": "no per-training-image margins (evaluated without a model card)"}
    return written


# re-exported for metric plugins
__all__ += ["features", "pairwise", "paired"]
