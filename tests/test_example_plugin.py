"""The worked example of CONTRIBUTING.md is a real plugin and passes the conformance suite."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from reconbench import conformance, plugins

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "reconbench-naive-attack" / "src" / "reconbench_naive_attack.py"


def test_example_plugin_registers_and_conforms():
    spec = importlib.util.spec_from_file_location("reconbench_naive_attack", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    host = plugins.host()
    name = host.register(module, name="example-naive")
    try:
        assert "naive_margin" in host.names("attacks")
        conformance.check_attack(host.get("attacks", "naive_margin"))
    finally:
        host.unregister(name)
