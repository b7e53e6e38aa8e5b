"""plain() with its scalar fast path against the plain recursion it replaced, on nested JSON values holding records,
tuples, mapping subclasses and scalar subclasses: equal values, equal types, equal key order; and a union field's
reading of scalars with its fast path."""

from __future__ import annotations

import collections
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from reconbench.records.evaluation import Spread
from reconbench.records.record import VALUE_TYPES, Record, plain


def reference(v: Any) -> Any:
    if isinstance(v, Record) or type(v) in VALUE_TYPES:
        return v.to_dict()
    if isinstance(v, Mapping):
        return {k: reference(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [reference(x) for x in v]
    return v


def same(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return bool(a == b)


def test_plain_equals_the_reference_recursion():
    rng = np.random.default_rng(0)
    spread = Spread.from_dict({"mean": 0.5, "std": 0.1, "min": 0.2, "max": 0.9, "draws": 5}, "test")

    def value(depth: int) -> Any:
        kind = int(rng.integers(0, 10 if depth < 4 else 6))
        if kind == 0:
            return float(rng.standard_normal())
        if kind == 1:
            return int(rng.integers(-5, 5))
        if kind == 2:
            return rng.choice([None, True, False, "x", math.nan, math.inf])
        if kind == 3:
            return np.float64(rng.standard_normal())          # a float subclass
        if kind == 4:
            return spread
        if kind == 5:
            return "text"
        if kind == 6:
            return [value(depth + 1) for _ in range(int(rng.integers(0, 4)))]
        if kind == 7:
            return tuple(value(depth + 1) for _ in range(int(rng.integers(0, 4))))
        if kind == 8:
            return {f"k{i}": value(depth + 1) for i in range(int(rng.integers(0, 4)))}
        return collections.OrderedDict((f"o{i}", value(depth + 1)) for i in range(int(rng.integers(0, 3))))

    for _ in range(300):
        v = value(0)
        assert same(plain(v), reference(v))


def test_union_fields_read_scalars_as_before():
    """A field typed float | None (the per-image rows' kind) takes a float or an int as it is and None as None, and
    still refuses a bool, a string and a list: the union's fast path changes no reading."""
    import pytest

    from reconbench.errors import ReconbenchError

    for value in (0.25, 3, None, -0.0, math.inf):
        got = Spread.from_dict({"mean": value, "std": 0.1, "min": 0.2, "max": 0.9, "draws": 5}, "test").mean
        assert got is value or (got == value and type(got) is type(value))
    for bad in (True, "0.5", [0.5]):
        with pytest.raises(ReconbenchError):
            Spread.from_dict({"mean": bad, "std": 0.1, "min": 0.2, "max": 0.9, "draws": 5}, "test")
