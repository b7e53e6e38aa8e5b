"""`reconbench train`: train a target and write its model card."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from reconbench.cli.common import (
    check_device,
    data_root_option,
    main_group,
    quiet_option,
    remove_if_unused,
    show_cost,
    yes_option,
)
from reconbench.cli.recipe_options import recipe_from_options, train_recipe_options
from reconbench.errors import ReconbenchError
from reconbench.preflight import check_cost, check_target, step_seconds
from reconbench.provenance import check_writable, folder_lock
from reconbench.records import TrainMetrics
from reconbench.targets.cache import cache_dir, get_or_train, train_target
from reconbench.targets.cards import CARD_FILE
from reconbench.targets.problems import build_problem


@main_group.command("train")
@train_recipe_options
@click.option("--out", type=click.Path(file_okay=False), default=None,
              help="Folder for the model card (default: the cache, keyed by the recipe hash).")
@click.option("--cache", type=click.Path(file_okay=False), default=None,
              help="Cache folder for trained targets (default: $RECONBENCH_CACHE, else ~/.cache/reconbench).")
@click.option("--device", default="cpu", show_default=True,
              help="Torch device of the training, e.g. cuda (not part of the recipe: the card records it).")
@data_root_option
@quiet_option
@yes_option
def train_command(out: str | None, cache: str | None, device: str, data_root: str | None, quiet: bool, yes: bool,
                  **opts: Any) -> None:
    """Train a target model by full-batch gradient descent and write a model card (weights + card.json)."""
    recipe = recipe_from_options(opts)
    check_device(device)
    # the data set, the problem, the architecture and its memory: before training
    size = check_target(recipe, build_problem(recipe.problem, data_root))
    estimate = check_cost([("training", step_seconds(size.parameters, size.n_train, recipe.train.steps))], yes=yes,
                          fix="lower --steps")
    if out:
        check_not_another_card(Path(out), recipe.key())
        created = not Path(out).exists()
        check_writable(Path(out), "--out")
        try:
            with folder_lock(Path(out), "model card"):
                show_cost(estimate, quiet)
                card = train_target(recipe, out, data_root, quiet, device)
        except BaseException:
            if created:
                remove_if_unused(Path(out))
            raise
    else:
        check_writable(cache_dir(cache), "--cache")
        show_cost(estimate, quiet)
        card = get_or_train(recipe, cache, data_root, quiet, device=device)
    m = TrainMetrics.from_dict(card.data["metrics"], card.path)
    cert = m.certificate
    margins = len(m.margins or [])
    click.echo(f"model card: {card.path}")
    click.echo(f"  train error {m.train_error:.4f}  train loss {m.train_loss:.3e}  "
               f"test error {nan_if_none(m.test_error):.4f}  ({m.steps_run} steps, {m.train_seconds:.1f}s)")
    stalled = int(m.stalled_samples or 0)
    if stalled:
        click.echo(f"  warning: {stalled} of {margins} training samples get an exactly-zero loss gradient in "
                   f"{card.recipe.train.dtype} (their margins are past what it resolves), so longer training "
                   "does not move them; train with --train-dtype float64 or loss_form = \"stable\" in the recipe's "
                   "[train] table to keep converging")
    if cert is not None:
        click.echo(f"  stationarity residual: {cert.residual_at_train:.3e} at the training data vs "
                   f"{cert.residual_at_random:.3e} at random inputs (ratio {cert.ratio:.3g}; "
                   "small means near a KKT point, which the KKT attacks need)")
        regime = m.regime
        theta = regime.theta
        if theta is not None and theta.residual is not None:
            bound = 0.5 if regime.max_residual is None else regime.max_residual
            on_margin = len(theta.margin_set or [])
            parts = [f"theta {theta.residual:.3g} (margin set {on_margin} of {margins})"]
            parts += [f"{k} {fit.residual:.3g}" for k in ("regularised", "learned")
                      if (fit := regime.fit(k)) is not None and fit.residual is not None]
            click.echo(f"  regime residuals ||v - J^T lambda|| / ||v||: {', '.join(parts)}; a KKT attack's premise "
                       f"holds at most {bound:g} (docs/regime.md#the-regime-test-of-each-threat-model)")


def nan_if_none(value: float | None) -> float:
    return float("nan") if value is None else value


def check_not_another_card(out: Path, key: str) -> None:
    """``train --out`` replaces a card only of the same recipe (retraining it); a card of another recipe, or a file
    there that is not a card reconbench can read, is the user's: refused, naming the fix."""
    card = out / CARD_FILE
    if not card.exists():
        return
    try:
        old = json.loads(card.read_text())["recipe_key"]
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError):   # not a card this version reads
        old = None
    if old != key:
        what = f"the model card of another recipe (key {old})" if isinstance(old, str) else "a card.json it cannot read"
        raise ReconbenchError(f"--out {out} holds {what}; this recipe's key is {key}: pass another --out, or delete "
                              "that folder first to train this recipe there")
