"""Plugin discovery through entry points, including a deliberately broken plugin."""

from __future__ import annotations

import textwrap

import pytest

from reconbench import hookspecs, plugins
from reconbench.errors import ReconbenchError, UnknownNameError
from reconbench.plugins import PluginHost, PluginLoadError


def make_distribution(root, name: str, entry_points: dict[str, str], modules: dict[str, str]) -> None:
    """A fake installed distribution (a .dist-info folder) that importlib.metadata finds on sys.path."""
    info = root / f"{name.replace('-', '_')}-0.3.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.3\n")
    eps = "\n".join(f"{k} = {v}" for k, v in entry_points.items())
    (info / "entry_points.txt").write_text(f"[reconbench]\n{eps}\n")
    for mod, src in modules.items():
        (root / f"{mod}.py").write_text(textwrap.dedent(src))


GOOD = """
from dataclasses import dataclass
from reconbench import hookimpl
from reconbench.interfaces import Defense as DefenseBase

@dataclass(frozen=True)
class Defense(DefenseBase):
    name: str = "ext_noop_defense"
    description: str = "a defense from an external package"
    def apply(self, model, problem, config, *, generator):
        pass

@hookimpl
def register_defenses(register):
    register(Defense())
"""


@pytest.fixture
def fake_dists(tmp_path, monkeypatch):
    make_distribution(tmp_path, "reconbench-ext-good", {"ext_good": "ext_good_mod"}, {"ext_good_mod": GOOD})
    make_distribution(tmp_path, "reconbench-ext-broken", {"ext_broken": "ext_broken_mod"},
                      {"ext_broken_mod": "raise RuntimeError('boom at import')\n"})
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("RECONBENCH_STRICT_PLUGINS", raising=False)
    return tmp_path


def test_builtins_are_found_through_entry_points():
    host = PluginHost()
    infos = {i.name: i for i in host.plugin_infos()}
    for name in ("datasets", "models", "inits"):
        assert infos[name].distribution == "reconbench"
        assert infos[name].hooks, name
    assert {"digits", "mnist", "cifar10", "cifar100", "npz"} <= set(host.names("datasets"))
    assert {"mlp", "mlp_bias", "affine", "conv"} <= set(host.names("models"))


def test_external_plugin_loads_and_broken_one_is_skipped(fake_dists):
    with pytest.warns(UserWarning, match="ext_broken.*boom at import"):
        host = PluginHost()
    assert "ext_noop_defense" in host.names("defenses")
    info = {i.name: i for i in host.plugin_infos()}["ext_good"]
    assert (info.distribution, info.version, info.hooks) == ("reconbench-ext-good", "0.3", ["register_defenses"])
    assert [f.name for f in host.failed] == ["ext_broken"]
    assert "boom at import" in host.failed[0].error
    assert "mlp" in host.names("models")  # the rest keeps working


def test_strict_mode_raises_on_broken_plugin(fake_dists, monkeypatch):
    monkeypatch.setenv("RECONBENCH_STRICT_PLUGINS", "1")
    with pytest.raises(PluginLoadError, match="ext_broken.*boom at import"):
        PluginHost()


def test_unknown_name_lists_close_matches():
    host = PluginHost()
    with pytest.raises(UnknownNameError) as err:
        host.get("models", "mpl")
    assert "mlp" in err.value.close_matches
    assert "Did you mean" in str(err.value) and "reconbench list models" in str(err.value)


def test_wildcard_filter_and_kind_validation():
    host = PluginHost()
    assert host.names("models", "mlp*") == ["mlp", "mlp_bias"]
    with pytest.raises(ReconbenchError, match="unknown plugin kind"):
        host.registry("widgets")


def test_duplicate_registration_is_an_error():
    host = PluginHost()

    class Dup:
        @hookspecs.hookimpl
        def register_models(self, register):  # type: ignore[no-untyped-def]
            register(plugins.get("models", "mlp"))

    host.register(Dup(), name="dup")
    with pytest.raises(ReconbenchError, match="registered twice"):
        host.registry("models")


def test_every_hook_is_documented_and_has_a_kind():
    specs = [n for n in dir(hookspecs) if n.startswith("register_")]
    assert sorted(s.removeprefix("register_") for s in specs) == sorted(plugins.KINDS)
    for s in specs:
        assert getattr(hookspecs, s).__doc__, s


def test_an_object_that_does_not_subclass_its_kind_is_refused_by_name():
    from dataclasses import dataclass

    from reconbench import hookimpl

    @dataclass(frozen=True)
    class LooseAttack:  # has the attributes but not the base class
        name: str = "loose"
        description: str = "not declared as an Attack"

    class Plugin:
        @hookimpl
        def register_attacks(self, register):  # type: ignore[no-untyped-def]
            register(LooseAttack())

    host = PluginHost()
    host.register(Plugin(), name="loose-plugin")
    with pytest.raises(ReconbenchError, match=r"LooseAttack through register_attacks, but it does not subclass "
                                              r"reconbench.interfaces.Attack"):
        host.names("attacks")


def test_an_unknown_name_names_the_plugins_that_failed_to_load(fake_dists):
    import pickle

    with pytest.warns(UserWarning, match="ext_broken"):
        host = PluginHost()
    with pytest.raises(UnknownNameError, match=r"failed to load, which may register it: ext_broken") as info:
        host.get("defenses", "from_the_broken_plugin")
    again = pickle.loads(pickle.dumps(info.value))   # crosses process boundaries whole
    assert str(again) == str(info.value) and again.failed == ["ext_broken"]
    with pytest.raises(UnknownNameError) as clean:   # without failed plugins the message says nothing of them
        plugins.get("defenses", "from_the_broken_plugin")
    assert "failed to load" not in str(clean.value)


def test_a_shell_shows_reconbenchs_warnings_as_one_line_and_others_as_python_does(capsys):
    from reconbench.cli import one_line_warnings

    passed: list[str] = []
    shown = one_line_warnings(lambda message, *rest: passed.append(str(message)))
    shown(UserWarning("reconbench: skipped plugin 'x'"), UserWarning, "/somewhere/plugins.py", 89)
    shown(UserWarning("another library's warning"), UserWarning, "lib.py", 1)
    assert capsys.readouterr().err == "warning: skipped plugin 'x'\n"
    assert passed == ["another library's warning"]
