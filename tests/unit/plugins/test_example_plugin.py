"""The worked example of CONTRIBUTING.md is a real plugin: registered as its entry point would register it, it
passes its own test (the conformance suite, the snippet CONTRIBUTING shows)."""

from __future__ import annotations

from _helpers.examples import EXAMPLES, example_registered, load_module

from reconbench import plugins

EXAMPLE = EXAMPLES / "reconbench-naive-attack"


def test_example_plugin_registers_and_passes_its_own_tests():
    with example_registered("reconbench-naive-attack", "example-naive"):
        assert "naive_margin" in plugins.host().names("attacks")
        tests = load_module("example_naive_tests", EXAMPLE / "tests" / "test_conformance.py")
        found = [name for name in dir(tests) if name.startswith("test_")]
        assert found == ["test_naive_attack_conforms"]
        for name in found:
            getattr(tests, name)()
