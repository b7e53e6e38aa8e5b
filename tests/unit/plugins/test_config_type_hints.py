"""Config type hints read once per class equal typing.get_type_hints for every registered attack's, metric's and init's
options, and a config built after the first reading is checked as strictly as before."""

from __future__ import annotations

import typing

import pytest

from reconbench import plugins
from reconbench.config import build_config, type_hints
from reconbench.errors import ReconbenchError


def configs() -> list[type]:
    out = []
    for kind in ("attacks", "metrics", "inits"):
        for name in plugins.names(kind):
            cls = getattr(plugins.get(kind, name), "config_cls", None)
            if cls is not None and typing.get_type_hints(cls):
                out.append(cls)
    return out


def test_cached_hints_equal_fresh_ones():
    classes = configs()
    assert classes
    for cls in classes:
        assert type_hints(cls) == typing.get_type_hints(cls)
        assert type_hints(cls) is type_hints(cls)


def test_build_config_still_refuses_wrong_types_after_the_first_reading():
    for cls in configs():
        build_config(cls, {})
        name = next(iter(type_hints(cls)))
        with pytest.raises(ReconbenchError):
            build_config(cls, {name: object()})
