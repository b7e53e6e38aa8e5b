"""Benchmark suite files: a TOML grid of target recipes x attacks x init regimes x seeds, plus comparisons.

A suite file (``reconbench/bench/suites/<name>.toml``) has these tables (``reconbench/bench/suites/README.md`` shows a
commented example)::

    [suite]          name, description, seeds, device, dtype, search_runs (search budget), search (strategy,
                     default random) and search_config (its options), candidates (m; default 2n), seed_targets
                     (each seed also retrains the targets with weight-init seed + seed and, for shuffled-order
                     problems, order_seed + seed: a new draw of the training images), seed_nulls (each seed
                     also seeds the held-out null draws with null_seed + seed), max_learned_ratio /
                     max_stationarity_ratio (regime gates, flagged)
    [protocol]       evaluation protocol options, passed as they are to ``reconbench.evaluation.evaluate``
    [leaderboard]    store_candidates, figures, sample_images, candidates_max_bytes, figure_pairs, columns (the
                     tables' metric columns)
    [targets.NAME]   a target recipe: dataset, task, n_per_class, num_classes, binary_rule, family, widths,
                     model, loss, lr, steps, weight_decay, schedule, dtype, seed (weight init), problem_seed
    [attacks.LABEL]  attack (registered name; default LABEL), config (fixed options), search_runs, search,
                     search_config, candidates, dtype (the attack's precision for its cells, over the suite's
                     and --dtype: a float64 A/B copy of a float32 attack, say)
    [inits.LABEL]    regime (registered name; default LABEL), config
    [[grid]]         targets, attacks, inits (default: all), seeds (default: the suite's): their product runs
    [comparisons.N]  title, target, axis, values (shorthand for target.<axis> = value) or variants (tables
                     of target overrides), attacks, inits, seeds: a metric against the varied target field
    [defenses.LABEL] defense (registered name; default LABEL), config, strength (the option varied; default the
                     defense's own), values (its strengths)
    [privacy.N]      title, targets, defenses (default: all), attacks, inits, seeds: every target undefended and
                     under each defense at each strength (the privacy-utility leaderboard)

Unknown keys and wrong types are rejected with the key's name and its line in the file (the schema:
:mod:`reconbench.bench.suite.schema`). This module reads a file into a :class:`Suite`; the tables of targets,
comparisons, the privacy axis and the leaderboard are read by the modules named for them.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomllib

from reconbench.attack.search import resolve_search
from reconbench.bench.suite.columns import LeaderboardOptions, leaderboard_options, read_leaderboard_table
from reconbench.bench.suite.comparisons import read_comparisons
from reconbench.bench.suite.entries import AttackEntry, Comparison, GridBlock, InitEntry, TargetEntry
from reconbench.bench.suite.files import SuiteError, find_suite, read_suite_text
from reconbench.bench.suite.privacy import PrivacyAxis, privacy_axes
from reconbench.bench.suite.schema import (
    ATTACK_TABLE,
    GRID_TABLE,
    INIT_TABLE,
    SUITE_TABLE,
    AttackTable,
    Checker,
    GridTable,
    InitTable,
    SuiteHead,
    SuiteTables,
    check_plugin_config,
)
from reconbench.bench.suite.targets import read_targets
from reconbench.config import MAX_SEED
from reconbench.errors import ReconbenchError, UnknownNameError


@dataclass(frozen=True)
class Suite:
    name: str
    path: Path
    text_sha256: str
    description: str
    seeds: tuple[int, ...]
    device: str
    dtype: str
    search_runs: int
    candidates: int | None
    protocol: dict[str, Any]
    targets: dict[str, TargetEntry]
    attacks: dict[str, AttackEntry]
    inits: dict[str, InitEntry]
    grid: tuple[GridBlock, ...]
    comparisons: tuple[Comparison, ...]
    leaderboard: LeaderboardOptions = field(default_factory=LeaderboardOptions)
    warnings: tuple[str, ...] = ()
    seed_targets: bool = False                  # each seed also retrains the targets (weight-init seed + seed)
    seed_nulls: bool = False                    # each seed also moves the held-out null's seed (null_seed + seed)
    max_stationarity_ratio: float | None = None  # convergence gate: targets above it are flagged in the tables
    max_learned_ratio: float | None = None  # regime gate on the learned part θ - d·θ0 (docs/regime.md), flagged likewise
    privacy: tuple[PrivacyAxis, ...] = ()


def flatten(table: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``ssim = { window_size = 5 }`` (or ``ssim.window_size = 5``) -> ``{"ssim.window_size": 5}``, the dotted
    form the evaluation protocol and ``--protocol-set`` use."""
    out: dict[str, Any] = {}
    for k, v in table.items():
        if isinstance(v, dict):
            out.update(flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def check_protocol(protocol: dict[str, Any], chk: Checker) -> Mapping[str, object] | None:
    """Let the evaluation protocol reject unknown options and bad values now, not after hours of attacks; the metric
    configs it resolves (which name the columns whose labels show a metric's option), None for the defaults."""
    from reconbench import evaluation

    resolve = evaluation.resolve_protocol
    if not protocol:
        return None
    if "calibration_draws" in protocol and protocol["calibration_draws"] == 0:
        raise chk.fail(("protocol", "calibration_draws"), "is 0, which leaves a board without its calibrated headline "
                       "(every cell would show None); use at least 1 draw (the default is 19)")
    try:
        resolved = resolve(protocol, "mlp")
    except ReconbenchError as exc:
        key = next((k for k in protocol if k in str(exc)), None)
        raise chk.fail(("protocol", *key.split(".")) if key else ("protocol",), str(exc)) from None
    configs = getattr(resolved, "metric_configs", None)
    return configs if isinstance(configs, Mapping) else None


def load_suite(name_or_path: str | Path, *, strict: bool = False) -> Suite:
    """Read and validate a suite file. ``strict``: unregistered attacks / inits are errors, not warnings."""
    path = find_suite(str(name_or_path))
    text = read_suite_text(path)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SuiteError(f"{path}: not valid TOML: {exc}") from None
    chk = Checker(path, text)
    warnings: list[str] = []
    tables = SuiteTables.read(data, chk)
    head = read_head(tables, chk)
    seeds = tuple(head.seeds)
    protocol = flatten(chk.table(tables.protocol, ("protocol",)))
    metric_configs = check_protocol(protocol, chk)
    lb = read_leaderboard_table(tables, chk)
    leaderboard = leaderboard_options(lb, chk, metric_configs)
    targets = read_targets(tables, chk)
    attacks = read_attacks(tables, chk, head, strict, warnings)
    inits = read_inits(tables, chk, strict, warnings)
    if lb.figure_inits is not None:
        eligible = chk.refs(lb.figure_inits, inits, "init", ("leaderboard", "figure_inits"))
        leaderboard = dataclasses.replace(leaderboard, figure_inits=eligible)
    grid = read_grid(tables, chk, targets, attacks, inits, seeds)
    comparisons = read_comparisons(tables, chk, targets, attacks, inits, seeds)
    privacy = privacy_axes(tables, chk, targets, attacks, inits, seeds, strict, warnings)
    if head.seed_targets:
        check_target_seeds(targets, grid, comparisons, privacy, chk)
    if not grid and not comparisons and not privacy:
        raise chk.fail(("grid",), "the suite runs nothing: add [[grid]] blocks or [comparisons.NAME] tables")
    return Suite(
        name=chk.name(path.stem if head.name is None else head.name, ("suite", "name")),
        path=path,
        text_sha256=hashlib.sha256(text.encode()).hexdigest(),
        description=head.description,
        seeds=seeds,
        device=head.device,
        dtype=head.dtype,
        search_runs=head.search_runs,
        candidates=head.candidates,
        protocol=protocol,
        targets=targets,
        attacks=attacks,
        inits=inits,
        grid=grid,
        comparisons=comparisons,
        leaderboard=leaderboard,
        warnings=tuple(warnings),
        privacy=privacy,
        seed_targets=head.seed_targets,
        seed_nulls=head.seed_nulls,
        max_stationarity_ratio=head.max_stationarity_ratio,
        max_learned_ratio=head.max_learned_ratio,
    )


def check_target_seeds(targets: dict[str, TargetEntry], grid: tuple[GridBlock, ...], comparisons: tuple[Comparison, ...],
                        privacy: tuple[PrivacyAxis, ...], chk: Checker) -> None:
    """With seed_targets, a cell trains with weight-init seed + its seed: that sum must be a seed too."""
    groups: list[GridBlock | Comparison | PrivacyAxis] = [*grid, *comparisons, *privacy]
    top = max((s for group in groups for s in group.seeds), default=0)
    for name, entry in targets.items():
        if entry.recipe.train.seed + top > MAX_SEED:
            raise chk.fail(("targets", name.split("@")[0], "seed"),
                           f"seed {entry.recipe.train.seed} plus the largest suite seed {top} (seed_targets = true) "
                           f"exceeds {MAX_SEED:,}; lower the target's seed")


def read_head(tables: SuiteTables, chk: Checker) -> SuiteHead:
    """The [suite] table, typed and range-checked."""
    head = chk.section(tables.suite, SUITE_TABLE, ("suite",))   # bounds: declared in SUITE_TABLE
    if "seeds" in head:
        chk.seeds(head["seeds"], ("suite", "seeds"))
    return SuiteHead(**head)


def read_attacks(tables: SuiteTables, chk: Checker, head: SuiteHead, strict: bool,
                  warnings: list[str]) -> dict[str, AttackEntry]:
    attacks: dict[str, AttackEntry] = {}
    for label, table in chk.table(tables.attacks, ("attacks",)).items():
        keys = ("attacks", label)
        chk.name(label, keys)
        t = AttackTable(**chk.section(table, ATTACK_TABLE, keys))
        runs = head.search_runs if t.search_runs is None else t.search_runs   # both bounded by their tables
        search_keys = keys if t.search is not None or t.search_config is not None else ("suite",)
        search = head.search if t.search is None else t.search
        search_config = dict(head.search_config if t.search_config is None else t.search_config)
        _check_search(search, search_config, chk, search_keys)
        entry = AttackEntry(label, label if t.attack is None else t.attack, dict(t.config), runs,
                            head.candidates if t.candidates is None else t.candidates, search, search_config,
                            t.dtype)
        check_plugin_config("attacks", entry.attack, entry.config, chk, keys, strict, warnings)
        attacks[label] = entry
    if not attacks:
        raise chk.fail(("attacks",), "the suite defines no attacks; add an [attacks.NAME] table")
    return attacks


def _check_search(name: str, config: dict[str, Any], chk: Checker, keys: tuple[Any, ...]) -> None:
    """A registered search strategy with valid options (one line naming the key otherwise); whether its optional
    dependency is installed is checked where cells run (rendering a board does not need it)."""
    try:
        resolve_search(name, config)
    except UnknownNameError as exc:
        raise chk.fail((*keys, "search"), str(exc)) from None
    except ReconbenchError as exc:
        raise chk.fail((*keys, "search_config"), str(exc)) from None


def read_inits(tables: SuiteTables, chk: Checker, strict: bool, warnings: list[str]) -> dict[str, InitEntry]:
    inits: dict[str, InitEntry] = {}
    for label, table in chk.table(tables.inits, ("inits",)).items():
        keys = ("inits", label)
        chk.name(label, keys)
        t = InitTable(**chk.section(table, INIT_TABLE, keys))
        entry = InitEntry(label, label if t.regime is None else t.regime, dict(t.config))
        check_plugin_config("inits", entry.regime, entry.config, chk, keys, strict, warnings)
        inits[label] = entry
    return inits


def read_grid(tables: SuiteTables, chk: Checker, targets: dict[str, TargetEntry],
               attacks: dict[str, AttackEntry], inits: dict[str, InitEntry],
               seeds: tuple[int, ...]) -> tuple[GridBlock, ...]:
    grid: list[GridBlock] = []
    raw_grid = tables.grid
    if not isinstance(raw_grid, list):
        raise chk.fail(("grid",), "write the grid as [[grid]] blocks (an array of tables)")
    for i, block in enumerate(raw_grid):
        keys: tuple[Any, ...] = ("grid", i)
        t = GridTable(**chk.section(block, GRID_TABLE, keys))
        grid.append(
            GridBlock(
                targets=chk.refs(t.targets, targets, "target", (*keys, "targets")),
                attacks=chk.refs(t.attacks, attacks, "attack", (*keys, "attacks")),
                inits=chk.refs(t.inits, inits, "init", (*keys, "inits")),
                seeds=seeds if t.seeds is None else chk.seeds(t.seeds, (*keys, "seeds")),
            )
        )
    return tuple(grid)
