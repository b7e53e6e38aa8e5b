"""Deprecated alias of :mod:`reconbench.nets`, kept for model plugins that import the base class from here."""

from reconbench.nets import Activation, TargetNet, init_linear_default_

__all__ = ["Activation", "TargetNet", "init_linear_default_"]
