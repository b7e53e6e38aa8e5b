"""Every float of a model card's metrics tree, by its dotted path: what a re-trained target's card is compared with
the stored one by (to a re-run's rounding)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


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
