"""`reconbench audit`: attack a model trained elsewhere with the owner's data and write a calibrated report."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from reconbench.cli.common import SEED, Count, check_device, command_line, main_group, parse_assignments, quiet_option

#: kept in step with reconbench.auditing.run (not imported here: the command modules load before torch)
DEFAULT_BUDGET = 3000


@main_group.command("audit")
@click.argument("weights", type=click.Path(dir_okay=False))
@click.option("--family", required=True,
              help="Architecture: a model family (mlp, mlp_bias, affine, conv, ...; `reconbench list models`), any "
                   "timm architecture name, or an importable module:factory returning an nn.Module.")
@click.option("--model-set", multiple=True,
              help="Architecture option KEY=VALUE (repeatable), e.g. widths=[1000] for mlp; for a timm name, its "
                   "create_model kwargs; for a factory, its keyword arguments.")
@click.option("--train", "train", required=True, type=click.Path(),
              help="The training set to protect: .npz with `images` (uint8, N x H x W or N x H x W x C) and `labels`, "
                   "or an image folder with one subfolder per class.")
@click.option("--held-out", "held_out", required=True, type=click.Path(),
              help="Images of the same distribution the model never saw (.npz or image folder, same layout): the "
                   "null, the decoys and the membership test's non-members; each class needs 2 x max class count + "
                   "10 x its count.")
@click.option("--task", type=click.Choice(["binary", "multiclass", "regression"]), required=True,
              help="What the model was trained for (binary: one output logit; regression: one output, targets -1/+1).")
@click.option("--binary-rule", default=None,
              help="Binary/regression: how the files' labels map to 0/1 (parity, vehicles_animals); not needed "
                   "when the labels are 0/1 already.")
@click.option("--preprocess", multiple=True,
              help="Input preprocessing KEY=VALUE (repeatable): inputs = (scale * x - mean) / std for x in [0, 1]. "
                   "scale (default 1; 255 for raw pixel values), mean (none | train | train-channel | per-channel "
                   "values | FILE.npy; default none), std (one value or per channel; default 1).")
@click.option("--loss", default=None, help="Training loss (bce, ce, mse, l25, huber; default by task).")
@click.option("--init-weights", type=click.Path(dir_okay=False), default=None,
              help="The weights training started from (θ0): enables the learned-part regime gate.")
@click.option("--init-decay", type=float, default=1.0, show_default=True,
              help="What coupled weight decay left of θ0 (prod of 1 - lr*wd over the steps; 1 without weight decay).")
@click.option("--attack", "attacks", multiple=True,
              help="Attack to run (repeatable; default: the task's KKT attack and the weight_rows baseline).")
@click.option("--budget", type=Count(1), default=DEFAULT_BUDGET, show_default=True,
              help="Attack steps per attack, summed over its search runs (the default takes minutes on a laptop CPU).")
@click.option("--search-runs", type=Count(1), default=None, help="Search runs per attack (default 3).")
@click.option("--seed", type=SEED, default=0, show_default=True, help="Seed of the starts and the search.")
@click.option("--device", default="cpu", show_default=True, help="Torch device of the attacks, e.g. cuda.")
@click.option("--out", required=True, type=click.Path(file_okay=False),
              help="Report folder: report.html, audit.json and each attack's result folder.")
@quiet_option
def audit_command(weights: str, family: str, model_set: tuple[str, ...], train: str, held_out: str, task: str,
                  binary_rule: str | None, preprocess: tuple[str, ...], loss: str | None, init_weights: str | None,
                  init_decay: float, attacks: tuple[str, ...], budget: int, search_runs: int | None, seed: int,
                  device: str, out: str, quiet: bool) -> None:
    """Audit released WEIGHTS for training-image leakage: run the attacks that apply and write a calibrated report."""
    from reconbench.auditing.run import audit

    check_device(device)
    rec: dict[str, Any] = audit(
        weights, family=family, model_set=parse_assignments(model_set, "--model-set"), train=train, held_out=held_out,
        task=task, binary_rule=binary_rule, preprocess=parse_assignments(preprocess, "--preprocess"), loss=loss,
        init_weights=init_weights, init_decay=init_decay, attacks=list(attacks) or None, budget=budget,
        search_runs=search_runs, seed=seed, device=device, out=out, quiet=quiet,
        command=command_line())
    head = rec["headline"]
    if head["available"]:   # the audit's headline says whether it is available, always
        click.echo(f"reconstructed (calibrated headline): {head['reconstructed']} of {head['n_train']} "
                   f"({head['attack']})  | held-out null: mean {head['null_mean']:.2g}, max {head['null_max']:.0f}")
        click.echo(f"membership AUC: {head['membership_auc']:.2f}  | null {head['membership_auc_null_mean']:.2f}")
    regime = rec["regime"]
    click.echo(f"regime: learned-part gate {regime['gate_verdict']}; stationarity ratio "
               f"{regime['stationarity_ratio']:.3g}")
    for r in rec["refused"]:
        click.echo(f"not run: {r['reason']}")
    click.echo(f"report: {Path(out) / 'report.html'}  (JSON: {Path(out) / 'audit.json'})")
