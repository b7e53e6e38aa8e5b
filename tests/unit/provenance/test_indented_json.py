"""dumps_indented writes the same bytes as json.dumps(obj, indent=n, default=json_default, allow_nan=True): on
random nested values (every scalar kind, numpy and torch values, odd keys, empty and shared containers), on the
published records, and through write_json; and it refuses what json refuses."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from reconbench.indented_json import dumps_indented
from reconbench.provenance import json_default, write_json

REPO = Path(__file__).resolve().parents[3]
STRINGS = ["", "a", "key", "caf\u00e9", "\u2603 snow", 'quote " and \\ back', "tab\tnew\nline", "\x00\x1f", "\ud83d"]


def _scalar(rng: random.Random) -> Any:
    kind = rng.randrange(14)
    return [
        lambda: rng.choice(STRINGS), lambda: None, lambda: True, lambda: False,
        lambda: rng.randint(-10**20, 10**20), lambda: rng.uniform(-1e6, 1e6), lambda: rng.choice(
            [math.nan, math.inf, -math.inf, 0.0, -0.0, 1e-300, 5e-324, 1.7976931348623157e308, 0.1, 1e16, 1e-5]),
        lambda: np.float64(rng.gauss(0, 1)), lambda: np.float32(rng.gauss(0, 1)), lambda: np.int64(rng.randint(-99, 99)),
        lambda: np.bool_(rng.random() < 0.5), lambda: torch.tensor([rng.random(), math.nan], dtype=torch.float64),
        lambda: Path("a") / rng.choice(STRINGS[1:4]), lambda: torch.float32,
    ][kind]()


def _key(rng: random.Random) -> Any:
    return rng.choice([rng.choice(STRINGS), rng.randint(-5, 5), 0.5, math.nan, True, False, None])


def _value(rng: random.Random, depth: int) -> Any:
    if depth == 0 or rng.random() < 0.35:
        return _scalar(rng)
    n = rng.choice([0, 1, 2, 3, 5, 8])
    kind = rng.randrange(5)
    if kind == 0:
        return [_value(rng, depth - 1) for _ in range(n)]
    if kind == 1:
        return tuple(_value(rng, depth - 1) for _ in range(n))
    if kind == 2:   # a leaf: scalars only
        return [_scalar(rng) for _ in range(n)] if rng.random() < 0.5 else {rng.choice(STRINGS) + str(i): _scalar(rng)
                                                                            for i in range(n)}
    if kind == 3:
        return np.arange(n, dtype=np.float64) / 3.0
    return {_key(rng): _value(rng, depth - 1) for _ in range(n)}


@pytest.mark.parametrize("indent", [0, 1, 2, 4])
def test_random_values_give_the_same_bytes_as_json_dumps(indent):
    rng = random.Random(indent)
    for _ in range(400):
        value = _value(rng, 5)
        assert dumps_indented(value, indent, json_default) == json.dumps(value, indent=indent, default=json_default,
                                                                        allow_nan=True)


def test_a_container_written_twice_is_not_circular():
    shared = [1.0, {"a": [2, 3]}]
    value = {"x": shared, "y": shared, "z": [shared, shared]}
    assert dumps_indented(value, 1) == json.dumps(value, indent=1)


def test_the_published_records_give_the_same_bytes():
    files = sorted((REPO / "leaderboards").rglob("*.json"))[::7]
    assert len(files) > 20
    for path in files:
        value = json.loads(path.read_text())
        assert dumps_indented(value, 1, json_default) == json.dumps(value, indent=1, default=json_default,
                                                                   allow_nan=True), path


def test_write_json_writes_what_json_dumps_writes(tmp_path):
    value = {"scores": np.linspace(0, 1, 7), "count": np.int64(3), "trace": [{"loss": math.nan, "step": 1.0}],
             "where": Path("runs") / "run-000.json", "dtype": torch.float64, "nested": {"t": torch.arange(3)}}
    write_json(tmp_path / "r.json", value)
    assert (tmp_path / "r.json").read_bytes() == json.dumps(value, indent=1, default=json_default,
                                                            allow_nan=True).encode("utf-8")


def test_what_json_refuses_is_refused():
    with pytest.raises(TypeError, match="object"):
        dumps_indented({"a": [object()]}, 1, json_default)
    with pytest.raises(TypeError, match="set"):
        dumps_indented([{1, 2}], 1)
    with pytest.raises(TypeError, match="keys must be"):
        dumps_indented({(1, 2): 3, "b": [1]}, 1)
    loop: list[Any] = [1]
    loop.append([loop])
    with pytest.raises(ValueError, match="Circular reference"):
        dumps_indented(loop, 1)
