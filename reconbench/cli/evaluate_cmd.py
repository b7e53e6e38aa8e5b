"""`reconbench evaluate`: re-score the stored candidates of a result folder without re-running the attack."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from ..cards import load_card
from ..errors import ReconbenchError
from ..evaluation import evaluate
from ..provenance import config_hash, provenance, write_json
from .common import data_root_option, main_group, parse_assignments, quiet_option

#: parts of an evaluation that must agree for "the stored numbers are reproduced"
COMPARED = ("summary", "per_image", "candidates")


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
    path = Path(recorded)
    if not path.exists() and not path.is_absolute() and (result_dir / path).exists():
        path = result_dir / path
    try:
        return load_card(path)
    except ReconbenchError as exc:
        raise ReconbenchError(f"cannot rebuild the problem of {result_dir}: {exc}. If the card moved, pass "
                              "--model CARD_DIR") from exc


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


@main_group.command("evaluate")
@click.argument("result_dir", type=click.Path(file_okay=False))
@click.option("--protocol-set", multiple=True,
              help="Protocol option KEY=VALUE (repeatable; same parsing as `reconbench run`), e.g. distance=ncc or "
                   "ssim.window_size=5. Applied over the options stored with the result.")
@click.option("--model", "model_card", type=click.Path(), default=None,
              help="Model card folder, if it moved since the run (default: the card recorded in result.json).")
@click.option("--out", type=click.Path(file_okay=False), default=None,
              help="Folder for evaluation.json and figures/ (default: RESULT_DIR/evaluations/<protocol hash>).")
@click.option("--check", is_flag=True,
              help="Exit with an error unless the stored numbers are reproduced exactly (stored protocol only).")
@data_root_option
@quiet_option
def evaluate_command(result_dir: str, protocol_set: tuple[str, ...], model_card: str | None, out: str | None,
                     check: bool, data_root: str | None, quiet: bool) -> None:
    """Re-score the stored candidates of RESULT_DIR against the problem rebuilt from its model card."""
    folder = Path(result_dir)
    result = read_result(folder)
    pooled = read_candidates(folder)
    card = locate_card(folder, result, model_card)
    try:
        problem = card.problem(data_root)
    except ReconbenchError as exc:
        raise ReconbenchError(f"cannot rebuild the problem of {folder} from the card {card.path}: {exc}") from exc
    stored_overrides = dict(result["spec"].get("protocol") or {})
    overrides = {**stored_overrides, **parse_assignments(protocol_set, "--protocol-set")}
    out_dir = Path(out) if out else folder / "evaluations" / config_hash(overrides)
    evaluation = evaluate(problem, pooled["candidates"], family=str(result["target"]["family"]), protocol=overrides,
                          labels=pooled.get("labels"), run_ids=pooled.get("run_ids"), x0=pooled.get("x0"),
                          card=card, out_dir=out_dir, quiet=quiet)
    same_protocol = overrides == stored_overrides
    stored = result.get("evaluation") or {}
    diff = differences(stored, evaluation) if same_protocol else []
    record = {"kind": "reconbench-evaluation/1", "result_dir": str(folder), "card": str(card.path),
              "protocol_overrides": overrides, "stored_protocol": same_protocol,
              "reproduces_stored": (not diff) if same_protocol else None, "evaluation": evaluation,
              "provenance": provenance(overrides, "cpu", "float64")}
    write_json(out_dir / "evaluation.json", record)
    click.echo(f"evaluation: {out_dir / 'evaluation.json'}  ({evaluation['seconds']:.1f}s)")
    for key, value in evaluation["summary"].items():
        click.echo(f"  {key}: {value:.4g}" if isinstance(value, float) else f"  {key}: {value}")
    if same_protocol:
        if diff:
            click.echo("stored numbers NOT reproduced:\n  " + "\n  ".join(diff), err=True)
            if check:
                raise ReconbenchError(f"the stored evaluation of {folder} is not reproduced ({diff[0]})")
        else:
            click.echo("stored numbers reproduced exactly")
    elif check:
        raise ReconbenchError("--check compares with the stored numbers, which use the stored protocol; drop "
                              "--protocol-set or --check")
