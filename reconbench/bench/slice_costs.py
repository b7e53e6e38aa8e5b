"""What a cell costs before it runs: its work in three phases, the seconds a phase takes, and the plan of slices.

A *slice* is one command with a deadline (a few minutes of a GPU that comes in short occasions, docs/slices.md): it
runs the cells that fit and leaves the rest to the next slice. Before a cell starts, its cost is estimated from
its work and from what the slice has measured so far, plus a safety margin; a cell whose estimate does not fit in
the time left is not started.

Work is counted per phase in units proportional to the arithmetic of a dense network (``P`` parameters):

- ``train``: full-batch gradient-descent steps x training images x ``P`` (only when the target is not already
  trained on this machine: targets are cached by recipe). A target trained in pieces across slices (the resumable
  trainer, ``reconbench.targets.resumable``) counts ``P`` as that trainer's arithmetic does: the layers past the
  first, plus n x w_1 / 3 for the first layer's factorised update (6 n P is then its FLOPs per step; the input
  dimension does not enter), and its training is planned apart from its cells (:func:`plan_slices`);
- ``attack``: search runs x attack steps x candidates x ``P`` (every run of a cell, every step a product with the
  weights per candidate);
- ``evaluate``: the pooled candidates (search runs x candidates per run) x training images x pixels (the distances
  between candidates and training images, and those of the held-out null and calibration draws, which draw as
  many candidates, scale with it). A group of a cell's runs (runs split over slices) is written, not evaluated:
  its cell is evaluated where its last group is merged, so a group's share holds no evaluation.

The seconds of a phase with ``u`` units: before the slice has measured it, the prior ``fixed + u x rate`` of the
device's cost table (:data:`PRIORS`, or a file given with ``--costs``: the probe's numbers, with a ledger's measured
rows), the attack's rate that of the cell's network (``CostTable.attack_price``: each network measured bounds the
step of a network no larger by its own step, a larger one proportionally), an evaluation of units measured whole at
their seconds (``CostTable.evaluate_seconds``); once the slice has
measured it, the largest measured ``seconds x max(1, u / u_measured)`` (a smaller cell is assumed to cost what the
measured one did, a larger one proportionally more: conservative whether the fixed part or the rate dominates).
A cell that a slice packs also has its **figure pairs** taken once it is written (``figure_pairs.take_pairs``, as the
pack is rewritten after it: the evaluation's features, matching and averaging of its pooled candidates once more, on
the machine's CPU): priced at :data:`FIGURE_PAIRS` per unit of its evaluation, apart from the evaluate phase, whose
prices (the probe's ``evaluation`` case, the rows a slice measures up to the cell's record) do not hold it.
A cell's estimate is ``margin x (train + attack + evaluate + figure pairs) + extra`` seconds. Training in pieces is planned apart
and without the margin (:func:`training_seconds`: it is resumable, so an overrun delays it but loses nothing).
In a cross-target slice the search runs that advance in one batched computation (:func:`pool_key`) are priced once,
at their total run count, and each cell is charged its share of the units (:class:`Slot`).

Cost tables and the probe's JSON are read through their typed records (``reconbench.records.cost_table``);
:func:`break_even_speed` and :func:`break_even_budget` say how much faster a device, or how much longer a slice,
would take a plan to fewer slices.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from reconbench import plugins
from reconbench.attack.search import DEFAULT_SEARCH
from reconbench.bench import slice_pack
from reconbench.bench.cells import Cell
from reconbench.bench.slice_pack import run_files_taken, run_tensor_bytes, runs_that_fit
from reconbench.config import build_config, config_to_dict
from reconbench.errors import ReconbenchError, UnknownNameError
from reconbench.precision import MATMUL_PRECISIONS, attack_precision
from reconbench.preflight import TargetSize
from reconbench.provenance import read_json
from reconbench.records.cost_table import (
    PROBE_FILE,
    CostTable,
    PhaseCost,
    Probe,
    ProbeAttackRow,
    ProbeTrainerRow,
    is_probe,
    read_cost_table,
)
from reconbench.records.measured_rate import MeasuredRate
from reconbench.records.record import mapping, number
from reconbench.runs.execute import REDRAWN_INITS
from reconbench.targets.recipe import TargetRecipe
from reconbench.targets.resumable import batch_group, resumable_reason

PHASES = ("train", "attack", "evaluate")
#: parameters assumed per input pixel for a family that cannot be sized without building it (a width-1000 layer)
UNSIZED_PARAMETERS_PER_PIXEL = 1000
#: an estimate is ``SAFETY_FACTOR x (phases) + SAFETY_SECONDS``
SAFETY_FACTOR = 1.25
SAFETY_SECONDS = 2.0
#: training in pieces starts only with at least this many seconds left (less is not worth a process's set-up)
MIN_TRAINING_SECONDS = 1.0

#: Prior cost tables by device kind, used until the slice measures a phase. Deliberately pessimistic: a cell
#: skipped for lack of time runs in the next slice, a cell started that cannot finish is lost.
#: cpu: one torch thread of the 2-core machine (a tiny `digits` cell: about 1 s of training and imports, a tenth of a
#: second of attack, a tenth of evaluation; large cells at about 1 GFLOP/s).
#: cuda: an H100 before the probe's numbers (benchmarks/gpu/README.md): the one paper-size attack run timed here took
#: 4.4 ms per step at m = 1000 and P = 4.07e6 (about 1.1e-12 s per unit); training assumed no faster per unit. Its
#: card (release metrics and the stationarity certificate, on the machine's CPU) from the one paper-size card built
#: from a GPU's state, CIFAR-10 binary at n = 500: 65 s on the 2-core CPU machine (63 s of it the certificate), about
#: 3.2e-8 s per unit of n x P (on the CPU machine, not the device's). Its evaluation runs on the machine's CPU, in float64:
#: a paper cell's (16 runs of m = 1000 on CIFAR-10, n = 500) took 147-187 s on one thread of the loaded CPU machine,
#: a 4-run cell's 37-52 s (benchmarks/gpu/merge_cost.py, benchmarks/results/gpu/merge_cost_cpu.json): 15 s and
#: 7.6e-9 s per unit lie above each. A probe with an evaluation row and a certificate row prices both from the device
#: machine's CPU instead (:func:`costs_from_probe`).
PRIORS: dict[str, CostTable] = {
    "cpu": CostTable(train=PhaseCost(fixed=3.0, rate=1e-8), attack=PhaseCost(fixed=1.0, rate=2e-8),
                     evaluate=PhaseCost(fixed=3.0, rate=1e-7)),
    "cuda": CostTable(train=PhaseCost(fixed=15.0, rate=2e-12), attack=PhaseCost(fixed=5.0, rate=2e-12),
                      evaluate=PhaseCost(fixed=15.0, rate=7.6e-9), card=PhaseCost(fixed=2.0, rate=3.2e-8)),
}


@dataclass(frozen=True)
class CertificateReference:
    """The probe's certificate case (a random network of ``layers`` at ``n``) timed on the CPU machine the built-in
    card price was measured on: what a probe's certificate row is compared with to scale that price."""

    n: int
    layers: tuple[int, ...]
    seconds: float
    source: str


#: benchmarks/results/gpu/probe_cpu_reference.json (``python benchmarks/gpu/probe.py
#: benchmarks/results/gpu/probe_cpu_reference.json --device cpu --only evaluation certificate``, one torch thread,
#: load about 1.9): 8.4 s. The fastest run here is the reference (two threads under the same load took 14.6-14.8 s),
#: so that the device's speed-up over it, and the card's price it scales, err high.
CERTIFICATE_REFERENCE = CertificateReference(n=500, layers=(3072, 1000, 1000, 1), seconds=8.419182017009007,
                                             source="benchmarks/results/gpu/probe_cpu_reference.json")


#: Taking a packed cell's figure pairs (``reconbench.leaderboard.figure_pairs.pairs_from_results``, when the pack is
#: written after the cell: its pooled candidates read back, the evaluation's context built once more from them, on
#: the machine's CPU), in seconds per unit of the evaluate phase (pooled candidates x training images x pixels: the
#: features and the matching's distances, which are most of it, scale with them). A paper cell (16 runs of m = 1000
#: against n = 500 CIFAR-10 images, 2.46e10 units) took 0.81-1.33 s on one thread of the 2-core CPU machine at load
#: 0.7 (``benchmarks/gpu/figure_pairs_timing.py``, benchmarks/results/gpu/figure_pairs_cpu.json: 5.4e-11 s per unit
#: at the slowest), a 4-run cell 0.35 s (5.8e-11): 6e-11 s per unit, no fixed seconds, lies above both. Neither the
#: probe's ``evaluation`` case (``benchmarks/gpu/evaluation_timing.time_case`` times ``evaluate_many`` and the
#: calibration bars, not the pairs) nor a slice's measured ``evaluation`` row (it ends when the cell's record is
#: written, before the pack) holds it, so it is priced here, never from them; as the evaluation on a GPU, not scaled
#: by the device's speed.
FIGURE_PAIRS = PhaseCost(fixed=0.0, rate=6e-11)


@dataclass(frozen=True)
class CellWork:
    """A cell's work per phase (units in the module docstring); ``train`` counts its target's whole training.

    ``pieces``: the target trains in pieces, apart from its cells (resumable work that the slices share: the cell's
    own estimate then holds no training); ``group``: targets of one group train as one stack in a slice."""

    cell_id: str
    target_key: str
    train: float
    attack: float
    evaluate: float
    pieces: bool = False
    group: str = ""
    precision: str = ""   # the attack's matrix products (reconbench.precision): float64, float32 or tf32
    runs: int = 0         # search runs of the cell's attack
    steps: int = 0        # steps of one search run
    card: float = 0.0     # the target's card (its release metrics and stationarity certificate): n x P
    #: its search runs may run in groups over slices (random search, more than one run: they are proposed at once)
    split: bool = False
    chunk: int = 0        # the attack's own ``max_batch`` (0: none): a group is whole chunks of it
    #: the bytes of one run's tensors as they travel in a pack (candidates, the start where it travels, labels,
    #: multipliers: ``reconbench.bench.slice_pack.run_tensor_bytes``)
    run_bytes: tuple[int, ...] = ()
    #: what its search runs share with another cell's to advance in one batched computation in a cross-target slice
    #: (:func:`pool_key`; empty: they run alone)
    pool: str = ""
    #: units of taking its figure pairs (:data:`FIGURE_PAIRS`): its evaluate units where its slice packs it, else 0
    pairs: float = 0.0
    #: pack files its target's training state takes where a slice trains it in pieces (:func:`state_files`; 0:
    #: trained whole, no state travels)
    state_files: int = 0
    #: ``P``: the weights of the target's network (0: unknown), by which the attack's price picks its measured
    #: network (:meth:`~reconbench.records.cost_table.CostTable.attack_price`)
    weights: float = 0.0

    @property
    def run_step(self) -> float:
        """The attack units of one step of one search run (candidates x ``P``); 0 for an attack without steps."""
        return self.attack / (self.runs * self.steps) if self.runs and self.steps else 0.0

    def units(self, phase: str, trains: bool) -> float:
        if phase == "train":
            return self.train if trains and not self.pieces else 0.0
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


def piece_parameters(recipe: TargetRecipe, size: TargetSize, params: float) -> float:
    """``P`` of the resumable trainer's step: ``params`` less the first layer's D x w_1 weights, plus n x w_1 / 3
    (its factorised update: 2 n^2 w_1 FLOPs against 6 n per parameter elsewhere)."""
    widths = recipe.widths
    out = recipe.problem.num_classes if recipe.problem.task == "multiclass" and recipe.problem.num_classes else 1
    w1 = int(widths[0]) if isinstance(widths, (list, tuple)) and widths else int(out)
    d = math.prod(size.input_shape)
    return max(params - d * w1, 0.0) + size.n_train * w1 / 3.0


#: room counted for a state file's safetensors header and metadata (its settings and loss history)
STATE_HEADER_BYTES = 256 * 1024


def state_bytes(recipe: TargetRecipe, size: TargetSize) -> int:
    """At most the bytes of ``recipe``'s training state as the resumable trainer saves it (without the initial
    first layer): float64 throughout, the first layer as its n x w_1 coefficients and pre-activations, every other
    weight and every bias, and :data:`STATE_HEADER_BYTES`; a float32 state is smaller."""
    pixels = math.prod(size.input_shape)
    params = size.parameters if size.parameters is not None else pixels * UNSIZED_PARAMETERS_PER_PIXEL
    widths = recipe.widths
    w1 = int(widths[0]) if isinstance(widths, (list, tuple)) and widths else 1
    return int(8 * (max(params - pixels * w1, 0) + 2 * size.n_train * w1)) + STATE_HEADER_BYTES


def state_files(recipe: TargetRecipe, size: TargetSize) -> int:
    """The pack files ``recipe``'s training state takes: one, or its parts where it is larger than a file
    (``reconbench.bench.slice_pack.STATE_PART_BYTES``)."""
    return -(-state_bytes(recipe, size) // slice_pack.STATE_PART_BYTES)


def cell_work(cell: Cell, size: TargetSize, *, pieces: bool = False, dtype: str | None = None,
              device: str = "", carry_starts: bool = False) -> CellWork:
    """The work of ``cell`` on a target of ``size`` (:func:`reconbench.preflight.check_target`). ``pieces``: the
    slice trains targets in pieces where the resumable trainer takes their recipe (a slice with ``--pack``).
    ``dtype`` (the suite's or the command's) and ``device``: the attack's precision, which a cost table may price
    apart (none given: the table's one attack rate). ``carry_starts``: every run's start travels in a pack (else
    only where the merge cannot draw it again). With ``pieces`` (a slice with ``--pack``) the cell's figure pairs
    are taken when it is packed: its ``pairs`` units are its evaluation's."""
    pixels = math.prod(size.input_shape)
    params = size.parameters if size.parameters is not None else pixels * UNSIZED_PARAMETERS_PER_PIXEL
    m = cell.attack.candidates if cell.attack.candidates is not None else 2 * size.n_train
    steps = attack_steps(cell.attack.attack, cell.attack.config)
    in_pieces = pieces and resumable_reason(cell.recipe) is None
    train_params = piece_parameters(cell.recipe, size, params) if in_pieces else params
    evaluate = float(cell.attack.search_runs) * m * size.n_train * pixels
    return CellWork(
        cell_id=cell.cell_id,
        target_key=cell.recipe.key(),
        train=float(cell.recipe.train.steps) * size.n_train * train_params,
        attack=float(cell.attack.search_runs) * steps * m * params,
        evaluate=evaluate,
        pieces=in_pieces,
        group=batch_group(cell.recipe) if in_pieces else "",
        precision=_matmul(cell, dtype, device) if device else "",
        runs=int(cell.attack.search_runs),
        steps=steps,
        card=float(size.n_train) * params,
        split=int(cell.attack.search_runs) > 1 and cell.attack.search == DEFAULT_SEARCH,
        chunk=int(cell.attack.config.get("max_batch", 0) or 0),
        run_bytes=tuple(run_tensor_bytes(int(m), pixels, 8 if (cell.attack.dtype or dtype) == "float64" else 4,
                                         starts=carry_starts or cell.init.regime not in REDRAWN_INITS)),
        pool=pool_key(cell, size, int(m), dtype, device),
        pairs=evaluate if pieces else 0.0,
        state_files=state_files(cell.recipe, size) if in_pieces else 0,
        weights=float(params),
    )


def pool_key(cell: Cell, size: TargetSize, m: int, dtype: str | None, device: str = "") -> str:
    """What ``cell``'s search runs must share with another cell's to advance with them in one batched computation
    of a cross-target slice, as ``reconbench.attack.cross_target.cross_key`` groups the batches the cells ask for:
    the attack and its options outside the per-run ones, the network's shape and training precision, the attack's
    precision, the candidates and their labels. Empty where its runs run alone: not a random search (a search that
    proposes its runs in rounds joins with its first round only), not a KKT attack on the closed-form engine, or
    rescaled weights."""
    from reconbench.attack.cross_target import batchable  # torch: only where cells are priced
    from reconbench.attack.kkt.batched import PER_RUN_FIELDS

    if cell.attack.search != DEFAULT_SEARCH or int(cell.attack.search_runs) < 1:
        return ""
    try:
        plugin = plugins.attack(cell.attack.attack)
    except UnknownNameError:
        return ""
    cfg = build_config(plugin.config_cls, dict(cell.attack.config), f"attack {cell.attack.attack}")
    if not batchable(plugin, [cfg]):
        return ""
    fixed = sorted((k, repr(v)) for k, v in config_to_dict(cfg).items() if k not in PER_RUN_FIELDS)
    problem = cell.recipe.problem
    parts = (cell.attack.attack, fixed, cell.recipe.family, sorted((k, repr(v)) for k, v in cell.recipe.model.items()),
             tuple(size.input_shape), size.parameters, problem.task, problem.num_classes, cell.recipe.train.dtype,
             cell.attack.dtype or dtype or "float64", _matmul(cell, dtype, device) if device else "", m)
    return repr(parts)


def _matmul(cell: Cell, dtype: str | None, device: str) -> str:
    tf32 = bool(cell.attack.config.get("tf32", False))
    return str(attack_precision(cell.attack.dtype or dtype or "float64", tf32, device).attack_matmul)


def device_kind(device: str) -> str:
    """``cuda:1`` -> ``cuda``; the prior cost table a device reads (an unknown kind reads the CPU's)."""
    kind = device.split(":")[0]
    return kind if kind in PRIORS else "cpu"


def evaluates_on_device(device: str) -> bool:
    """Whether a slice on ``device`` evaluates its cells on that device: on the CPU yes; on a GPU the evaluation runs
    on the machine's CPU (float64), so a faster GPU does not shorten it (:meth:`CostTable.scaled`)."""
    return device_kind(device) == "cpu"


#: the precision of the probe's attack rows a cost table is made from, by the suite's attack dtype (a float32 attack
#: of the paper suites asks for TF32 products: benchmarks/gpu/probe.py measures both)
PROBE_ATTACK_PRECISION = {"float64": "float64", "float32": "tf32"}


#: the measured precisions a precision the probe did not reach is priced as, in order
SLOWER_PRECISIONS: dict[str, tuple[str, ...]] = {"tf32": ("float32", "float64"), "float32": ("float64",)}


def costs_from_probe(probe: Probe | Mapping[str, Any], *, train_dtype: str = "float64",
                     attack_precision: str = "tf32", source: str = "") -> CostTable:
    """A cost table from the GPU probe's JSON (``benchmarks/gpu/probe.py``, read through
    :data:`~reconbench.records.cost_table.PROBE_FILE`): the rate of each phase in seconds per unit of this module's
    work.

    - train: the batched trainer's rows of ``train_dtype`` with the CUDA graph (every row where none was captured),
      the slowest per target-step (a stack of one target) as the flat rate; its units per target-step are the
      probe's FLOPs per step / targets / 6 (the resumable trainer's ``n P``); and, in ``train_targets``, the rate
      at every stack size measured (the slowest row of each ``targets``, data sets and settings alike), which
      prices a stack by its own size (:meth:`~reconbench.records.cost_table.CostTable.phase`);
    - attack: the attack rows of ``attack_precision`` with the CUDA graph where one was captured, the most runs
      batched, the slowest per unit; units per step: runs x m x the probe network's weights; and, in
      ``attack_runs``, each precision's rate at every run count measured (the slowest row of each count), which
      prices a cell by its own run count (:meth:`~reconbench.records.cost_table.CostTable.phase`); a precision the
      probe did not reach is priced as the first slower one it did (float32 as float64, TF32 as float32 or float64);
    - evaluate, from the probe's ``evaluation`` row (``s`` seconds on ``u`` units, a cell's evaluation on the
      machine's CPU): fixed ``min(the cuda table's fixed, s)`` and rate ``s / u``, and ``evaluate_at`` ``u`` at
      ``s``: a cell of the measured size pays ``s``, a larger one at least ``s`` per ``u`` units whatever part of ``s`` was fixed
      (without the row, or for a row that failed: the built-in ``cuda`` table's);
    - card, from the probe's ``certificate`` row: the built-in card price times the ratio of the row's seconds to
      :data:`CERTIFICATE_REFERENCE`'s (the same random network's certificate timed on the CPU machine that price
      was measured on), its fixed seconds scaled only upwards, so never below the ratio's price (without the row,
      or for a row of another size: the built-in price);
    - fixed seconds of training and attack: the built-in ``cuda`` table's;
    - ``attack_network``: the weights of the network the attack rows timed (biases aside), where they all timed one.
    Raises when the probe measured no row a phase needs (it ran past its budget, say)."""
    prior = PRIORS["cuda"]
    where = f"probe {source}" if source else "the probe"
    rec = probe if isinstance(probe, Probe) else PROBE_FILE.decode(dict(probe), source or None)

    def train_rows(dtype: str) -> list[ProbeTrainerRow]:
        rows = [r for r in rec.trainer if r.measured and r.dtype == dtype]
        return [r for r in rows if r.cuda_graph] or rows

    # a precision the probe did not reach (its budget ran out) is priced as a slower one it measured: float32
    # training as float64, TF32 products as float32 or float64 (pessimistic: a cell may wait, none overruns)
    train = train_rows(train_dtype) or (train_rows("float64") if train_dtype == "float32" else [])

    def all_attack_rows(precision: str) -> list[ProbeAttackRow]:
        rows = [r for r in rec.attack if r.measured and r.precision == precision]
        return [r for r in rows if r.graph] or rows

    def attack_rows(precision: str) -> list[ProbeAttackRow]:
        rows = all_attack_rows(precision)
        most = max((int(r.runs or 0) for r in rows), default=0)
        return [r for r in rows if r.runs == most]

    slower = SLOWER_PRECISIONS[attack_precision] if attack_precision in SLOWER_PRECISIONS else ()
    runs_rows = {p: all_attack_rows(p) for p in MATMUL_PRECISIONS}
    attack = attack_rows(attack_precision) or next((rows for p in slower if (rows := attack_rows(p))), [])
    if not train or not attack:
        phase = "trainer" if not train else "attack"
        want = f"dtype {train_dtype}" if not train else f"precision {attack_precision}"
        raise ReconbenchError(f"{where} has no {phase} row of {want}; run benchmarks/gpu/probe.py with a larger "
                              "--budget, or write the cost table by hand")

    def train_rate(r: ProbeTrainerRow) -> float:
        units = float(r.flops_per_step or 0.0) / int(r.targets or 1) / 6.0
        return 1.0 / float(r.target_steps_per_second or 0.0) / units

    def attack_rate(r: ProbeAttackRow) -> float:
        return float(r.seconds_per_step or 0.0) / (int(r.runs or 1) * int(r.m or 1) * _layer_weights(r.layers))

    t = max(train, key=train_rate)
    a = max(attack, key=attack_rate)
    # each precision the probe measured, for cells that ask for it
    at = {p: PhaseCost(fixed=prior.attack.fixed, rate=max(map(attack_rate, rows)))
          for p in MATMUL_PRECISIONS if (rows := attack_rows(p))}

    def by_runs(precision: str) -> dict[str, PhaseCost]:
        rates: dict[str, float] = {}
        for r in all_attack_rows(precision):
            rates[str(r.runs)] = max(rates.get(str(r.runs), 0.0), attack_rate(r))
        return {k: PhaseCost(fixed=prior.attack.fixed, rate=v) for k, v in sorted(rates.items(), key=lambda x: int(x[0]))}

    slowest: dict[int, ProbeTrainerRow] = {}   # targets stacked -> the slowest row per unit of one target's work
    for r in train:
        k = int(r.targets or 1)
        if k not in slowest or train_rate(r) > train_rate(slowest[k]):
            slowest[k] = r
    by_targets = {str(k): PhaseCost(fixed=prior.train.fixed, rate=train_rate(r)) for k, r in sorted(slowest.items())}
    runs_at = {p: prices for p in MATMUL_PRECISIONS if (prices := by_runs(p))}
    fallback = next((p for p in slower if p in runs_at), None)
    if attack_precision not in runs_at and fallback is not None:   # as the slower precision its flat rate came from
        runs_at[attack_precision] = runs_at[fallback]
    # any other precision the budget did not reach (the float32 attack runs after the cases a paper plan reads), as
    # the first slower one measured: a cell asking for it is not priced at the flat, faster rate
    stand_ins: dict[str, str] = {}
    for p in MATMUL_PRECISIONS:
        stand_in = next((q for q in SLOWER_PRECISIONS.get(p, ()) if q in runs_at), None)
        if p not in runs_at and stand_in is not None:
            runs_at[p], stand_ins[p] = runs_at[stand_in], stand_in
            if stand_in in at:
                at.setdefault(p, at[stand_in])
    about = {"from_probe": {"source": source, "device": rec.device,
                            "train": {"targets": t.targets, "dataset": t.dataset, "dtype": t.dtype,
                                      "cuda_graph": t.cuda_graph, "target_steps_per_second": t.target_steps_per_second,
                                      "target_steps_per_second_by_targets": {
                                          str(k): r.target_steps_per_second for k, r in sorted(slowest.items())}},
                            "attack": {"runs": a.runs, "m": a.m, "precision": a.precision,
                                       "seconds_per_step": a.seconds_per_step,
                                       **({"priced_as": stand_ins} if stand_ins else {})}}}
    networks = {_layer_weights(r.layers) for rows in runs_rows.values() for r in rows}
    evaluate, evaluation_about = probe_evaluation_price(rec, prior.evaluate)
    evaluation = rec.evaluation
    evaluate_at = {str(round(float(evaluation.units or 0.0))): float(evaluation.seconds or 0.0)} \
        if evaluation is not None and evaluation.measured else {}
    card, card_about = probe_card_price(rec, prior.card)
    about["from_probe"].update(evaluation=evaluation_about, card=card_about)
    return CostTable(train=PhaseCost(fixed=prior.train.fixed, rate=train_rate(t)),
                     attack=PhaseCost(fixed=prior.attack.fixed, rate=attack_rate(a)),
                     evaluate=evaluate, attack_at=at, about=about, attack_runs=runs_at, card=card,
                     train_targets=by_targets, evaluate_at=evaluate_at,
                     # the network the attack rows timed, where they all timed one (else prices per unit of any)
                     attack_network=float(networks.pop()) if len(networks) == 1 else None)


def _layer_weights(layers: Sequence[int] | None) -> int:
    """The weights of a dense network of ``layers`` widths (its biases aside): the probe's units of a network."""
    widths = [int(x) for x in layers or []]
    return sum(a * b for a, b in zip(widths[:-1], widths[1:], strict=False))


#: the relative difference in weights under which a measured network is the table's own (the probe counts a
#: network's weights without its biases, a cell's size with them: a few per thousand)
SAME_NETWORK = 0.01


def probe_evaluation_price(probe: Probe, built_in: PhaseCost) -> tuple[PhaseCost, dict[str, Any]]:
    """The evaluate phase's price from ``probe``'s evaluation row, and what it was made of (``about``): fixed
    ``min(built_in.fixed, s)``, rate ``s / u`` (:func:`costs_from_probe`); ``built_in`` without a measured row."""
    row = probe.evaluation
    if row is None or not row.measured:
        why = "the probe has no evaluation row" if row is None else f"the probe's evaluation failed: {row.error}"
        return built_in, {"price": "built-in", "why": why}
    seconds, units = float(row.seconds or 0.0), float(row.units or 0.0)
    price = PhaseCost(fixed=min(built_in.fixed, seconds), rate=seconds / units)
    return price, {"price": "probe", "seconds": seconds, "units": units, "runs": row.runs, "m": row.m, "n": row.n,
                   "pixels": row.pixels, "torch_threads": row.torch_threads,
                   "rule": "fixed min(built-in fixed, seconds), rate seconds / units: the measured size priced at "
                           "its seconds plus at most as much again"}


def probe_card_price(probe: Probe, built_in: PhaseCost | None,
                     reference: CertificateReference = CERTIFICATE_REFERENCE) -> tuple[PhaseCost | None, dict[str, Any]]:
    """A target card's price from ``probe``'s certificate row: ``built_in`` with its rate times ``ratio`` = the row's
    seconds / ``reference``'s and its fixed seconds times ``max(1, ratio)`` (:func:`costs_from_probe`); ``built_in``
    where the table prices no card, the probe timed none, or timed another network than the reference's."""
    row = probe.certificate
    if built_in is None:
        return None, {"price": "none"}
    if row is None or not row.measured:
        why = "the probe has no certificate row" if row is None else f"the probe's certificate failed: {row.error}"
        return built_in, {"price": "built-in", "why": why}
    size = (int(row.n or 0), tuple(int(x) for x in row.layers or []))
    if size != (reference.n, reference.layers):
        return built_in, {"price": "built-in", "why": f"the probe's certificate is of n = {size[0]}, layers "
                          f"{list(size[1])}; the reference's of n = {reference.n}, layers {list(reference.layers)}"}
    ratio = float(row.seconds or 0.0) / reference.seconds
    price = PhaseCost(fixed=built_in.fixed * max(1.0, ratio), rate=built_in.rate * ratio)
    return price, {"price": "probe", "ratio": ratio, "seconds": row.seconds, "torch_threads": row.torch_threads,
                   "reference_seconds": reference.seconds, "reference": reference.source}


def measured_kind(device: str) -> str:
    """The device kind a measured row's ``device`` stands for: ``cpu`` for the CPU, ``cuda`` for anything else (a
    GPU's name or ``cuda:0``)."""
    return "cpu" if device.split(":")[0].strip().lower() == "cpu" else "cuda"


def with_measured(table: CostTable, rows: Iterable[MeasuredRate], device: str) -> CostTable:
    """``table`` with the rates the slices measured on ``device``'s kind (a ledger's ``measured`` rows):

    - ``attack`` rows of the table's own network (``attack_network``, within :data:`SAME_NETWORK`; any network
      where the table names none), in ``attack_runs``: a measured rate, per unit of the table's network, replaces
      the table's at the same precision and run count (the slowest where several cells were measured there), and a
      run count the table lacks is added, so that a cell is priced by the largest run count at most its own,
      measured first (:meth:`CostTable.phase`); rows of another network go to ``attack_networks`` by its weights
      (the table's own prices unchanged: a step does not scale with the weights), which price a cell by its
      network (:meth:`CostTable.attack_price`);
    - ``card_restored`` rows, in ``card_restore`` by the network's weights (the slowest): a travelled card's
      restore (:func:`restore_seconds`);
    - ``evaluation`` rows of cells evaluated whole (their pooled units recorded), as the ``evaluate`` phase's rate,
      the table's fixed seconds ``F`` kept (:func:`measured_evaluation_rate`): the largest ``max(s - F, 0) / u``
      among the cells (each cell re-priced at its own size pays at least what it took), but at least the smallest
      ``s / u`` (no cell's true rate per unit passes its whole seconds per unit, so a cell larger than those measured
      is not priced below its cost however little of ``F`` is really fixed); and each row's units in ``evaluate_at``
      at its seconds (the slowest of rows of the same units): a cell of those units is priced as it took;
    - ``train`` rows of training pieces, in ``train_targets`` at their stack's size (the slowest per size; a size
      measured replaces the probe's), the table's fixed seconds of that size kept (a row times the steps alone); a
      table without prices by size keeps its flat rate as the one-target price.

    Rows of another phase, of another kind of device or with nothing timed (no units: written before they were
    recorded) are left out. ``about["measured"]`` and ``about["measured_networks"]`` list the attack rates taken
    from measurement, ``about["measured_evaluation"]``, ``about["measured_training"]`` and
    ``about["measured_restores"]`` the others."""
    kind = device_kind(device)
    rates: dict[tuple[str, int], tuple[float, list[str]]] = {}
    others: dict[tuple[str, int, int], tuple[float, list[str]]] = {}   # attack rows of other networks
    evaluations: list[MeasuredRate] = []
    training: dict[int, tuple[float, list[str]]] = {}
    restores: dict[str, float] = {}
    own = table.attack_network
    for r in rows:
        if r.phase == "card_restored" and measured_kind(r.device) == kind and r.weights > 0 and r.seconds > 0:
            restores[str(r.weights)] = max(restores.get(str(r.weights), 0.0), r.seconds)
            continue
        rate = r.rate
        if rate is None or measured_kind(r.device) != kind:
            continue
        if r.phase == "attack" and r.runs > 0 and r.weights > 0 and (
                own is None or abs(r.weights - own) > SAME_NETWORK * own):
            old, cells = others.get((r.precision, r.weights, r.runs), (0.0, []))
            others[(r.precision, r.weights, r.runs)] = (max(old, rate), [*cells, r.cell])
            if own is not None:   # the table's own prices stay those of its network
                continue
        if r.phase == "attack" and r.runs > 0:
            if own is not None and r.weights > 0:   # its step per unit of the table's network (its biases aside)
                rate *= r.weights / own
            old, cells = rates.get((r.precision, r.runs), (0.0, []))
            rates[(r.precision, r.runs)] = (max(old, rate), [*cells, r.cell])
        elif r.phase == "evaluation":
            evaluations.append(r)
        elif r.phase == "train" and r.targets > 0:
            old, cells = training.get(r.targets, (0.0, []))
            training[r.targets] = (max(old, rate), [*cells, r.cell])
    if not rates and not others and not evaluations and not training and not restores:
        return table
    changes: dict[str, Any] = {}
    about = dict(table.about)
    if others:
        nets: dict[str, dict[str, dict[str, PhaseCost]]] = {
            p: {w: dict(by) for w, by in v.items()} for p, v in table.attack_networks.items()}
        for (precision, weights, runs), (rate, _) in others.items():
            fixed = table.phase("attack", precision).fixed
            nets.setdefault(precision, {}).setdefault(str(weights), {})[str(runs)] = PhaseCost(fixed=fixed, rate=rate)
        changes["attack_networks"] = nets
        about["measured_networks"] = [{"precision": p, "weights": w, "runs": n, "rate": rate, "cells": cells}
                                      for (p, w, n), (rate, cells) in sorted(others.items())]
    if restores:
        changes["card_restore"] = {**table.card_restore, **{
            w: max(sec, table.card_restore.get(w, 0.0)) for w, sec in restores.items()}}
        about["measured_restores"] = restores
    if rates:
        by_runs = {p: dict(v) for p, v in table.attack_runs.items()}
        for (precision, runs), (rate, _) in rates.items():
            base = by_runs.setdefault(precision, {})
            fixed = table.phase("attack", precision).fixed
            base[str(runs)] = PhaseCost(fixed=fixed, rate=rate)
        changes["attack_runs"] = {p: dict(sorted(v.items(), key=lambda x: int(x[0]))) for p, v in by_runs.items()}
        about["measured"] = [{"precision": p, "runs": n, "rate": rate, "cells": cells}
                             for (p, n), (rate, cells) in sorted(rates.items())]
    if evaluations:
        rate = measured_evaluation_rate(table.evaluate.fixed, [(r.seconds, r.units) for r in evaluations])
        changes["evaluate"] = PhaseCost(fixed=table.evaluate.fixed, rate=rate)
        at = dict(table.evaluate_at)
        for r in evaluations:   # a cell of the units measured is priced at them (the slowest of any there)
            key = str(round(r.units))
            at[key] = max(at.get(key, 0.0), r.seconds)
        changes["evaluate_at"] = at
        about["measured_evaluation"] = {"rate": rate, "table_rate": table.evaluate.rate,
                                        "table_fixed": table.evaluate.fixed, "cells": [r.cell for r in evaluations]}
    if training:
        # a table without prices by size keeps its flat rate for one target (else a lone target would pay a measured
        # stack's whole step)
        by_targets = dict(table.train_targets) or {"1": table.train}
        for k, (rate, _) in training.items():
            by_targets[str(k)] = PhaseCost(fixed=table.phase("train", targets=k).fixed, rate=rate)
        changes["train_targets"] = dict(sorted(by_targets.items(), key=lambda x: int(x[0])))
        about["measured_training"] = [{"targets": k, "rate": rate, "pieces": len(stacks)}
                                      for k, (rate, stacks) in sorted(training.items())]
    return table.updated(**changes, about=about)


def measured_evaluation_rate(fixed: float, measured: Sequence[tuple[float, float]]) -> float:
    """The evaluate phase's rate from cells measured at ``(seconds, units)`` under a table whose fixed seconds are
    ``fixed``: ``max(max over cells of max(s - fixed, 0) / u, min over cells of s / u)``. The first term prices each
    cell at its own size at least at what it took; the second bounds the rate from below by the cells' whole seconds
    per unit, the least of which is still at least the true rate (a cell's cost is a fixed part, at least 0, plus
    that rate times its units), so a cell larger than every measured one is not priced below its cost either."""
    if not measured:
        raise ValueError("no measured evaluation")
    excess = max(max(s - fixed, 0.0) / u for s, u in measured)
    return max(excess, min(s / u for s, u in measured))


def read_costs(path: Path, *, train_dtype: str = "float64", attack_dtype: str = "float64") -> CostTable:
    """A cost table file (:data:`~reconbench.records.cost_table.COST_TABLE_FILE`: ``{"train": {"fixed": s, "rate":
    s_per_unit}, "attack": ..., "evaluate": ...}``, every phase required). The GPU probe's JSON is read as the table
    :func:`costs_from_probe` makes of it, for targets trained in ``train_dtype`` and attacks in ``attack_dtype``."""
    data = read_json(Path(path), missing="pass a JSON file or leave --costs out", damaged="restore it, or write "
                     'it again: {"train": {"fixed": SECONDS, "rate": SECONDS_PER_UNIT}, "attack": ..., "evaluate": ...}')
    if is_probe(data):
        return costs_from_probe(PROBE_FILE.decode(data, path), train_dtype=train_dtype,
                                attack_precision=PROBE_ATTACK_PRECISION.get(attack_dtype, attack_dtype),
                                source=str(path))
    return read_cost_table(data, path)


def pairs_seconds(work: CellWork) -> float:
    """Seconds of taking ``work``'s figure pairs when its slice packs it (:data:`FIGURE_PAIRS`; 0 where it takes
    none: no pack, or a group of its runs, which is written, not evaluated)."""
    return FIGURE_PAIRS.seconds(work.pairs) if work.pairs > 0 else 0.0


def attack_key(phase: str, precision: str) -> str:
    """The key a phase's measurements are kept under: ``attack@<precision>`` for an attack whose precision is
    known (measured apart from the others), else the phase's own name."""
    return f"attack@{precision}" if phase == "attack" and precision else phase


def _seconds_at(record: Mapping[str, Any], *path: str) -> float:
    """A record's number at ``path`` (0 where absent or not a number)."""
    value: object = record
    for key in path:
        value = mapping(value)[key] if key in mapping(value) else None
    return number(value) or 0.0


@dataclass
class CostModel:
    """Seconds per phase: the prior table until the slice measures the phase, then the measurements."""

    prior: CostTable
    factor: float = SAFETY_FACTOR
    extra: float = SAFETY_SECONDS
    measured: dict[str, list[tuple[float, float]]] = field(default_factory=dict)  # phase -> (units, seconds)

    @classmethod
    def for_device(cls, device: str, table: CostTable | Mapping[str, Any] | None = None) -> CostModel:
        """The model of ``device``'s built-in table, or of ``table`` (a record, or a cost table's JSON object)."""
        return cls(prior=PRIORS[device_kind(device)] if table is None else CostTable.of(table))

    def phase_seconds(self, phase: str, units: float, precision: str = "", runs: int = 0, targets: int = 0,
                      weights: float = 0.0) -> float:
        """Seconds of ``units`` of ``phase``; an attack's in its matrix-product ``precision`` where the table has
        a rate for it (``attack_at``: a float64 A/B cell costs far more than a TF32 one of the same units) and
        with its ``runs`` batched where the table prices run counts (``attack_runs``), measured apart from the
        others; on a network of ``weights`` by the networks the table measured (``CostTable.attack_price``);
        training of a stack of ``targets`` where the table prices stack sizes (``train_targets``); an evaluation at
        the seconds measured of the same units where the table has them (``CostTable.evaluate_seconds``)."""
        if units <= 0:
            return 0.0
        key = attack_key(phase, precision)
        seen = [(u, s) for u, s in self.measured.get(key, []) if u > 0]
        if not seen:
            if phase == "attack":
                return self.prior.attack_price(precision, runs, weights).seconds(units)
            if phase == "evaluate":
                return self.prior.evaluate_seconds(units)
            return self.prior.phase(phase, precision, runs, targets).seconds(units)
        return max(s * max(1.0, units / u) for u, s in seen)

    def estimate(self, work: CellWork, trains: bool) -> float:
        """Seconds ``work`` is expected to take, the margin included (``trains``: its target is trained first)."""
        return self.factor * (sum(self.phase_seconds(p, work.units(p, trains), work.precision, work.runs,
                                                     weights=work.weights)
                                  for p in PHASES) + pairs_seconds(work)) + self.extra

    def observe(self, work: CellWork, trains: bool, record: Mapping[str, Any]) -> None:
        """Learn from a finished cell's record: its training (the target's ``load_or_train_seconds`` when this cell
        trained it), its attack (``attack_seconds``), and the rest of its wall time (evaluation and the rest)."""
        if "status" not in record or record["status"] != "ok":
            return
        wall = _seconds_at(record, "wall_seconds")
        train = _seconds_at(record, "target", "load_or_train_seconds") if trains else 0.0
        attack = _seconds_at(record, "attack_seconds")
        for phase, seconds in (("train", train), ("attack", attack), ("evaluate", max(wall - train - attack, 0.0))):
            units = work.units(phase, trains)
            if units > 0:
                self.measured.setdefault(attack_key(phase, work.precision), []).append((units, seconds))


@dataclass
class Pool:
    """A batched computation that the search runs of several cells (or groups of their runs) share in a cross-target
    slice: its precision, the runs and attack units it holds, and per member (cell id) its runs, its units and the
    seconds of its phases other than the attack (margin and fixed seconds included)."""

    precision: str
    weights: float = 0.0   # its network's (a pool's cells share one network)
    runs: int = 0
    units: float = 0.0
    members: dict[str, tuple[int, float, float]] = field(default_factory=dict)


@dataclass
class Slot:
    """Deciding, cell after cell, which cells one slice starts: the time left, and the targets it holds.

    ``pooled`` (a cross-target slice): the search runs of cells with the same :attr:`CellWork.pool` advance in one
    batched computation, priced once at its total run count (:meth:`pooled_attack`); a cell that joins it costs its
    other phases plus what the computation's price grows by (:meth:`cost`), and is charged its share of the units
    (:meth:`charged`)."""

    model: CostModel
    budget: float
    trained: set[str] = field(default_factory=set)   # targets already on the machine (cached or trained here)
    spent: float = 0.0
    pooled: bool = False
    #: the pooled computations of the cells taken, by pool key (only with ``pooled``)
    pools: dict[str, Pool] = field(default_factory=dict)

    def estimate(self, work: CellWork) -> float:
        """``work``'s own estimate: as if its runs ran alone."""
        return self.model.estimate(work, work.target_key not in self.trained)

    def _pool_of(self, work: CellWork) -> str:
        return work.pool if self.pooled and work.pool and work.runs > 0 and work.attack > 0 else ""

    def pooled_attack(self, units: float, precision: str, runs: int, weights: float = 0.0) -> float:
        """Seconds, the margin included, of one batched computation of ``runs`` search runs and ``units`` of attack
        on a network of ``weights``: its fixed seconds once, its units at the rate of its whole run count."""
        return self.model.factor * self.model.phase_seconds("attack", units, precision, runs, weights=weights)

    def _rest(self, work: CellWork) -> float:
        """``work``'s estimate without its attack (its training, evaluation, margin and fixed seconds)."""
        return self.model.estimate(replace(work, attack=0.0), work.target_key not in self.trained)

    def cost(self, work: CellWork) -> float:
        """What taking ``work`` adds to the seconds spent: its estimate, or where its runs join a pooled
        computation, its other phases plus what that computation's price grows by."""
        key = self._pool_of(work)
        if not key:
            return self.estimate(work)
        pool = self.pools.get(key, Pool(work.precision, work.weights))
        before = self.pooled_attack(pool.units, pool.precision, pool.runs, pool.weights) if pool.runs else 0.0
        after = self.pooled_attack(pool.units + work.attack, pool.precision, pool.runs + work.runs, pool.weights)
        return self._rest(work) + after - before

    def charged(self, cell_id: str) -> float | None:
        """The estimate charged to a cell whose runs joined a pooled computation: its other phases plus the
        computation's price times its share of the units (None: it joined none)."""
        for pool in self.pools.values():
            if cell_id in pool.members:
                _, units, rest = pool.members[cell_id]
                return rest + self.pooled_attack(pool.units, pool.precision, pool.runs, pool.weights) * units / pool.units
        return None

    def fits(self, work: CellWork, elapsed: float | None = None) -> bool:
        """Whether the cell's cost (:meth:`cost`) fits in what is left (``elapsed``: the real seconds spent;
        default: the sum of the costs of the cells taken, as a plan counts)."""
        used = self.spent if elapsed is None else elapsed
        return used + self.cost(work) <= self.budget

    def take(self, work: CellWork) -> None:
        self.spent += self.cost(work)
        if key := self._pool_of(work):
            pool = self.pools.setdefault(key, Pool(work.precision, work.weights))
            pool.members[work.cell_id] = (work.runs, work.attack, self._rest(work))
            pool.runs += work.runs
            pool.units += work.attack
        self.trained.add(work.target_key)

    def shared(self) -> list[PooledComputation]:
        """The pooled computations of more than one member, each with its price and its members' charges."""
        out = []
        for pool in self.pools.values():
            if len(pool.members) < 2:
                continue
            charges = tuple((cid, runs, self.charged(cid) or 0.0) for cid, (runs, _, _) in pool.members.items())
            out.append(PooledComputation(runs=pool.runs, precision=pool.precision,
                                         seconds=self.pooled_attack(pool.units, pool.precision, pool.runs,
                                                                    pool.weights),
                                         members=charges))
        return out


@dataclass(frozen=True)
class PooledComputation:
    """A batched computation several cells' runs share in a planned slice: its run count, its precision, its
    attack's seconds (margin included), and per member its cell id, runs and the estimate charged to it."""

    runs: int
    precision: str
    seconds: float
    members: tuple[tuple[str, int, float], ...]


@dataclass(frozen=True)
class GroupRules:
    """How a slice splits a cell's search runs into groups (docs/slices.md, "Cells longer than a slice"), as
    :class:`~reconbench.bench.slice_executor.DeadlineExecutor` does: ``run_files``, the pack files left to runs
    (None: no pack, no limit); ``runs_per_slice``, ``--runs-per-slice`` (None: as many as fit); ``runs_done``, the
    runs of each cell merged already (a ledger's ``partial``); ``cross_target``, the slice pools the search runs of
    cells that can share one batched computation (``--cross-target``: :class:`Slot`'s ``pooled``)."""

    run_files: int | None = None
    runs_per_slice: int | None = None
    runs_done: Mapping[str, frozenset[int]] = field(default_factory=dict)
    cross_target: bool = False
    #: the targets (recipe keys) whose final training state the ledger lists with the card that travelled beside it
    #: (``reconbench.bench.slice_pack.ledger_cards``): a slice restores their cards (:func:`restore_seconds`)
    #: instead of rebuilding them (:func:`card_seconds`)
    travelled_cards: frozenset[str] = frozenset()

    def pack_runs(self, work: CellWork, before: Sequence[Sequence[int]] = (), states: int = 0) -> int:
        """Runs of ``work``'s cell a pack holds (its whole run count without a pack) after the runs ``before``
        (each one's tensor bytes, at its own size) that the slice's groups took already and the ``states`` files
        of the training states the slice packs (:func:`states_due`)."""
        return work.runs if self.run_files is None else runs_that_fit(work.run_bytes, self.run_files - states, before)

    def states_fit(self, states: int, before: Sequence[Sequence[int]] = ()) -> bool:
        """Whether ``states`` files of training states fit beside the runs ``before`` that the slice's groups
        took (always without a pack): a slice trains a stack only where they do."""
        return self.run_files is None or run_files_taken(before) + states <= self.run_files


@dataclass(frozen=True)
class PlannedGroup:
    """Search runs of a cell that one slice runs as a group (written, not evaluated); ``bytes``: what their tensors
    take in the pack."""

    cell_id: str
    runs: tuple[int, ...]
    search_runs: int
    bytes: int


def group_share(work: CellWork, k: int) -> CellWork:
    """``work`` as a group of ``k`` of its runs: its attack's share, priced at ``k`` runs batched, and no evaluation
    (a group is written, not evaluated: the merge evaluates its cell and takes its figure pairs), as the executor
    prices a group."""
    return replace(work, attack=work.attack * k / work.runs, runs=k, evaluate=0.0, pairs=0.0)


@dataclass
class SlicePlan:
    slices: list[list[str]]               # cell ids, in the order they run
    seconds: list[float]                  # each slice's estimated seconds (its cells' estimates and its training)
    unfit: dict[str, float]               # cells that fit no slice: their estimate alone, on an empty machine
    #: per slice, the seconds of training in pieces it gives each group of targets (group -> seconds)
    training: list[dict[str, float]] = field(default_factory=list)
    #: per target trained in pieces: the slice (0-based) in which its training ends
    trained_in: dict[str, int] = field(default_factory=dict)
    #: per slice, how many cards of targets trained in an earlier slice it rebuilds from their final states first
    #: (no card travelled beside the state: a ledger written before cards travelled)
    cards: list[int] = field(default_factory=list)
    #: per slice, the seconds of those rebuilt cards
    card_seconds: list[float] = field(default_factory=list)
    #: per slice, how many cards it restores first from the card that travelled beside the final state
    cards_restored: list[int] = field(default_factory=list)
    #: per slice, the seconds of those restored cards
    restored_seconds: list[float] = field(default_factory=list)
    #: per slice, the targets trained in an earlier slice whose card it does not make: where the walk reached their
    #: first cell, none of their cells (nor a group of their runs) fitted after it, so their cells wait
    cards_skipped: list[list[str]] = field(default_factory=list)
    #: per slice, the seconds of the cards of each group whose training ends in it (group -> seconds; included in
    #: ``training``)
    training_cards: list[dict[str, float]] = field(default_factory=list)
    #: per slice, the groups of search runs it runs (cells longer than a slice, or capped by the pack or
    #: ``--runs-per-slice``); a cell whose runs all ran in groups is evaluated where its last group is merged
    groups: list[list[PlannedGroup]] = field(default_factory=list)
    #: per slice, the batched computations several cells' runs share (a cross-target slice: ``GroupRules``)
    pooled: list[list[PooledComputation]] = field(default_factory=list)

    def finished_in(self, cell_ids: Iterable[str]) -> int | None:
        """The slice (0-based) by whose end every cell of ``cell_ids`` has run, whole or in groups (None: one of
        them never runs)."""
        where = {c: i for i, ids in enumerate(self.slices) for c in ids}
        where.update({g.cell_id: i for i, groups in enumerate(self.groups) for g in groups})
        ids = list(cell_ids)
        return max(where[c] for c in ids) if ids and all(c in where for c in ids) else None


def states_due(state_files: Mapping[str, int], keys: Iterable[str]) -> int:
    """The pack files the training states of ``keys`` take (``state_files``: each target's, by recipe key): the
    states a slice packs, counted before any group of search runs takes a file (docs/slices.md, "The pack")."""
    return sum(state_files.get(k, 0) for k in set(keys))


def training_stacks(works: Iterable[CellWork], progress: Mapping[str, float] | None = None
                    ) -> dict[str, list[dict[str, float]]]:
    """The stacks each group of targets trained in pieces trains in, as the executor stacks them (targets of one
    group at the same step, ``DeadlineExecutor._group_of``): per group, in the cells' order, each stack's targets
    and the units each has left (``progress``: the fraction of its steps done; a group's targets share their step
    count, so an equal fraction is an equal step)."""
    done = dict(progress or {})
    stacks: dict[str, dict[float, dict[str, float]]] = {}
    for w in works:
        if w.pieces:
            at = done.get(w.target_key, 0.0)
            stacks.setdefault(w.group, {}).setdefault(at, {})[w.target_key] = w.train * max(0.0, 1.0 - at)
    return {g: list(by_step.values()) for g, by_step in stacks.items()}


def training_seconds(model: CostModel, works: Iterable[CellWork],
                     progress: Mapping[str, float] | None = None) -> dict[str, float]:
    """Seconds each group of targets trained in pieces needs in one go: one computation per stack
    (:func:`training_stacks`: its targets at the same step), its fixed cost once and its targets' units added, at
    the rate of its stack size where the table prices stack sizes (``CostTable.train_targets``: T targets stacked
    do T targets' arithmetic, faster per target-step in a larger stack); ``progress``: the fraction of each
    target's steps already done. No safety factor: training is resumable (time it overruns is not lost, its state
    goes on in the next slice), so the plan counts what it is expected to take; only a cell, which is lost when it
    cannot finish, is priced with the margin."""
    return {g: sum(model.phase_seconds("train", sum(stack.values()), targets=len(stack)) for stack in stacks)
            for g, stacks in training_stacks(works, progress).items()}


def plan_slices(works: Iterable[CellWork], model: CostModel, budget: float,
                progress: Mapping[str, float] | None = None, rules: GroupRules | None = None) -> SlicePlan:
    """The slices of ``budget`` seconds that run ``works`` on bare machines (no target cached), as the slicer takes
    them: a cell must finish inside its slice, training in pieces need not.

    Each slice first walks the remaining cells in order and starts every one whose estimate still fits and whose
    target needs no training in pieces (a target trained whole is counted in its first cell, as before); then it
    gives what is left (less the margin's fixed seconds; at least :data:`MIN_TRAINING_SECONDS` past the training's
    set-up) to the first group of targets, in the cells' order, whose training in pieces is unfinished; when that
    training ends inside the slice, the walk starts again (its cells can now run) and the next group trains;
    otherwise the slice is full. A target trained in an earlier slice (or before the plan: ``progress`` 1) needs its
    card before its cells: the walk makes it where it reaches the target's first remaining cell, restored from the
    card that travelled beside its final state (:func:`restore_seconds`; ``rules.travelled_cards`` lists the
    ledger's, and every card the plan makes travels), else rebuilt (:func:`card_seconds`); only where one of its
    cells, or a group of a cell's runs, fits after it (:func:`_fits_after`; else the card waits,
    ``SlicePlan.cards_skipped``); and its cells are taken right after it, in their order, before the walk goes on
    (one card, then its cells, then the next card), so no card's seconds are spent without its cells. Training is
    counted as expected, without the cells' safety factor
    (:func:`training_seconds`), and a group pays its set-up (the table's fixed training seconds) in every slice
    it trains in: a bare machine builds the stack and captures its graph again. A finished training state travels,
    so a target trained in one slice is ready in every later one. A cell that does not fit even an empty slice, its
    training aside, is ``unfit``. ``progress``: the fraction of its steps a target's training state has done
    already (by recipe key; its training in pieces costs that much less). Nothing runs: the plan comes from the
    cost model alone.

    A cell of random search runs its search runs in groups (``rules``, :func:`_group_of`) where the executor would
    split it: its estimate passes the slice, it has more runs than ``runs_per_slice``, or some of its runs ran
    already; each group (one a cell a slice) takes as many of the runs left as fit the time left and the pack files
    left to runs (whole chunks of the cell's ``max_batch``), and the cell is done where its last group ran. The
    training states the slice packs take their files first (:func:`states_due`: the targets it trained or rebuilt
    a card of, and the group it trains next), and a group of targets trains only where its states fit beside the
    runs the slice's groups took. Such a
    cell fits no slice only when not even its smallest group fits a bare one (or the pack holds none of its
    runs). With ``rules.cross_target`` the runs of cells (and groups) that share a batched computation are priced
    together, as the executor prices them (:class:`Slot`): once at their total run count, each charged its share."""
    rules = rules or GroupRules()
    todo = list(works)
    plan = SlicePlan([], [], {})
    done_runs = {cid: set(runs) for cid, runs in rules.runs_done.items()}
    card_of = {w.target_key: card_seconds(model.prior, w) for w in todo if w.pieces}
    restore_of = {w.target_key: restore_seconds(model.prior, w) for w in todo if w.pieces}
    # targets whose training ended before the plan (their state at its last step): their card comes first
    finished = {w.target_key for w in todo if w.pieces and (progress or {}).get(w.target_key, 0.0) >= 1.0}
    # the cards that travel beside their final states: the ledger's, then every card the plan makes (at the end of
    # a training, or rebuilt), so that a later slice restores it
    travelled = set(rules.travelled_cards)

    def fits_bare(w: CellWork, card: float) -> tuple[bool, float]:
        """Whether ``w`` (whole, or its smallest group) fits a bare slice after ``card`` seconds; its estimate."""
        alone = Slot(model, budget)
        alone.spent = card
        runs_left = w.runs - len(done_runs.get(w.cell_id, ()))
        ok = alone.fits(w) or (w.split and rules.pack_runs(w) >= 1 and alone.fits(
            group_share(w, min(w.chunk or 1, runs_left))))
        return ok, alone.spent + alone.estimate(w)

    # a bare slice restores a card that travels; the first card of a finished target whose card did not travel is
    # rebuilt, and only where one of its cells fits after the rebuild (else none ever runs)
    restorable = {w.target_key for w in todo if w.pieces} - (finished - travelled)
    for key in finished - travelled:
        if model.prior.card is None or any(fits_bare(w, card_of[key])[0] for w in todo if w.target_key == key):
            restorable.add(key)

    def bare_card(key: str) -> float:
        """The card a bare slice makes before a cell of ``key`` (nothing where the table prices no card)."""
        if model.prior.card is None or key not in card_of:
            return 0.0
        return restore_of[key] if key in restorable else card_of[key]

    for w in todo:
        ok, estimate = fits_bare(w, bare_card(w.target_key))
        if not ok:
            plan.unfit[w.cell_id] = estimate
    todo = [w for w in todo if w.cell_id not in plan.unfit]
    setup = model.prior.train.fixed   # the set-up of a training piece
    training = [w for w in todo if w.target_key not in finished]
    left = {g: sec - setup for g, sec in training_seconds(model, training, progress).items()}
    members: dict[str, set[str]] = {}
    for w in training:
        if w.pieces:
            members.setdefault(w.group, set()).add(w.target_key)
    ready: set[str] = set(finished)
    by_id = {w.cell_id: w for w in todo}
    state_of = {w.target_key: w.state_files for w in todo if w.pieces}
    while todo:
        slot = Slot(model, budget, pooled=rules.cross_target)
        groups: list[PlannedGroup] = []
        # the card of a target whose training ended in an earlier slice is made where the walk reaches its first
        # cell, as the executor makes it: restored where it travelled (a training piece's set-up), else rebuilt; and
        # only where one of its cells, or a group of their runs, fits after it (else its cells wait: the time goes
        # to other work). Its cells come right after it, before any other cell: no card is paid for without them.
        carded: dict[str, float] = {}   # targets whose card the slice holds: the seconds it cost here
        rebuilt = restored = 0
        rebuilt_seconds = restored_seconds = 0.0
        skipped: list[str] = []
        made: dict[str, float] = {}
        taken: list[str] = []
        trained: dict[str, float] = {}
        packed: set[str] = set()   # targets whose training state the slice packs (trained, or a card rebuilt)

        while True:
            # the states the slice packs take their files first: those of the targets it trained, and of the group
            # it trains next (states_due); a group of runs takes only the files they leave
            pending = next((w.group for w in todo if w.pieces and w.target_key not in ready), None)
            states = states_due(state_of, packed | (members[pending] if pending is not None else set()))
            order = list(todo)
            at = 0
            while at < len(order):
                w = order[at]
                at += 1
                if w.cell_id in taken or (
                        w.split and len(done_runs.get(w.cell_id, ())) >= w.runs):
                    continue
                if any(g.cell_id == w.cell_id for g in groups):   # one group of a cell a slice, as the executor runs
                    continue
                key = w.target_key
                if w.pieces and key not in carded:
                    if key not in ready or key in skipped:
                        continue
                    price = restore_of[key] if key in travelled else card_of[key]
                    before = [by_id[g.cell_id].run_bytes for g in groups for _ in g.runs]
                    if not any(_fits_after(v, slot, price, model, budget, rules, done_runs, before, states)
                               for v in order[at - 1:] if v.target_key == key):
                        skipped.append(key)
                        continue
                    slot.spent += price
                    carded[key] = price
                    if key in travelled:
                        restored, restored_seconds = restored + 1, restored_seconds + price
                    else:   # rebuilt by a training call: its final state travels
                        rebuilt, rebuilt_seconds = rebuilt + 1, rebuilt_seconds + price
                        packed.add(key)
                        states = states_due(state_of, packed | (members[pending] if pending is not None else set()))
                    travelled.add(key)
                    # the card's cells next, in their order, then the walk goes on where it was
                    rest = order[at - 1:]
                    order[at - 1:] = [v for v in rest if v.target_key == key] + [v for v in rest if v.target_key != key]
                    at -= 1
                    continue
                if w.split:
                    # each run taken already at its own cell's size (cells of other shapes take other room)
                    room = None if rules.run_files is None else rules.pack_runs(
                        w, [by_id[g.cell_id].run_bytes for g in groups for _ in g.runs], states)
                    # a bare slice makes the target's card before the cell: what a whole cell must fit in
                    bare = budget - (carded.get(key, bare_card(key)) if w.pieces and
                                     model.prior.card is not None else 0.0)
                    planned = _group_of(w, slot, model, bare, rules, done_runs.get(w.cell_id, set()), room)
                    if planned is not None:   # the cell runs in groups: this one, or none here
                        if planned.runs:
                            slot.take(group_share(w, len(planned.runs)))
                            groups.append(planned)
                            done_runs.setdefault(w.cell_id, set()).update(planned.runs)
                        continue
                if slot.fits(w):
                    slot.take(w)
                    taken.append(w.cell_id)
            group = next((w.group for w in todo if w.pieces and w.target_key not in ready), None)
            allowed = budget - slot.spent - model.extra - setup
            if group is None or allowed < MIN_TRAINING_SECONDS:
                break
            # its states must find files beside the runs the slice's groups took (else none of it would travel)
            if not rules.states_fit(states_due(state_of, packed | members[group]),
                                    [by_id[g.cell_id].run_bytes for g in groups for _ in g.runs]):
                break
            # the cards of the group's targets are made when its training ends, in the same slice: training ends
            # here only if they fit after it (a table without a card price makes them for free, as before)
            card = sum(card_of[k] for k in members[group]) if model.prior.card is not None else 0.0
            ends = left[group] + card <= allowed
            seconds = left[group] if ends else allowed if left[group] > allowed else allowed - card
            if seconds < MIN_TRAINING_SECONDS and not ends:
                break
            slot.spent += setup + seconds + (card if ends else 0.0)
            packed |= members[group]
            left[group] -= seconds
            trained[group] = trained.setdefault(group, 0.0) + setup + seconds + (card if ends else 0.0)
            if not ends:
                break
            made[group] = card
            ready |= members[group]
            travelled |= members[group]   # the cards made here travel beside the final states
            carded.update({k: 0.0 for k in members[group]})
            for key in members[group]:
                plan.trained_in[key] = len(plan.slices)
        if not taken and not trained and not groups:   # nothing can progress (not once unfit cells are set aside)
            plan.unfit.update({w.cell_id: Slot(model, budget).estimate(w) for w in todo})
            break
        plan.slices.append(taken)
        plan.seconds.append(slot.spent)
        plan.training.append(trained)
        plan.cards.append(rebuilt)
        plan.card_seconds.append(rebuilt_seconds)
        plan.cards_restored.append(restored)
        plan.restored_seconds.append(restored_seconds)
        plan.cards_skipped.append(skipped)
        plan.training_cards.append(made)
        plan.groups.append(groups)
        plan.pooled.append(slot.shared())
        todo = [w for w in todo if w.cell_id not in set(taken)
                and not (w.split and len(done_runs.get(w.cell_id, ())) >= w.runs)]
    return plan


def _fits_after(work: CellWork, slot: Slot, card: float, model: CostModel, budget: float, rules: GroupRules,
                done_runs: Mapping[str, set[int]], before: Sequence[Sequence[int]] = (), states: int = 0) -> bool:
    """Whether ``work`` (whole, or a group of its runs) fits the slot after ``card`` more seconds of its target's
    card, as ``DeadlineExecutor._fits_after`` asks before it makes a card: ``Slot.fits``, or :func:`_group_of`
    with the card's price off a bare slice (``before``: the tensor bytes of each run the slice's groups took
    already, and ``states`` the files of the training states it packs, which take pack room)."""
    done = done_runs.get(work.cell_id, set())
    if work.split and len(done) >= work.runs:
        return False
    trial = replace(slot, spent=slot.spent + card)
    if work.split:
        room = None if rules.run_files is None else rules.pack_runs(work, before, states)
        planned = _group_of(work, trial, model, budget - (card if model.prior.card is not None else 0.0), rules,
                            done, room)
        if planned is not None:
            return bool(planned.runs)
    return trial.fits(work)


def _group_of(work: CellWork, slot: Slot, model: CostModel, budget: float, rules: GroupRules, done: set[int],
              room: int | None) -> PlannedGroup | None:
    """The group of ``work``'s runs a slice runs now (no runs: none fits the time or the pack left), or None: the
    cell runs whole (all its runs fit ``budget``, a bare slice less its card's rebuild, within ``runs_per_slice``,
    and none ran before); as ``DeadlineExecutor._runs_to_do`` decides."""
    left = [k for k in range(work.runs) if k not in done]
    if not done and work.runs <= (rules.runs_per_slice or work.runs) and model.estimate(work, False) <= budget:
        return None   # whole, evaluated on the device: its runs do not travel
    cap = min(len(left), rules.runs_per_slice or work.runs, work.runs if room is None else room)
    for k in range(cap, 0, -1):
        if work.chunk and k % work.chunk and k != len(left):
            continue
        if slot.fits(group_share(work, k)):
            return PlannedGroup(cell_id=work.cell_id, runs=tuple(left[:k]), search_runs=work.runs,
                                bytes=k * sum(work.run_bytes))
    return PlannedGroup(cell_id=work.cell_id, runs=(), search_runs=work.runs, bytes=0)


def fits_in(works: list[CellWork], table: CostTable, budget: float, slices: int,
            progress: Mapping[str, float] | None = None, rules: GroupRules | None = None) -> bool:
    """Whether the plan of ``works`` on ``table`` takes at most ``slices`` slices, every cell in them (whole or in
    groups of its runs)."""
    plan = plan_slices(works, CostModel(prior=table), budget, progress, rules)
    return not plan.unfit and len(plan.slices) <= slices


#: the range of speeds a break-even search looks in (times the table's speed)
BREAK_EVEN_RANGE = (1e-3, 1e3)


def break_even_speed(works: list[CellWork], table: CostTable, budget: float, slices: int,
                     progress: Mapping[str, float] | None = None, *, rel: float = 1e-6,
                     rules: GroupRules | None = None, evaluation: bool = True) -> float | None:
    """The least speed ``s`` (a device ``s`` times as fast per unit as ``table``, its fixed seconds unchanged:
    :meth:`CostTable.scaled`; ``evaluation=False``: the evaluate phase's price too, as on a GPU, whose cells are
    evaluated on the machine's CPU) at which ``works`` fit in ``slices`` slices of ``budget`` seconds; None when not
    even :data:`BREAK_EVEN_RANGE`'s fastest does (fixed seconds, or the unscaled phases, alone pass the budget).
    Bisection in log scale to ``rel``: a plan's slice count does not grow as every rate falls, so the fitting
    speeds form one interval."""
    lo, hi = BREAK_EVEN_RANGE

    def fits(speed: float) -> bool:
        return fits_in(works, table.scaled(speed, evaluation=evaluation), budget, slices, progress, rules)

    if not fits(hi):
        return None
    if fits(lo):
        return lo
    while hi / lo > 1.0 + rel:
        mid = math.sqrt(lo * hi)
        lo, hi = (lo, mid) if fits(mid) else (mid, hi)
    return hi


#: seconds one paper-size search run may take on the device, batched with others (the GPU issue's target)
RUN_SECONDS_TARGET = 30.0


def card_seconds(table: CostTable, work: CellWork) -> float:
    """Seconds of ``work``'s target's card (made when its training ends, or rebuilt from its final state in a later
    slice) at ``table``'s card price; its training's fixed seconds where the table has none."""
    return table.card.seconds(work.card) if table.card is not None else table.train.fixed


def restore_seconds(table: CostTable, work: CellWork | None = None) -> float:
    """Seconds of restoring a target's card from the card that travelled beside its final state (the state loaded,
    the weights written and hashed, no release metrics): as the slices measured restores (``card_restore``, the
    ledger's ``card_restored`` rows: :meth:`CostTable.restore_seconds` at ``work``'s network; without ``work``
    the largest network measured), else priced as a training piece's set-up, ``table``'s fixed training seconds."""
    measured = table.restore_seconds(work.weights if work is not None else 0.0)
    return table.train.fixed if measured is None else measured


def run_step_seconds(table: CostTable, work: CellWork) -> float:
    """Seconds of one step of one of ``work``'s search runs at ``table``'s attack rate for its precision and run
    count (batched: no fixed part)."""
    return table.attack_price(work.precision, work.runs, work.weights).rate * work.run_step


def target_training_seconds(table: CostTable, work: CellWork, targets: int = 1) -> float:
    """Seconds of ``work``'s target's whole training in pieces in a stack of ``targets`` targets, at ``table``'s
    price for that stack size (``train_targets``, as :func:`training_seconds` prices it), its set-up aside."""
    return table.phase("train", targets=targets).rate * work.train


def stack_size(works: Iterable[CellWork], key: str, progress: Mapping[str, float] | None = None) -> int:
    """The targets of the stack the target ``key`` trains in (:func:`training_stacks`); 1 where it trains in none."""
    for stacks in training_stacks(works, progress).values():
        for stack in stacks:
            if key in stack:
                return len(stack)
    return 1


def break_even_budget(works: list[CellWork], table: CostTable, slices: int, start: float, stop: float,
                      progress: Mapping[str, float] | None = None, rules: GroupRules | None = None) -> float | None:
    """The least whole number of seconds in ``[start, stop]`` a slice needs for ``works`` to fit in ``slices``
    slices at ``table``'s speed; None when none of them does. A scan, not a bisection: the first-fit walk can
    take more slices at a longer budget than at a shorter one (a cell that now fits earlier displaces training)."""
    budget = math.ceil(start)
    while budget <= stop:
        if fits_in(works, table, budget, slices, progress, rules):
            return float(budget)
        budget += 1
    return None
