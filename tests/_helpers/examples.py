"""The external example packages of examples/, loaded from their source files as their installed modules would be."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

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
