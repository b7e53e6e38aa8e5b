"""Hook specifications: one hook per plugin kind, each receiving a ``register`` callback.

A plugin module implements any subset of these with ``@reconbench.hookimpl``::

    from reconbench import hookimpl

    @hookimpl
    def register_attacks(register):
        register(MyAttack())

``register`` takes an object with ``name`` and ``description`` attributes (see the protocols in
:mod:`reconbench.interfaces`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pluggy

hookspec = pluggy.HookspecMarker("reconbench")
hookimpl = pluggy.HookimplMarker("reconbench")

Register = Callable[[Any], None]


@hookspec
def register_datasets(register: Register) -> None:
    """Register data set sources (objects following :class:`reconbench.interfaces.DatasetSource`)."""


@hookspec
def register_models(register: Register) -> None:
    """Register target model families (:class:`reconbench.interfaces.ModelFamily`)."""


@hookspec
def register_attacks(register: Register) -> None:
    """Register reconstruction attacks (:class:`reconbench.interfaces.Attack`)."""


@hookspec
def register_inits(register: Register) -> None:
    """Register initialisation regimes for attack candidates (:class:`reconbench.interfaces.InitRegime`)."""


@hookspec
def register_metrics(register: Register) -> None:
    """Register evaluation metrics (:class:`reconbench.interfaces.Metric`)."""


@hookspec
def register_defenses(register: Register) -> None:
    """Register defenses applied to a target before release (:class:`reconbench.interfaces.Defense`)."""


@hookspec
def register_searches(register: Register) -> None:
    """Register search strategies choosing the configurations of a cell's search runs
    (:class:`reconbench.interfaces.SearchStrategy`)."""
