"""reconbench: a benchmark harness for training-data reconstruction attacks."""

import importlib
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from reconbench.hookspecs import hookimpl

try:
    __version__ = version("reconbench")
except PackageNotFoundError:  # running from a source tree without installation
    __version__ = "0.0.0+unknown"

__all__ = ["__version__", "audit", "hookimpl"]


def __getattr__(name: str) -> Any:
    """``reconbench.audit``: :func:`reconbench.auditing.run.audit`, loaded on first use (PEP 562) so that
    ``import reconbench`` stays light (no torch). A name, not an import statement: every module imports this package
    for ``__version__`` and ``hookimpl``, and the facade is the one place that points back up."""
    if name == "audit":
        return importlib.import_module("reconbench.auditing.run").audit
    raise AttributeError(f"module 'reconbench' has no attribute {name!r}")
