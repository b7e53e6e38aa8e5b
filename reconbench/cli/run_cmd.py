"""`reconbench run`: attack a target (trained on demand) and write a result folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from reconbench import plugins
from reconbench.attack.pipeline import RunSpec, run_attack
from reconbench.cli.common import data_root_option, main_group, parse_assignments, quiet_option
from reconbench.cli.recipe_options import recipe_from_options, recipe_options
from reconbench.targets.cache import get_or_train
from reconbench.targets.cards import load_card


@main_group.command("run")
@click.option("--attack", required=True, help="Attack name (see `reconbench list attacks`).")
@click.option("--model", "model_card", type=click.Path(exists=True), default=None,
              help="Model card folder from `reconbench train`; without it a target is trained (or reused) from "
                   "the recipe options, defaulting to the attack's small `digits` target.")
@recipe_options
@click.option("--init", "init_name", default="gaussian", show_default=True,
              help="Initialisation regime (see `reconbench list inits`).")
@click.option("--init-set", multiple=True, help="Init option KEY=VALUE (repeatable), e.g. scale=1e-3.")
@click.option("--set", "attack_set", multiple=True, help="Attack option KEY=VALUE (repeatable), e.g. steps=2000.")
@click.option("--search-runs", type=int, default=None,
              help="Random-search budget: runs sampled from the attack's declared space (default: the attack's).")
@click.option("--candidates", type=int, default=None, help="Number of candidates m (default 2n).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the init regime and the search.")
@click.option("--dtype", type=click.Choice(["float64", "float32"]), default="float64", show_default=True,
              help="Attack precision.")
@click.option("--device", default="cpu", show_default=True,
              help="Torch device of the attack, and of the training when a target is trained, e.g. cuda.")
@click.option("--protocol-set", multiple=True, help="Evaluation protocol option KEY=VALUE (repeatable).")
@click.option("--out", type=click.Path(file_okay=False), default=None,
              help="Result folder (default: runs/<attack>-<init>-<target>-s<seed>; an existing one is resumed).")
@click.option("--cache", type=click.Path(file_okay=False), default=None, help="Cache folder for trained targets.")
@data_root_option
@quiet_option
def run_command(attack: str, model_card: str | None, init_name: str, init_set: tuple[str, ...],
                attack_set: tuple[str, ...], search_runs: int | None, candidates: int | None, seed: int,
                dtype: str, device: str, protocol_set: tuple[str, ...], out: str | None, cache: str | None,
                data_root: str | None, quiet: bool, **recipe_opts: Any) -> None:
    """Run an attack against a target and write result.json, candidates and figures."""
    attack_obj = plugins.get("attacks", attack)
    plugins.get("inits", init_name)  # fail on a bad name before training anything
    if model_card:
        card = load_card(model_card)
    else:
        recipe = recipe_from_options(recipe_opts, base=attack_obj.default_recipe)
        card = get_or_train(recipe, cache, data_root, quiet, device=device)   # trained where it is attacked
    spec = RunSpec(attack=attack, attack_config=parse_assignments(attack_set, "--set"), init=init_name,
                   init_config=parse_assignments(init_set, "--init-set"), seed=seed, candidates=candidates,
                   search_runs=search_runs if search_runs is not None else attack_obj.default_search_runs,
                   dtype=dtype, device=device, protocol=parse_assignments(protocol_set, "--protocol-set"))
    out_dir = Path(out) if out else Path("runs") / f"{attack}-{init_name}-{card.data['recipe_key']}-s{seed}"
    result = run_attack(card, spec, out_dir, data_root=data_root, quiet=quiet)
    click.echo(f"result: {out_dir / 'result.json'}  ({result['wall_seconds']:.1f}s, {len(result['runs'])} run(s))")
    for line in headline_lines(result["evaluation"]):
        click.echo(line)
    click.echo("  (every number, per training image and per run: result.json; figures: figures/)")


def headline_lines(evaluation: dict[str, Any]) -> list[str]:
    """The calibrated headline next to the held-out null, then the other summary numbers with their null means."""
    summary, null = evaluation.get("summary", {}), evaluation.get("null") or {}
    nulls = null.get("spread") or {}
    lines = []
    cal = evaluation.get("protocol", {}).get("calibration", {})
    if summary.get("reconstructed_calibrated") is not None:
        spread = nulls.get("reconstructed_calibrated", {})
        lines.append(f"  reconstructed (calibrated headline): {summary['reconstructed_calibrated']} of "
                     f"{summary.get('n_train')}  | held-out null: mean {spread.get('mean', float('nan')):.2g}, "
                     f"max {spread.get('max', float('nan')):.0f} over {null.get('draws', 0)} draws  "
                     f"({cal.get('score')} > {summary['calibrated_threshold']:.3f}, the best any of "
                     f"{cal.get('calibration_draws')} null draws reached)")
    elif null.get("available") is False:
        lines.append(f"  no calibrated headline: {null.get('reason')}")
    for key in HEADLINE:
        if key in summary:
            value = summary[key]
            text = f"{value:.4g}" if isinstance(value, float) else str(value)
            if key == "lpips_mean" and value == "unavailable":
                text += " (backbone weights not cached; see result.json for the reason)"
            if key in nulls and key not in ("n_train", "n_candidates"):
                text += f"  | null {nulls[key]['mean']:.3g} (sd {nulls[key]['std']:.2g})"
            click_key = "reconstructed (papers' protocol)" if key == "reconstructed" else key
            lines.append(f"  {click_key}: {text}")
    return lines


HEADLINE = ("n_train", "n_candidates", "reconstructed", "reconstructed_corr", "top_k_mean_ssim", "reconstructed_ssim_standard",
            "membership_precision", "distinct_share", "init_copy_share", "extraction_score", "lpips_mean")
