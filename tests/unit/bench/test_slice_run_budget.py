"""How many search runs of a paper-size cell one pack holds: a CIFAR-10 run of m = 1000 in float32 or TF32 is
1000 x 3072 x 4 = 12,288,000 bytes of candidates, and one 16 MiB file holds one such tensor (two would need 24.6 MB).
With its start drawn again at the merge (a gaussian init) a run is one file, so the 6 files a pack leaves to runs hold
6 runs; carried (``--carry-starts``, or an init the merge cannot draw again) a run is two files: 3 runs. Counted from
the file size alone, here, and asked of the executor as a slice asks it."""

from __future__ import annotations

import pytest
from _helpers.slicekit import paper_works

from reconbench.bench.cells import Cell, expand
from reconbench.bench.slice_costs import CellWork, CostModel, cell_work
from reconbench.bench.slice_executor import DeadlineExecutor
from reconbench.bench.slice_pack import MAX_FILE_BYTES, run_tensor_bytes, runs_that_fit
from reconbench.preflight import TargetSize

IMAGE_BYTES = 1000 * 3 * 32 * 32 * 4


def per_file(size: int) -> int:
    """Tensors of ``size`` bytes one pack file holds (64 KiB kept for its header), by hand."""
    return (MAX_FILE_BYTES - 64 * 1024) // size


def test_the_closed_form_of_one_cifar_run():
    assert run_tensor_bytes(1000, 3072, 4, starts=True) == [IMAGE_BYTES, IMAGE_BYTES, 8000, 8000]
    assert run_tensor_bytes(1000, 3072, 4, starts=False) == [IMAGE_BYTES, 8000, 8000]
    assert per_file(IMAGE_BYTES) == 1
    for files in range(1, 8):
        assert runs_that_fit(run_tensor_bytes(1000, 3072, 4, starts=False), files) == files
        assert runs_that_fit(run_tensor_bytes(1000, 3072, 4, starts=True), files) == files // 2


def paper_cell(cell_id: str) -> tuple[Cell, CellWork, dict[str, TargetSize]]:
    """A cell of paper.toml with its work as a float32 slice on a GPU sees it (TF32 products), sized without data."""
    suite, _, sizes = paper_works()
    cell = next(c for c in expand(suite) if c.cell_id == cell_id)
    work = cell_work(cell, sizes[cell.recipe.key()], dtype=suite.dtype, device="cuda")
    assert work.precision == "tf32"
    return cell, work, sizes


@pytest.mark.parametrize(("carry", "runs"), [(False, 6), (True, 3)])
def test_the_executor_asks_the_pack_for_runs_without_their_starts(carry, runs):
    cell, work, sizes = paper_cell("cifar-binary--haim_binary_kkt--gaussian--s0")
    executor = DeadlineExecutor(470.0, CostModel.for_device("cuda"), sizes, run_files=6, carry_starts=carry)
    assert executor._runs_the_pack_holds(cell, work) == runs


def test_an_init_the_merge_cannot_draw_again_carries_its_starts():
    cell, work, sizes = paper_cell("cifar-binary--haim_binary_kkt--partition--s0")
    executor = DeadlineExecutor(470.0, CostModel.for_device("cuda"), sizes, run_files=6)
    assert executor._runs_the_pack_holds(cell, work) == 3


def test_groups_chosen_to_run_together_take_their_room_before_they_run():
    """In a cross-target slice the groups run together at the end: those chosen already hold their pack room, so a
    second cell of the target gets what the first leaves (6 files: 4 and 2 runs)."""
    cell, work, sizes = paper_cell("cifar-binary--haim_binary_kkt--gaussian--s0")
    executor = DeadlineExecutor(470.0, CostModel.for_device("cuda"), sizes, run_files=6, cross_target=True)
    executor._pooled["cifar-binary--haim_binary_kkt--uniform--s0"] = [0, 1, 2, 3]
    assert executor._runs_the_pack_holds(cell, work) == 2
