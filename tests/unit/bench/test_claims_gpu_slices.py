"""claims-gpu in slices (docs/slices.md, "claims-gpu in slices"): which of its targets the resumable trainer takes
(float32, the closed-form loop, a state that travels between slices), and that the training states a slice of one
seed (``--only '*--sK'``) leaves to the next fit beside the wheels, the data and the working tree in what a device
call carries."""

from __future__ import annotations

from collections import defaultdict

from reconbench.bench.cells import expand
from reconbench.bench.suite import load_suite
from reconbench.targets.recipe import TargetRecipe
from reconbench.targets.resumable import resumable_reason

SUITE = load_suite("claims-gpu")
CELLS = expand(SUITE)
#: what a device call carries (the `run` tool's `carry`, 64 MiB in all), less the wheels (`fetch_wheels.sh`:
#: 7.5 MB), the data `copy_data.py claims-gpu` copies (CIFAR-10's subset and MNIST's test set: 15.3 MiB, the same
#: files as paper's) and the tracked working tree (about 26 MB; allowed 30 MB)
CARRY, WHEELS, DATA, TREE = 64 * 2**20, 7.5e6, 15.3 * 2**20, 30e6
#: a state's safetensors header (settings, the loss history read every 100 steps): allowed per state
HEADER = 256 * 1024
#: the targets the resumable trainer cannot take, and why (each trains whole inside its cells)
NOT_RESUMABLE = {
    "cifar-cnn-wd": "an early stop",   # and family conv: it keeps its stop at the gate, which shortens it
    "mnist-regression-wd@loss=l25": "loss 'l25'",
    "mnist-regression-wd@loss=huber": "loss 'huber'",
}


def _targets() -> dict[str, TargetRecipe]:
    """Each planned target's recipe by its cell-id prefix and seed (``mnist-binary@weight_decay=0.002 s3``)."""
    return {f"{c.cell_id.split('--')[0]} s{c.seed}": c.recipe for c in CELLS}


def _state_bytes(recipe: TargetRecipe) -> int:
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


def test_every_target_but_the_listed_trains_in_pieces_in_float32_by_the_closed_form_loop():
    not_resumable: dict[str, set[str]] = defaultdict(set)
    for name, recipe in _targets().items():
        reason = resumable_reason(recipe)
        if reason is None:
            assert recipe.train.dtype == "float32" and recipe.train.float32_trainer == "closed_form", name
            assert recipe.train.schedule == "constant" and not recipe.train.certify_every, name
        else:
            not_resumable[name.split(" ")[0].split("@model")[0]].add(reason)
    assert set(not_resumable) == set(NOT_RESUMABLE)
    for prefix, reasons in not_resumable.items():
        assert all(NOT_RESUMABLE[prefix] in r for r in reasons), (prefix, reasons)


def test_a_state_of_the_suites_networks_is_a_few_megabytes():
    """784-1000-1000-1 at n = 100 (a CPU slice's pack held it as 4,812,824 bytes) and Runkel et al.'s
    3072-6144-1 with biases at n = 100: the input dimension does not enter the state."""
    targets = _targets()
    assert _state_bytes(targets["mnist-binary s0"]) == 4 * (2 * 1000 * 100 + 1000 * 1000 + 1000)
    assert _state_bytes(targets["cifar-binary s0"]) == _state_bytes(targets["mnist-binary s0"])
    assert _state_bytes(targets["cifar-mlp1-wd s0"]) == 4 * (2 * 6144 * 100 + 6144 + 6144 + 1)
    assert max(_state_bytes(r) for r in targets.values()) < 5.2e6
