"""Problems: the training subset, task labels, mean image, test split and decoy pool built from a data set.

Construction is deterministic in (dataset, task, n_per_class, rule/classes, seed, order, order_seed) and follows
the reference implementations (docs/method/targets.md#walk-order and the sections after it) on the data set's
*walk order*:

* the walk order is the data set's file order (``order = "file"``: the papers' subsets) or a permutation of it drawn
  with ``order_seed`` (``order = "shuffled"``, the default of new problems). Data files are ordered (by writer, by
  batch, by class position), so the first images of a file are not a random sample of it; shuffling makes the
  training images, the decoys and the held-out pool exchangeable draws of each class (docs/calibration.md);
* binary and regression: walk the data set and keep a sample while its binary class has fewer than ``n_per_class``
  kept (interleaved); regression targets are -1 / +1;
* multiclass: the first ``n_per_class`` indices (in walk order) of each of the first K classes, concatenated, then
  permuted with ``torch.randperm`` under ``seed``;
* the per-pixel mean image of the training subset is subtracted from everything; there is no rescaling.

Of the remaining indices (walk order), the first ``n_decoy_per_class`` of each class form the decoy pool and the
next ``n_test_per_class`` the test split, so training, decoy and test images are pairwise disjoint.

A problem recorded before ``order`` existed (model cards, suite files, stored recipes without the key) used file
order: :func:`recorded_spec_dict` reads such records, and :meth:`ProblemSpec.to_dict` leaves both keys out for file
order, so the recipe keys of those targets are unchanged.

Every image in neither the training subset nor the decoy pool (the test split included) forms the *held-out pool*:
images of the same distribution that the model never saw and that no attack is handed. The evaluation draws its
``held_out`` null from it (docs/calibration.md). It is derived from the split above and adds nothing to the spec,
so recipe keys do not change; its images are read from the data set on demand (a view, no copy).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import torch

from reconbench import plugins
from reconbench.data import TASKS, ImageData, Problem, ProblemSpec, to_unit
from reconbench.errors import DataError, ReconbenchError
from reconbench.targets.data_files import data_root as resolve_data_root

VEHICLES = {"airplane", "automobile", "ship", "truck"}


def _parity(labels: np.ndarray, classes: list[str]) -> np.ndarray:
    return (labels % 2).astype(np.int64)  # even -> 0, odd -> 1


def _vehicles_animals(labels: np.ndarray, classes: list[str]) -> np.ndarray:
    names = {c.lower() for c in classes}
    if not VEHICLES <= names:
        raise ReconbenchError(
            "binary rule 'vehicles_animals' needs CIFAR-10 class names (airplane, automobile, ship, truck, ...); "
            f"this data set has classes {classes[:10]}. Use --binary-rule parity instead."
        )
    is_vehicle = np.array([classes[int(lbl)].lower() in VEHICLES for lbl in labels])
    return np.where(is_vehicle, 0, 1).astype(np.int64)  # vehicles -> 0, animals -> 1


#: binary rules: original labels -> {0, 1}
BINARY_RULES: dict[str, Callable[[np.ndarray, list[str]], np.ndarray]] = {
    "parity": _parity,
    "vehicles_animals": _vehicles_animals,
}


#: how a problem recorded without the ``order`` key was built
RECORDED_WITHOUT_ORDER: dict[str, Any] = {"order": "file"}


def recorded_spec_dict(d: dict[str, Any]) -> dict[str, Any]:
    """A problem spec as recorded (card, cell, suite file): without ``order`` it was built in file order."""
    return dict(d) if "order" in d else {**d, **RECORDED_WITHOUT_ORDER}


def walk_order(spec: ProblemSpec, size: int) -> np.ndarray:
    """The order in which the data set's ``size`` images are walked: file order, or a permutation under order_seed."""
    if spec.order == "file":
        return np.arange(size)
    return np.random.default_rng(spec.order_seed).permutation(size)


def split_dataset_ref(ref: str) -> tuple[str, str | None]:
    """``"npz:path/file.npz"`` -> ("npz", "path/file.npz"); ``"digits"`` -> ("digits", None)."""
    name, _, arg = ref.partition(":")
    return name, (arg or None)


def load_dataset(ref: str, data_root: str | Path | None = None) -> ImageData:
    name, arg = split_dataset_ref(ref)
    source = plugins.get("datasets", name)  # untyped: the npz source takes a path beside the root
    root = resolve_data_root(data_root)
    data = source.load(root, arg) if arg is not None else source.load(root)
    _validate(data, ref)
    return data


@lru_cache(maxsize=4)
def _load_cached(ref: str, root: str | None, where: str) -> ImageData:
    """``where``: the absolute data folder ``root`` resolves to now, part of the key only, so that a changed
    $RECONBENCH_DATA or working folder loads the set again instead of returning the one loaded from the old folder."""
    return load_dataset(ref, root)


def _validate(data: ImageData, ref: str) -> None:
    imgs = data.images
    if imgs.ndim != 4 or imgs.shape[1] not in (1, 3) or len(imgs) != len(data.labels):
        raise DataError(f"data set {ref!r}: images must be (N, C, H, W) with C in (1, 3) and one label each; "
                        f"got images {imgs.shape} and labels {data.labels.shape}")
    if len(data.labels) and (data.labels.min() < 0 or data.labels.max() >= len(data.classes)):
        raise DataError(f"data set {ref!r}: labels must lie in 0..{len(data.classes) - 1} (its {len(data.classes)} "
                        f"classes), found {int(data.labels.min())}..{int(data.labels.max())}; the data file is damaged")


def first_per_class(order: np.ndarray, labels: np.ndarray, classes: list[int], k: int) -> np.ndarray:
    """Walk ``order`` and keep an index while its class has fewer than ``k`` kept (classes interleaved)."""
    counts = dict.fromkeys(classes, 0)
    kept = []
    for idx in order:
        c = int(labels[idx])
        if c in counts and counts[c] < k:
            kept.append(idx)
            counts[c] += 1
            if all(v >= k for v in counts.values()):
                break
    return np.asarray(kept, dtype=np.int64)


def build_problem(spec: ProblemSpec, data_root: str | Path | None = None,
                  data: ImageData | None = None) -> Problem:
    """Build a problem deterministically from its spec (loading the data set unless given)."""
    if spec.task not in TASKS:
        raise ReconbenchError(f"unknown task {spec.task!r}; choose one of {', '.join(TASKS)}")
    if spec.n_per_class < 1:
        raise ReconbenchError(f"n_per_class must be at least 1, got {spec.n_per_class}")
    if data is None:
        data = _load_cached(spec.dataset, str(data_root) if data_root else None,
                            str(resolve_data_root(data_root).absolute()))
    _validate(data, spec.dataset)
    name, _ = split_dataset_ref(spec.dataset)
    n_c = spec.n_per_class
    n_decoy = 2 * n_c if spec.n_decoy_per_class is None else spec.n_decoy_per_class
    if spec.order not in ("shuffled", "file"):
        raise ReconbenchError(f"problem order {spec.order!r}: choose 'shuffled' (a permutation under order_seed) or "
                              "'file' (the data file's order, the papers' subsets)")
    all_idx = np.arange(len(data.labels))
    walk = walk_order(spec, len(all_idx))

    if spec.task == "multiclass":
        k = spec.num_classes or len(data.classes)
        if not 2 <= k <= len(data.classes):
            raise ReconbenchError(f"--num-classes {k}: data set {spec.dataset!r} has {len(data.classes)} classes; "
                                  f"pass a value from 2 to {len(data.classes)}")
        task_labels = data.labels.copy()
        classes = list(range(k))
        blocks = []
        for c in classes:
            idx = walk[task_labels[walk] == c][:n_c]
            if len(idx) < n_c:
                raise DataError(f"data set {spec.dataset!r} has only {len(idx)} images of class {c}; "
                                f"n_per_class={n_c} needs {n_c}. Lower --n-per-class.")
            blocks.append(idx)
        gen = torch.Generator().manual_seed(spec.seed)
        perm = torch.randperm(n_c * k, generator=gen).numpy()
        train_idx = np.concatenate(blocks)[perm]
    else:
        rule = spec.binary_rule or plugins.dataset(name).default_binary_rule
        if rule not in BINARY_RULES:
            raise ReconbenchError(f"unknown binary rule {rule!r}; choose one of {', '.join(BINARY_RULES)}")
        k = 2
        task_labels = BINARY_RULES[rule](data.labels, data.classes)
        classes = [0, 1]
        train_idx = first_per_class(walk, task_labels, classes, n_c)
        for c in classes:
            have = int((task_labels[train_idx] == c).sum())
            if have < n_c:
                raise DataError(f"data set {spec.dataset!r} has only {have} images of binary class {c} under "
                                f"rule {rule!r}; n_per_class={n_c} needs {n_c}. Lower --n-per-class.")

    rest = walk[~np.isin(walk, train_idx)]  # walk order
    decoy_idx = first_per_class(rest, task_labels, classes, n_decoy) if n_decoy > 0 else rest[:0]
    rest2 = rest[~np.isin(rest, decoy_idx)]  # walk order
    test_idx = first_per_class(rest2, task_labels, classes, spec.n_test_per_class) \
        if spec.n_test_per_class > 0 else rest2[:0]

    def imgs(idx: np.ndarray) -> np.ndarray:
        return to_unit(data.images[idx])

    held_out = np.setdiff1d(rest, decoy_idx)  # sorted (file order); the test split is part of it
    x_train = imgs(train_idx)
    mean = x_train.mean(axis=0)
    return Problem(
        spec=spec, num_classes=k, image_shape=tuple(int(s) for s in data.images.shape[1:]),  # type: ignore[arg-type]
        mean=mean, train_images=x_train, train_labels=task_labels[train_idx], train_indices=train_idx,
        test_images=imgs(test_idx), test_labels=task_labels[test_idx], test_indices=test_idx,
        decoy_images=imgs(decoy_idx), decoy_labels=task_labels[decoy_idx], decoy_indices=decoy_idx,
        original_train_labels=data.labels[train_idx], class_names=list(data.classes),
        held_out_indices=held_out, held_out_labels=task_labels[held_out], source_images=data.images,
    )
