"""Small constructed problems for the evaluation tests (no data set, no training)."""

from __future__ import annotations

import numpy as np
import torch
from scipy.ndimage import gaussian_filter

from reconbench.data import Problem, ProblemSpec


def smooth_images(n: int, shape: tuple[int, int, int] = (1, 16, 16), seed: int = 0, sigma: float = 1.5) -> np.ndarray:
    """Random images with structure (Gaussian-blurred noise), each min-max scaled to [0, 1]."""
    rng = np.random.default_rng(seed)
    raw = rng.normal(size=(n, *shape))
    out = np.stack([np.stack([gaussian_filter(ch, sigma) for ch in img]) for img in raw])
    lo = out.reshape(n, -1).min(1)[:, None, None, None]
    hi = out.reshape(n, -1).max(1)[:, None, None, None]
    return (out - lo) / (hi - lo)


def make_problem(train: np.ndarray, labels: np.ndarray | None = None, decoys: np.ndarray | None = None,
                 task: str = "binary") -> Problem:
    n = len(train)
    labels = np.arange(n) % 2 if labels is None else np.asarray(labels)
    decoys = np.zeros((0, *train.shape[1:])) if decoys is None else decoys
    k = len(decoys)
    empty = np.zeros((0, *train.shape[1:]))
    return Problem(
        spec=ProblemSpec(dataset="synthetic", task=task, n_per_class=max(1, n // 2)),
        num_classes=int(labels.max()) + 1 if task == "multiclass" else 2,
        image_shape=tuple(train.shape[1:]),  # type: ignore[arg-type]
        mean=train.mean(0), train_images=train.astype(np.float64), train_labels=labels.astype(np.int64),
        train_indices=np.arange(n), test_images=empty, test_labels=np.zeros(0, dtype=np.int64),
        test_indices=np.zeros(0, dtype=np.int64), decoy_images=decoys.astype(np.float64),
        decoy_labels=np.arange(k) % 2, decoy_indices=np.arange(1000, 1000 + k),
    )


def centred(problem: Problem, images: np.ndarray) -> torch.Tensor:
    """Images in [0, 1] -> the problem's centred space (what an attack returns)."""
    return torch.as_tensor(images - problem.mean[None], dtype=torch.float64)


def noisy(images: np.ndarray, sd: float, seed: int) -> np.ndarray:
    return images + np.random.default_rng(seed).normal(scale=sd, size=images.shape)


#: evaluate() options that keep the tests fast: no figures and only the metrics a test reads
FAST = {"figures": False}
