"""The external example packages of examples/, loaded from their source files as their installed modules would be."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

from reconbench import plugins

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load_module(name: str, path: Path) -> ModuleType:
    """Import the file at ``path`` as module ``name`` (also under that name in ``sys.modules``, so that the example's
    own tests import it as they would the installed package)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@contextmanager
def example_registered(package: str, plugin_name: str) -> Iterator[ModuleType]:
    """The example package ``examples/<package>`` (module ``package`` with dashes as underscores, in ``src/``)
    registered as a plugin while the block runs."""
    module_name = package.replace("-", "_")
    module = load_module(module_name, EXAMPLES / package / "src" / f"{module_name}.py")
    host = plugins.host()
    name = host.register(module, name=plugin_name)
    try:
        yield module
    finally:
        host.unregister(name)
