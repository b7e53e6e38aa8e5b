"""Typed configuration dataclasses: building them from dicts with clear errors, and search distributions.

Every attack, init regime and metric declares its options as a dataclass whose fields carry a ``help`` string in
their metadata (``field(default=..., metadata={"help": "..."})``), in the cleanrl style.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from dataclasses import dataclass
from typing import Any, TypeVar

from reconbench.errors import ReconbenchError

T = TypeVar("T")


def option(default: Any, help: str, **kwargs: Any) -> Any:
    """A dataclass field with a help text (shown by ``reconbench list`` and in CONTRIBUTING)."""
    return dataclasses.field(default=default, metadata={"help": help}, **kwargs)


def _coerce(value: Any, annotation: Any, where: str) -> Any:
    """Check (and gently convert int->float, list->tuple) a value against a simple type annotation."""
    origin = typing.get_origin(annotation)
    if annotation is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        errors = []
        for arg in typing.get_args(annotation):
            if arg is type(None) and value is None:
                return None
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, where)
            except ReconbenchError as exc:
                errors.append(str(exc))
        raise ReconbenchError(f"{where}: {value!r} does not fit {annotation}")
    if origin is typing.Literal:
        if value not in typing.get_args(annotation):
            raise ReconbenchError(f"{where}: {value!r} is not one of {list(typing.get_args(annotation))}")
        return value
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ReconbenchError(f"{where}: expected a list, got {type(value).__name__} {value!r}")
        args = typing.get_args(annotation)
        inner = args[0] if args else Any
        items = [_coerce(v, inner, f"{where}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        if not isinstance(value, dict):
            raise ReconbenchError(f"{where}: expected a table/dict, got {type(value).__name__}")
        return dict(value)
    if annotation is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ReconbenchError(f"{where}: expected a number, got {type(value).__name__} {value!r}")
        return float(value)
    if annotation is int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                return int(value)
            raise ReconbenchError(f"{where}: expected an integer, got {type(value).__name__} {value!r}")
        return value
    if annotation is bool:
        if not isinstance(value, bool):
            raise ReconbenchError(f"{where}: expected true or false, got {value!r}")
        return value
    if annotation is str:
        if not isinstance(value, str):
            raise ReconbenchError(f"{where}: expected a string, got {type(value).__name__} {value!r}")
        return value
    return value


def build_config(cls: type[T], values: dict[str, Any] | None, owner: str = "config") -> T:
    """Instantiate dataclass ``cls`` from ``values``, rejecting unknown keys (with close matches) and wrong types."""
    values = dict(values or {})
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = [k for k in values if k not in fields]
    if unknown:
        k = unknown[0]
        close = difflib.get_close_matches(k, list(fields), n=3, cutoff=0.5)
        hint = f" Did you mean: {', '.join(close)}?" if close else ""
        raise ReconbenchError(
            f"{owner}: unknown option {k!r}.{hint} Known options: {', '.join(sorted(fields))}."
        )
    kwargs = {k: _coerce(v, hints[k], f"{owner}.{k}") for k, v in values.items()}
    return cls(**kwargs)


def config_to_dict(cfg: Any) -> dict[str, Any]:
    return dataclasses.asdict(cfg)


def describe_options(cls: type) -> list[tuple[str, str, Any, str]]:
    """(name, type, default, help) for every option of a config dataclass."""
    rows = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        default = f.default if f.default is not dataclasses.MISSING else (
            f.default_factory() if f.default_factory is not dataclasses.MISSING else None)  # type: ignore[misc]
        tname = getattr(hints[f.name], "__name__", str(hints[f.name]))
        rows.append((f.name, tname, default, f.metadata.get("help", "")))
    return rows


# -- search distributions ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class LogUniform:
    """log-uniform on [low, high]."""

    low: float
    high: float

    def sample(self, rng: Any) -> float:
        return float(math.exp(rng.uniform(math.log(self.low), math.log(self.high))))


@dataclass(frozen=True)
class Uniform:
    """uniform on [low, high]."""

    low: float
    high: float

    def sample(self, rng: Any) -> float:
        return float(rng.uniform(self.low, self.high))


@dataclass(frozen=True)
class Choice:
    """one of a fixed list of values."""

    values: tuple[Any, ...]

    def sample(self, rng: Any) -> Any:
        return self.values[int(rng.integers(len(self.values)))]


Distribution = LogUniform | Uniform | Choice
