"""The loaded-image carrier every data set returns, and the task names a problem can pose.

A neutral module: the plugin contracts (:mod:`reconbench.interfaces`) and the targets both read it, and it reads
neither.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

TASKS = ("binary", "multiclass", "regression")


@dataclass
class ImageData:
    """A loaded data set: images in [0, 1] as float32 (N, C, H, W), integer labels, class names."""

    name: str
    images: np.ndarray
    labels: np.ndarray
    classes: list[str]
    source: str
