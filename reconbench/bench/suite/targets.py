"""The [targets.NAME] tables of a suite: flat keys read into target recipes."""

from __future__ import annotations

from pathlib import PurePosixPath, PureWindowsPath
from typing import Any

from reconbench import plugins
from reconbench.bench.suite.entries import TargetEntry
from reconbench.bench.suite.schema import TARGET_KEYS, Checker, SuiteTables
from reconbench.errors import ReconbenchError, UnknownNameError
from reconbench.targets.problems import RECORDED_WITHOUT_ORDER
from reconbench.targets.recipe import TargetRecipe


def recipe_from_table(table: dict[str, Any], chk: Checker, keys: tuple[Any, ...]) -> TargetRecipe:
    chk.known(table, TARGET_KEYS, keys)
    d: dict[str, Any] = {"problem": {}, "model": {}, "train": {}, "family": "mlp"}
    widths_in_model = False   # `model = { widths = ... }`: widths belong in their own key
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
            widths_in_model = "widths" in v
        else:
            d[section][name] = v
    if "order" not in d["problem"]:  # suite files written before `order` existed describe file-order targets
        if "order_seed" in d["problem"]:
            raise chk.fail((*keys, "order_seed"), "order_seed needs order = \"shuffled\" (a target that names no "
                                                  "order walks the data set in file order)")
        d["problem"].update(RECORDED_WITHOUT_ORDER)
    try:
        plugins.model(d["family"])
    except UnknownNameError as exc:
        raise chk.fail((*keys, "family"), str(exc)) from None
    if widths_in_model:
        raise chk.fail((*keys, "model", "widths"), "widths is given twice (as `widths` and in `model`); keep one")
    if "dataset" in table:
        check_dataset_path(table["dataset"], chk, (*keys, "dataset"))
    try:
        return TargetRecipe.from_dict(d).validate()  # the checks the command line makes, before any cell runs
    except ReconbenchError as exc:
        raise chk.fail(keys, str(exc)) from None


def check_dataset_path(ref: str, chk: Checker, keys: tuple[Any, ...]) -> None:
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


def read_targets(tables: SuiteTables, chk: Checker) -> dict[str, TargetEntry]:
    targets: dict[str, TargetEntry] = {}
    for name, table in chk.table(tables.targets, ("targets",)).items():
        keys = ("targets", name)
        chk.name(name, keys)
        table = chk.table(table, keys)
        targets[name] = TargetEntry(name, recipe_from_table(table, chk, keys), dict(table))
    if not targets:
        raise chk.fail(("targets",), "the suite defines no targets; add a [targets.NAME] table")
    return targets


def format_value(v: object) -> str:
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, (list, tuple)):
        return "x".join(format_value(x) for x in v)
    if isinstance(v, dict):  # a table such as `model = { init_scale = 1e-3 }`: names stay file-safe
        return "+".join(f"{k}={format_value(x)}" for k, x in sorted(v.items()))
    return str(v)
