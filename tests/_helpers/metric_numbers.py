"""Every float of a model card's metrics tree, by its dotted path: what a re-trained target's card is compared with
the stored one by (to a re-run's rounding); and a Jacobian one unit in the last place apart, the rounding another
processor or library gives a certificate's Jacobian, on any processor."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

import torch


def numbers(tree: Any, path: str = "") -> Iterator[tuple[str, float]]:
    """Every float of a metrics tree with its dotted path, wall-clock seconds left out."""
    if isinstance(tree, dict):
        for key, value in tree.items():
            yield from numbers(value, f"{path}.{key}" if path else key)
    elif isinstance(tree, list):
        for i, value in enumerate(tree):
            yield from numbers(value, f"{path}[{i}]")
    elif isinstance(tree, float) and "seconds" not in path:
        yield path, tree


def last_place_apart(jacobian: Callable[..., dict[str, torch.Tensor]]) -> Callable[..., dict[str, torch.Tensor]]:
    """``jacobian`` with each nonzero entry of its blocks moved one unit in the last place, away from zero."""
    def moved(*args: object, **kwargs: object) -> dict[str, torch.Tensor]:
        return {name: torch.where(block != 0, torch.nextafter(block, block * math.inf), block)
                for name, block in jacobian(*args, **kwargs).items()}
    return moved
