"""What the audit tests share: networks built by plain PyTorch factories, and a digits split made with scikit-learn
alone (no reconbench code)."""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn


def digits_split(n_per_class: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """scikit-learn's digits as uint8 (x * 255 / 16, rounded), parity labels: n_per_class even and odd training
    images drawn with ``seed``, every other image held out."""
    from sklearn.datasets import load_digits

    bunch = load_digits()
    images = np.round(bunch.images * 255.0 / 16.0).astype(np.uint8)
    labels = (bunch.target % 2).astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(labels))
    train = np.concatenate([order[labels[order] == c][:n_per_class] for c in (0, 1)])
    held = np.setdiff1d(order, train)
    return images[train], labels[train], images[held], labels[held]


def small_mlp(input_shape: tuple[int, int, int], out_dim: int, hidden: int = 64) -> nn.Module:
    """A plain PyTorch MLP with biases everywhere."""
    return nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), hidden), nn.ReLU(), nn.Linear(hidden, out_dim))


class Rounding(nn.Module):
    """Rounds its input to quarters: a layer whose gradient is zero almost everywhere."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.round(x * 4) / 4


def rounding_mlp(input_shape: tuple[int, int, int], out_dim: int) -> nn.Module:
    return nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), 16), Rounding(), nn.ReLU(),
                         nn.Linear(16, out_dim))
