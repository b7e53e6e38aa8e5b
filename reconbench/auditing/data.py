"""The audit's data: the owner's training set and held-out set (npz files), the input preprocessing the model was
trained with, and the :class:`~reconbench.data.Problem` the attacks and the evaluation read.

The held-out file is split as ``reconbench train`` splits a data set: walking it in file order, the first
``2 x max(class count)`` images of each class are the membership decoys, the rest is the held-out pool that the
null draws and the membership test's non-members come from (docs/audit.md).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from reconbench import plugins
from reconbench.data import TASKS, ImageData, Problem, ProblemSpec, to_unit
from reconbench.errors import DataError, ReconbenchError
from reconbench.targets.data_files import file_digest
from reconbench.targets.problems import BINARY_RULES, first_per_class

#: non-members per training image that the membership test draws from the held-out pool (its default
#: ``membership_test.pool_per_member``); the decoys are a further 2 x the largest class count per class
NON_MEMBERS_PER_MEMBER = 10
DECOYS_PER_MEMBER = 2


@dataclass(frozen=True)
class Preprocess:
    """How the model's inputs were made from images x in [0, 1]: z = (scale * x - mean) / std.

    ``mean`` is ``none``, ``train`` (the per-pixel mean image of the training set, reconbench's own convention),
    ``train-channel`` (its per-channel mean), per-channel values (``0.49,0.48,0.45``, in the scaled units) or an .npy
    file holding the mean image (H x W, C x H x W or H x W x C, scaled units). ``std`` is one value or one per channel.
    """

    scale: float = 1.0
    mean: str = "none"
    std: tuple[float, ...] = (1.0,)

    def to_dict(self) -> dict[str, Any]:
        return {"scale": self.scale, "mean": self.mean, "std": list(self.std)}


#: each ``--preprocess`` key and the value it stands for when not given (inputs in [0, 1], no mean, no scaling)
PREPROCESS_DEFAULTS: dict[str, Any] = {"scale": 1.0, "mean": "none", "std": 1.0}
PREPROCESS_KEYS = tuple(PREPROCESS_DEFAULTS)


def parse_preprocess(values: dict[str, Any]) -> Preprocess:
    """``--preprocess KEY=VALUE`` assignments (already split) as a :class:`Preprocess`, checked."""
    unknown = sorted(set(values) - set(PREPROCESS_KEYS))
    if unknown:
        raise ReconbenchError(f"--preprocess has no key {unknown[0]!r}; its keys are {', '.join(PREPROCESS_KEYS)} "
                              "(e.g. --preprocess scale=1 --preprocess mean=train --preprocess std=0.3081)")
    given = {**PREPROCESS_DEFAULTS, **values}
    scale = float(given["scale"])
    if not np.isfinite(scale) or scale <= 0:
        raise ReconbenchError(f"--preprocess scale={given['scale']!r} must be a positive number (1: inputs in "
                              "[0, 1]; 255: raw 0-255 pixel values)")
    std_raw = given["std"]
    std = tuple(float(s) for s in str(std_raw).split(",")) if isinstance(std_raw, str) else \
        tuple(float(s) for s in (std_raw if isinstance(std_raw, (list, tuple)) else [std_raw]))
    if not std or any(not np.isfinite(s) or s <= 0 for s in std):
        raise ReconbenchError(f"--preprocess std={std_raw!r} must be one positive number or one per channel "
                              "(e.g. std=0.247,0.243,0.261)")
    mean = given["mean"]
    mean = ",".join(str(v) for v in mean) if isinstance(mean, (list, tuple)) else str(mean)
    return Preprocess(scale=scale, mean=mean, std=std)


@dataclass
class AuditData:
    """The two npz files as loaded (images N x C x H x W, uint8 or floats in [0, 1]; original labels)."""

    train: ImageData
    held_out: ImageData
    train_path: Path
    held_out_path: Path


def load_npz(path: str | Path, option: str) -> ImageData:
    """An npz file with ``images`` and ``labels``, read by the project's npz data set (no pickles)."""
    p = Path(path)
    if not p.is_file():
        raise DataError(f"{option} {path}: no such file or folder; pass an .npz with `images` (uint8, N x H x W or "
                        "N x H x W x C) and `labels`, or an image folder with one subfolder per class")
    data: ImageData = plugins.get("datasets", "npz").load(None, str(p.absolute()))
    if len(data.labels) == 0:
        raise DataError(f"{option} {path} holds no images; it needs at least one per class")
    return data


IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp")


def load_folder(path: str | Path, option: str, classes: list[str] | None = None) -> ImageData:
    """An image folder, one subfolder per class (``DIR/<class>/*.png``, torchvision's ImageFolder layout): classes
    in sorted order (or ``classes``, the training folder's), files in sorted order, as uint8 (grey or RGB)."""
    from PIL import Image  # Pillow comes with matplotlib

    root = Path(path)
    found = sorted(d.name for d in root.iterdir() if d.is_dir())
    if not found:
        raise DataError(f"{option} {path} has no class subfolders; lay it out as {path}/<class>/<image>.png")
    names = classes if classes is not None else found
    unknown = sorted(set(found) - set(names))
    if unknown:
        raise DataError(f"{option} {path} has class folder(s) {unknown[:3]} that the training folder lacks; the "
                        "held-out set must hold the training set's classes")
    files = [(names.index(c), f) for c in found for f in sorted((root / c).iterdir()) if f.suffix.lower() in IMAGE_SUFFIXES]
    if not files:
        raise DataError(f"{option} {path} holds no images ({', '.join(IMAGE_SUFFIXES)})")
    opened: list[Image.Image] = []
    for _, f in files:
        with Image.open(f) as handle:   # read now and closed: a folder may hold more files than may stay open
            opened.append(handle.copy())
    mode = "L" if all(img.mode in ("1", "L", "I", "I;16", "F") for img in opened) else "RGB"
    arrays: list[np.ndarray] = []
    for (_, f), img in zip(files, opened, strict=True):
        arr = np.asarray(img.convert(mode), dtype=np.uint8)
        if arrays and arr.shape != arrays[0].shape:
            raise DataError(f"{option}: {f} is {arr.shape[1]}x{arr.shape[0]} pixels, the first image is "
                            f"{arrays[0].shape[1]}x{arrays[0].shape[0]}; every image must have the same size")
        arrays.append(arr)
    images = np.stack(arrays)
    images = images[:, None] if images.ndim == 3 else np.ascontiguousarray(images.transpose(0, 3, 1, 2))
    labels = np.asarray([label for label, _ in files], dtype=np.int64)
    return ImageData(f"folder:{root.name}", images, labels, list(names), str(root))


def load_images(path: str | Path, option: str, classes: list[str] | None = None) -> ImageData:
    """An npz file or an image folder."""
    return load_folder(path, option, classes) if Path(path).is_dir() else load_npz(path, option)


def data_sha256(path: str | Path) -> str:
    """sha256 of an npz file, or of an image folder (each file's relative path and sha256, in sorted order)."""
    p = Path(path)
    if not p.is_dir():
        return file_digest(p, "sha256")
    h = hashlib.sha256()
    for f in sorted(q for q in p.rglob("*") if q.is_file()):
        h.update(f"{f.relative_to(p)}\0{file_digest(f, 'sha256')}\n".encode())
    return h.hexdigest()


def load_data(train: str | Path, held_out: str | Path) -> AuditData:
    tr = load_images(train, "--train")
    ho = load_images(held_out, "--held-out", tr.classes if Path(train).is_dir() else None)
    if tr.images.shape[1:] != ho.images.shape[1:]:
        raise DataError(f"--train images are {_shape(tr)} but --held-out images are {_shape(ho)}; the held-out set "
                        "must come from the same distribution (same size and channels)")
    check_no_overlap(tr, ho)
    return AuditData(tr, ho, Path(train), Path(held_out))


def _shape(d: ImageData) -> str:
    return "x".join(str(s) for s in d.images.shape[1:])


def image_hashes(images: np.ndarray) -> list[str]:
    """sha256 of each image's pixels in [0, 1] (float64): the same image hashes alike as uint8 or float."""
    return [hashlib.sha256(np.ascontiguousarray(to_unit(img)).tobytes()).hexdigest() for img in images]


def check_no_overlap(train: ImageData, held_out: ImageData) -> None:
    """Refuse held-out images that are training images (by hash of the pixels)."""
    first: dict[str, int] = {}
    for i, h in enumerate(image_hashes(train.images)):
        first.setdefault(h, i)
    shared = [(first[h], j) for j, h in enumerate(image_hashes(held_out.images)) if h in first]
    if shared:
        pairs = ", ".join(f"train #{i} = held-out #{j}" for i, j in shared[:3])
        raise DataError(f"--train and --held-out share {len(shared)} image(s) ({pairs}{', ...' if len(shared) > 3 else ''}); "
                        "the held-out set must hold images the model never saw: remove them from the held-out file")


def task_labels(labels: np.ndarray, classes: list[str], task: str, binary_rule: str | None, option: str) -> np.ndarray:
    """The task's labels: class ids (multiclass); {0, 1} for binary and regression, by ``binary_rule`` when the file
    holds more than two labels."""
    if task == "multiclass":
        return labels.astype(np.int64)
    if binary_rule is None:
        if len(labels) and (labels.min() < 0 or labels.max() > 1):
            raise DataError(f"{option} labels run {int(labels.min())}..{int(labels.max())}, but a {task} audit needs "
                            f"labels 0/1; pass --binary-rule ({', '.join(BINARY_RULES)}) or relabel the file")
        return labels.astype(np.int64)
    if binary_rule not in BINARY_RULES:
        raise ReconbenchError(f"unknown --binary-rule {binary_rule!r}; choose one of {', '.join(BINARY_RULES)}")
    return BINARY_RULES[binary_rule](labels, classes)


def mean_image(pre: Preprocess, train_unit: np.ndarray) -> np.ndarray:
    """(C, H, W) mean in [0, 1] units (the mean of the scaled inputs divided by the scale) the model's inputs are
    centred on."""
    c, h, w = train_unit.shape[1:]
    text = pre.mean.strip()
    if text in ("none", "0", "0.0"):
        return np.zeros((c, h, w))
    if text == "train":
        return train_unit.mean(axis=0)
    if text == "train-channel":
        return np.broadcast_to(train_unit.mean(axis=(0, 2, 3))[:, None, None], (c, h, w)).copy()
    if text.endswith(".npy"):
        p = Path(text)
        if not p.is_file():
            raise DataError(f"--preprocess mean={text}: no such file; pass an .npy holding the mean image")
        arr = np.asarray(np.load(p, allow_pickle=False), dtype=np.float64)
        if arr.ndim == 2:
            arr = arr[None]
        elif arr.ndim == 3 and arr.shape[-1] == c and arr.shape[0] != c:
            arr = arr.transpose(2, 0, 1)
        if arr.shape != (c, h, w):
            raise DataError(f"--preprocess mean={text} has shape {arr.shape}; the images are {c}x{h}x{w}")
        return arr / pre.scale
    try:
        values = np.asarray([float(v) for v in text.split(",")])
    except ValueError:
        raise ReconbenchError(f"--preprocess mean={text!r}: use none, train, train-channel, per-channel values "
                              "(e.g. 0.1307) or an .npy file") from None
    if len(values) not in (1, c):
        raise ReconbenchError(f"--preprocess mean has {len(values)} values for {c}-channel images; give 1 or {c}")
    return np.broadcast_to((values / pre.scale)[:, None, None], (c, h, w)).astype(np.float64).copy()


def input_factor(pre: Preprocess, channels: int) -> np.ndarray:
    """(C,) factor scale / std that maps centred [0, 1] images onto the model's inputs."""
    std = np.asarray(pre.std, dtype=np.float64)
    if len(std) not in (1, channels):
        raise ReconbenchError(f"--preprocess std has {len(std)} values for {channels}-channel images; give 1 or "
                              f"{channels}")
    return np.broadcast_to(pre.scale / std, (channels,)).astype(np.float64).copy()


def build_audit_problem(data: AuditData, task: str, binary_rule: str | None, pre: Preprocess,
                        num_classes: int | None = None) -> Problem:
    """The problem of an audit: the training set, its mean, the decoys and the held-out pool (file order)."""
    if task not in TASKS:
        raise ReconbenchError(f"unknown --task {task!r}; choose one of {', '.join(TASKS)}")
    ytr = task_labels(data.train.labels, data.train.classes, task, binary_rule, "--train")
    yho = task_labels(data.held_out.labels, data.held_out.classes, task, binary_rule, "--held-out")
    k = 2 if task != "multiclass" else int(num_classes or max(int(ytr.max()), int(yho.max())) + 1)
    if task == "multiclass" and max(int(ytr.max()), int(yho.max())) >= k:
        raise DataError(f"the labels run up to {max(int(ytr.max()), int(yho.max()))}, but the model has {k} outputs; "
                        "labels must be class indices 0..K-1 of the model's K outputs")
    counts = [int((ytr == c).sum()) for c in range(k)]
    check_held_out_size(counts, yho)
    n_decoy = DECOYS_PER_MEMBER * max(counts)
    order = np.arange(len(yho))
    decoy_idx = first_per_class(order, yho, list(range(k)), n_decoy)
    pool = np.setdiff1d(order, decoy_idx)
    x_train = to_unit(data.train.images)
    spec = ProblemSpec(dataset="audit", task=task, n_per_class=max(counts), num_classes=k if task == "multiclass" else None,
                       binary_rule=binary_rule, n_test_per_class=0, n_decoy_per_class=n_decoy, order="file")
    empty = np.zeros((0, *x_train.shape[1:]))
    none = np.zeros(0, dtype=np.int64)
    return Problem(
        spec=spec, num_classes=k, image_shape=tuple(int(s) for s in x_train.shape[1:]),  # type: ignore[arg-type]
        mean=mean_image(pre, x_train), train_images=x_train, train_labels=ytr, train_indices=np.arange(len(ytr)),
        test_images=empty, test_labels=none, test_indices=none,
        decoy_images=to_unit(data.held_out.images[decoy_idx]), decoy_labels=yho[decoy_idx], decoy_indices=decoy_idx,
        original_train_labels=data.train.labels, class_names=list(data.train.classes),
        held_out_indices=pool, held_out_labels=yho[pool], source_images=data.held_out.images)


def check_held_out_size(counts: list[int], held_labels: np.ndarray) -> None:
    """Each class needs 2 x max(count) decoys and 10 x its count non-members in the held-out file."""
    short = []
    for c, n in enumerate(counts):
        if n == 0:
            continue
        need = DECOYS_PER_MEMBER * max(counts) + NON_MEMBERS_PER_MEMBER * n
        have = int((held_labels == c).sum())
        if have < need:
            short.append((c, have, need))
    if short:
        c, have, need = short[0]
        more = f" (and {len(short) - 1} more class(es))" if len(short) > 1 else ""
        raise DataError(f"--held-out has {have} image(s) of class {c}, but the null needs {need}{more}: "
                        f"{DECOYS_PER_MEMBER} x {max(counts)} decoys plus {NON_MEMBERS_PER_MEMBER} x its training count "
                        f"non-members; add held-out images of that class")
