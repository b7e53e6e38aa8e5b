"""reconbench: a benchmark harness for training-data reconstruction attacks."""

from importlib.metadata import PackageNotFoundError, version

from reconbench.hookspecs import hookimpl

try:
    __version__ = version("reconbench")
except PackageNotFoundError:  # running from a source tree without installation
    __version__ = "0.0.0+unknown"

__all__ = ["__version__", "audit", "hookimpl"]


def audit(*args, **kwargs):  # type: ignore[no-untyped-def]
    """Audit released weights with the owner's data (:func:`reconbench.auditing.run.audit`, imported on first use so
    that ``import reconbench`` stays light)."""
    from reconbench.auditing.run import audit as run_audit

    return run_audit(*args, **kwargs)

