"""The privacy-utility axis of a suite: targets under defenses at several strengths ([defenses.*], [privacy.*])."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from reconbench import plugins
from reconbench.bench.suite.entries import AttackEntry, InitEntry, TargetEntry
from reconbench.bench.suite.schema import (
    DEFENSE_TABLE,
    PRIVACY_TABLE,
    Checker,
    DefenseTable,
    SuitePrivacyTable,
    SuiteTables,
    check_plugin_config,
)
from reconbench.bench.suite.targets import format_value, recipe_from_table
from reconbench.config import build_config


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


def defense_entries(tables: SuiteTables, chk: Checker, strict: bool, warnings: list[str]) -> dict[str, DefenseEntry]:
    out: dict[str, DefenseEntry] = {}
    for label, table in chk.table(tables.defenses, ("defenses",)).items():
        keys = ("defenses", label)
        chk.name(label, keys)
        t = DefenseTable(**chk.section(table, DEFENSE_TABLE, keys))
        name = label if t.defense is None else t.defense
        strength = t.strength
        if strength is None and name in plugins.names("defenses"):
            strength = getattr(plugins.defense(name), "strength", None)
        values = tuple(t.values)
        if values and strength is None:
            raise chk.fail(keys, "`values` needs `strength`, the option they set")
        config = dict(t.config)
        for v in values or (None,):
            trial = config if v is None else {**config, str(strength): v}
            check_plugin_config("defenses", name, trial, chk, keys, strict, warnings)
        out[label] = DefenseEntry(label, name, config, strength, values)
    return out


def privacy_axes(tables: SuiteTables, chk: Checker, targets: dict[str, TargetEntry], attacks: dict[str, AttackEntry],
                 inits: dict[str, InitEntry], seeds: tuple[int, ...], strict: bool,
                 warnings: list[str]) -> tuple[PrivacyAxis, ...]:
    """The ``[defenses.*]`` and ``[privacy.*]`` tables; derived targets are added to ``targets``."""
    defenses = defense_entries(tables, chk, strict, warnings)
    axes = []
    for name, table in chk.table(tables.privacy, ("privacy",)).items():
        keys = ("privacy", name)
        chk.name(name, keys)
        t = SuitePrivacyTable(**chk.section(table, PRIVACY_TABLE, keys))
        if not defenses:
            raise chk.fail(keys, "a privacy axis needs defenses: add [defenses.LABEL] tables")
        chosen = chk.refs(t.defenses, defenses, "defense", (*keys, "defenses"))
        points = []
        for base in chk.refs(t.targets, targets, "target", (*keys, "targets")):
            if targets[base].recipe.defense is not None:
                raise chk.fail((*keys, "targets"), f"target {base!r} already has a defense; name an undefended target")
            points.append(PrivacyPoint(base, None, None, base))
            for label in chosen:
                d = defenses[label]
                for v in d.values or (None,):
                    config = dict(d.config) if v is None else {**d.config, str(d.strength): v}
                    tname = f"{base}@{label}" + ("" if v is None else f"={format_value(v)}")
                    merged = {**targets[base].table, "defense": d.defense, "defense_config": config}
                    if tname not in targets:
                        targets[tname] = TargetEntry(tname, recipe_from_table(merged, chk, ("defenses", label)), merged)
                    points.append(PrivacyPoint(base, label, configured_strength(d) if v is None else v, tname))
        axes.append(PrivacyAxis(
            name=name,
            title=f"{name}: privacy against utility" if t.title is None else t.title,
            defenses=tuple(defenses[c] for c in chosen),
            points=tuple(points),
            attacks=chk.refs(t.attacks, attacks, "attack", (*keys, "attacks")),
            inits=chk.refs(t.inits, inits, "init", (*keys, "inits")),
            seeds=seeds if t.seeds is None else chk.seeds(t.seeds, (*keys, "seeds")),
            null_attack=None if t.null_attack is None
            else chk.refs([t.null_attack], attacks, "attack", (*keys, "null_attack"))[0],
            null_init=None if t.null_init is None else chk.refs([t.null_init], inits, "init", (*keys, "null_init"))[0],
        ))
        if (axes[-1].null_attack is None) != (axes[-1].null_init is None):
            raise chk.fail(keys, "give both `null_attack` and `null_init` (the null: e.g. 0 attack steps from held-out images)")
    return tuple(axes)


def configured_strength(d: DefenseEntry) -> Any:
    """The strength a defense runs at without `values`: its configured (or default) option value."""
    if d.strength is None or d.defense not in plugins.names("defenses"):
        return None
    cfg = build_config(plugins.defense(d.defense).config_cls, d.config, f"defense {d.defense}")
    return getattr(cfg, d.strength, None)
