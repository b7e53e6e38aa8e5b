"""The base of the typed records and their codec: strict reading (cattrs), key-preserving writing, upgrades.

Each record is a frozen dataclass. ``from_dict`` reads a JSON object strictly: a key the record does not name, or a
value of the wrong JSON type, is a one-line error naming the file, the field's path and the fix (a misspelt key is
told its nearest name). Only an *open* record (:attr:`Record.OPEN`: an image row's score columns, a comparison
point's metrics) keeps keys it does not name, in ``extra``. Fields may be absent (they read as their defaults and
stay absent when written back). ``to_dict`` writes the keys in the order they were read, so
``to_dict(from_dict(x)) == x`` for every file the project has published. A record built in code writes every field
in the order it declares them; :meth:`Record.written` builds one that writes exactly the fields given.

Numbers are not converted: a float field holding ``3`` keeps the int, so the file is written back byte for byte.

A :class:`FileFormat` is the door of one kind of file: the version stamp the file carries (``format``, ``kind``)
selects an explicit upgrade step to the form the record reads; a stamp it does not know is a one-line error.
"""

from __future__ import annotations

import difflib
import numbers
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import MISSING, Field, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

import cattrs
import numpy as np
from cattrs.cols import list_structure_factory, mapping_structure_factory
from cattrs.errors import (
    AttributeValidationNote,
    ClassValidationError,
    ForbiddenExtraKeysError,
    IterableValidationError,
    IterableValidationNote,
)
from cattrs.gen import make_dict_structure_fn, override

from reconbench.errors import ReconbenchError
from reconbench.provenance import read_json

#: the version of the typed view; bump it when a field changes meaning
SCHEMA_VERSION = 1

R = TypeVar("R", bound="Record")
_EMPTY: Mapping[str, Any] = {}


def number(v: object) -> float | None:
    """A stored value as a float: a number, a boolean, or ``{"value": x}``; None for NaN, text or absent."""
    if isinstance(v, Mapping):
        v = v.get("value")
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, (int, float)) and v == v:  # v == v: not NaN
        return float(v)
    return None


def mapping(v: object) -> Mapping[str, Any]:
    """``v`` when it is a JSON object, else an empty one (a field absent, null, or a placeholder string)."""
    return v if isinstance(v, Mapping) else _EMPTY


#: JSON scalars, which :func:`plain` returns as they are (by exact type: a subclass takes the general path)
_SCALARS = frozenset({str, int, float, bool, type(None)})


def plain(v: Any) -> Any:
    """A record (or a value type of :func:`register_value_type`), or JSON values holding them, as plain JSON
    values. Scalars inside a dict or list are taken as they are without a call per value (a record's per-image rows
    hold hundreds of thousands of them)."""
    t = type(v)
    if t in _SCALARS:
        return v
    if t is dict:
        return {k: x if type(x) in _SCALARS else plain(x) for k, x in v.items()}
    if t is list or t is tuple:
        return [x if type(x) in _SCALARS else plain(x) for x in v]
    if isinstance(v, Record) or t in VALUE_TYPES:
        return v.to_dict()
    if isinstance(v, Mapping):
        return {k: plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [plain(x) for x in v]
    return v


@dataclass(frozen=True)
class Record:
    """Base of the typed records: strict reading, key-preserving writing."""

    #: keys of the JSON object that no field names (an open record only), kept to be written back
    extra: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False, kw_only=True)
    #: the keys as read, in their order (written back so); None for a record built in code, which writes every field
    key_order: tuple[str, ...] | None = field(default=None, repr=False, compare=False, kw_only=True)

    _OWN: ClassVar[frozenset[str]] = frozenset({"extra", "key_order"})
    #: the format (schema and its version) of the JSON file a top-level record reads, as its writer stamps it
    SCHEMA: ClassVar[str | None] = None
    #: whether keys the record does not name are kept in ``extra`` (True) or refused (False)
    OPEN: ClassVar[bool] = False

    @classmethod
    def from_dict(cls: type[R], d: object, source: str | Path | None = None, *, remedy: str | None = None) -> R:
        """The record of a JSON object, read strictly; ``source`` (the file) names it in a one-line error, which
        ends with ``remedy`` (what to do about the file) when given."""
        return decode(cls, d, source, remedy=remedy)

    @classmethod
    def written(cls: type[R], **values: Any) -> R:
        """A record as a writer makes it when the file leaves fields out: exactly the fields given, written in the
        order given (a field given at its default is written too; one not given is not)."""
        rec = cls(**values)
        object.__setattr__(rec, "key_order", tuple(k for k in values if k not in cls._OWN))
        return rec

    def updated(self: R, **changes: Any) -> R:
        """The record with fields changed; of a record with chosen keys (read, or :meth:`written`), a field it did
        not write yet is written after those it does, as a key set on a JSON object is."""
        rec = replace(self, **changes)
        if self.key_order is not None:
            new = tuple(k for k in changes if k not in self.key_order and k not in self._OWN)
            object.__setattr__(rec, "key_order", self.key_order + new)
        return rec

    def without(self: R, *names: str) -> R:
        """The record with these fields back at their defaults and no longer written (of a record with chosen keys)."""
        rec = replace(self, **{n: _default(f) for f in fields(self) if (n := f.name) in names})
        if self.key_order is not None:
            object.__setattr__(rec, "key_order", tuple(k for k in self.key_order if k not in names))
        return rec

    def to_dict(self) -> dict[str, Any]:
        """The JSON object: the keys read (or given to :meth:`written`), in their order, then fields set that were
        not; a record built in code (``key_order`` None) writes every field, in the order the record declares."""
        every = self.key_order is None
        order = self.key_order or ()
        values: dict[str, Any] = {}
        for f in fields(self):
            if f.name in self._OWN:
                continue
            v = getattr(self, f.name)
            if not every and f.name not in order:
                default = f.default_factory() if f.default_factory is not MISSING else f.default
                if v == default:
                    continue
            values[f.name] = plain(v)
        out: dict[str, Any] = {}
        for k in order:
            if k in values:
                out[k] = values.pop(k)
            elif k in self.extra:
                out[k] = self.extra[k]
        out.update(values)
        out.update({k: v for k, v in self.extra.items() if k not in out})
        return out


# -- the strict codec ------------------------------------------------------------------------------------------
def _json_kind(v: object) -> str:
    if v is None:
        return "null"
    if isinstance(v, (bool, np.bool_)):
        return "a boolean"
    if isinstance(v, numbers.Integral):
        return "an integer"
    if isinstance(v, numbers.Real):
        return "a number"
    if isinstance(v, str):
        return f"the text {v[:40]!r}"
    if isinstance(v, Mapping):
        return "an object"
    if isinstance(v, (list, tuple)):
        return "a list"
    return f"a {type(v).__name__}"


def _type_name(t: object) -> str:
    if t is type(None):
        return "null"
    if t is bool:
        return "a boolean"
    if t is int:
        return "an integer"
    if t is float:
        return "a number"
    if t is str:
        return "text"
    if isinstance(t, type) and (issubclass(t, Record) or t in VALUE_TYPES):
        return f"an object (a {t.__name__})"
    origin = typing.get_origin(t)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(t))
    if origin in (list, tuple) or t is list:
        return "a list"
    if origin in (dict, Mapping) or t in (dict, Mapping):
        return "an object"
    return "any value" if t is Any else str(t)


class WrongType(TypeError):
    """A value of another JSON type than its field's."""

    def __init__(self, value: object, want: object) -> None:
        super().__init__(f"is {_json_kind(value)}, expected {_type_name(want)}")


def _strict_bool(v: object, _: object) -> bool:
    if v is True or v is False or isinstance(v, np.bool_):
        return v  # type: ignore[return-value]
    raise WrongType(v, bool)


def _strict_int(v: object, _: object) -> int:
    if type(v) is int or (isinstance(v, numbers.Integral) and not isinstance(v, bool)):
        return v  # type: ignore[return-value]
    raise WrongType(v, int)


def _strict_float(v: object, _: object) -> float:
    """An int stays an int (JSON has one number type; converting would change the written text)."""
    if type(v) is float or type(v) is int or (isinstance(v, numbers.Real) and not isinstance(v, bool)):
        return v  # type: ignore[return-value]
    raise WrongType(v, float)


def _strict_str(v: object, _: object) -> str:
    if type(v) is str or isinstance(v, str):
        return v
    raise WrongType(v, str)


def _is_union(t: object) -> bool:
    return typing.get_origin(t) in (typing.Union, types.UnionType)


def _kind_of_type(t: object) -> str:
    """The JSON kind a member of a union reads: null, bool, int, float, str, object or array."""
    origin = typing.get_origin(t) or t
    if t is type(None):
        return "null"
    if t in (bool, int, float, str):
        return t.__name__
    if (isinstance(t, type) and (issubclass(t, Record) or t in VALUE_TYPES)) or origin in (dict, Mapping):
        return "object"
    if origin in (list, tuple):
        return "array"
    raise TypeError(f"a record field of type {t} cannot be read strictly; give it a JSON type")


#: the JSON kind of the types ``json.loads`` makes (the fast path of :func:`_kind_of_value`)
_KINDS = {type(None): "null", bool: "bool", int: "int", float: "float", str: "str", dict: "object", list: "array"}


def _kind_of_value(v: object) -> str:
    kind = _KINDS.get(type(v))
    if kind is not None:
        return kind
    if v is None:
        return "null"
    if isinstance(v, (bool, np.bool_)):
        return "bool"
    if isinstance(v, numbers.Integral):
        return "int"
    if isinstance(v, numbers.Real):
        return "float"
    if isinstance(v, str):
        return "str"
    if isinstance(v, Mapping):
        return "object"
    if isinstance(v, (list, tuple)):
        return "array"
    return type(v).__name__


def _make_converter(detailed: bool) -> cattrs.Converter:
    """A strict converter; ``detailed``: its errors name the path of each bad field (slower, for the message)."""
    conv = cattrs.Converter(forbid_extra_keys=True, detailed_validation=detailed)
    conv.register_structure_hook(bool, _strict_bool)
    conv.register_structure_hook(int, _strict_int)
    conv.register_structure_hook(float, _strict_float)
    conv.register_structure_hook(str, _strict_str)

    def union_hook(t: object) -> Callable[[Any, Any], Any]:
        """A union reads the member of the value's JSON kind (an int where a float is also allowed)."""
        by_kind = {_kind_of_type(a): a for a in typing.get_args(t)}
        if "int" not in by_kind and "float" in by_kind:
            by_kind["int"] = by_kind["float"]
        hooks: dict[str, Callable[[Any, Any], Any]] = {}  # filled on first use (a member's hook may not exist yet)
        # the JSON scalars a member reads as they are (the strict float, int and str hooks return such a value
        # unchanged): taken without the lookups below, most of the values a record's per-image rows hold
        direct = {k for k, member in (("float", float), ("int", int), ("str", str)) if by_kind.get(k) is member}
        if by_kind.get("int") is float:
            direct.add("int")
        direct_types = frozenset({"float": float, "int": int, "str": str}[k] for k in direct)

        def structure(v: object, _: object) -> Any:
            if type(v) in direct_types:
                return v
            kind = _kind_of_value(v)
            if kind == "null" and "null" in by_kind:
                return None
            hook = hooks.get(kind)
            if hook is None:
                member = by_kind.get(kind)
                if member is None:
                    raise WrongType(v, t)
                hook = hooks[kind] = conv.get_structure_hook(member)
            return hook(v, by_kind[kind])
        return structure

    def list_hook(t: Any) -> Callable[[Any, Any], Any]:
        args = typing.get_args(t)
        item = args[0] if args else Any
        inner = None if item is Any else list_structure_factory(t, conv)

        def structure(v: object, _: object) -> Any:
            if not isinstance(v, (list, tuple)):
                raise WrongType(v, t)
            return v if inner is None else inner(v, t)
        return structure

    def mapping_hook(t: Any) -> Callable[[Any, Any], Any]:
        args = typing.get_args(t)
        value = args[1] if len(args) == 2 else Any
        inner = None if value is Any else mapping_structure_factory(t, conv)

        def structure(v: object, _: object) -> Any:
            if not isinstance(v, Mapping):
                raise WrongType(v, t)
            return v if inner is None else inner(v, t)
        return structure

    def record_hook(cls: type[Record]) -> Callable[[Any, Any], Any]:
        made = make_dict_structure_fn(cls, conv, _cattrs_forbid_extra_keys=not cls.OPEN,
                                      extra=override(omit=True), key_order=override(omit=True))
        names = frozenset(f.name for f in fields(cls)) - cls._OWN

        def structure(d: object, _: object) -> Any:
            if not isinstance(d, Mapping):
                raise WrongType(d, cls)
            rec = made(d, cls)
            object.__setattr__(rec, "key_order", tuple(d))
            if cls.OPEN:
                object.__setattr__(rec, "extra", {k: v for k, v in d.items() if k not in names})
            return rec
        return structure

    conv.register_structure_hook_factory(_is_union, union_hook)
    conv.register_structure_hook_factory(
        lambda t: typing.get_origin(t) in (list, tuple) or t in (list, tuple), list_hook)
    conv.register_structure_hook_factory(
        lambda t: typing.get_origin(t) in (dict, Mapping) or t in (dict, Mapping), mapping_hook)
    conv.register_structure_hook_factory(lambda t: isinstance(t, type) and issubclass(t, Record), record_hook)
    return conv


#: reads a valid file fast; an invalid one is read again by :data:`DETAILED` for the paths of its problems
CONVERTER = _make_converter(detailed=False)
DETAILED = _make_converter(detailed=True)

#: classes of the house that records hold as they are (not records themselves): each reads a JSON object with its
#: own checks (:func:`register_value_type`) and writes it back with its ``to_dict``
VALUE_TYPES: dict[type, Callable[[Any], Any]] = {}


def register_value_type(cls: type, read: Callable[[Any], Any]) -> None:
    """Let records hold ``cls`` (a class with ``to_dict``): ``read`` makes one from a JSON object, raising a
    one-line error on a bad one. Register at import, before the first record holding it is read."""
    VALUE_TYPES[cls] = read
    for conv in (CONVERTER, DETAILED):
        conv.register_structure_hook(cls, lambda d, _: read(d))


def _problems(exc: BaseException, path: str, cls: object) -> list[tuple[str, Any, BaseException]]:
    """(the field's path, the record class it is in, the error) for each leaf error of a cattrs validation."""
    if isinstance(exc, ClassValidationError):
        out = []
        with_notes, without = exc.group_exceptions()
        for e, note in with_notes:
            assert isinstance(note, AttributeValidationNote)
            out += _problems(e, f"{path}.{note.name}", cls)
        for e in without:
            out += _problems(e, path, exc.cl)
        return out
    if isinstance(exc, IterableValidationError):
        out = []
        notes, without = exc.group_exceptions()
        for e, inote in notes:
            assert isinstance(inote, IterableValidationNote)
            index = inote.index
            out += _problems(e, f"{path}[{index!r}]" if isinstance(index, str) else f"{path}[{index}]", cls)
        for e in without:
            out += _problems(e, path, cls)
        return out
    return [(path, cls, exc)]


def _describe(path: str, cls: object, exc: BaseException) -> str:
    if isinstance(exc, ForbiddenExtraKeysError):
        known = sorted({f.name for f in fields(exc.cl)} - Record._OWN)
        has = f"a {exc.cl.__name__} has {', '.join(known[:12])}{', ...' if len(known) > 12 else ''}"
        keys = sorted(exc.extra_fields)
        if len(keys) > 1:
            return f"unknown keys {', '.join(f'{path}.{k}' for k in keys)}; remove or rename them ({has})"
        close = difflib.get_close_matches(keys[0], known, n=1)
        fix = f"rename it to {close[0]!r}" if close else f"remove it ({has})"
        return f"unknown key {path}.{keys[0]}; {fix}"
    if isinstance(exc, WrongType):
        return f"{path} {exc}; correct the value"
    if _is_missing(path, exc):
        return f"field {path} is missing; add it"
    return f"{path}: {exc}"


def _is_missing(path: str, exc: BaseException) -> bool:
    """Whether a leaf error is cattrs' for a required key absent (a ``KeyError`` of the field's own name)."""
    return isinstance(exc, KeyError) and bool(exc.args) and path.endswith(f".{exc.args[0]}")


def _rename_first(problems: list[tuple[str, Any, BaseException]]) -> list[tuple[str, Any, BaseException]]:
    """The problems with a misspelt key first: an unknown key whose nearest name is a required field that is missing
    is one problem (its fix is the rename), not two."""
    missing = {path for path, _, exc in problems if _is_missing(path, exc)}
    for i, (path, _, exc) in enumerate(problems):
        if isinstance(exc, ForbiddenExtraKeysError) and len(exc.extra_fields) == 1:
            known = sorted({f.name for f in fields(exc.cl)} - Record._OWN)
            close = difflib.get_close_matches(next(iter(exc.extra_fields)), known, n=1)
            if close and f"{path}.{close[0]}" in missing:
                rest = [p for j, p in enumerate(problems) if j != i and p[0] != f"{path}.{close[0]}"]
                return [problems[i], *rest]
    return problems


#: what a one-line refusal tells a user to do about the file, unless its format says otherwise
REMEDY = "the file was edited by hand or written by another version: restore it, or render it again"


def decode(cls: type[R], d: object, source: str | Path | None = None, *, remedy: str | None = None) -> R:
    """``d`` read strictly as a ``cls``, or a one-line :class:`ReconbenchError` naming the file, the field and the
    fix (the first problem, and how many more there are), ending with ``remedy`` (default :data:`REMEDY`)."""
    try:
        return CONVERTER.structure(d, cls)
    except Exception:  # noqa: BLE001 - any failure of the fast pass is read again below, for its message
        pass
    try:
        return DETAILED.structure(d, cls)
    except (ClassValidationError, IterableValidationError, WrongType, ForbiddenExtraKeysError) as exc:
        problems = _rename_first(_problems(exc, "$", cls))
        first = _describe(*problems[0])
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        name = source if source is not None else f"a {cls.__name__}"
        kind = "" if source is None else f" (a {cls.__name__})"
        line = f"{name}{kind}: {first}{more}".replace("\n", "\\n")
        raise ReconbenchError(f"{line}; {remedy or REMEDY}") from None


# -- the door: version stamps and their upgrades ------------------------------------------------------------
Upgrade = Callable[[dict[str, Any]], dict[str, Any]]


def unchanged(data: dict[str, Any]) -> dict[str, Any]:
    """The upgrade of the current version: nothing to do."""
    return data


@dataclass(frozen=True)
class FileFormat(Generic[R]):
    """One kind of JSON file: the record it reads as, the key of its version stamp (None: the file carries none),
    and for each stamp it reads the step that brings the file to the form the record reads."""

    record: type[R]
    stamp_key: str | None
    upgrades: Mapping[str | None, Upgrade]
    #: what a user does about a file of a stamp not in ``upgrades``
    fix: str = "upgrade reconbench, or write the file again with this version"
    #: what a user does about a file of a known stamp that does not read (None: :data:`REMEDY`)
    remedy: str | None = None

    def stamp(self, data: Mapping[str, Any]) -> str | None:
        v = data.get(self.stamp_key) if self.stamp_key is not None else None
        return v if isinstance(v, str) or v is None else repr(v)

    def upgrade(self, data: object, source: str | Path | None = None) -> dict[str, Any]:
        """The file's JSON in the form the record reads (its version's upgrade step), or a one-line error."""
        name = source if source is not None else f"a {self.record.__name__}"
        if not isinstance(data, dict):
            raise ReconbenchError(f"{name} is not a {self.record.__name__} (a JSON {_json_kind(data)}, expected an "
                                  "object); restore it, or write it again")
        stamp = self.stamp(data)
        step = self.upgrades.get(stamp)
        if step is None:
            known = ", ".join(repr(s) for s in self.upgrades)
            raise ReconbenchError(f"{name}: {self.stamp_key} {stamp!r} is not a version this reconbench reads "
                                  f"({known}); {self.fix}")
        return step(data)

    def decode(self, data: object, source: str | Path | None = None) -> R:
        """The record of a file's JSON: upgraded by its version stamp, then read strictly."""
        return self.record.from_dict(self.upgrade(data, source), source, remedy=self.remedy)

    def read(self, path: Path) -> R:
        """The record of a file, or a one-line error naming it (missing, not JSON, or not of this format)."""
        data = read_json(Path(path), missing="pass the path of an existing file",
                         damaged="restore it, or write it again")
        return self.decode(data, path)


def _default(f: Field[Any]) -> Any:
    """A dataclass field's default value."""
    return f.default_factory() if f.default_factory is not MISSING else f.default
