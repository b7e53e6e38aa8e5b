"""reconbench: a benchmark harness for training-data reconstruction attacks."""

from importlib.metadata import PackageNotFoundError, version

from reconbench.hookspecs import hookimpl

try:
    __version__ = version("reconbench")
except PackageNotFoundError:  # running from a source tree without installation
    __version__ = "0.0.0+unknown"

__all__ = ["__version__", "hookimpl"]
