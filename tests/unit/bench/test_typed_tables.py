"""The typed records that command-line options and suite tables are read into name exactly the keys their sources
declare: an option or a table key added without its field would fail at the first use (or be dropped)."""

from __future__ import annotations

import dataclasses
from typing import Any

import click
import pytest

from reconbench.bench.suite.schema import (
    ATTACK_TABLE,
    COLUMN_TABLE,
    DEFENSE_TABLE,
    INIT_TABLE,
    LEADERBOARD_TABLE,
    SUITE_TABLE,
    AttackTable,
    ColumnTable,
    DefenseTable,
    InitTable,
    LeaderboardTable,
    SuiteHead,
    Table,
)
from reconbench.cli.recipe_options import RecipeOptions, recipe_from_options, recipe_options


def _fields(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def test_recipe_options_name_every_recipe_option_of_the_command_line() -> None:
    @click.command()
    @recipe_options
    def command(**kwargs: object) -> None: ...

    assert {p.name for p in command.params} == _fields(RecipeOptions)


def test_recipe_options_given_as_keywords_or_as_the_record_make_the_same_recipe() -> None:
    given: dict[str, Any] = {"dataset": "digits", "task": "binary", "steps": 7, "train_seed": 3,
                             "model_set": ("init_scale=0.5",)}
    recipe = recipe_from_options(given)
    assert recipe == recipe_from_options(RecipeOptions(**given))
    assert recipe.train.steps == 7 and recipe.train.seed == 3 and recipe.model["init_scale"] == 0.5
    with pytest.raises(TypeError):
        recipe_from_options({"colour": "red"})


@pytest.mark.parametrize(("table", "record"), [
    (SUITE_TABLE, SuiteHead), (ATTACK_TABLE, AttackTable), (INIT_TABLE, InitTable),
    (LEADERBOARD_TABLE, LeaderboardTable), (COLUMN_TABLE, ColumnTable), (DEFENSE_TABLE, DefenseTable),
])
def test_each_suite_table_record_names_exactly_the_keys_its_table_declares(table: Table, record: type) -> None:
    assert set(table.keys) == _fields(record)
    required = {f.name for f in dataclasses.fields(record) if f.default is dataclasses.MISSING
                and f.default_factory is dataclasses.MISSING}
    assert required <= set(table.required)
