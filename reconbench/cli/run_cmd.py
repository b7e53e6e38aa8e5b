"""`reconbench run`: attack a target (trained on demand) and write a result folder."""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from reconbench import plugins
from reconbench.attack.search import RUN_SEARCH
from reconbench.cli.common import (
    SEED,
    Count,
    check_device,
    data_root_option,
    main_group,
    parse_assignments,
    quiet_option,
    remove_if_unused,
    show_cost,
    track_options,
    yes_option,
)
from reconbench.cli.recipe_options import recipe_from_options, recipe_options
from reconbench.errors import IncompatibleError, ReconbenchError
from reconbench.evaluation import reported
from reconbench.interfaces import Attack
from reconbench.preflight import (
    attack_seconds,
    card_size,
    check_attack,
    check_cost,
    check_target,
    config_steps,
    step_seconds,
)
from reconbench.provenance import check_writable, config_hash, folder_lock, write_json
from reconbench.records import RUN_RESULT_FILE, Spread, StoredEvaluation, StoredOutcome
from reconbench.runs.below_null import below_null_line
from reconbench.runs.execute import run_attack
from reconbench.runs.resolved import CLI_NAMES, ResolvedRun, resolve_run
from reconbench.runs.spec import RunSpec
from reconbench.targets.cache import cache_dir, get_or_train
from reconbench.targets.cards import load_card
from reconbench.targets.problems import build_problem
from reconbench.tracking import check_tracker, tracker

#: the configuration of the run a result folder holds (written before the first search run)
RUN_CONFIG_FILE = "run-config.json"


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
@click.option("--search-runs", type=Count(1), default=None,
              help="Search budget: runs drawn from the attack's declared space (default: the attack's).")
@click.option("--search", "search", default=RUN_SEARCH, show_default=True,
              help="Search strategy choosing the runs' configurations (see `reconbench list searches`): the default "
                   "runs the attack's default configuration first; random draws every run; optuna.")
@click.option("--search-set", multiple=True, help="Search strategy option KEY=VALUE (repeatable), e.g. batch=2.")
@click.option("--candidates", type=Count(1), default=None, help="Number of candidates m (default 2n).")
@click.option("--seed", type=SEED, default=0, show_default=True,
              help="Seed of the init regime and the search.")
@click.option("--dtype", type=click.Choice(["float64", "float32"]), default="float64", show_default=True,
              help="Attack precision.")
@click.option("--device", default="cpu", show_default=True,
              help="Torch device of the attack, and of the training when a target is trained, e.g. cuda.")
@click.option("--protocol-set", multiple=True, help="Evaluation protocol option KEY=VALUE (repeatable).")
@click.option("--out", type=click.Path(file_okay=False), default=None,
              help="Result folder (default: runs/<attack>-<init>-<target>-s<seed>, with -<config hash> when other options "
                   "differ from their defaults; an existing one with the same "
                   "configuration is resumed).")
@click.option("--replace", is_flag=True,
              help="If --out holds a run of another configuration, delete its files and run this one.")
@click.option("--cache", type=click.Path(file_okay=False), default=None,
              help="Cache folder for trained targets (default: $RECONBENCH_CACHE, else ~/.cache/reconbench).")
@track_options
@data_root_option
@quiet_option
@yes_option
def run_command(attack: str, model_card: str | None, init_name: str, init_set: tuple[str, ...],
                attack_set: tuple[str, ...], search_runs: int | None, search: str, search_set: tuple[str, ...],
                candidates: int | None, seed: int,
                dtype: str, device: str, protocol_set: tuple[str, ...], out: str | None, replace: bool,
                cache: str | None, data_root: str | None, quiet: bool, track: str | None, track_uri: str | None,
                track_experiment: str | None, yes: bool, **recipe_opts: Any) -> None:
    """Run an attack against a target and write result.json, candidates and figures.

    Without --model, the target is trained (or reused from the cache) from the attack's default target (a small
    `digits` model, shown by `reconbench list attacks NAME -v`; for an attack without one, the defaults
    `reconbench train -h` states), with the recipe options given changed: an option not given keeps that target's
    value.
    """
    # every option is checked before any training: names, values, ranges, the device and the folders; the run is
    # resolved once (ResolvedRun) and handed down, so nothing below looks a name up or builds a config again
    attack_obj = plugins.attack(attack)
    plugins.init(init_name)
    attack_config = parse_assignments(attack_set, "--set")
    init_config = parse_assignments(init_set, "--init-set")
    protocol = parse_assignments(protocol_set, "--protocol-set")
    search_config = parse_assignments(search_set, "--search-set")
    check_tracker(track, track_uri, track_experiment)
    check_device(device)
    if model_card:
        check_no_recipe_options(recipe_opts)
        card = load_card(model_card)
        size = card_size(card.data)  # the architecture fits in memory: before it is built
        card.load_model()  # hashes, dtypes, finite weights, shapes: before any work
        recipe_key, family, task = card.data["recipe_key"], card.data["family"], card.task
    else:
        recipe = recipe_from_options(recipe_opts, base=attack_obj.default_recipe)
        recipe_key, family, task = recipe.key(), recipe.family, recipe.problem.task
        # the data set, the problem, the architecture and its memory, before training
        size = check_target(recipe, build_problem(recipe.problem, data_root))
    check_task(attack_obj, task, card=bool(model_card))
    spec = RunSpec(attack=attack, attack_config=attack_config, init=init_name, init_config=init_config, seed=seed,
                   candidates=candidates,
                   search_runs=search_runs if search_runs is not None else attack_obj.default_search_runs,
                   dtype=dtype, device=device, protocol=protocol, search=search, search_config=search_config)
    resolved = resolve_run(spec, family, CLI_NAMES)
    resolved.search.check()   # the strategy's optional dependency is installed
    note_null_steps(resolved)
    check_attack(size, candidates=spec.candidates, search_runs=spec.search_runs, dtype=dtype)
    parts = [] if model_card else [("training (unless cached)", step_seconds(size.parameters, size.n_train,
                                                                             recipe.train.steps))]
    parts.append(("attack", attack_seconds(size, steps=config_steps(resolved.attack_config),
                                           candidates=spec.candidates, search_runs=spec.search_runs)))
    estimate = check_cost(parts, yes=yes, fix="lower the steps (--steps, --set steps=...) or --search-runs")
    out_dir = Path(out) if out else default_out_dir(recipe_key, spec, attack_obj.default_search_runs)
    created = not out_dir.exists()
    check_writable(out_dir, "--out")
    if not model_card:
        check_writable(cache_dir(cache), "--cache")
    config = run_config(recipe_key, spec.to_dict())
    show_cost(estimate, quiet)
    try:
        with folder_lock(out_dir, "result"):
            check_folder(out_dir, config, replace)  # a run of another configuration: refused before training
            if not model_card:
                card = get_or_train(recipe, cache, data_root, quiet, device=device)  # trained where it is attacked
            with claimed_folder(out_dir, config, replace):
                data = run_attack(card, resolved, out_dir, data_root=data_root, quiet=quiet)
    except BaseException:
        if created:
            remove_if_unused(out_dir)
        raise
    result = RUN_RESULT_FILE.decode(data, out_dir / "result.json")
    click.echo(f"result: {out_dir / 'result.json'}  ({result.wall_seconds:.1f}s, {len(result.runs)} run(s))")
    outcome = result.outcome or StoredOutcome()
    if outcome.status != "ok":   # the numbers below then score candidates the attack did not produce
        click.echo(f"warning: the attack failed ({outcome.status}): {outcome.reason}; the numbers below are not "
                   "a reconstruction result", err=True)
    for line in headline_lines(result.evaluation, quiet=quiet):
        click.echo(line)
    if outcome.status == "ok" and (why := below_null_line(result)):
        click.echo(why)
    click.echo("  (every number, per training image and per run: result.json; figures: figures/)")
    logger = tracker(track, track_uri, track_experiment or "reconbench",
                     experiment_given=track_experiment)
    if logger is not None and (run_id := logger.log_result(out_dir, out_dir.name)):
        click.echo(f"tracked: MLflow run {run_id} in experiment {logger.experiment!r}")


def default_out_dir(recipe_key: str, spec: RunSpec, default_search_runs: int) -> Path:
    """runs/<attack>-<init>-<target>-s<seed>, and a hash of the configuration when any other option (--set,
    --init-set, --search, --search-set, --search-runs, --candidates, --dtype, --protocol-set) differs from the
    defaults: a run of another configuration gets its own folder instead of being refused by the default one's."""
    base = f"{spec.attack}-{spec.init}-{recipe_key}-s{spec.seed}"
    plain = RunSpec(attack=spec.attack, init=spec.init, seed=spec.seed, search_runs=default_search_runs,
                    device=spec.device, search=RUN_SEARCH)   # `run`'s own default strategy
    config = run_config(recipe_key, spec.to_dict())
    if config == run_config(recipe_key, plain.to_dict()):
        return Path("runs") / base
    return Path("runs") / f"{base}-{config_hash(config)[:8]}"


def headline_lines(evaluation: StoredEvaluation, *, quiet: bool = False) -> list[str]:
    """The calibrated headline next to the held-out null, then the other summary numbers with their null means;
    ``quiet`` (``-q``): LPIPS without its backbone (the same reason on every run) takes one short line pointing to
    result.json, else one short line with the reason in a few words, once per process; a number this run could not
    compute keeps its reason, which says what to change."""
    summary, null, head = evaluation.numbers, evaluation.held_out, evaluation.headline
    lines = []
    cal = evaluation.recorded_protocol.calibrated
    if head.reconstructed_calibrated is not None:
        spread = null.spread_of("reconstructed_calibrated") or Spread()
        mean, top = (float("nan") if v is None else v for v in (spread.mean, spread.max))
        lines.append(f"  reconstructed (calibrated headline): {head.reconstructed_calibrated} of "
                     f"{head.n_train}  | held-out null: mean {mean:.2g}, "
                     f"max {top:.0f} over {null.draws or 0} draws  "
                     f"({cal.score} > {summary['calibrated_threshold']:.3f}, the best any of "
                     f"{cal.calibration_draws} null draws reached)")
    elif null.available is False:
        lines.append(f"  no calibrated headline: {null.reason}")
    # the evaluation and each metric declare their numbers: which to print and which direction means more leakage
    shown = reported.console_keys()
    better = {rep.key: ("higher" if rep.higher_is_better else "lower") for rep in shown if rep.values != "count_unbounded"}
    lines.append("  (for each number: which direction means more leakage; 'null' is the same number for random held-out "
                 "images)")
    for key in (rep.key for rep in shown):
        if key in summary:
            value = summary[key]
            if quiet and key == "lpips_mean" and value == "unavailable":   # the same missing backbone on every run
                lines.append(f"  {key}: unavailable (see result.json)")
                continue
            text = f"{value:.4g}" if isinstance(value, float) else str(value)
            if value is None:
                text += f" ({unavailable_reason(evaluation, key)})"
            if key == "lpips_mean" and value == "unavailable":   # the same reason on every run: short, once
                lines.append(f"  {key}: unavailable ({_lpips_said(head.lpips_mean_unavailable_reason)})")
                continue
            spread_of_key = null.spread_of(key)
            if spread_of_key is not None and key not in ("n_train", "n_candidates"):
                text += f"  | null {spread_of_key.mean:.3g} (sd {spread_of_key.std:.2g})"
            click_key = "reconstructed (papers' protocol)" if key == "reconstructed" else key
            direction = f" [{better[key]} = more leakage]" if key in better else ""
            lines.append(f"  {click_key}{direction}: {text}")
    return lines


#: the short LPIPS reasons this process has printed (a reason is printed once; its whole text is in result.json)
_LPIPS_SAID: set[str] = set()


def _lpips_said(reason: str | None) -> str:
    """Why LPIPS is unavailable, in a few words the first time this process says it, then "as above"."""
    from reconbench.evaluation.lpips_metric import short_reason

    if not reason:
        return "see result.json for the reason"
    short = short_reason(reason)
    if short in _LPIPS_SAID:
        return "as above"
    _LPIPS_SAID.add(short)
    return short


def unavailable_reason(evaluation: StoredEvaluation, key: str) -> str:
    """Why a summary number is None: the reason the metric that reports it gave, else where to look."""
    for name, metric in (evaluation.metrics or {}).items():
        if key in (metric.summary or {}) and metric.reason:
            return f"unavailable: {' '.join(metric.reason.split())}"
        if key in (metric.summary or {}):
            return f"not computed by metric {name!r}; see result.json's evaluation.metrics.{name}.details"
    return "not computed; see result.json's evaluation.summary"


def note_null_steps(run: ResolvedRun) -> None:
    """Say so when the validated ``--set steps=0`` runs no attack step."""
    if "steps" in run.spec.attack_config and getattr(run.attack_config, "steps", None) == 0:  # a null baseline
        click.echo("note: --set steps=0 runs no attack step: the candidates are the initialisation (a null "
                   "baseline), not reconstructions", err=True)


#: the files `reconbench run` writes into a result folder (the only ones --replace removes)
RUN_OUTPUTS = ("result.json", "candidates.safetensors", RUN_CONFIG_FILE, "runs", "figures", "evaluations")


def run_config(recipe_key: str, spec: dict[str, Any]) -> dict[str, Any]:
    """What determines a run's numbers: the target and the spec (the device only changes where it runs)."""
    return {"card": recipe_key, "spec": {k: v for k, v in dict(spec).items() if k != "device"}}


def check_folder(out: Path, config: dict[str, Any], replace: bool) -> bool:
    """Refuse a folder holding a run of another configuration unless ``replace``; True when it holds such a run
    (to be replaced), False when it is empty or holds this configuration (to be resumed)."""
    old = _folder_config(out)
    if old is None or old[0] == config_hash(config):
        return False
    if not replace:
        raise ReconbenchError(f"{out} holds a run of another configuration ({_difference(old[1], config)}); pass "
                              "--replace to delete its files and run this one, or choose another --out")
    return True


@contextmanager
def claimed_folder(out: Path, config: dict[str, Any], replace: bool) -> Iterator[None]:
    """Record this run's configuration in ``out`` (after removing the files of another one, with ``replace``) while
    the attack runs. If the run fails before any search run finished, the record is removed again: a failed command
    leaves nothing that would block the corrected one."""
    if check_folder(out, config, replace):
        remove_run_files(out)
    record = out / RUN_CONFIG_FILE
    fresh = not record.exists()
    write_json(record, {"config_hash": config_hash(config), "config": config})
    try:
        yield
    except BaseException:
        if fresh and not (out / "result.json").exists() and not _finished_runs(out):
            record.unlink(missing_ok=True)
            runs = out / "runs"
            if runs.is_dir() and not any(runs.iterdir()):
                runs.rmdir()
        raise


#: inside RUN_OUTPUTS' folders, the files `reconbench run` writes (relative to the result folder), and the
#: temporary files of its atomic writes; anything else there is the user's, which --replace never deletes
RUN_FILE_PATTERNS = ("runs/run-*.json", "runs/run-*.safetensors", "figures/*.png", "evaluations/*/evaluation.json",
                     "evaluations/*/figures/*.png", "*/.*.tmp", "*/*/.*.tmp", "*/*/*/.*.tmp")


def run_files(out: Path) -> tuple[list[Path], list[Path]]:
    """(files reconbench wrote, files it did not) among RUN_OUTPUTS of the result folder ``out``."""
    ours: list[Path] = []
    foreign: list[Path] = []
    for name in RUN_OUTPUTS:
        p = out / name
        if p.is_symlink() or p.is_file():
            ours.append(p)
        elif p.is_dir():
            for f in sorted(p.rglob("*")):
                if f.is_dir() and not f.is_symlink():
                    continue
                rel = f.relative_to(out).as_posix()
                is_ours = not f.is_symlink() and any(fnmatch.fnmatchcase(rel, pat) and rel.count("/") == pat.count("/")
                                                     for pat in RUN_FILE_PATTERNS)
                (ours if is_ours else foreign).append(f)
    return ours, foreign


def remove_run_files(out: Path) -> None:
    """Delete the files of the run in ``out`` (``--replace``): only what reconbench wrote, and nothing at all when
    a file of the user's would be lost with them."""
    ours, foreign = run_files(out)
    if foreign:
        shown = ", ".join(f.relative_to(out).as_posix() for f in foreign[:3]) + (" ..." if len(foreign) > 3 else "")
        raise ReconbenchError(f"--replace would delete {len(foreign)} file(s) in {out} that reconbench did not write "
                              f"({shown}); move them out of the folder, or choose another --out")
    for f in ours:
        f.unlink(missing_ok=True)
    for name in RUN_OUTPUTS:  # the folders, emptied deepest first
        p = out / name
        if p.is_dir() and not p.is_symlink():
            for d in sorted((d for d in p.rglob("*") if d.is_dir()), key=lambda d: -len(d.parts)):
                d.rmdir()
            p.rmdir()


def _finished_runs(out: Path) -> bool:
    runs = out / "runs"
    return runs.is_dir() and any(runs.glob("run-*.json"))


def check_task(attack: Attack[Any], task: str, card: bool = False) -> None:
    """The attack handles the target's task: checked before the target is trained (``card``: the target is a model
    card given with --model, whose task no option changes)."""
    if task not in attack.tasks:
        able = [n for n in plugins.names("attacks") if task in plugins.attack(n).tasks]
        other = (f"a --model card of a {sorted(attack.tasks)[0]} target" if card else
                 f"--task {sorted(attack.tasks)[0]}")
        raise IncompatibleError(f"attack {attack.name!r} handles {', '.join(sorted(attack.tasks))} targets, but this "
                                f"target is {task}; pass {other}, or one of the attacks for {task} targets: "
                                f"{', '.join(able)}")


def check_no_recipe_options(recipe_opts: dict[str, Any]) -> None:
    """With --model the card is the target: a recipe option (which describes a target to train) would be ignored."""
    given = [f"--{name.replace('_', '-')}" for name, value in recipe_opts.items() if value not in (None, ())]
    given = ["--recipe" if g == "--recipe-file" else g for g in given]
    if given:
        raise ReconbenchError(f"{', '.join(given)} describe{'s' if len(given) == 1 else ''} a target to train, but "
                              "--model names a trained one, whose recipe is its card's: drop "
                              f"{'it' if len(given) == 1 else 'them'}, or drop --model to train that target")


def _folder_config(out: Path) -> tuple[str, dict[str, Any]] | None:
    """(hash, config) of the run already in ``out``, from its run-config.json or its result.json; None if empty."""
    for name in (RUN_CONFIG_FILE, "result.json"):
        path = out / name
        if not path.exists():
            continue
        try:
            data = json.loads(path.read_text())
            if name == RUN_CONFIG_FILE:
                config = data["config"]
                return str(data["config_hash"]), {"card": config["card"], "spec": dict(config["spec"])}
            config = run_config(data["target"]["recipe_key"], data["spec"])
            return config_hash(config), config
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ReconbenchError(f"{path} is unreadable ({type(exc).__name__}: {exc}); pass --replace to delete the "
                                  "folder's run files, or choose another --out") from None
    if (out / "runs").is_dir() and any((out / "runs").iterdir()):
        return "unknown", {}
    return None


def _difference(old: dict[str, Any], new: dict[str, Any]) -> str:
    if not old:
        return "search runs of an unrecorded configuration"
    diffs = []
    if old["card"] != new["card"]:   # both built by run_config: a card and a spec
        diffs.append(f"target {old['card']} vs {new['card']}")
    o, n = old["spec"], new["spec"]
    for k in sorted(set(o) | set(n)):
        a, b = o.get(k), n.get(k)   # specs written by different versions: a key one of them lacks reads as None
        if a != b:
            diffs.append(f"{k} {a!r} vs {b!r}")
    return "; ".join(diffs[:3]) or "a different configuration"
