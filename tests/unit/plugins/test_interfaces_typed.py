"""The typed plugin contract: plugin kinds generic in their options class, per-kind registry accessors, and a
budget on parameters annotated ``Any`` so that the untyped surface cannot grow back."""

from __future__ import annotations

import ast
import dataclasses
import typing
from pathlib import Path
from typing import Any

import pytest

from reconbench import hookimpl, plugins
from reconbench.errors import ReconbenchError, UnknownNameError
from reconbench.interfaces import (
    Attack,
    AttackOutput,
    DatasetSource,
    Defense,
    InitRegime,
    Metric,
    ModelFamily,
    NoOptions,
    Plugin,
    SearchStrategy,
)

ROOT = Path(__file__).resolve().parents[3]

#: parameters annotated exactly ``Any`` in reconbench/ and plugins/ (also *args and **kwargs): at most this many
ANY_PARAMETER_BUDGET = 40


def any_parameters(source: str, filename: str = "<source>") -> list[str]:
    """``name:line`` of every function parameter whose annotation is exactly ``Any`` (or the string "Any")."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            a = node.args
            for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs, *(x for x in (a.vararg, a.kwarg) if x)]:
                ann = arg.annotation
                if (isinstance(ann, ast.Name) and ann.id == "Any") or (isinstance(ann, ast.Constant)
                                                                       and ann.value == "Any"):
                    found.append(f"{arg.arg}:{arg.lineno}")
    return found


def test_the_any_counter_sees_every_kind_of_parameter():
    src = ("def f(a: Any, /, b: int, *args: Any, c: 'Any' = 1, d: list[Any] = [], **kw: Any) -> Any: ...\n"
           "class K:\n    def m(self, x: Any) -> None: ...\n")
    assert [p.split(":")[0] for p in any_parameters(src)] == ["a", "c", "args", "kw", "x"]


def test_parameters_annotated_any_stay_within_the_budget():
    hits = [f"{path.relative_to(ROOT)}:{p}" for folder in ("reconbench", "plugins")
            for path in sorted((ROOT / folder).rglob("*.py")) for p in any_parameters(path.read_text(), str(path))]
    assert len(hits) <= ANY_PARAMETER_BUDGET, (
        f"{len(hits)} parameters are annotated Any (budget {ANY_PARAMETER_BUDGET}); type the new ones: {hits}")


# -- per-kind accessors ---------------------------------------------------------------------------------------
ACCESSORS = [("attacks", plugins.attack, Attack), ("inits", plugins.init, InitRegime),
             ("metrics", plugins.metric, Metric), ("defenses", plugins.defense, Defense),
             ("searches", plugins.search, SearchStrategy), ("models", plugins.model, ModelFamily),
             ("datasets", plugins.dataset, DatasetSource)]


@pytest.mark.parametrize(("kind", "accessor", "base"), ACCESSORS, ids=[k for k, _, _ in ACCESSORS])
def test_each_accessor_returns_the_registered_object_as_its_kind(kind, accessor, base):
    names = plugins.names(kind)
    assert names, f"no {kind} registered"
    for name in names:
        obj = accessor(name)
        assert obj is plugins.get(kind, name) and isinstance(obj, base)


@pytest.mark.parametrize(("kind", "accessor", "base"), ACCESSORS, ids=[k for k, _, _ in ACCESSORS])
def test_an_unknown_name_is_one_line_with_the_kind(kind, accessor, base):
    with pytest.raises(UnknownNameError, match=plugins.KIND_NOUN[kind]):
        accessor("no_such_plugin_xyz")


def test_an_object_of_another_kind_in_a_registry_is_refused():
    host = plugins.PluginHost(load_entry_points=False)
    host.registry("attacks")["wrong"] = plugins.Entry("wrong", plugins.metric("ssim"), "hand-edited")
    with pytest.raises(ReconbenchError, match="'wrong' is a PaperSsim, not a Attack"):
        host.attack("wrong")


# -- generic kinds --------------------------------------------------------------------------------------------
def declared_config(cls: type) -> object | None:
    """The options class a plugin class declares through its kind's type parameter (``Attack[KKTConfig]``), following
    generic intermediate classes; None when it subclasses the plain kind."""
    for klass in cls.__mro__:
        for base in getattr(klass, "__orig_bases__", ()):
            origin = typing.get_origin(base)
            if isinstance(origin, type) and issubclass(origin, Plugin):
                (arg,) = typing.get_args(base)
                if not isinstance(arg, typing.TypeVar):
                    return arg
    return None


GENERIC_KINDS = ("attacks", "inits", "metrics", "defenses", "searches")


@pytest.mark.parametrize("kind", GENERIC_KINDS)
def test_a_built_in_plugin_declares_the_config_class_it_uses(kind):
    """Every built-in plugin of a generic kind names its options class as the type parameter, and that class is the
    ``config_cls`` the harness builds (read from the class objects, not from the source)."""
    for entry in plugins.host().entries(kind):
        if not type(entry.obj).__module__.startswith("reconbench_plugins."):
            continue   # a third party's plugin may subclass the plain kind
        declared = declared_config(type(entry.obj))
        assert declared is entry.obj.config_cls, (
            f"{kind} {entry.name}: declares {declared!r} but config_cls is {entry.obj.config_cls!r}")


@dataclasses.dataclass
class _PlainConfig:
    steps: int = 1


@dataclasses.dataclass(frozen=True)
class _PlainAttack(Attack):
    """Written against the interface as it was before it was generic: plain base, ``config_cls: type``."""

    name: str = "plain_interface_attack"
    config_cls: type = _PlainConfig

    def run(self, target: Any, x0: Any, labels: Any, config: Any, *, generator: Any,
            progress: Any = None) -> AttackOutput:
        return AttackOutput(candidates=x0, labels=labels, final_loss=float(config.steps))


class _PlainPlugin:
    @hookimpl
    def register_attacks(self, register):  # type: ignore[no-untyped-def]
        register(_PlainAttack())


def test_a_plugin_written_against_the_plain_bases_still_registers():
    host = plugins.PluginHost(load_entry_points=False)
    host.register(_PlainPlugin(), name="plain")
    attack = host.attack("plain_interface_attack")
    assert declared_config(type(attack)) is None and attack.config_cls is _PlainConfig
    assert Attack[_PlainConfig] is not Attack and issubclass(_PlainAttack, Attack)


def test_kinds_without_options_default_to_no_options():
    assert ModelFamily.config_cls is NoOptions and DatasetSource.config_cls is NoOptions


def test_the_package_ships_its_type_marker():
    assert (ROOT / "reconbench" / "py.typed").is_file()
    assert '"reconbench" = ["py.typed"]' in (ROOT / "pyproject.toml").read_text()


def _snippet_declarations(text: str) -> list[str]:
    """The class and config_cls lines of CONTRIBUTING's Python snippets (comments dropped)."""
    lines = []
    for block in text.split("```python")[1:]:
        for line in block.split("```")[0].splitlines():
            code = line.split("#")[0].rstrip()
            if code.startswith("class ") or code.strip().startswith("config_cls"):
                lines.append(code.strip())
    return lines


def test_contributing_snippets_declare_what_the_tested_example_packages_declare():
    """CONTRIBUTING's plugin snippets are abridged from the example packages, whose own tests (and
    test_example_*.py) run them through the conformance suite: every class and config_cls line of a snippet is in
    one of the packages, so the snippets are tested against today's interface too."""
    sources = "\n".join(p.read_text() for p in sorted((ROOT / "examples").rglob("src/*.py")))
    declared = [line.strip() for line in sources.splitlines()]
    snippets = _snippet_declarations((ROOT / "CONTRIBUTING.md").read_text())
    assert len(snippets) >= 4
    missing = [line for line in snippets if line not in declared]
    assert missing == [], f"CONTRIBUTING shows declarations no example package has: {missing}"
