"""Expanding a suite into cells: one cell = one attack x init regime x target x seed (with its search
budget)."""

from __future__ import annotations

import dataclasses
import fnmatch
from dataclasses import dataclass
from typing import Any

from reconbench.bench.suite import AttackEntry, InitEntry, Suite
from reconbench.provenance import config_hash
from reconbench.runs.spec import RunSpec
from reconbench.targets.recipe import TargetRecipe

CELL_FORMAT = "reconbench-bench-cell/1"


@dataclass(frozen=True)
class Cell:
    cell_id: str
    target: str
    recipe: TargetRecipe
    attack: AttackEntry
    init: InitEntry
    seed: int
    groups: tuple[str, ...]  # "grid" and/or "comparison:<name>"

    def run_spec(self, suite: Suite, device: str | None = None, dtype: str | None = None) -> RunSpec:
        return RunSpec(
            attack=self.attack.attack,
            attack_config=dict(self.attack.config),
            init=self.init.regime,
            init_config=dict(self.init.config),
            seed=self.seed,
            candidates=self.attack.candidates,
            search_runs=self.attack.search_runs,
            dtype=self.attack.dtype or dtype or suite.dtype,
            device=device or suite.device,
            protocol=self.protocol(suite),
            search=self.attack.search,
            search_config=dict(self.attack.search_config),
        )

    def protocol(self, suite: Suite) -> dict[str, Any]:
        """The suite's evaluation protocol for this cell: with ``seed_nulls`` the held-out null draws (calibration
        and reported) are seeded by the protocol's ``null_seed`` plus the cell's seed, so that the calibrated tests of
        different seeds use independent null draws."""
        protocol = dict(suite.protocol)
        if suite.seed_nulls:
            protocol["null_seed"] = int(protocol.get("null_seed", 0)) + self.seed
        return protocol

    def identity(self, suite: Suite, dtype: str | None = None) -> dict[str, Any]:
        """Everything that determines the cell's numbers (not the device: that is provenance). The default search
        is left out, so that random-search cells keep their keys."""
        identity = {
            "recipe": self.recipe.to_dict(),
            "attack": self.attack.attack,
            "attack_config": self.attack.config,
            "search_runs": self.attack.search_runs,
            "candidates": self.attack.candidates,
            "init": self.init.regime,
            "init_config": self.init.config,
            "seed": self.seed,
            "dtype": self.attack.dtype or dtype or suite.dtype,
            "protocol": self.protocol(suite),
        }
        if not self.attack.default_search():
            identity["search"] = {"strategy": self.attack.search, "config": self.attack.search_config}
        return identity

    def key(self, suite: Suite, dtype: str | None = None) -> str:
        return config_hash(self.identity(suite, dtype))


def cell_id(target: str, attack: str, init: str, seed: int) -> str:
    return f"{target}--{attack}--{init}--s{seed}"


def expand(suite: Suite) -> list[Cell]:
    """All cells of a suite in a stable order (grid blocks first, then comparisons); duplicates merged."""
    cells: dict[str, Cell] = {}

    def add(target: str, attack: str, init: str, seed: int, group: str) -> None:
        cid = cell_id(target, attack, init, seed)
        if cid in cells:
            old = cells[cid]
            if group not in old.groups:
                cells[cid] = Cell(old.cell_id, old.target, old.recipe, old.attack, old.init, old.seed, (*old.groups, group))
            return
        recipe = suite.targets[target].recipe
        if suite.seed_targets:  # each seed trains its own target: the weight-init seed moves with the seed, and
            # so does the draw of the training images where the data set is walked in a seeded permutation
            recipe = dataclasses.replace(recipe, train=dataclasses.replace(recipe.train, seed=recipe.train.seed + seed))
            if recipe.problem.order == "shuffled":
                recipe = dataclasses.replace(recipe, problem=dataclasses.replace(
                    recipe.problem, order_seed=recipe.problem.order_seed + seed))
        cells[cid] = Cell(
            cid,
            target,
            recipe,
            suite.attacks[attack],
            suite.inits[init],
            seed,
            (group,),
        )

    for block in suite.grid:
        for t in block.targets:
            for a in block.attacks:
                for i in block.inits:
                    for s in block.seeds:
                        add(t, a, i, s, "grid")
    for comp in suite.comparisons:
        for v in comp.variants:
            for a in comp.attacks:
                for i in comp.inits:
                    for s in comp.seeds:
                        add(v.target, a, i, s, f"comparison:{comp.name}")
    for axis in suite.privacy:
        for p in axis.points:
            for a in axis.attacks:
                for i in axis.inits:
                    for s in axis.seeds:
                        add(p.target, a, i, s, f"privacy:{axis.name}")
            if axis.null_attack and axis.null_init and p.defense is None:
                for s in axis.seeds:
                    add(p.target, axis.null_attack, axis.null_init, s, f"privacy:{axis.name}")
    return list(cells.values())


def select(cells: list[Cell], patterns: tuple[str, ...] | list[str] | None) -> list[Cell]:
    """Cells whose id matches any of the wildcards (``*haim*``, ``digits-binary--*``); all if none."""
    if not patterns:
        return list(cells)
    return [c for c in cells if any(fnmatch.fnmatchcase(c.cell_id, p) for p in patterns)]
