"""Built-in data set sources: digits (embedded), mnist / mnist_test (idx), cifar10 / cifar100 (python batches), npz."""

from __future__ import annotations

import gzip
import importlib.util
import struct
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from reconbench import hookimpl
from reconbench.data import ImageData
from reconbench.errors import DataError
from reconbench.interfaces import DatasetSource
from reconbench.targets.data_files import ensure_file, load_cifar_batch

CIFAR10_CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
MNIST_URL = "https://ossci-datasets.s3.amazonaws.com/mnist/"
MNIST_FILES = {  # official file name -> md5
    "train-images-idx3-ubyte.gz": "f68b3c2dcbeaaa9fbdd348bbdeb94873",
    "train-labels-idx1-ubyte.gz": "d53e105ee54ea40749a09fcbcd1e9432",
    "t10k-images-idx3-ubyte.gz": "9fb629c4189551a2d022fa330f9573f3",
    "t10k-labels-idx1-ubyte.gz": "ec29112dd5afa0611ce80d1b7f02629c",
}
CIFAR_ARCHIVES = {
    "cifar10": ("cifar-10-python.tar.gz", "c58f30108f718f92721af3b95e74349a", "cifar-10-batches-py"),
    "cifar100": ("cifar-100-python.tar.gz", "eb9058c3a382ffc7106e4002c42a8d85", "cifar-100-python"),
}
CIFAR_URL = "https://www.cs.toronto.edu/~kriz/"
#: the most classes an npz file's labels may number (class names are made for 0..K-1; ImageNet-21k has 21,841)
MAX_NPZ_CLASSES = 1_000_000


def read_idx(path: Path) -> np.ndarray:
    """Parse an idx file (optionally gzipped): magic, dims, then big-endian data."""
    try:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rb") as fh:
            data = fh.read()
    except (OSError, EOFError) as exc:
        raise DataError(f"{path} cannot be read ({exc}); the file is corrupt or truncated, replace it") from exc
    if len(data) < 4 or data[0] != 0 or data[1] != 0:
        raise DataError(f"{path} is not an idx file (bad magic number); replace it with the official file")
    type_code, ndim = data[2], data[3]
    dtypes: dict[int, Any] = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
    if type_code not in dtypes:
        raise DataError(f"{path}: unknown idx type code {type_code:#x}")
    header = 4 + 4 * ndim
    if len(data) < header:
        raise DataError(f"{path} is truncated (header incomplete); replace it with the official file")
    dims = struct.unpack(f">{ndim}I", data[4:header])
    dtype = np.dtype(dtypes[type_code])
    expected = int(np.prod(dims)) * dtype.itemsize
    if len(data) - header != expected:
        raise DataError(f"{path} is truncated or padded: {len(data) - header} data bytes for shape {dims}, "
                        f"expected {expected}; replace it with the official file")
    return np.frombuffer(data, dtype=dtype, offset=header).reshape(dims)


@dataclass(frozen=True)
class Digits(DatasetSource):
    name: str = "digits"
    description: str = "scikit-learn's embedded 8x8 handwritten digits (1,797 images, no download)"
    default_binary_rule: str = "parity"

    def load(self, data_root: Path | None) -> ImageData:
        pixels, target = _digits_table()
        images = (pixels.reshape(-1, 8, 8).astype(np.float32) / 16.0)[:, None, :, :]
        return ImageData(self.name, images, target.astype(np.int64), [str(c) for c in range(10)],
                         "sklearn.datasets.load_digits")


def _digits_table() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's digits (pixels 0-16 as float64, labels): its bundled ``digits.csv.gz`` read the way
    ``load_digits`` reads it, without importing scikit-learn (whose import, pandas included, took longer than the
    rest of a default run's data loading); ``load_digits`` itself where the file is not where it ships."""
    spec = importlib.util.find_spec("sklearn")
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    table = next((Path(f) / "datasets" / "data" / "digits.csv.gz" for f in folders
                  if (Path(f) / "datasets" / "data" / "digits.csv.gz").is_file()), None)
    if table is None:
        from sklearn.datasets import load_digits

        bunch = load_digits()
        return bunch.data, bunch.target
    data = np.loadtxt(table, delimiter=",")
    return data[:, :-1], data[:, -1].astype(int)


@dataclass(frozen=True)
class Mnist(DatasetSource):
    name: str
    description: str
    split: str = "train"  # "train" or "t10k"
    default_binary_rule: str = "parity"

    def load(self, data_root: Path | None) -> ImageData:
        root = Path(data_root) if data_root else Path(".")
        paths = []
        for kind in ("images-idx3", "labels-idx1"):
            fname = f"{self.split}-{kind}-ubyte.gz"
            paths.append(ensure_file(root, f"mnist/{fname}", MNIST_URL + fname, MNIST_FILES[fname], self.name))
        images, labels = read_idx(paths[0]), read_idx(paths[1])
        if images.ndim != 3 or labels.ndim != 1 or len(images) != len(labels):
            raise DataError(f"{paths[0]} / {paths[1]}: image shape {images.shape} and label shape {labels.shape} "
                            "do not form an MNIST split (expected (N, 28, 28) and (N,))")
        return ImageData(self.name, images[:, None, :, :], labels.astype(np.int64),
                         [str(c) for c in range(10)], str(paths[0].parent))


@dataclass(frozen=True)
class Cifar(DatasetSource):
    name: str
    description: str
    default_binary_rule: str = "vehicles_animals"

    def load(self, data_root: Path | None) -> ImageData:
        root = Path(data_root) if data_root else Path(".")
        archive, md5, folder = CIFAR_ARCHIVES[self.name]
        batch_dir = root / folder
        if not batch_dir.is_dir():
            tar_path = ensure_file(root, archive, CIFAR_URL + archive, md5, self.name)
            try:
                with tarfile.open(tar_path) as tar:
                    tar.extractall(root, filter="data")
            except (tarfile.TarError, OSError, EOFError) as exc:
                raise DataError(f"{tar_path} is corrupt ({exc}); delete it and place the official archive") from exc
        if self.name == "cifar10":
            files = [batch_dir / f"data_batch_{i}" for i in range(1, 6)]
            label_key, meta_file, names_key = b"labels", batch_dir / "batches.meta", b"label_names"
        else:
            files = [batch_dir / "train"]
            label_key, meta_file, names_key = b"fine_labels", batch_dir / "meta", b"fine_label_names"
        for f in files:
            if not f.exists():
                raise DataError(f"{self.name}: batch file {f} is missing; place the official python batches in {batch_dir}")
        imgs, labels = [], []
        for f in files:  # CIFAR batches are pickles: read with the array-only unpickler (no code execution)
            batch = load_cifar_batch(f)
            data = np.asarray(batch.get(b"data"))
            if data.ndim != 2 or data.shape[1] != 3072:
                raise DataError(f"{f}: data has shape {data.shape}, expected (N, 3072); not a CIFAR batch")
            imgs.append(data.reshape(-1, 3, 32, 32))
            labels.append(np.asarray(batch[label_key], dtype=np.int64))
        classes = CIFAR10_CLASSES if self.name == "cifar10" else [str(i) for i in range(100)]
        if meta_file.exists():
            meta = load_cifar_batch(meta_file)
            if names_key in meta:
                classes = [n.decode() if isinstance(n, bytes) else str(n) for n in meta[names_key]]
        return ImageData(self.name, np.concatenate(imgs), np.concatenate(labels), classes, str(batch_dir))


@dataclass(frozen=True)
class Npz(DatasetSource):
    """Any .npz with ``images`` and ``labels`` (and optionally ``classes``). Use as ``npz:PATH``."""

    name: str = "npz"
    description: str = "any .npz file with `images` (N,H,W[,C] or N,C,H,W) and `labels`; use as npz:PATH"
    default_binary_rule: str = "parity"

    def load(self, data_root: Path | None, path: str | None = None) -> ImageData:
        if not path:
            raise DataError("the npz data set needs a file: write it as npz:PATH (relative to --data-root or absolute)")
        p = Path(path).expanduser()
        if not p.is_absolute() and data_root is not None:
            p = Path(data_root) / p
        if not p.exists():
            raise DataError(f"npz file {p} does not exist; check the path (relative paths start at --data-root)")
        if not p.is_file():
            raise DataError(f"npz file {p} is {'a folder' if p.is_dir() else 'not a regular file (a device or a pipe)'};"
                            " pass an .npz file written by np.savez(path, images=..., labels=...)")
        if not _starts_with(p, b"PK"):  # an .npz is a zip archive of .npy files
            kind = "a single .npy array" if _starts_with(p, b"\x93NUMPY") else "not an .npz archive"
            raise DataError(f"{p} is {kind}; the npz data set reads an .npz file written by np.savez(path, "
                            "images=..., labels=...)")
        try:
            with np.load(p, allow_pickle=False) as z:
                if "images" not in z or "labels" not in z:
                    raise DataError(f"{p} has arrays {sorted(z.files)}; it needs `images` and `labels`")
                images, labels = z["images"], z["labels"]
                classes = [str(c) for c in z["classes"]] if "classes" in z else None
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
            if "allow_pickle" in str(exc):  # numpy's own advice (allow pickles) would run code from the file
                raise DataError(f"{p} holds object arrays, which are pickles and are never loaded; save `images` "
                                "and `labels` as plain numeric arrays (np.savez(path, images=..., labels=...))") from exc
            raise DataError(f"{p} is not a readable .npz file ({exc}); it may be corrupt or truncated") from exc
        images = to_nchw(images, str(p))
        labels = np.asarray(labels)
        if labels.ndim != 1 or len(labels) != len(images) or not np.issubdtype(labels.dtype, np.integer):
            raise DataError(f"{p}: labels must be integers of shape ({len(images)},), got {labels.dtype} {labels.shape}")
        if len(labels) and labels.min() < 0:
            raise DataError(f"{p}: labels must be class indices 0..K-1, but the smallest is {int(labels.min())}; "
                            "renumber the classes from 0")
        if classes is None and len(labels) and labels.max() >= MAX_NPZ_CLASSES:
            raise DataError(f"{p}: label {int(labels.max())} would make {int(labels.max()) + 1:,} classes; labels are "
                            f"class indices 0..K-1 with K at most {MAX_NPZ_CLASSES:,}: renumber them "
                            "(np.unique(labels, return_inverse=True)[1])")
        if classes is None:
            classes = [str(c) for c in range(int(labels.max()) + 1 if len(labels) else 0)]
        elif len(labels) and labels.max() >= len(classes):
            raise DataError(f"{p}: label {int(labels.max())} is outside the {len(classes)} declared `classes`; "
                            "fix the labels or list every class")
        return ImageData(f"npz:{path}", images, labels.astype(np.int64), classes, str(p))


def _starts_with(path: Path, magic: bytes) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(len(magic)) == magic
    except OSError:
        return False


def to_nchw(images: np.ndarray, where: str) -> np.ndarray:
    """Bring (N,H,W), (N,H,W,C) or (N,C,H,W) images to (N,C,H,W); uint8 stays uint8, floats must be in [0,1]."""
    if images.ndim == 3:
        images = images[:, None]
    elif images.ndim == 4:
        if images.shape[-1] in (1, 3) and images.shape[1] not in (1, 3):
            images = np.ascontiguousarray(images.transpose(0, 3, 1, 2))
    else:
        raise DataError(f"{where}: images have shape {images.shape}; expected (N,H,W), (N,H,W,C) or (N,C,H,W)")
    if images.shape[1] not in (1, 3):
        raise DataError(f"{where}: images have {images.shape[1]} channels (shape {images.shape}); expected 1 or 3")
    if images.dtype == np.uint8:
        return images
    if not np.issubdtype(images.dtype, np.floating):
        raise DataError(f"{where}: images have dtype {images.dtype}; use uint8 (0-255) or floats in [0, 1]")
    if images.size and (np.nanmin(images) < 0 or np.nanmax(images) > 1 or np.isnan(images).any()):
        raise DataError(f"{where}: float images must lie in [0, 1] without NaN; rescale them (x / 255 for 8-bit)")
    return images.astype(np.float32)


SOURCES = [
    Digits(),
    Mnist(name="mnist", description="MNIST training split (official idx .gz files under DATA_ROOT/mnist/)",
          split="train"),
    Mnist(name="mnist_test", split="t10k",
          description="MNIST test split, all 10,000 (official t10k idx .gz files under DATA_ROOT/mnist/)"),
    Cifar(name="cifar10", description="CIFAR-10 training batches (official python batches under DATA_ROOT/cifar-10-batches-py/)"),
    Cifar(name="cifar100", description="CIFAR-100 training set (official python files under DATA_ROOT/cifar-100-python/)"),
    Npz(),
]


@hookimpl
def register_datasets(register):  # type: ignore[no-untyped-def]
    for source in SOURCES:
        register(source)
