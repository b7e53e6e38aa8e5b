"""`reconbench evaluate`: re-score the stored candidates of a result folder without re-running the attack."""

from __future__ import annotations

import click

from reconbench.cli.common import data_root_option, main_group, parse_assignments, quiet_option
from reconbench.cli.run_cmd import headline_lines
from reconbench.errors import ReconbenchError
from reconbench.evaluation.rescore import rescore


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
    record = rescore(result_dir, parse_assignments(protocol_set, "--protocol-set"), model_card=model_card,
                     data_root=data_root, out_dir=out, quiet=quiet)
    evaluation, diff = record["evaluation"], record["differences"]
    click.echo(f"evaluation: {record['path']}  ({evaluation['seconds']:.1f}s)")
    for line in headline_lines(evaluation)[:1]:  # the calibrated headline next to its held-out null
        click.echo(line)
    for key, value in evaluation["summary"].items():
        click.echo(f"  {key}: {value:.4g}" if isinstance(value, float) else f"  {key}: {value}")
    if record["stored_protocol"]:
        if diff:
            click.echo("stored numbers NOT reproduced:\n  " + "\n  ".join(diff), err=True)
            if check:
                raise ReconbenchError(f"the stored evaluation of {result_dir} is not reproduced ({diff[0]})")
        else:
            click.echo("stored numbers reproduced exactly")
    elif check:
        raise ReconbenchError("--check compares with the stored numbers, which use the stored protocol; drop "
                              "--protocol-set or --check")
