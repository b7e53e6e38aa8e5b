"""Re-score a stored result folder under the same or another protocol, without re-running the attack.

``rescore(result_dir, overrides)`` rebuilds the problem from the model card recorded in ``result.json`` (via
``load_card(...).problem()``), evaluates the pooled candidates of ``candidates.safetensors`` and writes
``<out_dir>/evaluation.json`` (+ figures). With the stored protocol it also says whether every stored number is
reproduced exactly. ``reconbench evaluate`` and suite runners call it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from reconbench.errors import ReconbenchError
from reconbench.evaluation.recorded import absent_options
from reconbench.provenance import config_hash, portable_path, provenance, write_json
from reconbench.targets.cache import cache_dir
from reconbench.targets.cards import load_card

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
    if not isinstance(result, dict) or result.get("kind") != "reconbench-result/1":
        kind = result.get("kind") if isinstance(result, dict) else None
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


def locate_card(result_dir: Path, result: dict[str, Any], explicit: str | None) -> Any:
    if explicit:
        return load_card(explicit)
    recorded = result["target"].get("card")
    if not recorded:
        raise ReconbenchError(f"{result_dir / 'result.json'} records no model card; pass --model CARD_DIR")
    path = Path(recorded).expanduser()
    if not path.exists() and not path.is_absolute() and (result_dir / path).exists():
        path = result_dir / path
    key = result["target"].get("recipe_key")
    if not path.exists() and key and (cache_dir() / "targets" / str(key)).exists():
        path = cache_dir() / "targets" / str(key)   # recorded elsewhere; the same recipe is in this machine's cache
    try:
        return load_card(path)
    except ReconbenchError as exc:
        raise ReconbenchError(f"cannot rebuild the problem of {result_dir}: {exc}. If the card moved, pass "
                              "--model CARD_DIR") from exc


def pinned_protocol(overrides: dict[str, Any], stored_evaluation: dict[str, Any] | None) -> dict[str, Any]:
    """The protocol that re-scores a stored evaluation: its overrides, and, when they leave the metric list open
    (every registered metric), the metrics the stored evaluation computed. A metric registered since is not a stored
    number to reproduce; it is computed when the overrides name it. A metric option added since takes the value the
    stored configuration stands for (``recorded.absent_options``)."""
    recorded = (((stored_evaluation or {}).get("protocol") or {}).get("metrics")) or None
    if not isinstance(recorded, dict):
        return dict(overrides)
    pinned = dict(overrides) if "metrics" in overrides else {**overrides, "metrics": list(recorded)}
    return {**pinned, **absent_options(recorded, pinned)}


def differences(stored: dict[str, Any], new: dict[str, Any], limit: int = 5) -> list[str]:
    """Where a fresh evaluation differs from the stored one (exact comparison)."""
    out: list[str] = []

    def walk(a: Any, b: Any, where: str) -> None:
        if len(out) >= limit:
            return
        if isinstance(a, dict) and isinstance(b, dict):
            for k in sorted(set(a) | set(b), key=str):
                if k not in a or k not in b:
                    out.append(f"{where}.{k}: {'missing in stored' if k not in a else 'missing now'}")
                else:
                    walk(a[k], b[k], f"{where}.{k}")
        elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
            for i, (x, y) in enumerate(zip(a, b, strict=True)):
                walk(x, y, f"{where}[{i}]")
        elif a != b:
            out.append(f"{where}: stored {a!r}, now {b!r}")

    for key in COMPARED:
        walk(stored.get(key), new.get(key), key)
    return out


def rescore(result_dir: str | Path, overrides: dict[str, Any] | None = None, *, model_card: str | None = None,
            data_root: str | None = None, out_dir: str | Path | None = None, quiet: bool = True) -> dict[str, Any]:
    """Evaluate the stored candidates of ``result_dir`` with the stored protocol updated by ``overrides``.

    Returns the record written to ``<out_dir>/evaluation.json`` (default ``result_dir/evaluations/<protocol
    hash>``): the evaluation, the protocol overrides, whether they are the stored ones, and if so ``differences``
    from the stored evaluation (empty: reproduced exactly).
    """
    from reconbench.evaluation import evaluate

    folder = Path(result_dir)
    result = read_result(folder)
    pooled = read_candidates(folder)
    card = locate_card(folder, result, model_card)
    try:
        problem = card.problem(data_root)
    except ReconbenchError as exc:
        raise ReconbenchError(f"cannot rebuild the problem of {folder} from the card {card.path}: {exc}") from exc
    stored_overrides = dict(result["spec"].get("protocol") or {})
    merged = {**stored_overrides, **(overrides or {})}
    target = Path(out_dir) if out_dir else folder / "evaluations" / config_hash(merged)
    same_protocol = merged == stored_overrides
    protocol = pinned_protocol(merged, result.get("evaluation")) if same_protocol else merged
    evaluation = evaluate(problem, pooled["candidates"], family=str(result["target"]["family"]), protocol=protocol,
                          labels=pooled.get("labels"), run_ids=pooled.get("run_ids"), x0=pooled.get("x0"),
                          card=card, out_dir=target, quiet=quiet)
    diff = differences(result.get("evaluation") or {}, evaluation) if same_protocol else []
    record = {"kind": "reconbench-evaluation/1", "result_dir": portable_path(folder), "card": portable_path(card.path),
              "protocol_overrides": merged, "stored_protocol": same_protocol,
              "reproduces_stored": (not diff) if same_protocol else None, "differences": diff,
              "evaluation": evaluation, "provenance": provenance(merged, "cpu", "float64")}
    write_json(target / "evaluation.json", record)
    record["path"] = str(target / "evaluation.json")
    return record
