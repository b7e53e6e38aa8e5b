"""The plugin manager: discovery through the ``reconbench`` entry-point group, and one registry per kind.

Built-in plugins (the ``reconbench_plugins`` package, i.e. the repository's ``plugins/`` folder) are found through
the same entry points as third-party ones. A plugin that fails to import is reported by name and skipped;
``RECONBENCH_STRICT_PLUGINS=1`` turns that into an error.
"""

from __future__ import annotations

import fnmatch
import os
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any, TypeVar

import pluggy

from reconbench import hookspecs
from reconbench.errors import ReconbenchError, UnknownNameError
from reconbench.interfaces import (
    PLUGIN_BASES,
    Attack,
    DatasetSource,
    Defense,
    InitRegime,
    Metric,
    ModelFamily,
    Plugin,
    SearchStrategy,
)

P = TypeVar("P", bound=Plugin[Any])

ENTRY_POINT_GROUP = "reconbench"
STRICT_ENV = "RECONBENCH_STRICT_PLUGINS"
KINDS = ("attacks", "models", "datasets", "inits", "metrics", "defenses", "searches")
# Singular nouns for messages: "unknown attack 'x'".
KIND_NOUN = {"attacks": "attack", "models": "model", "datasets": "dataset", "inits": "init",
             "metrics": "metric", "defenses": "defense", "searches": "search strategy"}


class PluginLoadError(ReconbenchError):
    """Raised in strict mode when a plugin cannot be imported."""


@dataclass
class PluginInfo:
    """What ``reconbench plugins`` shows for one loaded plugin."""

    name: str
    distribution: str | None
    version: str | None
    hooks: list[str] = field(default_factory=list)


@dataclass
class FailedPlugin:
    name: str
    entry_point: str
    error: str


@dataclass
class Entry:
    """One registered object and the plugin that registered it."""

    name: str
    obj: Plugin[Any]
    plugin: str

    @property
    def description(self) -> str:
        text = self.obj.description or (self.obj.__doc__ or "")
        return text.strip().splitlines()[0] if text.strip() else ""


class PluginHost:
    """Owns the pluggy manager and the per-kind registries built from it."""

    def __init__(self, load_entry_points: bool = True) -> None:
        self.pm = pluggy.PluginManager(ENTRY_POINT_GROUP)
        self.pm.add_hookspecs(hookspecs)
        self.failed: list[FailedPlugin] = []
        self._dists: dict[str, tuple[str | None, str | None]] = {}
        self._registries: dict[str, dict[str, Entry]] | None = None
        if load_entry_points:
            self._load_entry_points()

    # -- discovery -------------------------------------------------------------------------------------
    def _load_entry_points(self) -> None:
        strict = os.environ.get(STRICT_ENV, "").strip().lower() in {"1", "true", "yes"}
        for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
            if self.pm.get_plugin(ep.name) is not None:
                continue
            try:
                module = ep.load()
            except Exception as exc:  # any import-time failure of a plugin must not take the CLI down
                msg = f"{type(exc).__name__}: {exc}"
                if strict:
                    raise PluginLoadError(
                        f"plugin {ep.name!r} ({ep.value}) failed to load: {msg}. "
                        f"Unset {STRICT_ENV} to skip broken plugins instead."
                    ) from exc
                self.failed.append(FailedPlugin(ep.name, ep.value, msg))
                warnings.warn(
                    f"reconbench: skipped plugin {ep.name!r} ({ep.value}), which failed to load: {msg} "
                    f"(`reconbench plugins` lists it; {STRICT_ENV}=1 makes this an error)",
                    stacklevel=2,
                )
                continue
            dist = getattr(ep, "dist", None)
            self.register(module, name=ep.name,
                          distribution=getattr(dist, "name", None), version=getattr(dist, "version", None))

    def register(self, plugin: object, name: str | None = None, distribution: str | None = None,
                 version: str | None = None) -> str:
        """Register a plugin object or module (tests and notebooks use this directly)."""
        registered = self.pm.register(plugin, name=name)
        if registered is None:
            raise ReconbenchError(f"plugin {name!r} is already registered")
        self._dists[registered] = (distribution, version)
        self._registries = None
        return registered

    def unregister(self, name: str) -> None:
        self.pm.unregister(name=name)
        self._dists.pop(name, None)
        self._registries = None

    def plugin_infos(self) -> list[PluginInfo]:
        infos = []
        for name, plugin in self.pm.list_name_plugin():
            hooks = sorted(h.name for h in self.pm.get_hookcallers(plugin) or [])
            dist, ver = self._dists.get(name, (None, None))
            infos.append(PluginInfo(name=name, distribution=dist, version=ver, hooks=hooks))
        return sorted(infos, key=lambda i: i.name)

    # -- registries ------------------------------------------------------------------------------------
    def _build(self) -> dict[str, dict[str, Entry]]:
        registries: dict[str, dict[str, Entry]] = {}
        for kind in KINDS:
            entries: dict[str, Entry] = {}
            hook = getattr(self.pm.hook, f"register_{kind}")
            for impl in hook.get_hookimpls():
                plugin_name = self.pm.get_name(impl.plugin) or "?"

                def register(obj: object, _plugin: str = plugin_name, _entries: dict[str, Entry] = entries,
                             _kind: str = kind) -> None:
                    base = PLUGIN_BASES[_kind]
                    if not isinstance(obj, base):
                        raise ReconbenchError(
                            f"plugin {_plugin!r} registered {type(obj).__name__} through register_{_kind}, but it does "
                            f"not subclass reconbench.interfaces.{base.__name__}; declare it as "
                            f"`class {type(obj).__name__}({base.__name__})` (see CONTRIBUTING.md)")
                    name = obj.name
                    if not isinstance(name, str) or not name:
                        raise ReconbenchError(f"plugin {_plugin!r} registered a {KIND_NOUN[_kind]} without a name")
                    if name in _entries:
                        raise ReconbenchError(
                            f"{KIND_NOUN[_kind]} {name!r} is registered twice: by plugin "
                            f"{_entries[name].plugin!r} and by plugin {_plugin!r}; rename one of them."
                        )
                    _entries[name] = Entry(name=name, obj=obj, plugin=_plugin)

                impl.function(register=register)
            registries[kind] = dict(sorted(entries.items()))
        return registries

    def registry(self, kind: str) -> dict[str, Entry]:
        if kind not in KINDS:
            raise ReconbenchError(f"unknown plugin kind {kind!r}; choose one of: {', '.join(KINDS)}")
        if self._registries is None:
            self._registries = self._build()
        return self._registries[kind]

    def get(self, kind: str, name: str) -> Any:
        """The registered object (untyped: prefer the per-kind accessors :meth:`attack`, :meth:`init`, ...)."""
        reg = self.registry(kind)
        if name not in reg:
            raise UnknownNameError(KIND_NOUN[kind], name, reg, failed=[f.name for f in self.failed])
        return reg[name].obj

    def typed(self, kind: str, name: str, base: type[P]) -> P:
        """The object registered under ``name`` of ``kind``, as its kind's base class (the host checked it on
        registration)."""
        obj = self.get(kind, name)
        if not isinstance(obj, base):  # the host refuses such objects on registration; a registry edited by hand
            raise ReconbenchError(f"{KIND_NOUN[kind]} {name!r} is a {type(obj).__name__}, not a {base.__name__}")
        return obj

    def attack(self, name: str) -> Attack[Any]:
        return self.typed("attacks", name, Attack)

    def init(self, name: str) -> InitRegime[Any]:
        return self.typed("inits", name, InitRegime)

    def metric(self, name: str) -> Metric[Any]:
        return self.typed("metrics", name, Metric)

    def defense(self, name: str) -> Defense[Any]:
        return self.typed("defenses", name, Defense)

    def search(self, name: str) -> SearchStrategy[Any]:
        return self.typed("searches", name, SearchStrategy)

    def model(self, name: str) -> ModelFamily:
        return self.typed("models", name, ModelFamily)

    def dataset(self, name: str) -> DatasetSource:
        return self.typed("datasets", name, DatasetSource)

    def names(self, kind: str, pattern: str | None = None) -> list[str]:
        """Registered names of a kind, optionally filtered with a shell-style wildcard (``*kkt*``)."""
        names = list(self.registry(kind))
        return [n for n in names if pattern is None or fnmatch.fnmatch(n, pattern)]

    def entries(self, kind: str, pattern: str | None = None) -> Iterator[Entry]:
        reg = self.registry(kind)
        for n in self.names(kind, pattern):
            yield reg[n]


_HOST: PluginHost | None = None


def host() -> PluginHost:
    """The process-wide plugin host, created (and entry points loaded) on first use."""
    global _HOST
    if _HOST is None:
        _HOST = PluginHost()
    return _HOST


def get(kind: str, name: str) -> Any:
    """The registered object, untyped (kept for plugins and scripts written before the per-kind accessors below)."""
    return host().get(kind, name)


# per-kind accessors: the registered object typed as its kind's base class
def attack(name: str) -> Attack[Any]:
    return host().attack(name)


def init(name: str) -> InitRegime[Any]:
    return host().init(name)


def metric(name: str) -> Metric[Any]:
    return host().metric(name)


def defense(name: str) -> Defense[Any]:
    return host().defense(name)


def search(name: str) -> SearchStrategy[Any]:
    return host().search(name)


def model(name: str) -> ModelFamily:
    return host().model(name)


def dataset(name: str) -> DatasetSource:
    return host().dataset(name)


def names(kind: str, pattern: str | None = None) -> list[str]:
    return host().names(kind, pattern)

