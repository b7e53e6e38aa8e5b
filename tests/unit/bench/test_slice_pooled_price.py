"""Search runs that share one batched computation (a cross-target slice) are priced once, at their total run count,
and each cell (or group of a cell's runs) is charged its share of the units; the planner and the executor agree.
The prices are worked out by hand from a cost table with rates at 8 and 16 runs batched (a 4-run batch pays the
whole 8-run step, as ``CostTable.phase`` prices run counts below the smallest measured one)."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest
from _helpers.slicekit import paper_works

from reconbench.bench.cells import Cell, expand
from reconbench.bench.executors import CellJob, Outcome, RunContext
from reconbench.bench.slice_costs import (
    SAFETY_FACTOR,
    SAFETY_SECONDS,
    CellWork,
    CostModel,
    GroupRules,
    Slot,
    cell_work,
    plan_slices,
)
from reconbench.bench.slice_executor import DeadlineExecutor
from reconbench.bench.slice_pack import run_tensor_bytes, runs_that_fit
from reconbench.records.cost_table import CostTable, PhaseCost
from reconbench.targets.cache import cache_dir
from reconbench.targets.cards import CARD_FILE

FIXED = 5.0            # the attack's fixed seconds
STEP_8 = 0.0042        # seconds of one batched step of 8 runs (the probe's 8.4 ms, at twice its speed)
STEP_16 = 0.00555      # of 16 runs
UNITS_PER_RUN_STEP = 1000.0   # m x P of the hand-made works below


def table(units_per_run_step: float = UNITS_PER_RUN_STEP) -> CostTable:
    """Rates per unit from the steps above: a step of ``runs`` runs is ``runs x units_per_run_step`` units."""
    def at(runs: int, step: float) -> PhaseCost:
        return PhaseCost(fixed=FIXED, rate=step / (runs * units_per_run_step))

    return CostTable(train=PhaseCost(fixed=0.0, rate=0.0), attack=at(16, STEP_16),
                     evaluate=PhaseCost(fixed=0.0, rate=0.0), attack_runs={"tf32": {"8": at(8, STEP_8),
                                                                                    "16": at(16, STEP_16)}})


def work(cell_id: str, runs: int = 4, steps: int = 50_000, pool: str = "cifar") -> CellWork:
    return CellWork(cell_id=cell_id, target_key="t", train=0.0, attack=runs * steps * UNITS_PER_RUN_STEP,
                    evaluate=0.0, precision="tf32", runs=runs, steps=steps, split=True, pool=pool)


def test_two_cells_of_4_runs_are_one_8_run_computation_each_charged_half():
    model = CostModel(prior=table())
    slot = Slot(model, 1000.0, pooled=True)
    a, b = work("a"), work("b")
    alone = SAFETY_FACTOR * (FIXED + 50_000 * STEP_8) + SAFETY_SECONDS   # a 4-run cell pays the 8-run step
    assert slot.estimate(a) == pytest.approx(alone, rel=1e-12)
    assert slot.cost(a) == pytest.approx(alone, rel=1e-12)
    slot.take(a)
    together = SAFETY_FACTOR * (FIXED + 50_000 * STEP_8)   # one computation: fixed seconds once, the 8-run step
    assert slot.cost(b) == pytest.approx(SAFETY_SECONDS, rel=1e-12)   # b's runs fill the step a paid for
    slot.take(b)
    assert slot.spent == pytest.approx(together + 2 * SAFETY_SECONDS, rel=1e-12)
    for cid in ("a", "b"):
        assert slot.charged(cid) == pytest.approx(together / 2 + SAFETY_SECONDS, rel=1e-12)
    (shared,) = slot.shared()
    assert shared.runs == 8 and shared.seconds == pytest.approx(together, rel=1e-12)
    assert sum(c for _, _, c in shared.members) == pytest.approx(slot.spent, rel=1e-12)


def test_sixteen_pooled_runs_take_the_16_run_rate_and_shares_follow_the_units():
    slot = Slot(CostModel(prior=table()), 1000.0, pooled=True)
    big, small = work("big", runs=12), work("small", runs=4)
    slot.take(big)
    slot.take(small)
    together = SAFETY_FACTOR * (FIXED + 50_000 * STEP_16)
    assert slot.spent == pytest.approx(together + 2 * SAFETY_SECONDS, rel=1e-12)
    assert slot.charged("big") == pytest.approx(together * 12 / 16 + SAFETY_SECONDS, rel=1e-12)
    assert slot.charged("small") == pytest.approx(together * 4 / 16 + SAFETY_SECONDS, rel=1e-12)


@pytest.mark.parametrize(("pooled", "pools"), [(False, ("cifar", "cifar")), (True, ("cifar", "mnist")),
                                               (True, ("", ""))])
def test_runs_that_do_not_share_a_computation_are_priced_alone(pooled, pools):
    """No cross-target slice, cells of other shapes, or cells that cannot pool: each its own estimate, as before."""
    slot = Slot(CostModel(prior=table()), 1000.0, pooled=pooled)
    a, b = work("a", pool=pools[0]), work("b", pool=pools[1])
    slot.take(a)
    slot.take(b)
    assert slot.spent == pytest.approx(slot.estimate(a) + slot.estimate(b), rel=1e-12)
    assert not slot.shared()   # no computation of two members
    charged = slot.charged("a")   # a computation of its own: charged its own estimate
    assert charged is None or charged == pytest.approx(slot.estimate(a), rel=1e-12)


def test_the_plan_pools_only_in_a_cross_target_slice():
    """Two 4-run cells in 320 s: together (one 8-run computation and each one's 2 s: 273 s) in one slice; alone (271 s
    each) in two."""
    works = [work("a"), work("b")]
    model = CostModel(prior=table())
    pooled = plan_slices(works, model, 320.0, rules=GroupRules(cross_target=True))
    assert pooled.slices == [["a", "b"]] and not pooled.unfit
    (shared,) = pooled.pooled[0]
    assert [(cid, runs) for cid, runs, _ in shared.members] == [("a", 4), ("b", 4)]
    assert pooled.seconds[0] == pytest.approx(SAFETY_FACTOR * (FIXED + 50_000 * STEP_8) + 2 * SAFETY_SECONDS)
    alone = plan_slices(works, model, 320.0)
    assert alone.slices == [["a"], ["b"]] and alone.pooled == [[], []]


def test_a_group_of_runs_joins_a_whole_cell_in_the_plan():
    """A 16-run cell split by ``runs_per_slice`` 4 and a 4-run cell: the group and the cell share one 8-run step."""
    works = [work("long", runs=16), work("short")]
    plan = plan_slices(works, CostModel(prior=table()), 320.0,
                       rules=GroupRules(runs_per_slice=4, cross_target=True))
    assert [g.runs for g in plan.groups[0]] == [(0, 1, 2, 3)] and plan.slices[0] == ["short"]
    assert [(c, r) for c, r, _ in plan.pooled[0][0].members] == [("long", 4), ("short", 4)]
    assert len(plan.slices) == 4   # the other 12 runs, 4 a slice, each group alone
    unpooled = plan_slices(works, CostModel(prior=table()), 320.0, rules=GroupRules(runs_per_slice=4))
    assert len(unpooled.slices) == 5


def test_pack_room_counts_each_run_at_its_own_size():
    """A 16 MiB file (less 64 KiB for its header) holds one CIFAR-10 run of m = 1000 in float32 (12.3 MB of
    candidates) and five MNIST runs (3.1 MB each); beside a CIFAR run there is room for one MNIST run. So after a CIFAR
    run two files hold 1 + 5 MNIST runs (not the 10 two files hold less one), and after an MNIST run two CIFAR runs
    (not 1). By hand from the sizes; the runs' small tensors (labels, multipliers) fit in what is left."""
    cifar = run_tensor_bytes(1000, 3072, 4, starts=False)
    mnist = run_tensor_bytes(1000, 784, 4, starts=False)
    room = 16 * 1024 * 1024 - 64 * 1024
    c, m = sum(cifar), sum(mnist)
    assert (room - c) // m == 1 and room // m == 5 and room // c == 1 and room - m >= c
    assert runs_that_fit(mnist, 2, [cifar]) == (room - c) // m + room // m
    assert runs_that_fit(cifar, 2, [mnist]) == 2
    assert runs_that_fit(mnist, 2) == 2 * (room // m)   # counted as before where no run was taken
    assert runs_that_fit(cifar, 2, [cifar]) == 1 and runs_that_fit(cifar, 2, [cifar] * 3) == 0


# -- the executor decides with the same price -----------------------------------------------------------------------

MAIN, AB = "cifar-binary--haim_binary_kkt--gaussian--s0", "cifar-binary--haim_binary_kkt-ab-tf32--gaussian--s0"


def paper_cells() -> tuple[Any, list[Cell], dict[str, Any]]:
    suite, _, sizes = paper_works()
    by_id = {c.cell_id: c for c in expand(suite)}
    return suite, [by_id[MAIN], by_id[AB]], sizes


def executor_run(tmp_path: Any, monkeypatch: Any, deadline: float) -> tuple[DeadlineExecutor, dict[str, Any]]:
    """A cross-target slice of the two cells on a scripted clock (always 0 s elapsed), the target's card cached, its
    joint computation recorded instead of run."""
    suite, cells, sizes = paper_cells()
    ctx = RunContext(suite, tmp_path / "out", 0, "cuda", suite.dtype, None, str(tmp_path / "cache"), True)
    card = cache_dir(ctx.cache) / "targets" / cells[0].recipe.key() / CARD_FILE
    card.parent.mkdir(parents=True)
    card.write_text("{}")
    ran: dict[str, Any] = {}

    def run_together(self: DeadlineExecutor, jobs: list[CellJob], ctx: RunContext, targets: Any, slot: Slot,
                     works: Any, group_runs: Any = None) -> Generator[Outcome, None, None]:
        ran["jobs"] = [j.cell.cell_id for j in jobs]
        ran["groups"] = {k: list(v) for k, v in (group_runs or {}).items()}
        yield from ()

    monkeypatch.setattr(DeadlineExecutor, "_run_together", run_together)
    size = sizes[cells[0].recipe.key()]
    units = 1000.0 * float(size.parameters)
    model = CostModel(prior=table(units))
    executor = DeadlineExecutor(deadline, model, sizes, start=0.0, clock=lambda: 0.0, cross_target=True,
                                runs_per_slice=4)
    jobs = [CellJob(c, c.run_spec(suite, "cuda", suite.dtype)) for c in cells]
    assert list(executor.run(jobs, ctx)) == []
    return executor, ran


def test_the_executor_starts_the_pooled_computation_the_plan_prices(tmp_path, monkeypatch):
    """In 320 s the 16-run cell's first 4 runs and the 4-run A/B cell start together (one 8-run step: 269 s with the
    margin, where each alone would be 269 s), each charged half of it; the plan of the same slice chose the same."""
    executor, ran = executor_run(tmp_path, monkeypatch, 320.0)
    assert ran["jobs"] == [MAIN, AB] and ran["groups"] == {MAIN: [0, 1, 2, 3]}
    together = SAFETY_FACTOR * (FIXED + 50_000 * STEP_8)
    for cid in (MAIN, AB):   # evaluation and fixed seconds are the table's (no evaluate price): the margin's 2 s
        assert executor.started_cells[cid] == pytest.approx(together / 2 + SAFETY_SECONDS, rel=1e-9)
    suite, cells, sizes = paper_cells()
    works = [cell_work(c, sizes[c.recipe.key()], dtype=suite.dtype, device="cuda") for c in cells]
    assert works[0].pool == works[1].pool != ""
    plan = plan_slices(works, executor.model, 320.0, rules=GroupRules(runs_per_slice=4, cross_target=True))
    assert [list(g.runs) for g in plan.groups[0]] == [ran["groups"][MAIN]]
    assert plan.slices[0] == [AB]
    assert {cid: sec for cid, _, sec in plan.pooled[0][0].members} == pytest.approx(executor.started_cells)


def test_the_executor_leaves_what_does_not_fit_even_pooled(tmp_path, monkeypatch):
    """In 272 s the group of 4 fits alone (271 s: its step and the margin's 2 s) but the A/B cell joining it adds
    its own 2 s (273 s): it waits for the next slice, as the plan says."""
    executor, ran = executor_run(tmp_path, monkeypatch, 272.0)
    assert ran["jobs"] == [MAIN] and [d.cell_id for d in executor.deferred] == [AB]
    suite, cells, sizes = paper_cells()
    works = [cell_work(c, sizes[c.recipe.key()], dtype=suite.dtype, device="cuda") for c in cells]
    plan = plan_slices(works, executor.model, 272.0, rules=GroupRules(runs_per_slice=4, cross_target=True))
    assert plan.slices[0] == [] and [g.cell_id for g in plan.groups[0]] == [MAIN]


def test_the_executor_counts_pooled_runs_of_another_shape_at_their_size():
    """Five MNIST runs chosen to run together take 15.8 MB of the first of 2 files; a CIFAR-10 run (12.3 MB) then
    fits the second file only: one run, where counting every run at the CIFAR size left none (2 - 5 < 0)."""
    suite, _, sizes = paper_works()
    by_id = {c.cell_id: c for c in expand(suite)}
    cifar, mnist = by_id[MAIN], by_id["mnist-binary--haim_binary_kkt--gaussian--s0"]
    executor = DeadlineExecutor(470.0, CostModel.for_device("cuda"), sizes, run_files=2, cross_target=True)
    works = {c.cell_id: cell_work(c, sizes[c.recipe.key()], dtype=suite.dtype, device="cuda") for c in (cifar, mnist)}
    assert executor._runs_the_pack_holds(mnist, works[mnist.cell_id]) == 10
    executor._pooled[mnist.cell_id] = [0, 1, 2, 3, 4]
    room = 16 * 1024 * 1024 - 64 * 1024
    c, m = sum(run_tensor_bytes(1000, 3072, 4, starts=False)), sum(run_tensor_bytes(1000, 784, 4, starts=False))
    assert room - 5 * m < c <= room
    assert executor._runs_the_pack_holds(cifar, works[cifar.cell_id]) == 1


def test_a_cells_evaluation_grows_with_its_pooled_candidates_and_a_group_holds_none():
    """The merge evaluates every run's candidates together (and draws as many for its null): a cell's evaluation is
    its runs x m candidates against n images of its pixels; a group of its runs is written, not evaluated."""
    from reconbench.bench.slice_costs import group_share

    _, works, _ = paper_works()
    by_id = {w.cell_id: w for w in works}
    whole = by_id["cifar-binary--haim_binary_kkt--gaussian--s0"]            # 16 runs
    ab = by_id["cifar-binary--haim_binary_kkt-ab-tf32--gaussian--s0"]       # 4 runs, the same target and m
    assert (whole.runs, ab.runs) == (16, 4)
    assert whole.evaluate == 16 * 1000 * 500 * 3072 and ab.evaluate == 4 * 1000 * 500 * 3072
    group = group_share(whole, 4)
    assert group.evaluate == 0.0 and group.attack == ab.attack and group.runs == 4
