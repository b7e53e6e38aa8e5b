"""Audit a model trained elsewhere: bring weights, architecture and data, get a calibrated report (docs/audit.md)."""

from reconbench.auditing.run import DEFAULT_BUDGET, audit

__all__ = ["DEFAULT_BUDGET", "audit"]
