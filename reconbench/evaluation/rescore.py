"""Re-score a stored result folder under the same or another protocol, without re-running the attack.

``rescore(result_dir, overrides)`` rebuilds the problem from the model card recorded in ``result.json`` (via
``load_card(...).problem()``), evaluates the pooled candidates of ``candidates.safetensors`` and writes
``<out_dir>/evaluation.json`` (+ figures). With the stored protocol it also says whether every stored number is
reproduced exactly. ``reconbench evaluate`` and suite runners call it.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from reconbench.data import Problem
from reconbench.errors import ReconbenchError
from reconbench.evaluation import decisions
from reconbench.evaluation.recorded import absent_options
from reconbench.provenance import config_hash, portable_path, provenance, write_json
from reconbench.records import CARD_FILE, RUN_RESULT_FILE, RunResult, StoredEvaluation, mapping, plain
from reconbench.records.recorded_protocol import RecordedProtocol
from reconbench.targets.cache import cache_dir
from reconbench.targets.cards import ModelCard, load_card

#: parts of an evaluation that must agree for "the stored numbers are reproduced"
COMPARED = ("summary", "per_image", "candidates", "null")


def read_result(result_dir: Path) -> dict[str, Any]:
    path = result_dir / "result.json"
    if not path.exists():
        raise ReconbenchError(f"{result_dir} holds no result.json; pass a folder written by `reconbench run`")
    try:
        result = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ReconbenchError(f"{path} is not valid JSON ({exc}); re-run the attack to rewrite it") from exc
    kind = RUN_RESULT_FILE.stamp(result) if isinstance(result, dict) else None
    if kind != RunResult.SCHEMA:
        raise ReconbenchError(f"{path} is not a reconbench result (kind {kind!r}, expected 'reconbench-result/1')")
    for key in ("target", "spec"):
        if key not in result:
            raise ReconbenchError(f"{path} has no {key!r} section; it was not written by `reconbench run`")
    return result


def read_candidates(result_dir: Path) -> dict[str, torch.Tensor]:
    path = result_dir / "candidates.safetensors"
    if not path.exists():
        raise ReconbenchError(f"{path} is missing: the run did not finish pooling its candidates; re-run the same "
                              "`reconbench run` command to resume it")
    try:
        tensors = load_file(str(path))
    except (SafetensorError, OSError, ValueError) as exc:
        raise ReconbenchError(f"{path} is not a readable safetensors file ({exc})") from exc
    if "candidates" not in tensors:
        raise ReconbenchError(f"{path} holds no 'candidates' tensor (it has {', '.join(sorted(tensors)) or 'none'})")
    return tensors


@dataclass(frozen=True)
class PooledCandidates:
    """The tensors of a run's ``candidates.safetensors`` (``runs/pool.py``): the pooled candidates, and their labels,
    run ids and starts (None in a file written without them)."""

    candidates: torch.Tensor
    labels: torch.Tensor | None = None
    run_ids: torch.Tensor | None = None
    x0: torch.Tensor | None = None


def read_pooled(result_dir: Path) -> PooledCandidates:
    """:func:`read_candidates` as its record; a tensor it does not name is a one-line error."""
    tensors = read_candidates(result_dir)
    known = {f.name for f in dataclasses.fields(PooledCandidates)}
    unknown = sorted(set(tensors) - known)
    if unknown:
        raise ReconbenchError(f"{result_dir / 'candidates.safetensors'} holds tensors a run does not write "
                              f"({', '.join(unknown)}; expected {', '.join(sorted(known))}); re-run the attack to "
                              "rewrite it")
    return PooledCandidates(**tensors)


def card_hashes(card: ModelCard) -> dict[str, Any]:
    """What identifies a card: its recipe key (the hash of what it was trained on, and how) and, when the card
    records it, the sha256 of its scored content (recipe, problem, shapes, the weights file's hash)."""
    data = CARD_FILE.decode(card.data, card.path / "card.json")
    return {"recipe_key": data.recipe_key, "content_sha256": data.content_sha256}


def check_card_matches(result_dir: Path, result: RunResult, card: ModelCard) -> None:
    """Refuse a card other than the one the result was produced with (by recipe key and, if recorded, content hash)."""
    want = {"recipe_key": result.target.recipe_key, "content_sha256": result.target.card_sha256}
    have = card_hashes(card)
    if any(want[k] is not None and want[k] != have[k] for k in want):
        def show(h: dict[str, Any]) -> str:
            sha = f", content sha256 {str(h['content_sha256'])[:16]}" if h["content_sha256"] else ""
            return f"recipe {h['recipe_key']}{sha}"
        raise ReconbenchError(f"the card {card.path} ({show(have)}) is not the card {result_dir} was produced with "
                              f"({show(want)}); pass that card with --model, or drop --model")


def locate_card(result_dir: Path, result: RunResult, explicit: str | None) -> Any:
    if explicit:
        card = load_card(explicit)
        check_card_matches(result_dir, result, card)
        return card
    recorded = result.target.card
    if result.target.audit is not None:
        raise ReconbenchError(f"{result_dir} was written by `reconbench audit`, which writes no model card to rebuild "
                              "the problem from: its numbers are in its result.json and the audit's audit.json; to "
                              "score it again, run the audit's command again (audit.json's `command`)")
    if not recorded:
        raise ReconbenchError(f"{result_dir / 'result.json'} records no model card; pass --model CARD_DIR")
    path = Path(recorded).expanduser()
    if not path.exists() and not path.is_absolute() and (result_dir / path).exists():
        path = result_dir / path
    key = result.target.recipe_key
    if not path.exists() and key and (cache_dir() / "targets" / str(key)).exists():
        path = cache_dir() / "targets" / str(key)   # recorded elsewhere; the same recipe is in this machine's cache
    try:
        return load_card(path)
    except ReconbenchError as exc:
        raise ReconbenchError(f"cannot rebuild the problem of {result_dir}: {exc}. If the card moved, pass "
                              "--model CARD_DIR") from exc


def pinned_protocol(overrides: dict[str, Any], stored_protocol: Mapping[str, Any] | None) -> dict[str, Any]:
    """The protocol that re-scores a stored evaluation (``stored_protocol``: the protocol it records): its overrides,
    and, when they leave the metric list open (every registered metric), the metrics the stored evaluation computed.
    A metric registered since is not a stored number to reproduce; it is computed when the overrides name it. A
    metric option added since takes the value the stored configuration stands for (``recorded.absent_options``)."""
    recorded = RecordedProtocol.from_dict(mapping(stored_protocol), "the stored evaluation's protocol").metrics
    if not recorded:
        return dict(overrides)
    pinned = dict(overrides) if "metrics" in overrides else {**overrides, "metrics": list(recorded)}
    return {**pinned, **absent_options(recorded, pinned, pinned["metrics"])}


@dataclass(frozen=True)
class Mismatch:
    """A stored number that a fresh evaluation does not reproduce: where, both values, and why it is not rounding."""

    where: str
    stored: Any
    fresh: Any
    note: str = ""

    def describe(self) -> str:
        note = f" ({self.note})" if self.note else ""
        return f"{self.where}: stored {_short(self.stored)}, re-scored {_short(self.fresh)}{note}"


def _short(v: object, n: int = 80) -> str:
    text = repr(v)
    return text if len(text) <= n else text[:n - 3] + "..."


@dataclass
class Reproduction:
    """The outcome of re-scoring stored numbers: failures, the borderline decisions of the fresh evaluation and the
    stored numbers that differ only through them ("borderline, agrees within rounding")."""

    mismatches: list[Mismatch]
    borderline: list[decisions.Borderline]
    explained: list[Mismatch]
    fresh: dict[str, Any]


def evaluation_terms(problem: Problem, n_candidates: int) -> int:
    """The largest reduction of an evaluation (values of one image, candidates, training images): the N of
    :func:`reconbench.evaluation.decisions.score_tolerance`."""
    return max(math.prod(problem.image_shape), int(n_candidates), int(problem.n), 1)


def close(a: object, b: object, rtol: float) -> bool:
    """Equal, with numbers within ``rtol * max(1, |a|, |b|)`` (the rounding tolerance of ``decisions.py``);
    booleans, strings and None exactly; NaN equals NaN."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(close(a[k], b[k], rtol) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(close(x, y, rtol) for x, y in zip(a, b, strict=True))
    if isinstance(a, bool) or isinstance(b, bool) or not (isinstance(a, (int, float)) and isinstance(b, (int, float))):
        return bool(a == b)
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    fa, fb = float(a), float(b)
    if math.isnan(fa) or math.isnan(fb):
        return math.isnan(fa) and math.isnan(fb)
    return fa == fb or abs(fa - fb) <= rtol * max(1.0, abs(fa), abs(fb))


def margin_note(fresh: dict[str, Any], key: str, stored: object, new: object, rtol: float) -> str:
    """Why a difference is not rounding: for a count, the decision of the fresh evaluation nearest its threshold;
    for a number, the difference against the tolerance."""
    column = f"{key}_margin"
    rows = fresh["per_image"]   # a decision's margin column is in every row or none (``evaluate._per_image``)
    margins = [abs(float(r[column])) for r in rows if r[column] is not None] if rows and column in rows[0] else []
    if margins:
        return (f"its decisions lie at least {min(margins):.3g} from their threshold, rounding tolerance "
                f"{rtol:.2g}: not a rounding difference")
    if isinstance(stored, (int, float)) and isinstance(new, (int, float)) and not isinstance(stored, bool):
        scale = max(1.0, abs(float(stored)), abs(float(new)))
        return f"differs by {abs(float(stored) - float(new)):.3g}, rounding tolerance {rtol * scale:.2g}"
    return ""


def reproduce(run: Callable[[], dict[str, Any]], compare: Callable[[dict[str, Any]], list[Mismatch]],
              n_terms: int, max_alternatives: int = 32, min_score_tol: float = 0.0) -> Reproduction:
    """Re-score with ``run`` noting borderline decisions; each stored number that ``compare`` finds different must
    be reproduced by re-scoring with borderline decisions flipped (all of them, or one at a time), else it fails.
    ``min_score_tol``: a score within this of its threshold is borderline too (candidates stored rounded)."""
    with decisions.guided(n_terms, min_score_tol=min_score_tol) as guide:
        fresh = run()
    mismatches = compare(fresh)
    seen = list(guide.seen.values())
    if not mismatches or not seen:
        return Reproduction(mismatches, seen, [], fresh)
    remaining = {m.where: m for m in mismatches}
    explained: list[Mismatch] = []
    alternatives: list[dict[str, Any]] = [{"flip_all": True}]
    alternatives += [{"flip": frozenset({b.key})} for b in seen[:max_alternatives]]
    for alt in alternatives:
        with decisions.guided(n_terms, min_score_tol=min_score_tol, **alt):
            still = {m.where for m in compare(run())}
        for where in [w for w in remaining if w not in still]:
            explained.append(dataclasses.replace(remaining.pop(where), note="it differs only through decisions "
                                                 "within rounding of their thresholds"))
        if not remaining:
            break
    return Reproduction(list(remaining.values()), seen, explained, fresh)


def compare_evaluation(stored: StoredEvaluation | Mapping[str, Any], new: dict[str, Any],
                       rtol: float) -> list[Mismatch]:
    """Where a fresh evaluation differs from the stored one beyond rounding (numbers to ``rtol``, the rest exactly).
    A per-image column or null field that the stored evaluation lacks (added since) is not a stored number."""
    out: list[Mismatch] = []

    def walk(a: object, b: object, where: str, key: str) -> None:
        if isinstance(a, dict) and isinstance(b, dict):
            for k in sorted(set(a) | set(b), key=str):
                if k not in a and not where.startswith("summary"):
                    continue  # recorded since (e.g. a decision's margin column)
                if k not in a:
                    out.append(Mismatch(f"{where}.{k}", "<missing>", b[k]))
                elif k not in b:
                    out.append(Mismatch(f"{where}.{k}", a[k], "<missing>"))
                else:
                    walk(a[k], b[k], f"{where}.{k}", str(k))
        elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
            for i, (x, y) in enumerate(zip(a, b, strict=True)):
                walk(x, y, f"{where}[{i}]", key)
        elif not close(a, b, rtol):
            out.append(Mismatch(where, a, b, margin_note(new, key, a, b, rtol) if where.startswith("summary") else ""))

    record = stored if isinstance(stored, StoredEvaluation) else StoredEvaluation.from_dict(stored,
                                                                                             "the stored evaluation")
    stored_parts = {"summary": record.summary, "per_image": record.per_image, "candidates": record.candidates,
                    "null": record.null}
    for part in COMPARED:
        walk(plain(stored_parts[part]), new[part], part, part)
    return out


def differences(stored: StoredEvaluation | Mapping[str, Any], new: dict[str, Any], limit: int = 5,
                rtol: float = 0.0) -> list[str]:
    """Where a fresh evaluation differs from the stored one (``rtol`` 0: exact comparison)."""
    return [m.describe() for m in compare_evaluation(stored, new, rtol)[:limit]]


def rescore(result_dir: str | Path, overrides: dict[str, Any] | None = None, *, model_card: str | None = None,
            data_root: str | None = None, out_dir: str | Path | None = None, quiet: bool = True) -> dict[str, Any]:
    """Evaluate the stored candidates of ``result_dir`` with the stored protocol updated by ``overrides``.

    Returns the record written to ``<out_dir>/evaluation.json`` (default ``result_dir/evaluations/<protocol
    hash>``): the evaluation, the protocol overrides, whether they are the stored ones, and if so ``differences``
    from the stored evaluation (empty: reproduced exactly).
    """
    from reconbench.evaluation import evaluate

    folder = Path(result_dir)
    result = RUN_RESULT_FILE.decode(read_result(folder), folder / "result.json")
    pooled = read_pooled(folder)
    card = locate_card(folder, result, model_card)
    try:
        problem = card.problem(data_root)
    except ReconbenchError as exc:
        raise ReconbenchError(f"cannot rebuild the problem of {folder} from the card {card.path}: {exc}") from exc
    stored_overrides = dict(mapping(result.spec["protocol"]))   # RunSpec.to_dict writes it, {} by default
    merged = {**stored_overrides, **(overrides or {})}
    target = Path(out_dir) if out_dir else folder / "evaluations" / config_hash(merged)
    same_protocol = merged == stored_overrides
    protocol = pinned_protocol(merged, result.evaluation.protocol) if same_protocol else merged

    def run() -> dict[str, Any]:
        return evaluate(problem, pooled.candidates, family=str(result.target.family), protocol=protocol,
                        labels=pooled.labels, run_ids=pooled.run_ids, x0=pooled.x0,
                        card=card, out_dir=target, quiet=quiet)

    n_terms = evaluation_terms(problem, int(pooled.candidates.shape[0]))
    rtol = decisions.score_tolerance(n_terms)
    if same_protocol and result.evaluation.to_dict():
        outcome = reproduce(run, lambda ev: compare_evaluation(result.evaluation, ev, rtol), n_terms)
        evaluation = outcome.fresh
    else:
        outcome, evaluation = None, run()
    diff = [m.describe() for m in outcome.mismatches] if outcome else []
    record = {"kind": "reconbench-evaluation/1", "result_dir": portable_path(folder), "card": portable_path(card.path),
              "card_hashes": card_hashes(card), "protocol_overrides": merged, "stored_protocol": same_protocol,
              "reproduces_stored": (not diff) if same_protocol else None, "differences": diff,
              "tolerance": {"relative": rtol, "reductions_of": n_terms,
                            "derivation": "reconbench.evaluation.decisions (float64 rounding of the scores)"},
              "borderline": [b.describe() for b in outcome.borderline] if outcome else [],
              "borderline_differences": [m.describe() for m in outcome.explained] if outcome else [],
              "evaluation": evaluation, "provenance": provenance(merged, "cpu", "float64")}
    write_json(target / "evaluation.json", record)
    record["path"] = str(target / "evaluation.json")
    return record
