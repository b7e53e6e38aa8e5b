"""Every registered plugin passes the conformance suite (so a new plugin is tested the day it lands)."""

from __future__ import annotations

import pytest

from reconbench import conformance, plugins


@pytest.mark.slow
@pytest.mark.parametrize("name", plugins.names("attacks"))
def test_attack_conforms(name):
    conformance.check_attack(plugins.get("attacks", name))


@pytest.mark.parametrize("name", plugins.names("inits"))
def test_init_conforms(name):
    conformance.check_init(plugins.get("inits", name))


@pytest.mark.parametrize("name", plugins.names("defenses"))
def test_defense_conforms(name):
    conformance.check_defense(plugins.get("defenses", name))


@pytest.mark.parametrize("name", plugins.names("metrics"))
def test_metric_conforms(name):
    conformance.check_metric(plugins.get("metrics", name))


@pytest.mark.parametrize("name", plugins.names("models"))
def test_model_family_conforms(name):
    conformance.check_model_family(plugins.get("models", name))


@pytest.mark.parametrize("name", plugins.names("searches"))
def test_search_strategy_conforms(name):
    conformance.check_search(plugins.get("searches", name))


def test_the_toy_attack_conforms(toy_attack_registered):
    outputs = conformance.check_attack(toy_attack_registered)
    assert set(outputs) == {"binary", "multiclass", "regression"}


def test_a_lying_init_is_caught():
    from dataclasses import dataclass

    import torch

    from reconbench.config import option

    @dataclass
    class Cfg:
        k: int = option(0, "unused")

    class Sneaky:
        name, description, oracle, config_cls = "sneaky", "copies training images", False, Cfg

        def is_oracle(self, config):
            return False

        def make(self, problem, labels, config, *, generator, dtype):
            x = problem.x_train(dtype)
            return x[torch.arange(len(labels)) % len(x)]

    with pytest.raises(AssertionError, match="reads training images"):
        conformance.check_init(Sneaky())
