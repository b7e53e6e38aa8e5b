"""`reconbench export`: a model card as plain files (weights, npz data) for `reconbench audit`."""

from __future__ import annotations

import shlex
from pathlib import Path

import click

from reconbench.cli.common import data_root_option, main_group


@main_group.command("export")
@click.argument("card", type=click.Path(exists=True))
@click.option("--out", required=True, type=click.Path(file_okay=False),
              help="Folder for weights.safetensors, init.safetensors, train.npz and held.npz.")
@data_root_option
def export_command(card: str, out: str, data_root: str | None) -> None:
    """Write a trained target (model card folder) as an owner outside reconbench holds a model: plain safetensors
    weights and npz data; prints the `reconbench audit` command that audits it as `reconbench run --model` attacks
    it (add --attack, --budget and --search-runs to match a run)."""
    from reconbench.auditing.export import export_card
    from reconbench.targets.cards import load_card

    written = export_card(load_card(card), out, data_root)
    for key in ("weights", "init_weights", "train", "held_out"):
        click.echo(f"{key}: {written[key]}")
    click.echo(f"audit it with:\n  {written['command']} --out {shlex.quote(str(Path(out) / 'audit'))}")
