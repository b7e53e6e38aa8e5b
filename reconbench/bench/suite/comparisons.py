"""The [comparisons.NAME] tables of a suite: a metric against one varied target field."""

from __future__ import annotations

from typing import Any

from reconbench.bench.suite.entries import AttackEntry, Comparison, InitEntry, TargetEntry, Variant
from reconbench.bench.suite.schema import COMPARISON_TABLE, TARGET_KEYS, Checker, SuiteComparisonTable, SuiteTables
from reconbench.bench.suite.targets import format_value, recipe_from_table


def read_comparisons(tables: SuiteTables, chk: Checker, targets: dict[str, TargetEntry],
                      attacks: dict[str, AttackEntry], inits: dict[str, InitEntry],
                      seeds: tuple[int, ...]) -> tuple[Comparison, ...]:
    """The [comparisons.NAME] tables; variant targets not defined in the suite are added to ``targets``."""
    comparisons: list[Comparison] = []
    for cname, table in chk.table(tables.comparisons, ("comparisons",)).items():
        keys: tuple[Any, ...] = ("comparisons", cname)
        chk.name(cname, keys)
        t = SuiteComparisonTable(**chk.section(table, COMPARISON_TABLE, keys))
        base = t.target
        if base not in targets:
            raise chk.fail((*keys, "target"), f"no target {base!r} in this suite; defined: {', '.join(targets)}")
        comparisons.append(
            Comparison(
                name=cname,
                title=f"{cname}: vs {t.axis}" if t.title is None else t.title,
                axis=t.axis,
                base=base,
                variants=variants(table, keys, chk, targets),
                attacks=chk.refs(t.attacks, attacks, "attack", (*keys, "attacks")),
                inits=chk.refs(t.inits, inits, "init", (*keys, "inits")),
                seeds=seeds if t.seeds is None else chk.seeds(t.seeds, (*keys, "seeds")),
            )
        )
    return tuple(comparisons)


def variants(table: dict[str, Any], keys: tuple[Any, ...], chk: Checker,
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
            tname = f"{base}@" + ",".join(f"{k}={format_value(v)}" for k, v in overrides.items())
            targets[tname] = TargetEntry(tname, recipe, merged)
        variants.append(Variant(overrides[axis], dict(overrides), tname))
    return tuple(variants)
