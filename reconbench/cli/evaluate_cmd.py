"""`reconbench evaluate`: re-score the stored candidates of a result folder without re-running the attack."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from reconbench.cli.common import data_root_option, main_group, parse_assignments, quiet_option
from reconbench.cli.run_cmd import headline_lines
from reconbench.errors import ReconbenchError
from reconbench.evaluation import resolve_protocol
from reconbench.evaluation.rescore import read_candidates, read_result, rescore
from reconbench.provenance import check_writable
from reconbench.records import RUN_RESULT_FILE, RunResult, StoredEvaluation
from reconbench.records.recorded_spec import RecordedSpec


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
              help="Exit with an error unless the stored numbers are reproduced (stored protocol only): numbers to "
                   "the rounding tolerance of float64 (see reconbench/bench/suites/README.md), counts exactly except "
                   "decisions whose score lies within that tolerance of its threshold.")
@data_root_option
@quiet_option
def evaluate_command(result_dir: str, protocol_set: tuple[str, ...], model_card: str | None, out: str | None,
                     check: bool, data_root: str | None, quiet: bool) -> None:
    """Re-score the stored candidates of RESULT_DIR against the problem rebuilt from its model card."""
    overrides = parse_assignments(protocol_set, "--protocol-set")
    if check and overrides:
        raise ReconbenchError("--check compares with the stored numbers, which use the stored protocol; drop "
                              "--protocol-set or --check")
    result = check_result(Path(result_dir), need_evaluation=check)
    resolve_protocol({**protocol_options(result), **overrides}, str(result.target.family))
    if check:
        check_provenance(Path(result_dir), result)
    if out:
        check_writable(Path(out), "--out")
    record = rescore(result_dir, overrides, model_card=model_card, data_root=data_root, out_dir=out, quiet=quiet)
    evaluation, diff = StoredEvaluation.from_dict(record["evaluation"], "the fresh evaluation"), record["differences"]
    click.echo(f"evaluation: {record['path']}  ({evaluation.seconds or 0.0:.1f}s)")
    for line in headline_lines(evaluation)[:1]:  # the calibrated headline next to its held-out null
        click.echo(line)
    for key, value in evaluation.numbers.items():
        click.echo(f"  {key}: {value:.4g}" if isinstance(value, float) else f"  {key}: {value}")
    if record["stored_protocol"] and "evaluation" not in (result.key_order or ()):
        click.echo("result.json holds no stored evaluation, so there is nothing to compare with")
    elif record["stored_protocol"]:
        if diff:
            shown = [d if len(d) <= 200 else d[:197] + "..." for d in diff[:10]]
            more = f"\n  ... and {len(diff) - 10} more (see {record['path']})" if len(diff) > 10 else ""
            click.echo("stored numbers NOT reproduced:\n  " + "\n  ".join(shown) + more, err=True)
            if check:
                raise ReconbenchError(f"the stored evaluation of {result_dir} is not reproduced ({diff[0][:200]})")
        else:
            click.echo(reproduced_line(record))
            for line in record["borderline_differences"][:10]:
                click.echo(f"  borderline, agrees within rounding: {line}")


def protocol_options(result: RunResult) -> dict[str, Any]:
    """The protocol options a run was made with (its spec's ``protocol``; none recorded: the defaults)."""
    return result.recorded_spec.protocol_options


def check_provenance(folder: Path, result: RunResult) -> None:
    """What --check can re-derive besides the numbers: the protocol recorded in the evaluation is the one the run's
    options resolve to, and the run's configuration (seed included) hashes to the one recorded when it ran."""
    from reconbench.cli.run_cmd import RUN_CONFIG_FILE, run_config
    from reconbench.evaluation.rescore import pinned_protocol
    from reconbench.provenance import config_hash

    path = folder / "result.json"
    stored = result.evaluation.protocol
    if stored is not None:
        fresh = resolve_protocol(pinned_protocol(protocol_options(result), stored),
                                 str(result.target.family)).to_dict()
        scalar = (str, int, float, bool, type(None))  # the options; nested records gain fields when evaluated
        for key in sorted(set(fresh) & set(stored) - {"libraries", "metrics"}):
            if isinstance(fresh[key], scalar) and fresh[key] != stored[key]:
                raise ReconbenchError(f"{path}: evaluation.protocol.{key} is {str(stored[key])[:80]}, but the run's "
                                      f"protocol options resolve to {str(fresh[key])[:80]}; the file was edited, "
                                      "restore it or run the attack again")
    record = folder / RUN_CONFIG_FILE
    if record.is_file() and isinstance(result.target.recipe_key, str):
        try:
            recorded = json.loads(record.read_text())["config_hash"]
        except (OSError, ValueError, KeyError, TypeError):   # not a run-config.json this version reads
            recorded = None
        if recorded is not None and recorded != config_hash(run_config(result.target.recipe_key, dict(result.spec))):
            raise ReconbenchError(f"{path}: its spec (seed, attack options, ...) is not the configuration recorded in "
                                  f"{RUN_CONFIG_FILE} when the run was made; the file was edited, restore it or run "
                                  "the attack again")


def check_result(folder: Path, need_evaluation: bool) -> RunResult:
    """result.json read strictly as its record (every field of its type), with the parts re-scoring reads present."""
    path = folder / "result.json"
    result = RUN_RESULT_FILE.decode(read_result(folder), path)
    read_candidates(folder)  # present and readable
    RecordedSpec.from_dict(result.spec, f"{path}, its spec")   # spec.protocol an object of options, ...
    if not isinstance(result.target.family, str):
        raise ReconbenchError(f"{path}: target.family is {result.target.family!r}, expected a string; the file "
                              "is damaged, re-run the attack")
    if need_evaluation and result.evaluation.summary is None:
        raise ReconbenchError(f"{path} holds no stored evaluation (with a summary) for --check to compare with; "
                              "drop --check to evaluate it, or re-run the attack")
    return result


def reproduced_line(record: dict[str, Any]) -> str:
    """One line: reproduced, to which tolerance, and how many decisions were borderline."""
    tol = record["tolerance"]["relative"]
    n_border, n_diff = len(record["borderline"]), len(record["borderline_differences"])
    border = (f"; {n_border} decision(s) within rounding of their threshold"
              + (f", {n_diff} stored number(s) differ only through them" if n_diff else "")) if n_border else ""
    return f"stored numbers reproduced (relative tolerance {tol:.2g}{border})"
