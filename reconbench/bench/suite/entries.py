"""The parsed entries of a suite: targets, attacks, init regimes, grid blocks and comparisons."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from reconbench.attack.search import DEFAULT_SEARCH
from reconbench.targets.recipe import TargetRecipe


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
    search: str = DEFAULT_SEARCH            # the search strategy choosing the runs' configurations
    search_config: dict[str, Any] = field(default_factory=dict)
    #: the attack's precision for these cells, over the suite's and the command line's (None: theirs), e.g. a
    #: float64 A/B copy of a float32 attack on a GPU board
    dtype: str | None = None

    def default_search(self) -> bool:
        """Random search with its defaults: left out of cell keys (cells keep the keys they had before)."""
        return self.search == DEFAULT_SEARCH and not self.search_config


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
