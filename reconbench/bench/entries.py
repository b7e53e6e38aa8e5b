"""Slim board entries: the small form in which a published board keeps each cell record.

A cell record as the runner writes it (``reconbench-bench-cell/1``) carries the whole evaluation of its pooled
candidates: the protocol's full description, every metric's details, the null draws one by one, and per-image rows
as one JSON object per training image. A published board keeps a *slim entry* of it instead: the same record with

* ``entry``: the schema (:data:`ENTRY_SCHEMA`) and the sha256 of the full record it was made from;
* ``selections``: unchanged except that each selection's held-out null keeps the spread of the summary keys the
  board shows (its columns and the two headline counts), and the blind/oracle selections drop their run's
  configuration (it is the run's own, in ``runs``);
* ``evaluation``: the metrics' directions and configurations, the thresholds of the protocol, the candidates'
  counts, and the per-image rows as columns (``{"columns": [...], "rows": [[...], ...]}``) of stored scores, with
  each thresholded decision named once (``decisions``: which score column it thresholds at which value). Decisions
  and their margins are not stored: they are re-derived from the scores (``expand``), so ``leaderboard --verify``
  can count them again and compare with the summary (``check_entry``);
* ``record_sha256``: the seal of the entry itself (``bench/seal.py``).

A record without ``entry`` is a full record and is read as before. :func:`expand` turns an entry back into a record
of the full shape (per-image rows as objects, with the decisions and margins re-derived), which is what every
reader of a board (tables, README, figures, site, claims) sees.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from reconbench.bench.seal import SEAL_FIELD, canonical, sealed
from reconbench.errors import ReconbenchError
from reconbench.evaluation import decisions
from reconbench.evaluation.reported import CALIBRATED_HEADLINE, PAPERS_HEADLINE
from reconbench.records import CellRecord, mapping
from reconbench.records.board_entry import POSITION, CompactRows, EntryInfo
from reconbench.records.board_protocol import BoardProtocol, SlimRun
from reconbench.records.cell import SearchRun, Selection, TargetInfo
from reconbench.records.evaluation import Candidates, HeldOutNull, Spread, StoredEvaluation, StoredMetric
from reconbench.records.model_card import CARD_FILE, CardData, TrainMetrics
from reconbench.records.recorded_protocol import ProtocolMetric, RecordedProtocol
from reconbench.targets.recipe import TargetRecipe

#: schema of a slim entry (the ``entry.schema`` field); a record without ``entry`` is a full cell record
ENTRY_SCHEMA = "reconbench-board-entry/1"
ENTRY_FIELD = "entry"
#: per-image columns a slim entry leaves out: the candidates averaged per image (the candidates file holds them),
#: the nearest decoy (display only), the target's margin (the model card's ``metrics.margins`` holds it)
DROPPED_COLUMNS = ("candidate_ids", "candidate_runs", "n_averaged", "nearest_decoy_distance",
                   "nearest_decoy_dataset_index", "margin")
#: summary keys a blind or oracle selection keeps besides the board's shown keys (the pooled one keeps all)
SELECTION_SUMMARY_KEPT = ("n_train", "n_candidates", "calibrated_threshold", "extraction_score")
#: the statistics of a null spread an entry keeps (what the tables show: the mean over draws and the largest),
#: as a list in this order
SPREAD_FIELDS = ("mean", "max")
#: summary keys whose held-out null every entry keeps, whatever the board's columns
ALWAYS_NULL_KEYS = (PAPERS_HEADLINE, CALIBRATED_HEADLINE)
#: the parts of the protocol's calibration an entry keeps (the rest is words, per draw, or the cell's own threshold, which
#: its summary keeps as calibrated_threshold)
CALIBRATION_KEPT = ("calibration_draws", "null_draws", "null_seed", "score", "family_wise_fpr_bound")
#: significant digits of the per-image values an entry stores (scores, distances, margins)
ROW_DIGITS = 7
#: relative rounding of a value stored to ROW_DIGITS significant digits (half a unit in the last place kept)
ROW_RTOL = 0.5 * 10.0 ** (1 - ROW_DIGITS)
#: fields of a search run's record an entry leaves out (how the engine batched it; its log line)
DROPPED_RUN_FIELDS = ("batch", "message")
#: fields of a selection that an entry stores once when another selection has the same value
SHARED_SELECTION_FIELDS = ("summary", "null", "attack_loss")
#: protocol fields an entry keeps beside the metrics' configurations
PROTOCOL_KEPT = ("name", "distance", "good_threshold", "top_k", "primary_metric", "family", "avg_threshold",
                 "best_buddy", "vote", "per_dimension")


def is_entry(rec: Any) -> bool:
    """Whether a cell record is a slim entry (it has the ``entry`` field)."""
    return isinstance(rec, dict) and isinstance(rec.get(ENTRY_FIELD), dict)


def record_sha256(rec: dict[str, Any]) -> str:
    """sha256 of a record's canonical JSON without its seal (what a full record's seal is)."""
    return hashlib.sha256(canonical(rec).encode()).hexdigest()


# -- making an entry ------------------------------------------------------------------------------------------
Columns = dict[str, list[Any]]


def _is_score(v: object) -> bool:
    """A stored score or margin (a number; a boolean counts, as it did in the records that hold one)."""
    return isinstance(v, (int, float))


def _decision_threshold(table: Columns, flag: str, score: str) -> float | None:
    """The threshold ``t`` for which every row's stored margin is ``score - t`` and decision ``score > t``, or None
    (no row has a score, or the stored margins do not come from one threshold)."""
    pairs = [(float(s), float(m), bool(f)) for s, m, f in zip(table[score], table[f"{flag}_margin"], table[flag],
                                                                strict=True) if _is_score(s) and _is_score(m)]
    if not pairs:
        return None
    tries = sorted({s - m for s, m, _ in pairs} | {round(s - m, 12) for s, m, _ in pairs})
    for t in tries:
        if all(s - t == m and (s > t) == f for s, m, f in pairs):
            return float(t)
    return None


def _protocol_threshold(flag: str, protocol: RecordedProtocol, pool: Selection) -> float | None:
    """The threshold the protocol records for a decision (records written before per-image margins)."""
    value: object
    if flag == CALIBRATED_HEADLINE:
        value = pool.raw("calibrated_threshold")
    elif flag == "reconstructed_corr":
        value = ((protocol.metrics or {}).get("corr", ProtocolMetric()).config or {}).get("threshold")   # legacy: optional
    else:
        value = protocol.good_threshold
    return float(value) if isinstance(value, (int, float)) else None


def _score_of(flag: str, table: Columns, summary: Mapping[str, Any]) -> str | None:
    """The per-image score column a decision column thresholds (``reconstructed_corr`` -> ``corr`` ...)."""
    if flag == CALIBRATED_HEADLINE:
        return "corr" if "corr" in table else None
    suffix = flag[len("reconstructed"):]
    for column in (suffix.lstrip("_"), "ssim" if not suffix else "", f"{suffix.lstrip('_')}_ssim"):
        if column and column in table and f"top_k_mean_{column}" in summary:
            return column
    return None


def compact_rows(rows: list[Mapping[str, Any]], pool: Selection,
                 protocol: RecordedProtocol | None = None) -> dict[str, Any]:
    """Per-image rows as columns of values; thresholded decisions named once, their flags and margins dropped
    where one threshold reproduces them exactly (else kept as columns). ``pool``: the selection whose summary the
    rows add up to; ``protocol``: the evaluation's (its thresholds, for rows recorded without margins)."""
    if not rows:
        return {"columns": [], "rows": [], "decisions": {}}
    # the first row's columns, one list each (a row without a column holds None there: rows are free-form)
    table: Columns = {k: [r.get(k) for r in rows] for k in rows[0]}
    derived: dict[str, dict[str, Any]] = {}
    for flag in [k for k in table if k.startswith("reconstructed") and not k.endswith("_margin")]:
        score = _score_of(flag, table, pool.summary)
        if score is None:
            continue
        if f"{flag}_margin" in table:
            threshold = _decision_threshold(table, flag, score)
        else:  # no margins recorded: the protocol's threshold, if it reproduces every stored decision
            threshold = _protocol_threshold(flag, protocol or RecordedProtocol(), pool)
            if threshold is not None and any((_is_score(s) and s > threshold) != bool(f)
                                             for s, f in zip(table[score], table[flag], strict=True)):
                threshold = None
        if threshold is None and not any(_is_score(s) for s in table[score]):
            if any(table[flag]):
                continue
            threshold = float("nan")  # no image has a score: no decision is true, no margin exists
        if threshold is not None:
            derived[flag] = {"score": score, "threshold": None if math.isnan(threshold) else threshold}
    skip = set(DROPPED_COLUMNS) | set(derived) | {f"{f}_margin" for f in derived}
    values = {k: [_rounded(v) for v in column] for k, column in table.items() if k not in skip}
    same: dict[str, str] = {}
    for k, column in values.items():
        if column == list(range(len(rows))):
            same[k] = POSITION
            continue
        earlier = next((e for e in values if e != k and e not in same and values[e] == column
                        and list(values).index(e) < list(values).index(k)), None)
        if earlier is not None:
            same[k] = earlier
    columns = [k for k in values if k not in same]
    out = {"columns": columns, "rows": [list(vs) for vs in zip(*(values[c] for c in columns), strict=True)]
           if columns else [[] for _ in rows], "decisions": derived, "digits": ROW_DIGITS}
    if same:
        out["same"] = same
    return out


def _rounded(v: Any) -> Any:
    """A float to ROW_DIGITS significant digits (ints, booleans, None and strings unchanged)."""
    if isinstance(v, float) and math.isfinite(v):
        return float(f"{v:.{ROW_DIGITS}g}")
    return v


def _slim_null(null: HeldOutNull, keep: set[str]) -> HeldOutNull:
    """A held-out null with its availability, draws, threshold and reason, and the spreads of the ``keep`` keys (as
    ``[mean, max]`` where the spread has both, over the null's own draws)."""
    out = null.without("kind", "summary", "spread", "per_draw")
    if null.spread is None:
        return out
    spread = {k: [v.mean, v.max] if isinstance(v, Spread) and v.draws == null.draws
              and {*SPREAD_FIELDS, "draws"} <= set(v.key_order or ()) else v
              for k, v in null.spread.items() if k in keep}
    return out.updated(spread=spread)


def _slim_selection(sel: Selection, keep: set[str], pooled: bool) -> Selection:
    out = sel.without("config")
    if not pooled and sel.summary:
        shown = keep | set(SELECTION_SUMMARY_KEPT)
        out = out.updated(summary={k: v for k, v in sel.summary.items() if k in shown})
    if sel.null is not None:
        out = out.updated(null=_slim_null(sel.null, keep))
    return out


def _slim_metric(metric: StoredMetric) -> StoredMetric:
    """A metric's direction and headline (and ``available: false`` when it was not available)."""
    written = set(metric.key_order or ())
    kept = {k: v for k, v in (("higher_is_better", metric.higher_is_better), ("headline", metric.headline))
            if k in written}
    out = StoredMetric.written(**kept)
    return out.updated(available=False) if metric.available is False else out


def _slim_evaluation(ev: StoredEvaluation, pool: Selection) -> StoredEvaluation:
    raw = mapping(ev.protocol)   # the protocol's description: the fields an entry keeps are named in PROTOCOL_KEPT
    protocol = RecordedProtocol.from_dict(raw, "a cell's evaluation.protocol")
    calibration = protocol.calibrated.to_dict()
    return StoredEvaluation.written(
        protocol={
            **{k: raw[k] for k in PROTOCOL_KEPT if k in raw},
            "calibration": {k: calibration[k] for k in CALIBRATION_KEPT if k in calibration},
            "metrics": {name: {"config": info.config or {}} for name, info in (protocol.metrics or {}).items()},
        },
        metrics={name: _slim_metric(info) for name, info in (ev.metrics or {}).items()},
        candidates=Candidates.written() if ev.candidates is None else ev.candidates,
        per_image=compact_rows([r for r in ev.rows if isinstance(r, Mapping)], pool, protocol),
    )


def null_keys(columns_keys: Iterable[str]) -> set[str]:
    """The summary keys whose held-out null an entry keeps: the board's columns' keys and the two headlines."""
    return set(columns_keys) | set(ALWAYS_NULL_KEYS)


def _slim_runs(runs: list[Any]) -> list[Any]:
    """Search runs without their engine details; a run's configuration as its differences from the first run's
    (``config_from``: 0), and its init overrides left out when they are its init configuration."""
    out: list[Any] = []
    first = SearchRun.from_dict(runs[0], "search run 0").config if runs and isinstance(runs[0], dict) else None
    for k, r in enumerate(runs):
        if not isinstance(r, dict):
            out.append(r)
            continue
        run = SearchRun.from_dict(r, f"search run {k}")
        slim = {key: v for key, v in r.items() if key not in DROPPED_RUN_FIELDS}
        if "init_overrides" in slim and run.init_overrides == run.init_config:
            slim["init_overrides"] = "init_config"
        if k and run.config is not None and first is not None and set(run.config) == set(first):
            slim["config"] = {key: v for key, v in run.config.items() if first[key] != v}
            slim["config_from"] = 0
        out.append(slim)
    return out


def _full_runs(runs: list[Any]) -> list[Any]:
    """Search runs as a full record stores them (:func:`_slim_runs` undone)."""
    out: list[Any] = []
    for k, r in enumerate(runs):
        if isinstance(r, dict):
            run = SlimRun.from_dict(r, f"a slim entry's search run {k}")
            r = dict(r)
            if run.config_from is not None and isinstance(out[run.config_from], dict):
                del r["config_from"]
                r["config"] = {**out[run.config_from]["config"], **(run.config or {})}
            if run.init_overrides == "init_config":
                r["init_overrides"] = run.init_config
        out.append(r)
    return out


def _card_data(card: Mapping[str, Any]) -> CardData:
    return CardData.from_dict(card, "a model card")


def card_metrics(card: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A model card's training metrics as a cell record repeats them (without the per-image margins); None for no
    card, or a card without metrics."""
    if card is None:
        return None
    stored = _card_data(card)
    return stored.metrics.without("margins").to_dict() if "metrics" in (stored.key_order or ()) else None


def _slim_selections(selections: Mapping[str, Selection], keep: set[str]) -> dict[str, Selection]:
    """Each selection slimmed; a field equal to an earlier selection's is stored as ``same_as`` that selection."""
    out: dict[str, Selection] = {}
    for name, sel in selections.items():
        slim = _slim_selection(sel, keep, pooled=name == "pool")
        same: dict[str, str] = {}
        for key in SHARED_SELECTION_FIELDS:
            written = set(slim.key_order or ())
            earlier = next((n for n, o in out.items() if key in (o.key_order or ()) and key in written
                            and _shared_field(o, key) == _shared_field(slim, key)), None)
            if earlier is not None:
                same[key] = earlier
                slim = slim.without(key)
        if same:
            slim = slim.updated(same_as=same)
        out[name] = slim
    return out


def protocol_ref(shared: dict[str, Any]) -> str:
    """The name of an evaluation protocol stored once per board: the first 16 hex digits of its sha256."""
    return hashlib.sha256(json.dumps(shared, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


def _slim_target(target: TargetInfo, card: Mapping[str, Any] | None) -> TargetInfo:
    """The target with its training metrics and recipe stored as ``"card"`` where they are the model card's."""
    if card is None:
        return target
    metrics = card_metrics(card)
    if metrics is not None and isinstance(target.train_metrics, TrainMetrics) and target.train_metrics.to_dict() == metrics:
        target = target.updated(train_metrics="card")
    stored = _card_data(card)
    if isinstance(target.recipe, TargetRecipe) and stored.recipe is not None \
            and target.recipe.to_dict() == stored.recipe.to_dict():
        target = target.updated(recipe="card")
    return target


def make_entry(rec: dict[str, Any], keep_null: set[str], card: dict[str, Any] | None = None,
               protocols: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """The slim entry of a full cell record (an entry already slim is returned unchanged). ``card``: the target's
    model card as the board stores it; the target's recipe and training metrics are then read from it (``expand``)
    instead of repeated, when they are the same. ``protocols``: when given, the evaluation's protocol and metric
    directions go there under their hash (the board writes them to ``protocols/``) and the entry names them. The
    record is read strictly as a :class:`CellRecord` first (a hand-edited one is a one-line error)."""
    if is_entry(rec):
        return rec
    full_sha = record_sha256(rec)
    cell = CellRecord.from_dict(rec, "a cell record")
    out = cell.without(SEAL_FIELD, "calibration_bars")   # each selection's ``calibrated`` keeps its count and bar
    if cell.selections is not None:
        out = out.updated(selections=_slim_selections(cell.selections, keep_null))
    if cell.evaluation is not None:
        pool = cell.selection("pool")
        ev = _slim_evaluation(cell.evaluation, pool if pool.summary else Selection(summary=cell.evaluation.numbers))
        if protocols is not None:  # stored once per board (``protocols/<ref>.json``), named by its hash
            shared = BoardProtocol.written(protocol=ev.protocol, metrics=ev.metrics).to_dict()
            ref = protocol_ref(shared)
            protocols[ref] = shared
            ev = StoredEvaluation.written(protocol_ref=ref, candidates=ev.candidates, per_image=ev.per_image)
        out = out.updated(evaluation=ev)
    if cell.runs is not None:
        out = out.updated(runs=_slim_runs(cell.runs))
    if cell.machine is not None:
        out = out.updated(machine={k: cell.machine[k] for k in ("cpu_model", "cores", "memory_gib", "gpu",
                                                                 "torch_threads") if k in cell.machine})
    target = _slim_target(cell.target, card)
    if target is not cell.target:
        out = out.updated(target=target)
    entry = EntryInfo.written(schema=ENTRY_SCHEMA, full_record_sha256=full_sha, row_digits=ROW_DIGITS)
    if cell.record_sha256 is not None and cell.record_sha256 != full_sha:  # a seal that did not hold
        entry = entry.updated(full_record_seal=cell.record_sha256)
    return sealed(out.updated(entry=entry).to_dict())


def entry_text(entry: dict[str, Any]) -> str:
    """An entry as written to a board: one line of compact JSON."""
    return json.dumps(entry, separators=(",", ":"), allow_nan=True) + "\n"


# -- reading an entry -----------------------------------------------------------------------------------------
def _scores(rows: list[dict[str, Any]], column: str) -> np.ndarray:
    """A score column of an entry's stored per-image rows (NaN where a row holds no score); the rows store every
    column, so a decision on a column they lack is a one-line error."""
    if rows and column not in rows[0]:
        raise ReconbenchError(f"a slim entry's per-image decision thresholds the column {column!r}, which its rows "
                              f"do not store (they store {', '.join(rows[0])}); restore the entry, or write it again")
    return np.array([np.nan if r[column] is None else float(r[column]) for r in rows])


def _rows_of(compact: CompactRows) -> list[dict[str, Any]]:
    rows = compact.stored()
    for flag, d in compact.decisions.items():
        threshold = d.threshold
        scores = _scores(rows, d.score)
        flags = (decisions.above(scores, float(threshold), flag) if threshold is not None
                 else np.zeros(len(rows), dtype=bool))
        for r, s, f in zip(rows, scores, flags, strict=True):
            r[flag] = bool(f)
            r[f"{flag}_margin"] = None if threshold is None or math.isnan(s) else float(s - threshold)
    return rows


Reader = Callable[[str], dict[str, Any] | None]


def _full_spread(null: HeldOutNull) -> HeldOutNull:
    """A held-out null whose spreads stored as ``[mean, max]`` lists are objects again (with the null's draws)."""
    if null.spread is None:
        return null
    spread = {k: Spread.written(**dict(zip(SPREAD_FIELDS, v, strict=True)), draws=null.draws)
              if isinstance(v, list) else v for k, v in null.spread.items()}
    return null.updated(spread=spread)


def _full_selections(selections: Mapping[str, Selection], runs: list[SearchRun]) -> dict[str, Selection]:
    """Each selection with the fields it shares with an earlier one (``same_as``) restored, its run's configuration
    put back and its null's spreads as objects."""
    configs = {r.run: r.config for r in runs if "config" in (r.key_order or ())}
    out: dict[str, Selection] = {}
    for name, sel in selections.items():
        shared = {key: _shared_field(out[other], key) for key, other in (sel.same_as or {}).items()
                  if other in out and key in (out[other].key_order or ())}
        sel = sel.without("same_as").updated(**shared)
        if sel.run in configs:
            sel = sel.updated(config=configs[sel.run])
        if sel.null is not None:
            sel = sel.updated(null=_full_spread(sel.null))
        out[name] = sel
    return out


def _shared_field(sel: Selection, key: str) -> object:
    """A selection's field that a later selection may store as ``same_as`` (one of SHARED_SELECTION_FIELDS)."""
    if key == "summary":
        return sel.summary
    if key == "null":
        return sel.null
    if key == "attack_loss":
        return sel.attack_loss
    raise ReconbenchError(f"a slim entry's same_as names {key!r}, which selections do not share; "
                          f"it shares {', '.join(SHARED_SELECTION_FIELDS)} only")


def _card_target(target: TargetInfo, card: Reader | None) -> TargetInfo:
    """The target with its training metrics and recipe read from its model card where the entry stores
    ``"card"`` (left as ``"card"`` when the card is absent)."""
    if "card" not in (target.train_metrics, target.recipe) or not card:
        return target
    data = card(str(target.recipe_key))
    if data is None:
        return target
    stored = CARD_FILE.decode(data, f"the model card {target.recipe_key}")
    if target.train_metrics == "card" and "metrics" in (stored.key_order or ()):
        target = target.updated(train_metrics=stored.metrics.without("margins"))
    if target.recipe == "card" and stored.recipe is not None:
        target = target.updated(recipe=stored.recipe)
    return target


def expand(entry: dict[str, Any], card: Reader | None = None, protocol: Reader | None = None) -> dict[str, Any]:
    """A slim entry in the shape of a full record (full records are returned unchanged): per-image rows as objects
    with their decisions and margins re-derived, shared selection fields and each selection's run configuration
    restored, the target's training metrics read from its model card (``card(recipe_key)``; absent card: left as
    the string ``"card"``). The seal stays in ``entry.record_sha256`` (it seals the stored entry, not this form).
    The entry is read strictly as a :class:`CellRecord` first (a hand-edited entry is a one-line error)."""
    if not is_entry(entry):
        return entry
    rec = CellRecord.from_dict(entry, "a board entry")
    assert rec.entry is not None  # is_entry: the entry field is an object
    rec = rec.without(SEAL_FIELD).updated(entry=rec.entry.updated(record_sha256=rec.record_sha256))
    if rec.runs is not None:
        rec = rec.updated(runs=_full_runs(rec.runs))
    selections = _full_selections(rec.selections or {}, rec.search_runs)
    if rec.selections is not None:
        rec = rec.updated(selections=selections)
    rec = rec.updated(target=_card_target(rec.target, card))
    ev = rec.evaluation
    if ev is not None and ev.protocol_ref is not None and protocol is not None:
        data = protocol(ev.protocol_ref)
        if data is not None:
            shared = BoardProtocol.from_dict(data, f"the board protocol {ev.protocol_ref}")
            parts = {"protocol": shared.protocol, "metrics": shared.metrics}   # in the file's order
            ev = ev.without("protocol_ref").updated(**{k: parts[k] for k in shared.key_order or parts})
        else:
            ev = ev.without("protocol_ref")
    if ev is not None:
        pool = rec.selection("pool")
        rows = _rows_of(CompactRows.from_dict(ev.per_image or {}, "per_image"))
        rec = rec.updated(evaluation=ev.updated(summary=pool.summary, null=pool.null, per_image=rows))
    return rec.to_dict()


# -- checking an entry ----------------------------------------------------------------------------------------
@dataclass
class EntryCheck:
    """Counts and means re-derived from an entry's per-image scores: mismatches, and borderline decisions."""

    problems: list[str] = field(default_factory=list)
    borderline: list[str] = field(default_factory=list)
    explained: list[str] = field(default_factory=list)
    checked: int = 0


def _top_k(scores: np.ndarray, k: int) -> float:
    filled = np.where(np.isnan(scores), 0.0, scores)
    return float(np.sort(filled)[::-1][:min(k, len(filled))].mean()) if len(filled) else 0.0


def check_entry(entry: dict[str, Any], *, n_terms: int = 1, protocol: Reader | None = None) -> EntryCheck:
    """Re-derive, from an entry's stored per-image scores and thresholds, every count and score mean of its pooled
    summary (``reconstructed*``, ``top_k_mean_*``, ``mean_*_matched``, ``matched_images``, ``n_train``) and
    compare. A count that differs only through decisions whose score lies within the rounding tolerance of its
    threshold (``decisions.py``, reductions of ``n_terms`` values) agrees within rounding; any other difference is
    a problem."""
    out = EntryCheck()
    if not is_entry(entry):
        return out
    rec = CellRecord.from_dict(entry, "a board entry")
    cid = rec.cell_id
    if rec.status != "ok" or rec.evaluation is None:
        return out
    ev = rec.evaluation
    compact = CompactRows.from_dict(ev.per_image or {}, f"cell {cid}: evaluation.per_image")
    summary = rec.selection("pool").summary
    rows = compact.stored()
    columns = list(rows[0]) if rows else []
    stored_protocol = mapping(ev.protocol)
    if ev.protocol_ref and protocol:
        board_protocol = BoardProtocol.from_dict(mapping(protocol(ev.protocol_ref)), f"protocol {ev.protocol_ref}")
        stored_protocol = mapping(board_protocol.protocol)
    top_k = int(RecordedProtocol.from_dict(stored_protocol, f"cell {cid}: the protocol").top_k or 10)
    rtol = max(decisions.score_tolerance(n_terms), ROW_RTOL)

    def differs(key: str, stored: Any, fresh: Any) -> bool:
        if stored is None or fresh is None:
            return stored is not fresh
        a, b = float(stored), float(fresh)
        return not (a == b or abs(a - b) <= rtol * max(1.0, abs(a), abs(b)))

    def compare(key: str, fresh: Any) -> None:
        if key not in summary:
            return
        out.checked += 1
        if differs(key, summary[key], fresh):
            out.problems.append(f"{cid}: summary {key} is {summary[key]!r}, its per-image rows give {fresh!r}")

    if rows:
        compare("n_train", len(rows))
        if "matched" in columns:
            compare("matched_images", sum(bool(r["matched"]) for r in rows))
    for flag, d in compact.decisions.items():
        scores = _scores(rows, d.score)
        threshold = d.threshold
        if threshold is None:
            compare(flag, 0)
            continue
        with decisions.guided(n_terms, min_score_tol=ROW_RTOL) as guide:
            count = int(decisions.above(scores, float(threshold), flag).sum())
        if flag in summary:
            stored = summary[flag]
            out.checked += 1
            near = list(guide.seen.values())
            out.borderline += [f"{cid} [pool] {b.describe()}" for b in near]
            if stored != count:
                if isinstance(stored, int) and abs(stored - count) <= len(near):
                    out.explained.append(f"{cid} [pool] {flag}: stored {stored}, re-derived {count}, "
                                         f"{len(near)} borderline decision(s)")
                else:
                    out.problems.append(f"{cid}: summary {flag} is {stored!r}, its per-image {d.score} scores "
                                        f"above {threshold!r} count {count}"
                                        + (f" ({len(near)} borderline)" if near else ""))
        if flag == CALIBRATED_HEADLINE:
            continue
        matched = scores[~np.isnan(scores)]
        compare(f"top_k_mean_{d.score}", _top_k(scores, top_k))
        compare(f"mean_{d.score}_matched", float(matched.mean()) if len(matched) else None)
    return out


def read_entry_text(text: str, where: str) -> dict[str, Any]:
    """A cell record or entry from JSON text, or a one-line error naming ``where``."""
    try:
        rec = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ReconbenchError(f"{where} is not valid JSON ({exc})") from None
    if not isinstance(rec, dict):
        raise ReconbenchError(f"{where}: a cell record is a JSON object, got a {type(rec).__name__}")
    return rec
