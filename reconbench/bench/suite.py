"""Benchmark suite files: a TOML grid of target recipes x attacks x init regimes x seeds, plus comparisons.

A suite file (``reconbench/bench/suites/<name>.toml``) has these tables (``reconbench/bench/suites/README.md`` shows a
commented example)::

    [suite]          name, description, seeds, device, dtype, search_runs (search budget),
                     candidates (m; default 2n), seed_targets (each seed also retrains the targets with
                     weight-init seed + seed and, for shuffled-order problems, order_seed + seed: a new draw of
                     the training images), seed_nulls (each seed also seeds the held-out null draws with
                     null_seed + seed), max_learned_ratio / max_stationarity_ratio (regime gates, flagged)
    [protocol]       evaluation protocol options, passed as they are to ``reconbench.evaluation.evaluate``
    [leaderboard]    store_candidates, figures, sample_images, columns (the tables' metric columns)
    [targets.NAME]   a target recipe: dataset, task, n_per_class, num_classes, binary_rule, family, widths,
                     model, loss, lr, steps, weight_decay, schedule, dtype, seed (weight init), problem_seed
    [attacks.LABEL]  attack (registered name; default LABEL), config (fixed options), search_runs, candidates
    [inits.LABEL]    regime (registered name; default LABEL), config
    [[grid]]         targets, attacks, inits (default: all), seeds (default: the suite's): their product runs
    [comparisons.N]  title, target, axis, values (shorthand for target.<axis> = value) or variants (tables
                     of target overrides), attacks, inits, seeds: a metric against the varied target field
    [defenses.LABEL] defense (registered name; default LABEL), config, strength (the option varied; default the
                     defense's own), values (its strengths)
    [privacy.N]      title, targets, defenses (default: all), attacks, inits, seeds: every target undefended and
                     under each defense at each strength (the privacy-utility leaderboard)

Unknown keys and wrong types are rejected with the key's name and its line in the file.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import re
import typing
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

import tomllib

from reconbench import plugins
from reconbench.bench.toml_lines import KeyLines
from reconbench.config import MAX_SEED, _coerce, build_config
from reconbench.errors import ReconbenchError, UnknownNameError
from reconbench.targets.problems import RECORDED_WITHOUT_ORDER, ProblemSpec
from reconbench.targets.training import TargetRecipe, TrainSpec

#: the suites shipped with the package (``reconbench bench ci`` works from any folder, installed or not)
SHIPPED_SUITES = Path(__file__).resolve().parent / "suites"
#: a project's own suites, looked up first, relative to the working folder
LOCAL_SUITES = Path("suites")
NAME_RE = re.compile(r"^[A-Za-z0-9_.+-]+$")


class SuiteError(ReconbenchError):
    """A suite file that cannot be used: the message names the file, the line and the key."""


# -- where suites live ----------------------------------------------------------------------------------
def suite_search_path() -> list[Path]:
    """Folders searched for ``NAME.toml``: ./suites (a project's own), then the suites shipped with reconbench."""
    here = Path.cwd() / LOCAL_SUITES
    return [SHIPPED_SUITES] if here.resolve() == SHIPPED_SUITES else [here, SHIPPED_SUITES]


def find_suite(name_or_path: str) -> Path:
    p = Path(name_or_path)
    if p.suffix == ".toml" or p.exists():
        if not p.is_file():
            raise SuiteError(f"suite file {p} does not exist")
        return p
    for folder in suite_search_path():
        cand = folder / f"{name_or_path}.toml"
        if cand.is_file():
            return cand
    known = sorted({f.stem for d in suite_search_path() if d.is_dir() for f in d.glob("*.toml")})
    close = difflib.get_close_matches(name_or_path, known, n=3, cutoff=0.5)
    hint = f" Did you mean: {', '.join(close)}?" if close else ""
    raise SuiteError(
        f"no suite named {name_or_path!r}.{hint} Known suites: {', '.join(known) or '(none)'} "
        f"(in {', '.join(str(d) for d in suite_search_path())}); or pass a path to a .toml file."
    )


def display_path(path: Path) -> str:
    """A suite path for people: relative to the working folder or the source checkout when inside one."""
    resolved = path.resolve()
    for base in (Path.cwd(), Path(__file__).resolve().parents[2]):
        try:
            return str(resolved.relative_to(base.resolve()))
        except ValueError:
            continue
    return str(path)


# -- the parsed suite ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TargetEntry:
    name: str
    recipe: TargetRecipe
    table: dict[str, Any]  # the flat table as written (comparisons override its keys)


@dataclass(frozen=True)
class AttackEntry:
    label: str
    attack: str
    config: dict[str, Any]
    search_runs: int
    candidates: int | None


@dataclass(frozen=True)
class InitEntry:
    label: str
    regime: str
    config: dict[str, Any]


@dataclass(frozen=True)
class GridBlock:
    targets: tuple[str, ...]
    attacks: tuple[str, ...]
    inits: tuple[str, ...]
    seeds: tuple[int, ...]


@dataclass(frozen=True)
class Variant:
    value: Any  # the axis value shown in the table
    overrides: dict[str, Any]
    target: str  # the (possibly derived) target name


@dataclass(frozen=True)
class Comparison:
    name: str
    title: str
    axis: str
    base: str
    variants: tuple[Variant, ...]
    attacks: tuple[str, ...]
    inits: tuple[str, ...]
    seeds: tuple[int, ...]


@dataclass(frozen=True)
class ColumnSpec:
    """One metric column of the leaderboard tables."""

    name: str
    keys: tuple[str, ...]  # evaluation summary keys tried in order (the first present is used)
    higher_is_better: bool
    fmt: str = ".3g"
    source: str = "summary"  # summary | attack_loss | wall_seconds | calibrated (the count against the selection's bar)
    optional: bool = False  # shown only when some cell records one of the keys (a metric older cells lack)


def default_columns() -> tuple[ColumnSpec, ...]:
    """The default columns: the numbers the evaluation and the registered metrics declare as board columns
    (:mod:`reconbench.evaluation.reported`; the calibrated headline first, then the papers' count, top-10 SSIM,
    membership precision, the membership test's AUC where cells computed it, distinct share, init copies), then the
    attack's final loss and the cell's wall time. A metric plugin that declares a column appears here with no
    other change; keys are tried in order (the declared key, then its older names)."""
    from reconbench.evaluation.reported import board_columns

    cols = [ColumnSpec(r.label, (r.key, *r.aliases), r.higher_is_better, r.fmt, optional=r.optional_column)
            for r in board_columns()]
    # the calibrated count against the threshold calibrated for the selection itself (evaluation/bars.py: pooled,
    # one run, or oracle-selected among the runs), where cells record calibration bars
    cols.insert(1, ColumnSpec("calibrated, own bar", (), True, ".1f", source="calibrated", optional=True))
    return (*cols, ColumnSpec("attack loss", (), False, ".3g", source="attack_loss"),
            ColumnSpec("wall s", (), False, ".1f", source="wall_seconds"))


@dataclass(frozen=True)
class LeaderboardOptions:
    store_candidates: int | None = None  # None: every cell's candidates are published; k: a sample of k cells
    sample_cells: tuple[str, ...] = ()  # cells whose candidates a published board always keeps (leaderboard/slim.py)
    figures: bool = True
    sample_images: int = 8
    figure_inits: tuple[str, ...] | None = None  # init labels eligible for the sample figure (None: non-oracle)
    columns: tuple[ColumnSpec, ...] = field(default_factory=default_columns)


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


# -- validation ------------------------------------------------------------------------------------------
class _Checker:
    def __init__(self, path: Path, text: str) -> None:
        self.path = path
        self.lines = KeyLines(text)

    def where(self, keys: tuple[Any, ...]) -> str:
        line = self.lines.line(keys)
        where = display_path(self.path)
        return f"{where}:{line}" if line else where

    @staticmethod
    def dotted(keys: tuple[Any, ...]) -> str:
        out = ""
        for k in keys:
            out += f"[{k}]" if isinstance(k, int) else (f".{k}" if out else str(k))
        return out

    def fail(self, keys: tuple[Any, ...], message: str) -> SuiteError:
        return SuiteError(f"{self.where(keys)}: {self.dotted(keys)}: {message}")

    def table(self, value: Any, keys: tuple[Any, ...]) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(keys, f"expected a table, got {type(value).__name__} {value!r}")
        return value

    def known(self, table: dict[str, Any], allowed: typing.Iterable[str], keys: tuple[Any, ...]) -> None:
        allowed = list(allowed)
        for k in table:
            if k not in allowed:
                close = difflib.get_close_matches(k, allowed, n=3, cutoff=0.5)
                hint = f" Did you mean: {', '.join(close)}?" if close else ""
                raise self.fail((*keys, k), f"unknown key {k!r}.{hint} Known keys here: {', '.join(sorted(allowed))}")

    def typed(self, value: Any, annotation: Any, keys: tuple[Any, ...]) -> Any:
        try:
            return _coerce(value, annotation, self.dotted(keys))
        except ReconbenchError as exc:
            msg, here = str(exc), self.dotted(keys)
            if msg.startswith(here):  # "a.b: expected ..." or "a.b[1]: expected ..."
                msg = msg[len(here) :].removeprefix(": ")
                msg = f"element {msg}" if msg.startswith("[") else msg
            raise self.fail(keys, msg) from None

    def seeds(self, value: Any, keys: tuple[Any, ...]) -> tuple[int, ...]:
        """A list of seeds, each in the range the command line accepts for --seed."""
        items = self.typed(value, list[int], keys)
        for i, seed in enumerate(items):
            if not 0 <= seed <= MAX_SEED:
                raise self.fail((*keys, i), f"seed {seed} is out of range; seeds are whole numbers from 0 to {MAX_SEED:,}")
        return tuple(items)

    def counts(self, value: int | None, keys: tuple[Any, ...]) -> None:
        """A number of candidates: at least 1, as --candidates (absent: 2n)."""
        if value is not None and value < 1:
            raise self.fail(keys, f"must be at least 1, got {value} (leave it out for the default 2n)")

    def name(self, value: str, keys: tuple[Any, ...]) -> str:
        if not NAME_RE.match(value) or set(value) == {"."}:  # "." and ".." would name a folder outside the results
            raise self.fail(keys, f"name {value!r} may use only letters, digits and _ . + - and not be . or .. "
                                  "(it names files)")
        return value

    def refs(self, value: Any, known: dict[str, Any], what: str, keys: tuple[Any, ...]) -> tuple[str, ...]:
        """A list of names of ``what`` (or "*" for all of them), each checked against ``known``."""
        if value == "*":
            return tuple(known)
        items = self.typed(value, list[str], keys)
        if not items:
            raise self.fail(keys, f'lists no {what}s; name at least one (or "*" for all)')
        for i, item in enumerate(items):
            if item not in known:
                close = difflib.get_close_matches(item, list(known), n=3, cutoff=0.5)
                hint = f" Did you mean: {', '.join(close)}?" if close else ""
                raise self.fail(
                    (*keys, i),
                    f"no {what} {item!r} in this suite.{hint} Defined: {', '.join(known) or '(none)'}",
                )
        return tuple(items)


SUITE_KEYS: dict[str, Any] = {
    "name": str,
    "description": str,
    "seeds": list[int],
    "device": str,
    "dtype": typing.Literal["float64", "float32"],
    "search_runs": int,
    "candidates": int | None,
    "seed_targets": bool,
    "seed_nulls": bool,
    "max_stationarity_ratio": float | None,
    "max_learned_ratio": float | None,
}
LEADERBOARD_KEYS: dict[str, Any] = {
    "store_candidates": str | int,
    "sample_cells": list[str],
    "figures": bool,
    "sample_images": int,
    "figure_inits": list[str],
    "columns": list[dict[str, Any]],
}
COLUMN_KEYS: dict[str, Any] = {
    "name": str,
    "keys": list[str],
    "key": str,
    "higher_is_better": bool,
    "format": str,
    "source": typing.Literal["summary", "attack_loss", "wall_seconds"],
}
ATTACK_KEYS: dict[str, Any] = {
    "attack": str,
    "config": dict[str, Any],
    "search_runs": int,
    "candidates": int | None,
    "description": str,
}
INIT_KEYS: dict[str, Any] = {"regime": str, "config": dict[str, Any], "description": str}
GRID_KEYS: dict[str, Any] = {"targets": Any, "attacks": Any, "inits": Any, "seeds": list[int]}
COMPARISON_KEYS: dict[str, Any] = {
    "title": str,
    "target": str,
    "axis": str,
    "values": list[Any],
    "variants": list[dict[str, Any]],
    "attacks": Any,
    "inits": Any,
    "seeds": list[int],
}
TOP_KEYS = ("suite", "protocol", "leaderboard", "targets", "attacks", "inits", "grid", "comparisons", "defenses", "privacy")


def _target_keys() -> dict[str, tuple[str, str, Any]]:
    """Flat target key -> (section, field, annotation). ``seed`` is the weight-init seed; ``problem_seed`` the
    multiclass permutation seed."""
    out: dict[str, tuple[str, str, Any]] = {}
    for f, ann in typing.get_type_hints(ProblemSpec).items():
        out["problem_seed" if f == "seed" else f] = ("problem", f, ann)
    for f, ann in typing.get_type_hints(TrainSpec).items():
        out[f] = ("train", f, ann)
    out["family"] = ("recipe", "family", str)
    out["widths"] = ("model", "widths", list[int])
    out["model"] = ("model", "*", dict[str, Any])
    out["description"] = ("meta", "description", str)
    out["defense"] = ("recipe", "defense", str)
    out["defense_config"] = ("recipe", "defense_config", dict[str, Any])
    return out


TARGET_KEYS = _target_keys()


def recipe_from_table(table: dict[str, Any], chk: _Checker, keys: tuple[Any, ...]) -> TargetRecipe:
    chk.known(table, TARGET_KEYS, keys)
    d: dict[str, Any] = {"problem": {}, "model": {}, "train": {}, "family": "mlp"}
    for k, v in table.items():
        section, name, ann = TARGET_KEYS[k]
        v = chk.typed(v, ann, (*keys, k))
        if isinstance(v, str) and not v.strip() and section != "meta":  # "" would silently mean the default
            raise chk.fail((*keys, k), "is empty; give a value, or leave the key out for its default")
        if section == "meta":
            continue
        if section == "recipe":
            d[name] = v
        elif name == "*":
            d["model"].update(v)
        else:
            d[section][name] = v
    if "order" not in d["problem"]:  # suite files written before `order` existed describe file-order targets
        if "order_seed" in d["problem"]:
            raise chk.fail((*keys, "order_seed"), "order_seed needs order = \"shuffled\" (a target that names no "
                                                  "order walks the data set in file order)")
        d["problem"].update(RECORDED_WITHOUT_ORDER)
    try:
        plugins.get("models", d["family"])
    except UnknownNameError as exc:
        raise chk.fail((*keys, "family"), str(exc)) from None
    if "widths" in d["model"] and "widths" in table.get("model", {}):
        raise chk.fail((*keys, "model", "widths"), "widths is given twice (as `widths` and in `model`); keep one")
    if "dataset" in table:
        _check_dataset_path(table["dataset"], chk, (*keys, "dataset"))
    try:
        return TargetRecipe.from_dict(d).validate()  # the checks the command line makes, before any cell runs
    except ReconbenchError as exc:
        raise chk.fail(keys, str(exc)) from None


def _check_dataset_path(ref: str, chk: _Checker, keys: tuple[Any, ...]) -> None:
    """A suite names npz files inside the data folder: relative, without `..` (a shared suite file must not read
    files elsewhere on the machine that runs it)."""
    name, _, arg = ref.partition(":")
    if name != "npz" or not arg:
        return
    parts = PurePosixPath(arg.replace("\\", "/"))
    if parts.is_absolute() or arg.startswith("~") or ".." in parts.parts or PureWindowsPath(arg).drive:
        raise chk.fail(keys, f"{ref!r} leaves the data folder; a suite names an npz file by its path inside the data "
                             "folder (--data-root / $RECONBENCH_DATA), without `..` or an absolute path: move the file "
                             "into the data folder")


def _check_plugin_config(
    kind: str,
    name: str,
    config: dict[str, Any],
    chk: _Checker,
    keys: tuple[Any, ...],
    strict: bool,
    warnings: list[str],
) -> None:
    """Check a registered plugin's config keys and types; warn about an unregistered one (strict: fail)."""
    try:
        obj = plugins.get(kind, name)
    except UnknownNameError as exc:
        if strict:
            raise chk.fail(keys, str(exc)) from None
        warnings.append(f"{chk.where(keys)}: {exc} Its cells will be reported as failed.")
        return
    cls = obj.config_cls
    if not isinstance(cls, type) or not dataclasses.is_dataclass(cls):
        return
    for k, v in config.items():
        try:
            build_config(cls, {k: v}, f"{kind[:-1]} {name}")
        except ReconbenchError as exc:
            raise chk.fail((*keys, "config", k), str(exc)) from None


def _flatten(table: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``ssim = { window_size = 5 }`` (or ``ssim.window_size = 5``) -> ``{"ssim.window_size": 5}``, the dotted
    form the evaluation protocol and ``--protocol-set`` use."""
    out: dict[str, Any] = {}
    for k, v in table.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _check_protocol(protocol: dict[str, Any], chk: _Checker) -> None:
    """Let the evaluation protocol reject unknown options and bad values now, not after hours of attacks."""
    from reconbench import evaluation

    resolve = evaluation.resolve_protocol
    if not protocol:
        return
    try:
        resolve(protocol, "mlp")
    except ReconbenchError as exc:
        key = next((k for k in protocol if k in str(exc)), None)
        raise chk.fail(("protocol", *key.split(".")) if key else ("protocol",), str(exc)) from None


def _columns(raw: list[dict], chk: _Checker, keys: tuple[Any, ...]) -> tuple[ColumnSpec, ...]:
    cols = []
    for i, c in enumerate(raw):
        ck = (*keys, i)
        chk.known(c, COLUMN_KEYS, ck)
        for k, v in c.items():
            chk.typed(v, COLUMN_KEYS[k], (*ck, k))
        if "name" not in c or "higher_is_better" not in c:
            raise chk.fail(ck, "a column needs `name` and `higher_is_better`")
        source = c.get("source", "summary")
        col_keys = tuple(c.get("keys", [])) + ((c["key"],) if "key" in c else ())
        if source == "summary" and not col_keys:
            raise chk.fail(ck, "a summary column needs `key` (or `keys`): the evaluation summary key it shows")
        cols.append(ColumnSpec(c["name"], col_keys, c["higher_is_better"], c.get("format", ".3g"), source))
    return tuple(cols)


def read_suite_text(path: Path) -> str:
    """The suite file's text; a file that is not UTF-8 text (a binary, say) is refused with its first bad byte."""
    raw = path.read_bytes()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SuiteError(f"{display_path(path)} is not a text file (byte {raw[exc.start]:#04x} at offset {exc.start} is "
                         "not UTF-8); a suite is a TOML file like reconbench/bench/suites/ci.toml") from None


def load_suite(name_or_path: str | Path, *, strict: bool = False) -> Suite:
    """Read and validate a suite file. ``strict``: unregistered attacks / inits are errors, not warnings."""
    path = find_suite(str(name_or_path))
    text = read_suite_text(path)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SuiteError(f"{path}: not valid TOML: {exc}") from None
    chk = _Checker(path, text)
    warnings: list[str] = []
    chk.known(data, TOP_KEYS, ())
    head = _read_head(data, chk)
    seeds = tuple(head.get("seeds", [0]))
    protocol = _flatten(chk.table(data.get("protocol", {}), ("protocol",)))
    _check_protocol(protocol, chk)
    lb = _read_leaderboard_table(data, chk)
    leaderboard = _leaderboard_options(lb, chk)
    targets = _read_targets(data, chk)
    attacks = _read_attacks(data, chk, head, strict, warnings)
    inits = _read_inits(data, chk, strict, warnings)
    if "figure_inits" in lb:
        eligible = chk.refs(lb["figure_inits"], inits, "init", ("leaderboard", "figure_inits"))
        leaderboard = dataclasses.replace(leaderboard, figure_inits=eligible)
    grid = _read_grid(data, chk, targets, attacks, inits, seeds)
    comparisons = _read_comparisons(data, chk, targets, attacks, inits, seeds)
    privacy = privacy_axes(data, chk, targets, attacks, inits, seeds, strict, warnings)
    if head.get("seed_targets", False):
        _check_target_seeds(targets, grid, comparisons, privacy, chk)
    if not grid and not comparisons and not privacy:
        raise chk.fail(("grid",), "the suite runs nothing: add [[grid]] blocks or [comparisons.NAME] tables")
    return Suite(
        name=chk.name(head.get("name", path.stem), ("suite", "name")),
        path=path,
        text_sha256=hashlib.sha256(text.encode()).hexdigest(),
        description=head.get("description", ""),
        seeds=seeds,
        device=head.get("device", "cpu"),
        dtype=head.get("dtype", "float64"),
        search_runs=head.get("search_runs", 1),
        candidates=head.get("candidates"),
        protocol=protocol,
        targets=targets,
        attacks=attacks,
        inits=inits,
        grid=grid,
        comparisons=comparisons,
        leaderboard=leaderboard,
        warnings=tuple(warnings),
        privacy=privacy,
        seed_targets=head.get("seed_targets", False),
        seed_nulls=head.get("seed_nulls", False),
        max_stationarity_ratio=head.get("max_stationarity_ratio"),
        max_learned_ratio=head.get("max_learned_ratio"),
    )


def _check_target_seeds(targets: dict[str, TargetEntry], grid: tuple[GridBlock, ...], comparisons: tuple[Comparison, ...],
                        privacy: tuple[PrivacyAxis, ...], chk: _Checker) -> None:
    """With seed_targets, a cell trains with weight-init seed + its seed: that sum must be a seed too."""
    groups: list[GridBlock | Comparison | PrivacyAxis] = [*grid, *comparisons, *privacy]
    top = max((s for group in groups for s in group.seeds), default=0)
    for name, entry in targets.items():
        if entry.recipe.train.seed + top > MAX_SEED:
            raise chk.fail(("targets", name.split("@")[0], "seed"),
                           f"seed {entry.recipe.train.seed} plus the largest suite seed {top} (seed_targets = true) "
                           f"exceeds {MAX_SEED:,}; lower the target's seed")


def _read_head(data: dict[str, Any], chk: _Checker) -> dict[str, Any]:
    """The [suite] table, typed and range-checked."""
    head = chk.table(data.get("suite", {}), ("suite",))
    chk.known(head, SUITE_KEYS, ("suite",))
    head = {k: chk.typed(v, SUITE_KEYS[k], ("suite", k)) for k, v in head.items()}
    if head.get("search_runs", 1) < 1:
        raise chk.fail(("suite", "search_runs"), f"must be at least 1, got {head['search_runs']}")
    chk.counts(head.get("candidates"), ("suite", "candidates"))
    if "seeds" in head:
        chk.seeds(head["seeds"], ("suite", "seeds"))
    for key in ("max_stationarity_ratio", "max_learned_ratio"):
        gate = head.get(key)
        if gate is not None and not gate > 0:
            raise chk.fail(("suite", key), f"must be positive, got {gate}")
    return head


def _read_leaderboard_table(data: dict[str, Any], chk: _Checker) -> dict[str, Any]:
    lb_raw = chk.table(data.get("leaderboard", {}), ("leaderboard",))
    chk.known(lb_raw, LEADERBOARD_KEYS, ("leaderboard",))
    return {k: chk.typed(v, LEADERBOARD_KEYS[k], ("leaderboard", k)) for k, v in lb_raw.items()}


def _leaderboard_options(lb: dict[str, Any], chk: _Checker) -> LeaderboardOptions:
    store = lb.get("store_candidates", "all")
    if isinstance(store, str) and store != "all":
        raise chk.fail(("leaderboard", "store_candidates"), f'expected "all" or a number of cells, got {store!r}')
    return LeaderboardOptions(
        store_candidates=None if store == "all" else int(store),
        sample_cells=tuple(lb.get("sample_cells", ())),
        figures=lb.get("figures", True),
        sample_images=lb.get("sample_images", 8),
        columns=_columns(lb["columns"], chk, ("leaderboard", "columns")) if "columns" in lb else default_columns(),
    )


def _read_targets(data: dict[str, Any], chk: _Checker) -> dict[str, TargetEntry]:
    targets: dict[str, TargetEntry] = {}
    for name, table in chk.table(data.get("targets", {}), ("targets",)).items():
        keys = ("targets", name)
        chk.name(name, keys)
        table = chk.table(table, keys)
        targets[name] = TargetEntry(name, recipe_from_table(table, chk, keys), dict(table))
    if not targets:
        raise chk.fail(("targets",), "the suite defines no targets; add a [targets.NAME] table")
    return targets


def _read_attacks(data: dict[str, Any], chk: _Checker, head: dict[str, Any], strict: bool,
                  warnings: list[str]) -> dict[str, AttackEntry]:
    attacks: dict[str, AttackEntry] = {}
    for label, table in chk.table(data.get("attacks", {}), ("attacks",)).items():
        keys = ("attacks", label)
        chk.name(label, keys)
        table = chk.table(table, keys)
        chk.known(table, ATTACK_KEYS, keys)
        t = {k: chk.typed(v, ATTACK_KEYS[k], (*keys, k)) for k, v in table.items()}
        runs = t.get("search_runs", head.get("search_runs", 1))
        if runs < 1:
            raise chk.fail((*keys, "search_runs"), f"must be at least 1, got {runs}")
        chk.counts(t.get("candidates"), (*keys, "candidates"))
        entry = AttackEntry(label, t.get("attack", label), dict(t.get("config", {})), runs,
                            t.get("candidates", head.get("candidates")))
        _check_plugin_config("attacks", entry.attack, entry.config, chk, keys, strict, warnings)
        attacks[label] = entry
    if not attacks:
        raise chk.fail(("attacks",), "the suite defines no attacks; add an [attacks.NAME] table")
    return attacks


def _read_inits(data: dict[str, Any], chk: _Checker, strict: bool, warnings: list[str]) -> dict[str, InitEntry]:
    inits: dict[str, InitEntry] = {}
    for label, table in chk.table(data.get("inits", {"gaussian": {}}), ("inits",)).items():
        keys = ("inits", label)
        chk.name(label, keys)
        table = chk.table(table, keys)
        chk.known(table, INIT_KEYS, keys)
        t = {k: chk.typed(v, INIT_KEYS[k], (*keys, k)) for k, v in table.items()}
        entry = InitEntry(label, t.get("regime", label), dict(t.get("config", {})))
        _check_plugin_config("inits", entry.regime, entry.config, chk, keys, strict, warnings)
        inits[label] = entry
    return inits


def _read_grid(data: dict[str, Any], chk: _Checker, targets: dict[str, TargetEntry],
               attacks: dict[str, AttackEntry], inits: dict[str, InitEntry],
               seeds: tuple[int, ...]) -> tuple[GridBlock, ...]:
    grid: list[GridBlock] = []
    raw_grid = data.get("grid", [])
    if not isinstance(raw_grid, list):
        raise chk.fail(("grid",), "write the grid as [[grid]] blocks (an array of tables)")
    for i, block in enumerate(raw_grid):
        keys: tuple[Any, ...] = ("grid", i)
        block = chk.table(block, keys)
        chk.known(block, GRID_KEYS, keys)
        for req in ("targets", "attacks"):
            if req not in block:
                raise chk.fail(keys, f"a [[grid]] block needs `{req}`")
        grid.append(
            GridBlock(
                targets=chk.refs(block["targets"], targets, "target", (*keys, "targets")),
                attacks=chk.refs(block["attacks"], attacks, "attack", (*keys, "attacks")),
                inits=chk.refs(block.get("inits", "*"), inits, "init", (*keys, "inits")),
                seeds=chk.seeds(block["seeds"], (*keys, "seeds")) if "seeds" in block else seeds,
            )
        )
    return tuple(grid)


def _read_comparisons(data: dict[str, Any], chk: _Checker, targets: dict[str, TargetEntry],
                      attacks: dict[str, AttackEntry], inits: dict[str, InitEntry],
                      seeds: tuple[int, ...]) -> tuple[Comparison, ...]:
    """The [comparisons.NAME] tables; variant targets not defined in the suite are added to ``targets``."""
    comparisons: list[Comparison] = []
    for cname, table in chk.table(data.get("comparisons", {}), ("comparisons",)).items():
        keys: tuple[Any, ...] = ("comparisons", cname)
        chk.name(cname, keys)
        table = chk.table(table, keys)
        chk.known(table, COMPARISON_KEYS, keys)
        for k, v in table.items():
            chk.typed(v, COMPARISON_KEYS[k], (*keys, k))
        for req in ("target", "axis", "attacks"):
            if req not in table:
                raise chk.fail(keys, f"a comparison needs `{req}`")
        base = table["target"]
        if base not in targets:
            raise chk.fail((*keys, "target"), f"no target {base!r} in this suite; defined: {', '.join(targets)}")
        comparisons.append(
            Comparison(
                name=cname,
                title=table.get("title", f"{cname}: vs {table['axis']}"),
                axis=table["axis"],
                base=base,
                variants=_variants(table, keys, chk, targets),
                attacks=chk.refs(table["attacks"], attacks, "attack", (*keys, "attacks")),
                inits=chk.refs(table.get("inits", "*"), inits, "init", (*keys, "inits")),
                seeds=chk.seeds(table["seeds"], (*keys, "seeds")) if "seeds" in table else seeds,
            )
        )
    return tuple(comparisons)


def _variants(table: dict[str, Any], keys: tuple[Any, ...], chk: _Checker,
              targets: dict[str, TargetEntry]) -> tuple[Variant, ...]:
    """One comparison's variants: the base target with the axis (and other keys) overridden."""
    base, axis = table["target"], table["axis"]
    if ("values" in table) == ("variants" in table):
        raise chk.fail(
            keys,
            "give exactly one of `values` (target.<axis> = value) or `variants` (tables of target overrides)",
        )
    if "values" in table:
        if axis not in TARGET_KEYS:
            raise chk.fail(
                (*keys, "axis"),
                f"`values` sets the target key {axis!r}, which is not a target key; "
                f"use `variants` or one of: {', '.join(sorted(TARGET_KEYS))}",
            )
        raw_variants = [({axis: v}, (*keys, "values", j)) for j, v in enumerate(table["values"])]
    else:
        raw_variants = [(v, (*keys, "variants", j)) for j, v in enumerate(table["variants"])]
    variants = []
    for overrides, vkeys in raw_variants:
        if axis not in overrides:
            raise chk.fail(vkeys, f"this variant does not set the axis key {axis!r}")
        merged = {**targets[base].table, **overrides}
        recipe = recipe_from_table(merged, chk, vkeys)
        tname = next((t.name for t in targets.values() if t.recipe == recipe), None)
        if tname is None:
            tname = f"{base}@" + ",".join(f"{k}={_fmt_value(v)}" for k, v in overrides.items())
            targets[tname] = TargetEntry(tname, recipe, merged)
        variants.append(Variant(overrides[axis], dict(overrides), tname))
    return tuple(variants)


def _fmt_value(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, (list, tuple)):
        return "x".join(_fmt_value(x) for x in v)
    if isinstance(v, dict):  # a table such as `model = { init_scale = 1e-3 }`: names stay file-safe
        return "+".join(f"{k}={_fmt_value(x)}" for k, x in sorted(v.items()))
    return str(v)


# -- the privacy-utility axis: targets under defenses at several strengths --------------------------------
@dataclass(frozen=True)
class DefenseEntry:
    label: str
    defense: str
    config: dict[str, Any]
    strength: str | None
    values: tuple[Any, ...]


@dataclass(frozen=True)
class PrivacyPoint:
    base: str                  # the undefended target of the suite
    defense: str | None        # the [defenses.LABEL] label; None: the undefended baseline
    strength: Any              # the value of the defense's strength option (None for the baseline)
    target: str                # the target that runs (derived: "<base>@<label>=<strength>")


@dataclass(frozen=True)
class PrivacyAxis:
    name: str
    title: str
    defenses: tuple[DefenseEntry, ...]
    points: tuple[PrivacyPoint, ...]
    attacks: tuple[str, ...]
    inits: tuple[str, ...]
    seeds: tuple[int, ...]
    null_attack: str | None = None  # run on each undefended target from null_init: the null of its problem
    null_init: str | None = None


DEFENSE_KEYS: dict[str, Any] = {"defense": str, "config": dict[str, Any], "strength": str, "values": list[Any],
                                "description": str}
PRIVACY_KEYS: dict[str, Any] = {"title": str, "targets": Any, "defenses": Any, "attacks": Any, "inits": Any,
                                "seeds": list[int], "null_attack": str, "null_init": str}


def _defense_entries(data: dict[str, Any], chk: _Checker, strict: bool, warnings: list[str]) -> dict[str, DefenseEntry]:
    out: dict[str, DefenseEntry] = {}
    for label, table in chk.table(data.get("defenses", {}), ("defenses",)).items():
        keys = ("defenses", label)
        chk.name(label, keys)
        table = chk.table(table, keys)
        chk.known(table, DEFENSE_KEYS, keys)
        t = {k: chk.typed(v, DEFENSE_KEYS[k], (*keys, k)) for k, v in table.items()}
        name = t.get("defense", label)
        strength = t.get("strength")
        if strength is None and name in plugins.names("defenses"):
            strength = getattr(plugins.get("defenses", name), "strength", None)
        values = tuple(t.get("values", []))
        if values and strength is None:
            raise chk.fail(keys, "`values` needs `strength`, the option they set")
        config = dict(t.get("config", {}))
        for v in values or (None,):
            trial = config if v is None else {**config, str(strength): v}
            _check_plugin_config("defenses", name, trial, chk, keys, strict, warnings)
        out[label] = DefenseEntry(label, name, config, strength, values)
    return out


def privacy_axes(data: dict[str, Any], chk: _Checker, targets: dict[str, TargetEntry], attacks: dict[str, AttackEntry],
                 inits: dict[str, InitEntry], seeds: tuple[int, ...], strict: bool,
                 warnings: list[str]) -> tuple[PrivacyAxis, ...]:
    """The ``[defenses.*]`` and ``[privacy.*]`` tables; derived targets are added to ``targets``."""
    defenses = _defense_entries(data, chk, strict, warnings)
    axes = []
    for name, table in chk.table(data.get("privacy", {}), ("privacy",)).items():
        keys = ("privacy", name)
        chk.name(name, keys)
        table = chk.table(table, keys)
        chk.known(table, PRIVACY_KEYS, keys)
        for req in ("targets", "attacks"):
            if req not in table:
                raise chk.fail(keys, f"a privacy axis needs `{req}`")
        if not defenses:
            raise chk.fail(keys, "a privacy axis needs defenses: add [defenses.LABEL] tables")
        chosen = chk.refs(table.get("defenses", "*"), defenses, "defense", (*keys, "defenses"))
        points = []
        for base in chk.refs(table["targets"], targets, "target", (*keys, "targets")):
            if targets[base].recipe.defense is not None:
                raise chk.fail((*keys, "targets"), f"target {base!r} already has a defense; name an undefended target")
            points.append(PrivacyPoint(base, None, None, base))
            for label in chosen:
                d = defenses[label]
                for v in d.values or (None,):
                    config = dict(d.config) if v is None else {**d.config, str(d.strength): v}
                    tname = f"{base}@{label}" + ("" if v is None else f"={_fmt_value(v)}")
                    merged = {**targets[base].table, "defense": d.defense, "defense_config": config}
                    if tname not in targets:
                        targets[tname] = TargetEntry(tname, recipe_from_table(merged, chk, ("defenses", label)), merged)
                    points.append(PrivacyPoint(base, label, _configured_strength(d) if v is None else v, tname))
        axes.append(PrivacyAxis(
            name=name,
            title=table.get("title", f"{name}: privacy against utility"),
            defenses=tuple(defenses[c] for c in chosen),
            points=tuple(points),
            attacks=chk.refs(table["attacks"], attacks, "attack", (*keys, "attacks")),
            inits=chk.refs(table.get("inits", "*"), inits, "init", (*keys, "inits")),
            seeds=chk.seeds(table["seeds"], (*keys, "seeds")) if "seeds" in table else seeds,
            null_attack=chk.refs([table["null_attack"]], attacks, "attack", (*keys, "null_attack"))[0]
            if "null_attack" in table else None,
            null_init=chk.refs([table["null_init"]], inits, "init", (*keys, "null_init"))[0] if "null_init" in table else None,
        ))
        if (axes[-1].null_attack is None) != (axes[-1].null_init is None):
            raise chk.fail(keys, "give both `null_attack` and `null_init` (the null: e.g. 0 attack steps from held-out images)")
    return tuple(axes)


def _configured_strength(d: DefenseEntry) -> Any:
    """The strength a defense runs at without `values`: its configured (or default) option value."""
    if d.strength is None or d.defense not in plugins.names("defenses"):
        return None
    cfg = build_config(plugins.get("defenses", d.defense).config_cls, d.config, f"defense {d.defense}")
    return getattr(cfg, d.strength, None)
