"""What a device call carries, priced without the files: the limit, the wheels, the ledger and data allowances, a
training state's bytes from its recipe, and the tracked tree's bytes. Shared by the tests of the slices that must
travel (tests/unit/bench/test_claims_gpu_slices.py, tests/unit/benchmarks/test_gpu_travel_size.py)."""

from __future__ import annotations

import math
import subprocess
from pathlib import Path

from reconbench.targets.recipe import TargetRecipe
from reconbench.targets.resumable import LOSS_EVERY

REPO = Path(__file__).resolve().parents[2]
#: what a device call carries in all (the working tree, tracked files included, and the carried paths), the wheels
#: (`fetch_wheels.sh`: cattrs, attrs and typing_extensions, 187,962 bytes; allowed 256 KiB) and the ledger (a few KB;
#: allowed 256 KiB)
CARRY, WHEELS, LEDGER = 64 * 2**20, 256 * 1024, 256 * 1024
#: the data folders a step carries (`copy_data.py` copies them): the bytes of their files
DATA = {".data/mnist": 1_648_877 + 4_542, ".data/cifar10": 14_389_434}
#: which data set each folder holds
READS = {".data/mnist": "mnist_test", ".data/cifar10": "npz:cifar10/cifar10_train_subset.npz"}
#: a state's safetensors header (settings, the loss history read every 100 steps): allowed per state
HEADER = 256 * 1024
#: a state file's header holds the loss read every ``LOSS_EVERY`` steps: at most this many bytes per reading (the
#: CIFAR-10 binary state of 10^6 steps the first occasion brought back: 552,312 header bytes for 10,000 readings, 55
#: each), beside a fixed part (settings, tensor names)
HEADER_PER_READING, HEADER_FIXED = 64, 16 * 1024


def state_bytes(recipe: TargetRecipe) -> int:
    """The tensors a float32 training state holds, in closed form: the factorised first layer (width x n and
    n x width), every later layer, the biases."""
    p = recipe.problem
    classes = p.num_classes or 2
    n = p.n_per_class * classes
    outputs = classes if p.task == "multiclass" else 1
    widths = [int(w) for w in (recipe.widths or [])] + [outputs]
    values = 2 * widths[0] * n + sum(a * b for a, b in zip(widths, widths[1:], strict=False))
    if recipe.family in ("mlp_bias", "affine"):
        values += sum(widths)
    return 4 * values


def state_file_bytes(recipe: TargetRecipe) -> int:
    """A training state's whole file, bounded from above: its header (the safetensors length word, the fixed part,
    the loss readings of all its steps), the tensors of :func:`state_bytes`, and the first layer's bias and scale
    the trainer keeps whatever the family (counted again where the family has biases)."""
    readings = math.ceil(recipe.train.steps / LOSS_EVERY)
    first = int((recipe.widths or [1])[0])
    return 8 + HEADER_FIXED + HEADER_PER_READING * readings + state_bytes(recipe) + 4 * (first + 1)


def tree_bytes(repo: Path = REPO) -> int | None:
    """The tracked files' bytes (what travels of the working tree besides the carried paths); None outside git."""
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=repo, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    paths = [repo / p for p in out.decode().split("\0") if p]
    return sum(p.stat().st_size for p in paths if p.is_file())
