"""Typed configuration dataclasses: building them from dicts with clear errors, and search distributions.

Every attack, init regime and metric declares its options as a dataclass whose fields carry a ``help`` string in
their metadata (``field(default=..., metadata={"help": "..."})``), in the cleanrl style.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import json
import math
import types
import typing
from dataclasses import dataclass
from typing import Any, TypeVar

from reconbench.errors import ReconbenchError

if typing.TYPE_CHECKING:
    import numpy as np

T = TypeVar("T")

#: the integers an option may hold: what a 64-bit signed integer (torch, numpy) can represent
INT64 = (-(2**63), 2**63 - 1)
#: the seeds reconbench accepts (numpy's and torch's generators take them; derived seeds stay below 2**63)
MAX_SEED = 2**32 - 1


@dataclass(frozen=True)
class Limit:
    """The allowed range of a numeric option: any of ``ge``, ``gt``, ``le``, ``lt`` (bounds included or not)."""

    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None

    def describe(self) -> str:
        parts = [f"{op} {_num(b)}" for op, b in ((">=", self.ge), (">", self.gt), ("<=", self.le), ("<", self.lt))
                 if b is not None]
        return " and ".join(parts)

    def holds(self, v: float) -> bool:
        return ((self.ge is None or v >= self.ge) and (self.gt is None or v > self.gt)
                and (self.le is None or v <= self.le) and (self.lt is None or v < self.lt))


def _num(b: float) -> str:
    return str(int(b)) if float(b).is_integer() and abs(b) < 1e15 else f"{b:g}"


#: ``option(..., absent=NOT_RECORDED)``: the option has no value that records made before it existed stand for
NOT_RECORDED: Any = dataclasses.MISSING


def option(default: object, help: str, *, ge: float | None = None, gt: float | None = None, le: float | None = None,
           lt: float | None = None, nonfinite: bool = False, absent: object = NOT_RECORDED, omit_default: bool = False,
           **kwargs: Any) -> Any:
    """A dataclass field with a help text (shown by ``reconbench list`` and in CONTRIBUTING).

    ``ge``/``gt``/``le``/``lt`` bound a numeric option; ``build_config`` refuses values outside. This is the one way a
    range is declared: plugin options, the evaluation protocol's, and (as ``Annotated[int, Limit(ge=1)]``) the keys of
    a suite's tables; hand-written checks are left for rules between options. Float options must be
    finite unless ``nonfinite=True``. ``absent`` is the value a stored configuration that lacks the option stands for
    (an option added after numbers were published, whose new default computes something else): re-scoring such a
    record uses it (:func:`absent_values`). ``omit_default=True``: :func:`config_to_dict` leaves the option out while
    it holds its default, so that an option added to a config whose dicts are hashed (run keys) keeps every key
    written before it existed.
    """
    meta: dict[str, Any] = {"help": help}
    if any(b is not None for b in (ge, gt, le, lt)):
        meta["limit"] = Limit(ge=ge, gt=gt, le=le, lt=lt)
    if nonfinite:
        meta["nonfinite"] = True
    if absent is not NOT_RECORDED:
        meta["absent"] = absent
    if omit_default:
        meta["omit_default"] = True
    return dataclasses.field(default=default, metadata=meta, **kwargs)


def absent_values(cls: type) -> dict[str, Any]:
    """Option -> the value a stored configuration of ``cls`` without that option stands for (``option(absent=)``)."""
    if not dataclasses.is_dataclass(cls):
        return {}
    return {f.name: f.metadata["absent"] for f in dataclasses.fields(cls) if "absent" in f.metadata}


def field_limits(cls: type) -> dict[str, Limit]:
    """The limits of every bounded option of a config dataclass: those given to ``option`` plus a class-level
    ``LIMITS: ClassVar[dict[str, Limit]]`` (merged along the MRO, subclasses last), for bounding inherited fields."""
    out: dict[str, Limit] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if "limit" in f.metadata:
            out[f.name] = f.metadata["limit"]
    for klass in reversed(cls.__mro__):
        out.update(vars(klass).get("LIMITS", {}) or {})
    return out


def check_value(value: object, limit: Limit | None, where: str, help_text: str = "") -> None:
    """Refuse a number outside its limit, and NaN / infinity (also inside lists) with a one-line message."""
    if isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            check_value(v, limit, f"{where}[{i}]", help_text)
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return
    what = f" ({help_text})" if help_text else ""
    if isinstance(value, int) and not INT64[0] <= value <= INT64[1]:
        rng = f"; it must be {limit.describe()}" if limit else f"; pass a value of at most {INT64[1]:.3g}"
        raise ReconbenchError(f"{where}: {_short_number(value)} is outside the 64-bit integer range{what}{rng}")
    if isinstance(value, float) and not math.isfinite(value):
        rng = f" {limit.describe()}" if limit else ""
        raise ReconbenchError(f"{where}: {value!r} is not a finite number{what}; pass a finite value{rng}")
    if limit is not None and not limit.holds(value):
        raise ReconbenchError(f"{where}: {value!r} is out of range{what}; it must be {limit.describe()}")


def coerce(value: object, annotation: object, where: str) -> Any:
    """Check (and gently convert int->float, list->tuple) a value against a simple type annotation;
    ``Annotated[int, Limit(ge=1)]`` also bounds it (the bounds of a table's keys, declared as an option's are)."""
    origin = typing.get_origin(annotation)
    if annotation is Any:
        return value
    if origin is typing.Annotated:
        base, *meta = typing.get_args(annotation)
        checked = coerce(value, base, where)
        for limit in meta:
            if isinstance(limit, Limit):
                check_value(checked, limit, where)
        return checked
    if origin in (typing.Union, types.UnionType):
        errors = []
        for arg in typing.get_args(annotation):
            if arg is type(None) and value is None:
                return None
            if arg is type(None):
                continue
            try:
                return coerce(value, arg, where)
            except ReconbenchError as exc:
                errors.append(str(exc))
        if len(errors) == 1:   # one arm besides None (Optional[...]): its own message says what is wrong
            raise ReconbenchError(errors[0])
        raise ReconbenchError(f"{where}: {value!r} does not fit {annotation}")
    if origin is typing.Literal:
        if value not in typing.get_args(annotation):
            raise ReconbenchError(f"{where}: {value!r} is not one of {list(typing.get_args(annotation))}")
        return value
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ReconbenchError(f"{where}: expected a list, got {type(value).__name__} {_short(value)}; write it "
                                  f"as a list, e.g. {_as_list(value)} (on a command line, inside single quotes)")
        args = typing.get_args(annotation)
        inner = args[0] if args else Any
        items = [coerce(v, inner, f"{where}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        if not isinstance(value, dict):
            raise ReconbenchError(f"{where}: expected a table/dict, got {type(value).__name__}")
        return dict(value)
    if annotation is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ReconbenchError(f"{where}: expected a number, got {type(value).__name__} {_short(value)}; "
                                  f"{_unquoted(value, float, 'a number such as 0.5')}")
        try:
            return float(value)
        except OverflowError:
            raise ReconbenchError(f"{where}: {_short_number(value)} is beyond the float64 range (about 1.8e308); "
                                  "pass a smaller number") from None
    if annotation is int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            else:
                raise ReconbenchError(f"{where}: expected an integer, got {type(value).__name__} {_short(value)}; "
                                      f"{_unquoted(value, int, 'a whole number such as 10')}")
        if not INT64[0] <= value <= INT64[1]:
            raise ReconbenchError(f"{where}: {_short_number(value)} is outside the 64-bit integer range; pass a "
                                  f"value of at most {INT64[1]:.3g}")
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


def _unquoted(value: object, kind: type, example: str) -> str:
    """The fix for text where a number belongs: the same digits without quotes, else what to write."""
    if isinstance(value, str):
        try:
            kind(value.strip())
        except ValueError:
            pass
        else:
            return f"write {value.strip()} without quotes"
        return f"write {example}, without quotes"
    return f"write {example}"


def _as_list(value: object) -> str:
    """How ``value`` reads as a list in TOML and in the command line's KEY=VALUE: ``[ssim]`` and ``ssim, corr`` as
    ``["ssim", "corr"]``, ``0`` as ``[0]``."""
    if isinstance(value, str):
        items = [item.strip().strip("'\"") for item in value.strip().strip("[]").split(",")]
        return json.dumps([item for item in items if item])
    return json.dumps([value], default=str)


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _short_number(value: int | float) -> str:
    """A huge integer as 1.00e+99 rather than its hundred digits (also beyond the float range)."""
    if not isinstance(value, int) or abs(value) < 10**15:
        return repr(value)
    digits = str(abs(value))
    return f"{'-' if value < 0 else ''}{digits[0]}.{digits[1:3]}e+{len(digits) - 1}"


@functools.cache
def type_hints(cls: type) -> dict[str, Any]:
    """``typing.get_type_hints(cls)``, read once per class: resolving the string annotations compiles each one, and a
    suite builds configs thousands of times (about 0.15 s of a `bench ci` run). Callers only read it."""
    return typing.get_type_hints(cls)


def build_config(cls: type[T], values: dict[str, Any] | None, owner: str = "config") -> T:
    """Instantiate dataclass ``cls`` from ``values``, rejecting unknown keys (with close matches) and wrong types."""
    values = dict(values or {})
    hints = type_hints(typing.cast(type, cls))
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = [k for k in values if k not in fields]
    if unknown:
        k = unknown[0]
        close = difflib.get_close_matches(k, list(fields), n=3, cutoff=0.5)
        hint = f" Did you mean: {', '.join(close)}?" if close else ""
        known = (f"Known options: {', '.join(sorted(fields))}." if fields else
                 "It takes no options: leave the option out.")
        raise ReconbenchError(f"{owner}: unknown option {k!r}.{hint} {known}")
    def label(k: str) -> str:  # "--set lr" for a command-line option, "attack x.lr" elsewhere
        return f"{owner} {k}" if owner.startswith("--") else f"{owner}.{k}"

    kwargs = {k: coerce(v, hints[k], label(k)) for k, v in values.items()}
    limits = field_limits(cls)
    for k, v in kwargs.items():
        if not fields[k].metadata.get("nonfinite"):
            check_value(v, limits.get(k), label(k), _short_help(fields[k]))
    return cls(**kwargs)


def check_option(cls: type, name: str, value: object, label: str) -> Any:
    """Check one option of config dataclass ``cls`` (type, finiteness, range), naming it ``label`` (e.g. ``--lr``)
    in the message; returns the coerced value."""
    hints = type_hints(cls)
    f = {f.name: f for f in dataclasses.fields(cls)}[name]  # type: ignore[arg-type]
    v = coerce(value, hints[name], label)
    if not f.metadata.get("nonfinite"):
        check_value(v, field_limits(cls).get(name), label, _short_help(f))
    return v


def _short_help(f: dataclasses.Field[Any]) -> str:
    text = str(f.metadata.get("help", ""))
    return text.split(";")[0].split(" (")[0][:60]


def config_to_dict(cfg: Any) -> dict[str, Any]:
    """The config as recorded and hashed: every option, except those declared ``omit_default`` at their default."""
    out = dataclasses.asdict(cfg)
    for f in dataclasses.fields(cfg):
        if f.metadata.get("omit_default") and out[f.name] == f.default:
            del out[f.name]
    return out


def describe_options(cls: type) -> list[tuple[str, str, Any, str]]:
    """(name, type, default, help) for every option of a config dataclass."""
    rows = []
    hints = type_hints(cls)
    for f in dataclasses.fields(cls):
        default = f.default if f.default is not dataclasses.MISSING else (
            f.default_factory() if f.default_factory is not dataclasses.MISSING else None)  # type: ignore[misc]
        tname = getattr(hints[f.name], "__name__", str(hints[f.name]))
        limit = field_limits(cls).get(f.name)
        help_text = f.metadata.get("help", "") + (f" [{limit.describe()}]" if limit else "")
        rows.append((f.name, tname, default, help_text))
    return rows


# -- search distributions ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class LogUniform:
    """log-uniform on [low, high]."""

    low: float
    high: float

    def sample(self, rng: np.random.Generator) -> float:
        return float(math.exp(rng.uniform(math.log(self.low), math.log(self.high))))


@dataclass(frozen=True)
class Uniform:
    """uniform on [low, high]."""

    low: float
    high: float

    def sample(self, rng: np.random.Generator) -> float:
        return float(rng.uniform(self.low, self.high))


@dataclass(frozen=True)
class Choice:
    """one of a fixed list of values."""

    values: tuple[Any, ...]

    def sample(self, rng: np.random.Generator) -> Any:
        return self.values[int(rng.integers(len(self.values)))]


Distribution = LogUniform | Uniform | Choice
