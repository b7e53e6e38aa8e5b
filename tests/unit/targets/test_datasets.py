"""Every data set loader on small generated files in the official formats, and their errors."""

from __future__ import annotations

import gzip
import pickle
import struct

import numpy as np
import pytest

from reconbench import plugins
from reconbench.errors import DataError
from reconbench.targets.problems import load_dataset


def write_idx(path, array: np.ndarray) -> None:
    header = bytes([0, 0, 0x08, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    with gzip.open(path, "wb") as fh:
        fh.write(header + array.astype(np.uint8).tobytes())


@pytest.fixture
def mnist_root(tmp_path):
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(30, 28, 28), dtype=np.uint8)
    labels = np.arange(30) % 10
    (tmp_path / "mnist").mkdir()
    write_idx(tmp_path / "mnist" / "t10k-images-idx3-ubyte.gz", images)
    write_idx(tmp_path / "mnist" / "t10k-labels-idx1-ubyte.gz", labels)
    return tmp_path, images, labels


def test_mnist_idx_roundtrip(mnist_root):
    root, images, labels = mnist_root
    data = load_dataset("mnist_test", root)
    assert data.images.shape == (30, 1, 28, 28) and data.images.dtype == np.uint8
    np.testing.assert_array_equal(data.images[:, 0], images)
    np.testing.assert_array_equal(data.labels, labels)


def test_truncated_idx_is_a_clear_error(mnist_root):
    root, _, _ = mnist_root
    path = root / "mnist" / "t10k-images-idx3-ubyte.gz"
    raw = gzip.decompress(path.read_bytes())
    path.write_bytes(gzip.compress(raw[: len(raw) // 2]))
    with pytest.raises(DataError, match="truncated"):
        load_dataset("mnist_test", root)


def test_corrupt_gzip_is_a_clear_error(mnist_root):
    root, _, _ = mnist_root
    (root / "mnist" / "t10k-images-idx3-ubyte.gz").write_bytes(b"\x1f\x8bnot really gzip")
    with pytest.raises(DataError, match="corrupt or truncated"):
        load_dataset("mnist_test", root)


def test_missing_file_names_the_file_and_folder(tmp_path):
    with pytest.raises(DataError) as err:
        load_dataset("mnist", tmp_path)
    msg = str(err.value)
    assert "train-images-idx3-ubyte.gz" in msg and str(tmp_path) in msg and "RECONBENCH_DATA" in msg


def _cifar_batch(n: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return {b"data": rng.integers(0, 256, size=(n, 3072), dtype=np.uint8), b"labels": list(rng.integers(0, 10, n))}


def test_cifar10_python_batches(tmp_path):
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    batches = [_cifar_batch(4, i) for i in range(5)]
    for i, b in enumerate(batches, 1):
        (folder / f"data_batch_{i}").write_bytes(pickle.dumps(b))
    names = [n.encode() for n in ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship",
                                  "truck"]]
    (folder / "batches.meta").write_bytes(pickle.dumps({b"label_names": names}))
    data = load_dataset("cifar10", tmp_path)
    assert data.images.shape == (20, 3, 32, 32)
    # channel-major layout: the first 1024 bytes of a row are the red plane
    np.testing.assert_array_equal(data.images[0, 0].reshape(-1), batches[0][b"data"][0, :1024])
    assert data.classes[8] == "ship"


def test_cifar100_python_files(tmp_path):
    folder = tmp_path / "cifar-100-python"
    folder.mkdir()
    rng = np.random.default_rng(1)
    batch = {b"data": rng.integers(0, 256, size=(6, 3072), dtype=np.uint8), b"fine_labels": [0, 5, 99, 3, 3, 1]}
    (folder / "train").write_bytes(pickle.dumps(batch))
    data = load_dataset("cifar100", tmp_path)
    assert data.images.shape == (6, 3, 32, 32) and data.labels.tolist() == [0, 5, 99, 3, 3, 1]


class _Evil:
    def __reduce__(self):  # noqa: D105 - a pickle that would run code when loaded
        return (print, ("pwned",))


def test_cifar_batch_with_code_is_refused(tmp_path):
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    for i in range(1, 6):
        (folder / f"data_batch_{i}").write_bytes(pickle.dumps({b"data": _Evil(), b"labels": [0]}))
    with pytest.raises(DataError, match="not a valid CIFAR python batch"):
        load_dataset("cifar10", tmp_path)


@pytest.mark.parametrize("layout", ["nhwc", "nchw", "nhw"])
def test_npz_layouts(tmp_path, layout):
    rng = np.random.default_rng(2)
    base = rng.integers(0, 256, size=(5, 3, 8, 8), dtype=np.uint8)
    arr = {"nhwc": base.transpose(0, 2, 3, 1), "nchw": base, "nhw": base[:, 0]}[layout]
    np.savez(tmp_path / "d.npz", images=arr, labels=np.arange(5))
    data = load_dataset("npz:d.npz", tmp_path)
    expected = base if layout != "nhw" else base[:, :1]
    np.testing.assert_array_equal(data.images, expected)


@pytest.mark.parametrize("images,match", [
    (np.zeros((4, 5, 8, 8, 2), dtype=np.uint8), "expected \\(N,H,W\\)"),
    (np.zeros((4, 8, 8, 5), dtype=np.uint8), "channels"),
    (np.full((4, 8, 8), 3.0), "\\[0, 1\\]"),
])
def test_npz_wrong_images_are_clear_errors(tmp_path, images, match):
    np.savez(tmp_path / "bad.npz", images=images, labels=np.zeros(4, dtype=np.int64))
    with pytest.raises(DataError, match=match):
        load_dataset("npz:bad.npz", tmp_path)


def test_npz_missing_arrays_and_file(tmp_path):
    np.savez(tmp_path / "x.npz", pics=np.zeros((2, 8, 8)))
    with pytest.raises(DataError, match="needs `images` and `labels`"):
        load_dataset("npz:x.npz", tmp_path)
    with pytest.raises(DataError, match="does not exist"):
        load_dataset("npz:nope.npz", tmp_path)
    (tmp_path / "trunc.npz").write_bytes(b"PK\x03\x04garbage")
    with pytest.raises(DataError, match="not a readable .npz"):
        load_dataset("npz:trunc.npz", tmp_path)


def test_digits_is_embedded():
    data = plugins.get("datasets", "digits").load(None)
    assert data.images.shape == (1797, 1, 8, 8)
    assert 0.0 <= data.images.min() and data.images.max() <= 1.0


def test_digits_read_without_importing_sklearn_equal_load_digits():
    """The digits source reads scikit-learn's bundled table itself (a default run's start-up skips importing
    scikit-learn and pandas); images and labels equal ``load_digits``'s bit for bit, and sklearn stays unimported."""
    import subprocess
    import sys

    from sklearn.datasets import load_digits

    data = plugins.get("datasets", "digits").load(None)
    bunch = load_digits()
    assert np.array_equal(data.images, (bunch.images.astype(np.float32) / 16.0)[:, None, :, :])
    assert np.array_equal(data.labels, bunch.target.astype(np.int64))
    probe = ("import sys; from reconbench import plugins; plugins.get('datasets', 'digits').load(None); "
             "print('sklearn' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_the_cli_imports_only_the_invoked_command():
    """`reconbench run` imports run's module, not the leaderboard site's or the suite runner's (pandas)."""
    import subprocess
    import sys

    probe = ("import sys; from reconbench.cli import load_commands; g = load_commands('run'); "
             "print(sorted(g.commands), 'reconbench.cli.site_cmd' in sys.modules, 'pandas' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['run'] False False"
