"""Deprecated alias of :mod:`reconbench.data`, kept for data-set plugins that import the carrier from here."""

from reconbench.data import TASKS, ImageData

__all__ = ["TASKS", "ImageData"]
