"""The data that plugins and targets share: the loaded-image carrier every data set returns, the task names a
problem can pose, and the training problem (its spec and the built problem; built by
:func:`reconbench.targets.problems.build_problem`).

A neutral module: the plugin contracts (:mod:`reconbench.interfaces`) and the targets both read it, and it reads
neither.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Literal

import numpy as np
import torch

from reconbench.errors import ReconbenchError

TASKS = ("binary", "multiclass", "regression")


@dataclass
class ImageData:
    """A loaded data set: images in [0, 1] as float32 (N, C, H, W), integer labels, class names."""

    name: str
    images: np.ndarray
    labels: np.ndarray
    classes: list[str]
    source: str


@dataclass(frozen=True)
class ProblemSpec:
    """Everything that determines a problem."""

    dataset: str = "digits"
    task: str = "multiclass"
    n_per_class: int = 10
    num_classes: int | None = None      # multiclass: use classes 0..K-1 (None: all)
    binary_rule: str | None = None      # binary/regression: a key of BINARY_RULES (None: the data set's default)
    seed: int = 1                       # multiclass permutation
    n_test_per_class: int = 100
    n_decoy_per_class: int | None = None  # None: 2 * n_per_class (enough for a partition init with m = 2n)
    order: Literal["shuffled", "file"] = "shuffled"  # walk order of the data set: a seeded permutation, or file order
    order_seed: int = 0                 # seed of the permutation (order = "shuffled")

    def to_dict(self) -> dict:
        d = asdict(self)
        if self.order == "file":  # the spec of every problem recorded before `order` existed: keys unchanged
            del d["order"], d["order_seed"]
        return d

    def key(self) -> str:
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()[:12]


@dataclass
class Problem:
    """A training problem. Images are stored uncentred in [0, 1]; the accessors return centred tensors."""

    spec: ProblemSpec
    num_classes: int                 # K (2 for binary and regression)
    image_shape: tuple[int, int, int]
    mean: np.ndarray                 # (C, H, W) float64, per-pixel mean of the training images
    train_images: np.ndarray         # (n, C, H, W) float64 in [0, 1]
    train_labels: np.ndarray         # (n,) task labels: {0,1} binary/regression, 0..K-1 multiclass
    train_indices: np.ndarray        # indices into the data set
    test_images: np.ndarray
    test_labels: np.ndarray
    test_indices: np.ndarray
    decoy_images: np.ndarray
    decoy_labels: np.ndarray
    decoy_indices: np.ndarray
    original_train_labels: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    class_names: list[str] = field(default_factory=list)
    held_out_indices: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # into the data set
    held_out_labels: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))   # task labels
    source_images: np.ndarray | None = None  # the data set's images (shared, not copied) the held-out pool reads
    _held_out_means: np.ndarray | None = field(default=None, repr=False, compare=False)

    @property
    def task(self) -> str:
        return self.spec.task

    @property
    def n(self) -> int:
        return len(self.train_labels)

    @property
    def out_dim(self) -> int:
        return self.num_classes if self.task == "multiclass" else 1

    @property
    def class_counts(self) -> list[int]:
        return [int((self.train_labels == c).sum()) for c in range(self.num_classes)]

    def centred(self, images: np.ndarray, dtype: torch.dtype = torch.float64) -> torch.Tensor:
        return torch.as_tensor(images - self.mean[None], dtype=dtype)

    def x_train(self, dtype: torch.dtype = torch.float64) -> torch.Tensor:
        return self.centred(self.train_images, dtype)

    def x_test(self, dtype: torch.dtype = torch.float64) -> torch.Tensor:
        return self.centred(self.test_images, dtype)

    def x_decoy(self, dtype: torch.dtype = torch.float64) -> torch.Tensor:
        return self.centred(self.decoy_images, dtype)

    def held_out_images(self, positions: np.ndarray) -> np.ndarray:
        """Images of the held-out pool at ``positions`` (into ``held_out_indices``), float64 in [0, 1]."""
        if self.source_images is None:
            raise ReconbenchError("this problem has no held-out pool (it was not built from a data set)")
        return to_unit(self.source_images[self.held_out_indices[np.asarray(positions, dtype=np.int64)]])

    def held_out_class_means(self, chunk: int = 1024) -> np.ndarray:
        """(K, C, H, W) mean image of each class's held-out images, float64 in [0, 1] (NaN for a class with none);
        computed once per problem."""
        if self._held_out_means is None:
            means = np.full((self.num_classes, *self.image_shape), np.nan)
            for c in range(self.num_classes):
                pos = np.flatnonzero(self.held_out_labels == c)
                if len(pos):
                    total = sum(self.held_out_images(pos[s:s + chunk]).sum(0) for s in range(0, len(pos), chunk))
                    means[c] = total / len(pos)
            self._held_out_means = means
        return self._held_out_means

    def targets(self, labels: np.ndarray, dtype: torch.dtype = torch.float64) -> torch.Tensor:
        """Training targets for the loss: {0,1} floats (binary), class ids (multiclass), -1/+1 (regression)."""
        if self.task == "multiclass":
            return torch.as_tensor(labels, dtype=torch.long)
        if self.task == "regression":
            return torch.as_tensor(2.0 * labels - 1.0, dtype=dtype)
        return torch.as_tensor(labels, dtype=dtype)

    def mean_tensor(self, dtype: torch.dtype = torch.float64) -> torch.Tensor:
        return torch.as_tensor(self.mean, dtype=dtype)

    def indices_record(self) -> dict[str, list[int]]:
        return {"train": self.train_indices.tolist(), "test": self.test_indices.tolist(),
                "decoy": self.decoy_indices.tolist()}


def to_unit(raw: np.ndarray) -> np.ndarray:
    """Stored images as float64 in [0, 1] (uint8 files are divided by 255)."""
    out = raw.astype(np.float64)
    return out / 255.0 if raw.dtype == np.uint8 else out
