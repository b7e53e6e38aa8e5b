"""What a cell costs before it runs: its work in three phases, the seconds a phase takes, and the plan of slices.

A *slice* is one command with a deadline (a few minutes of a GPU that comes in short occasions, docs/slices.md): it
runs the cells that fit and leaves the rest to the next slice. Before a cell starts, its cost is estimated from
its work and from what the slice has measured so far, plus a safety margin; a cell whose estimate does not fit in
the time left is not started.

Work is counted per phase in units proportional to the arithmetic of a dense network (``P`` parameters):

- ``train``: full-batch gradient-descent steps x training images x ``P`` (only when the target is not already
  trained on this machine: targets are cached by recipe);
- ``attack``: search runs x attack steps x candidates x ``P`` (every run of a cell, every step a product with the
  weights per candidate);
- ``evaluate``: candidates x training images x pixels (the distances between candidates and training images, and
  those of the held-out null draws, scale with it).

The seconds of a phase with ``u`` units: before the slice has measured it, the prior ``fixed + u x rate`` of the
device's cost table (:data:`PRIORS`, or a file given with ``--costs``: the probe's numbers); once the slice has
measured it, the largest measured ``seconds x max(1, u / u_measured)`` (a smaller cell is assumed to cost what the
measured one did, a larger one proportionally more: conservative whether the fixed part or the rate dominates).
The estimate is ``margin x (train + attack + evaluate) + extra`` seconds.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reconbench import plugins
from reconbench.bench.cells import Cell
from reconbench.config import build_config
from reconbench.errors import ReconbenchError, UnknownNameError
from reconbench.preflight import TargetSize

PHASES = ("train", "attack", "evaluate")
#: parameters assumed per input pixel for a family that cannot be sized without building it (a width-1000 layer)
UNSIZED_PARAMETERS_PER_PIXEL = 1000
#: an estimate is ``SAFETY_FACTOR x (phases) + SAFETY_SECONDS``
SAFETY_FACTOR = 1.25
SAFETY_SECONDS = 2.0

#: Prior cost tables by device kind, used until the slice measures a phase. Deliberately pessimistic: a cell
#: skipped for lack of time runs in the next slice, a cell started that cannot finish is lost.
#: cpu: one torch thread of the 2-core machine (a tiny `digits` cell: about 1 s of training and imports, a tenth of a
#: second of attack, a tenth of evaluation; large cells at about 1 GFLOP/s).
#: cuda: an H100 before the probe's numbers (benchmarks/gpu/README.md): the one paper-size attack run timed here took
#: 4.4 ms per step at m = 1000 and P = 4.07e6 (about 1.1e-12 s per unit); training assumed no faster per unit.
PRIORS: dict[str, dict[str, dict[str, float]]] = {
    "cpu": {"train": {"fixed": 3.0, "rate": 1e-8}, "attack": {"fixed": 1.0, "rate": 2e-8},
            "evaluate": {"fixed": 3.0, "rate": 1e-7}},
    "cuda": {"train": {"fixed": 15.0, "rate": 2e-12}, "attack": {"fixed": 5.0, "rate": 2e-12},
             "evaluate": {"fixed": 15.0, "rate": 1e-9}},
}


@dataclass(frozen=True)
class CellWork:
    """A cell's work per phase (units in the module docstring); ``train`` counts its target's whole training."""

    cell_id: str
    target_key: str
    train: float
    attack: float
    evaluate: float

    def units(self, phase: str, trains: bool) -> float:
        if phase == "train":
            return self.train if trains else 0.0
        return float(getattr(self, phase))


def attack_steps(attack: str, config: Mapping[str, Any]) -> int:
    """Steps of one search run of ``attack`` with ``config`` (its defaults filled in): ``steps``, or a bilevel
    attack's outer steps x the most inner iterations of each (an upper bound); 0 for an attack without steps."""
    try:
        plugin = plugins.attack(attack)
    except UnknownNameError:  # not installed: the cell fails at once as unavailable
        return 0
    cfg = build_config(plugin.config_cls, dict(config), f"attack {attack}")
    if isinstance(getattr(cfg, "steps", None), int):
        return int(cfg.steps)  # type: ignore[attr-defined]
    outer = getattr(cfg, "outer_steps", None)
    if isinstance(outer, int):
        return outer * int(getattr(cfg, "inner_max_iter", 1))
    return 0


def cell_work(cell: Cell, size: TargetSize) -> CellWork:
    """The work of ``cell`` on a target of ``size`` (:func:`reconbench.preflight.check_target`)."""
    pixels = math.prod(size.input_shape)
    params = size.parameters if size.parameters is not None else pixels * UNSIZED_PARAMETERS_PER_PIXEL
    m = cell.attack.candidates if cell.attack.candidates is not None else 2 * size.n_train
    steps = attack_steps(cell.attack.attack, cell.attack.config)
    return CellWork(
        cell_id=cell.cell_id,
        target_key=cell.recipe.key(),
        train=float(cell.recipe.train.steps) * size.n_train * params,
        attack=float(cell.attack.search_runs) * steps * m * params,
        evaluate=float(m) * size.n_train * pixels,
    )


def device_kind(device: str) -> str:
    """``cuda:1`` -> ``cuda``; the prior cost table a device reads (an unknown kind reads the CPU's)."""
    kind = device.split(":")[0]
    return kind if kind in PRIORS else "cpu"


def read_costs(path: Path) -> dict[str, dict[str, float]]:
    """A cost table file: ``{"train": {"fixed": s, "rate": s_per_unit}, "attack": ..., "evaluate": ...}`` (a
    file may also hold other keys, e.g. where the numbers were measured); every phase is required."""
    fix = 'write {"train": {"fixed": SECONDS, "rate": SECONDS_PER_UNIT}, "attack": ..., "evaluate": ...}'
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ReconbenchError(f"cost table {path} does not exist; pass a JSON file or leave --costs out") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ReconbenchError(f"cost table {path} is not valid JSON ({exc}); {fix}") from None
    table: dict[str, dict[str, float]] = {}
    for phase in PHASES:
        entry = data.get(phase) if isinstance(data, dict) else None
        ok = isinstance(entry, dict) and all(isinstance(entry.get(k), (int, float)) and not isinstance(entry.get(k), bool)
                                             and math.isfinite(entry[k]) and entry[k] >= 0 for k in ("fixed", "rate"))
        if not ok:
            raise ReconbenchError(f"cost table {path}: phase {phase!r} needs finite non-negative 'fixed' and 'rate'; {fix}")
        table[phase] = {"fixed": float(entry["fixed"]), "rate": float(entry["rate"])}  # type: ignore[index]
    return table


@dataclass
class CostModel:
    """Seconds per phase: the prior table until the slice measures the phase, then the measurements."""

    prior: Mapping[str, Mapping[str, float]]
    factor: float = SAFETY_FACTOR
    extra: float = SAFETY_SECONDS
    measured: dict[str, list[tuple[float, float]]] = field(default_factory=dict)  # phase -> (units, seconds)

    @classmethod
    def for_device(cls, device: str, table: Mapping[str, Mapping[str, float]] | None = None) -> CostModel:
        return cls(prior=table if table is not None else PRIORS[device_kind(device)])

    def phase_seconds(self, phase: str, units: float) -> float:
        if units <= 0:
            return 0.0
        seen = [(u, s) for u, s in self.measured.get(phase, []) if u > 0]
        if not seen:
            return self.prior[phase]["fixed"] + units * self.prior[phase]["rate"]
        return max(s * max(1.0, units / u) for u, s in seen)

    def estimate(self, work: CellWork, trains: bool) -> float:
        """Seconds ``work`` is expected to take, the margin included (``trains``: its target is trained first)."""
        return self.factor * sum(self.phase_seconds(p, work.units(p, trains)) for p in PHASES) + self.extra

    def observe(self, work: CellWork, trains: bool, record: Mapping[str, Any]) -> None:
        """Learn from a finished cell's record: its training (the target's ``load_or_train_seconds`` when this cell
        trained it), its attack (``attack_seconds``), and the rest of its wall time (evaluation and the rest)."""
        if record.get("status") != "ok":
            return
        target = record.get("target") or {}
        wall = float(record.get("wall_seconds") or 0.0)
        train = float(target.get("load_or_train_seconds") or 0.0) if trains else 0.0
        attack = float(record.get("attack_seconds") or 0.0)
        for phase, seconds in (("train", train), ("attack", attack), ("evaluate", max(wall - train - attack, 0.0))):
            units = work.units(phase, trains)
            if units > 0:
                self.measured.setdefault(phase, []).append((units, seconds))


@dataclass
class Slot:
    """Deciding, cell after cell, which cells one slice starts: the time left, and the targets it holds."""

    model: CostModel
    budget: float
    trained: set[str] = field(default_factory=set)   # targets already on the machine (cached or trained here)
    spent: float = 0.0

    def estimate(self, work: CellWork) -> float:
        return self.model.estimate(work, work.target_key not in self.trained)

    def fits(self, work: CellWork, elapsed: float | None = None) -> bool:
        """Whether the cell's estimate fits in what is left (``elapsed``: the real seconds spent; default: the sum
        of the estimates of the cells taken, as a plan counts)."""
        used = self.spent if elapsed is None else elapsed
        return used + self.estimate(work) <= self.budget

    def take(self, work: CellWork) -> None:
        self.spent += self.estimate(work)
        self.trained.add(work.target_key)


@dataclass
class SlicePlan:
    slices: list[list[str]]               # cell ids, in the order they run
    seconds: list[float]                  # each slice's estimated seconds
    unfit: dict[str, float]               # cells that fit no slice: their estimate alone, on an empty machine


def plan_slices(works: Iterable[CellWork], model: CostModel, budget: float) -> SlicePlan:
    """The slices of ``budget`` seconds that run ``works`` on bare machines (no target cached), as the slicer takes
    them: each slice walks the remaining cells in order and starts every one whose estimate still fits; a cell that
    does not fit even an empty slice is ``unfit``. Nothing runs: the plan comes from the cost model alone."""
    todo = list(works)
    plan = SlicePlan([], [], {})
    for w in todo:
        alone = Slot(model, budget)
        if not alone.fits(w):
            plan.unfit[w.cell_id] = alone.estimate(w)
    todo = [w for w in todo if w.cell_id not in plan.unfit]
    while todo:
        slot = Slot(model, budget)
        taken = []
        for w in todo:
            if slot.fits(w):
                slot.take(w)
                taken.append(w.cell_id)
        plan.slices.append(taken)
        plan.seconds.append(slot.spent)
        todo = [w for w in todo if w.cell_id not in set(taken)]
    return plan
