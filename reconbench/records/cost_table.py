"""What a slice's plan prices cells with: a cost table (``--costs FILE``, ``reconbench-cost-table/1``) and the GPU
probe's JSON (``benchmarks/gpu/probe.py``, ``reconbench-gpu-probe/1``), each read strictly through its door.

A cost table gives each phase of a cell (``reconbench.bench.slice_costs``) its seconds as ``fixed + units x rate``.
Its first form carried no version stamp and held the attack's rate per matrix-product precision as top-level keys
``attack@tf32`` and the like, beside any other keys a writer chose (where it was measured, say); the upgrade step
moves the former into :attr:`CostTable.attack_at` and the latter into :attr:`CostTable.about`.

The probe's JSON first carried no stamp either; its rows are read as they are (a row that failed holds ``params``
and ``error`` only). Fields added later (a row's ``case_seconds``, the ``evaluation`` row, the certificate's typed
row) are optional: a probe written before them reads with none.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from reconbench.errors import ReconbenchError
from reconbench.records.record import FileFormat, Record, unchanged

COST_TABLE_SCHEMA = "reconbench-cost-table/1"
PROBE_SCHEMA = "reconbench-gpu-probe/1"
#: the phases every cost table prices
COST_PHASES = ("train", "attack", "evaluate")


@dataclass(frozen=True)
class PhaseCost(Record):
    """Seconds of a phase of ``u`` units: ``fixed + u x rate`` (both finite and non-negative)."""

    fixed: float
    rate: float

    def __post_init__(self) -> None:
        for name in ("fixed", "rate"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise ReconbenchError(f"a phase cost needs finite non-negative 'fixed' and 'rate' (got {name} = {v!r}); "
                                      'write {"fixed": SECONDS, "rate": SECONDS_PER_UNIT}')

    def seconds(self, units: float) -> float:
        return self.fixed + units * self.rate


@dataclass(frozen=True)
class CostTable(Record):
    """A device's prices per phase, and per matrix-product precision for the attack (``attack_at``: a float64 A/B
    cell costs far more than a TF32 one of the same units), and per precision and number of search runs batched
    where they were measured (``attack_runs``: precision -> runs, as a decimal string -> price; a GPU does more per
    unit with more runs, so a 4-run cell does not get the 16-run rate: :meth:`phase`), and training's price per
    number of targets stacked where measured (``train_targets``: targets, as a decimal string -> price per unit of
    one target's work; a stack of four does more target-steps a second than one target alone). ``peak_fraction``: the
    fraction of the device's peak the rates stand for, where the table was made from arithmetic (none for a
    measured one); ``about``: where the numbers come from (free form)."""

    SCHEMA: ClassVar[str | None] = COST_TABLE_SCHEMA

    train: PhaseCost
    attack: PhaseCost
    evaluate: PhaseCost
    format: str = COST_TABLE_SCHEMA
    attack_at: Mapping[str, PhaseCost] = field(default_factory=dict)
    peak_fraction: float | None = None
    about: Mapping[str, Any] = field(default_factory=dict)
    attack_runs: Mapping[str, Mapping[str, PhaseCost]] = field(default_factory=dict)
    #: a target's card (release metrics and stationarity certificate, on the machine's CPU) per unit of n x P; None:
    #: the training's fixed seconds per rebuilt card, nothing for a card made at the end of training
    card: PhaseCost | None = None
    #: training in pieces by the number of targets that train as one stack (targets, as a decimal string -> price
    #: per unit of one target's work): :meth:`phase` with ``targets``; empty: every stack at ``train``'s rate
    train_targets: Mapping[str, PhaseCost] = field(default_factory=dict)
    #: the weights of the network the attack's prices (``attack``, ``attack_at``, ``attack_runs``) were measured on
    #: (the probe's); None: prices per unit of any network (built-in or from arithmetic)
    attack_network: float | None = None
    #: the attack's prices measured on other networks (precision -> the network's weights, a decimal string -> run
    #: count -> price per unit of that network): :meth:`attack_price`
    attack_networks: Mapping[str, Mapping[str, Mapping[str, PhaseCost]]] = field(default_factory=dict)
    #: evaluations measured whole (their units, a decimal string -> the slowest seconds): a cell of the same units
    #: is priced at them (:meth:`seconds`)
    evaluate_at: Mapping[str, float] = field(default_factory=dict)
    #: cards restored from the card that travelled beside a final state (the network's weights, a decimal string
    #: -> the slowest seconds): :meth:`restore_seconds`
    card_restore: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for precision, by_runs in self.attack_runs.items():
            bad = [k for k in by_runs if not (k.isdigit() and int(k) > 0)]
            if bad:
                raise ReconbenchError(f"attack_runs.{precision}: {bad[0]!r} is not a number of search runs; key each "
                                      'price by its run count as a decimal string, e.g. "16"')
        bad = [k for k in self.train_targets if not (k.isdigit() and int(k) > 0)]
        if bad:
            raise ReconbenchError(f"train_targets: {bad[0]!r} is not a number of targets; key each price by the "
                                  'number of targets stacked as a decimal string, e.g. "4"')
        for precision, by_network in self.attack_networks.items():
            for weights, by_runs in by_network.items():
                bad = [k for k in (weights, *by_runs) if not (k.isdigit() and int(k) > 0)]
                if bad:
                    raise ReconbenchError(f"attack_networks.{precision}: {bad[0]!r} is not a positive whole number; "
                                          'key each network by its weights and each price by its run count as '
                                          'decimal strings, e.g. {"1786000": {"16": {"fixed": 5, "rate": 1e-13}}}')
        for name in ("evaluate_at", "card_restore"):
            for k, v in getattr(self, name).items():
                if not (k.isdigit() and int(k) > 0 and isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                    raise ReconbenchError(f"{name}: {k!r}: {v!r} is not a positive whole number of units or weights "
                                          'with finite non-negative seconds; write e.g. {"6272000000": 14.8}')
        if self.attack_network is not None and not (math.isfinite(self.attack_network) and self.attack_network > 0):
            raise ReconbenchError(f"attack_network {self.attack_network!r} is not a positive number of weights; give "
                                  "the weights of the network the attack was measured on, or leave it out")

    def phase(self, phase: str, precision: str = "", runs: int = 0, targets: int = 0) -> PhaseCost:
        """The price of ``phase``; an attack's in its ``precision`` where the table has one, and with ``runs``
        search runs batched where ``attack_runs`` has that precision: the price of the largest measured run count
        at most ``runs``; below the smallest, that count's seconds per batched step spread over ``runs`` (a step
        never gets cheaper with fewer runs: the rate per unit grows as smallest / runs). Training of a stack of
        ``targets`` targets where ``train_targets`` has prices, alike: the largest measured stack at most
        ``targets`` (a stack of 2 at the 1-target rate where 1 and 4 were measured: never cheaper than
        measured); below the smallest, its seconds per stack step spread over ``targets``."""
        if phase == "attack" and runs > 0 and self.attack_runs.get(precision):
            return runs_price(self.attack_runs[precision], runs)
        if phase == "train" and targets > 0 and self.train_targets:
            return count_price(self.train_targets, targets, "training price by targets stacked",
                               '{"4": {"fixed": 15, "rate": 2e-13}}')
        if phase == "attack" and precision in self.attack_at:
            return self.attack_at[precision]
        if phase not in COST_PHASES:
            raise ReconbenchError(f"no phase {phase!r} in a cost table; one of {', '.join(COST_PHASES)}")
        cost: PhaseCost = getattr(self, phase)
        return cost

    def attack_price(self, precision: str = "", runs: int = 0, weights: float = 0.0) -> PhaseCost:
        """The attack's price per unit for ``runs`` batched search runs on a network of ``weights`` weights. Where
        the table knows the networks its prices were measured on (``attack_network``, ``attack_networks``), each
        measured network ``W`` bounds a batched step's seconds from above: a network no larger steps no slower (its
        rate per unit at most ``W / weights`` times ``W``'s), a larger one at most proportionally slower (at most
        ``W``'s rate); the price is the least of these bounds, so a network measured is priced as measured and
        another by the measured step of the nearest one above it (not by units alone: a step of a smaller network
        does not shrink with its weights). ``runs`` picks each network's price as :meth:`phase` does. Without
        ``weights`` or a known network: :meth:`phase`'s price per unit of any network."""
        base = self.phase("attack", precision, runs)
        points: list[tuple[float, PhaseCost]] = []
        if self.attack_network is not None:
            points.append((self.attack_network, base))
        for network, by_runs in self.attack_networks.get(precision, {}).items():
            points.append((float(network), runs_price(by_runs, runs)))
        if weights <= 0 or not points:
            return base

        def bound(point: tuple[float, PhaseCost]) -> float:
            return point[1].rate * max(1.0, point[0] / weights)

        best = min(points, key=bound)
        return PhaseCost(fixed=best[1].fixed, rate=bound(best))

    def evaluate_seconds(self, units: float) -> float:
        """Seconds of an evaluation of ``units``: the slowest measured of exactly these units (``evaluate_at``),
        else the ``evaluate`` price."""
        measured = self.evaluate_at.get(str(round(units)))
        return float(measured) if measured is not None else self.evaluate.seconds(units)

    def restore_seconds(self, weights: float = 0.0) -> float | None:
        """Seconds of restoring a card of a network of ``weights`` weights from ``card_restore``: the most any
        measured restore bounds it by (its seconds, times ``weights / W`` for a larger network: the state read
        grows with it); None where none was measured."""
        if not self.card_restore:
            return None
        return max(s * max(1.0, weights / int(w)) for w, s in self.card_restore.items())

    def scaled(self, speed: float, *, evaluation: bool = True) -> CostTable:
        """The table of a device ``speed`` times as fast per unit (fixed seconds unchanged): what a break-even
        search varies. ``evaluation=False`` keeps the evaluate phase's price: on a GPU a cell is evaluated on the
        machine's CPU, which a faster device does not speed up (as the card)."""
        def faster(c: PhaseCost) -> PhaseCost:
            return PhaseCost(fixed=c.fixed, rate=c.rate / speed)

        return CostTable(train=faster(self.train), attack=faster(self.attack),
                         evaluate=faster(self.evaluate) if evaluation else self.evaluate,
                         attack_at={k: faster(v) for k, v in self.attack_at.items()},
                         peak_fraction=None if self.peak_fraction is None else self.peak_fraction * speed,
                         about=self.about,
                         attack_runs={p: {r: faster(c) for r, c in by.items()} for p, by in self.attack_runs.items()},
                         card=self.card,   # on the machine's CPU: a faster device does not change it
                         train_targets={k: faster(c) for k, c in self.train_targets.items()},
                         attack_network=self.attack_network,
                         attack_networks={p: {w: {r: faster(c) for r, c in by.items()} for w, by in nets.items()}
                                          for p, nets in self.attack_networks.items()},
                         evaluate_at={k: v / speed for k, v in self.evaluate_at.items()} if evaluation
                         else self.evaluate_at,
                         card_restore=self.card_restore)

    @classmethod
    def of(cls, table: CostTable | Mapping[str, Any], source: str = "") -> CostTable:
        """A table given as a record or as the JSON object of a cost table file (either form)."""
        return table if isinstance(table, CostTable) else read_cost_table(dict(table), source)


def runs_price(by_runs: Mapping[str, PhaseCost], runs: int) -> PhaseCost:
    """The price of an attack of ``runs`` batched search runs from prices measured at some run counts (decimal
    string keys): the largest count at most ``runs``; below the smallest, its rate x smallest / ``runs``."""
    return count_price(by_runs, runs, "attack price by run count", '{"16": {"fixed": 5, "rate": 1e-12}}')


def count_price(by_count: Mapping[str, PhaseCost], count: int, what: str, example: str) -> PhaseCost:
    """The price of ``count`` things done together (search runs batched, targets stacked) from prices measured at
    some counts (decimal string keys): the largest count at most ``count``; below the smallest, its rate x
    smallest / ``count`` (a batched step never gets cheaper with fewer in it). ``what`` and ``example`` name the
    prices in the error where there are none."""
    counts = {int(k): v for k, v in by_count.items()}
    if not counts:
        raise ReconbenchError(f"no {what}; give at least one, e.g. {example}")
    below = [c for c in counts if c <= count]
    if below:
        return counts[max(below)]
    least = min(counts)
    return PhaseCost(fixed=counts[least].fixed, rate=counts[least].rate * least / max(count, 1))


def _legacy_cost_table(data: dict[str, Any]) -> dict[str, Any]:
    """The unstamped form: ``attack@<precision>`` keys into ``attack_at``, keys no field names into ``about``."""
    known = {"train", "attack", "evaluate", "attack_at", "peak_fraction", "about", "attack_runs", "card",
             "train_targets", "attack_network", "attack_networks", "evaluate_at", "card_restore"}
    out: dict[str, Any] = {"format": COST_TABLE_SCHEMA}
    attack_at: dict[str, Any] = {}
    about: dict[str, Any] = {}
    for key, value in data.items():
        if key.startswith("attack@"):
            attack_at[key.removeprefix("attack@")] = value
        elif key in known:
            out[key] = value
        else:
            about[key] = value
    for precision, entry in attack_at.items():   # an entry may leave out what it shares with the attack's
        if isinstance(entry, dict) and isinstance(data.get("attack"), dict):
            attack_at[precision] = {**data["attack"], **entry}
    if attack_at:
        out["attack_at"] = attack_at
    if about:
        out["about"] = about
    return out


#: the door of a cost table file
COST_TABLE_FILE: FileFormat[CostTable] = FileFormat(
    CostTable, "format", {COST_TABLE_SCHEMA: unchanged, None: _legacy_cost_table},
    fix='write {"format": "reconbench-cost-table/1", "train": {"fixed": SECONDS, "rate": SECONDS_PER_UNIT}, '
        '"attack": ..., "evaluate": ...}')


def read_cost_table(data: object, source: object = "") -> CostTable:
    """A cost table file's JSON through its door; a phase left out is named in one line."""
    if isinstance(data, dict):
        missing = [p for p in COST_PHASES if p not in data]
        if missing:
            raise ReconbenchError(f"{source or 'a cost table'}: no {', '.join(repr(p) for p in missing)} phase; every "
                                  f"phase is required: {COST_TABLE_FILE.fix}")
    return COST_TABLE_FILE.decode(data, str(source) or None)


@dataclass(frozen=True)
class ProbeTrainerRow(Record):
    """One case of the batched trainer (``benchmarks/gpu/probe.py``); a failed case holds ``params`` and ``error``."""

    targets: int | None = None
    dataset: str | None = None
    input_dim: int | None = None
    n: int | None = None
    widths: list[int] | None = None
    dtype: str | None = None
    #: "shared": the targets share loss, lr and weight decay; "mixed": each has its own (None: a probe before both)
    settings: str | None = None
    cuda_graph_asked: bool | None = None
    cuda_graph: bool | None = None
    notes: list[Any] | None = None
    steps_timed: int | None = None
    seconds: float | None = None
    steps_per_second: float | None = None
    target_steps_per_second: float | None = None
    flops_per_step: float | None = None
    tflops_per_second: float | None = None
    peak_memory_gib: float | None = None
    diverged: list[bool] | None = None
    params: list[Any] | None = None
    error: str | None = None
    case_seconds: float | None = None   # the case's whole wall time, set-up and warm-up included

    @property
    def measured(self) -> bool:
        return self.error is None and bool(self.target_steps_per_second) and bool(self.flops_per_step) \
            and bool(self.targets)


@dataclass(frozen=True)
class ProbeAttackRow(Record):
    """One case of the batched attack; a failed case holds ``params`` and ``error``."""

    runs: int | None = None
    m: int | None = None
    layers: list[int] | None = None
    precision: str | None = None
    cuda_graph_asked: bool | None = None
    batch: Mapping[str, Any] | None = None
    loop_seconds: Mapping[str, float] | None = None
    seconds_per_step: float | None = None
    run_steps_per_second: float | None = None
    flops_per_step: float | None = None
    tflops_per_second: float | None = None
    peak_memory_gib: float | None = None
    params: list[Any] | None = None
    error: str | None = None
    case_seconds: float | None = None

    @property
    def measured(self) -> bool:
        return self.error is None and (self.seconds_per_step or 0.0) > 0 and bool(self.runs) and bool(self.m) \
            and bool(self.layers)

    @property
    def graph(self) -> bool:
        return bool(self.batch is not None and self.batch.get("cuda_graph"))


@dataclass(frozen=True)
class ProbeEvaluationRow(Record):
    """One cell's evaluation timed on the machine's CPU (``probe.py``'s ``evaluation`` case): ``runs`` x ``m``
    pooled candidates against ``n`` training images of ``pixels`` pixels, ``units`` the planner's (their product),
    ``seconds`` the whole evaluation (``seconds_by_step``: the evaluations with their nulls, the calibration bars)
    with ``torch_threads`` threads; a failed case holds ``error``."""

    cell: str | None = None
    runs: int | None = None
    m: int | None = None
    n: int | None = None
    pixels: int | None = None
    candidates: int | None = None
    evaluations: int | None = None
    bars: bool | None = None
    figures: bool | None = None
    seconds: float | None = None
    seconds_by_step: Mapping[str, float] | None = None
    units: float | None = None
    seconds_per_unit: float | None = None
    torch_threads: int | None = None
    problem_seconds: float | None = None
    pooled_summary: Mapping[str, Any] | None = None
    params: list[Any] | None = None
    error: str | None = None
    case_seconds: float | None = None

    @property
    def measured(self) -> bool:
        return self.error is None and (self.seconds or 0.0) > 0 and (self.units or 0.0) > 0


@dataclass(frozen=True)
class ProbeCertificateRow(Record):
    """The stationarity certificate of a random network timed on the machine's CPU (``probe.py``'s ``certificate``
    case): ``layers`` at ``n`` training points, ``seconds`` its wall time (``fit_seconds``: the certificate's own
    count) with ``torch_threads`` threads; a failed case holds ``error``."""

    n: int | None = None
    layers: list[int] | None = None
    seconds: float | None = None
    fit_seconds: float | None = None
    torch_threads: int | None = None
    params: list[Any] | None = None
    error: str | None = None
    case_seconds: float | None = None

    @property
    def measured(self) -> bool:
        return self.error is None and (self.seconds or 0.0) > 0 and bool(self.n) and bool(self.layers)


@dataclass(frozen=True)
class Probe(Record):
    """The GPU probe's JSON: what the batched trainer and attack achieved on one device."""

    SCHEMA: ClassVar[str | None] = PROBE_SCHEMA

    format: str = PROBE_SCHEMA
    benchmark: str | None = None
    tiny: bool | None = None
    command: str | None = None   # the command line that wrote it (none before it was recorded)
    conditions: Mapping[str, Any] = field(default_factory=dict)
    sizes: Mapping[str, Any] | None = None
    trainer_check: Mapping[str, Any] | None = None
    trainer: list[ProbeTrainerRow] = field(default_factory=list)
    attack: list[ProbeAttackRow] = field(default_factory=list)
    skipped: list[Any] = field(default_factory=list)
    wall_seconds: float | None = None
    profile: Mapping[str, Any] | None = None       # the kernel profile of the largest TF32 attack case
    certificate: ProbeCertificateRow | None = None   # the stationarity certificate's seconds (--certificate)
    evaluation: ProbeEvaluationRow | None = None     # a cell's evaluation on the machine's CPU (none before it)

    @property
    def device(self) -> str | None:
        d = self.conditions.get("device")
        return None if d is None else str(d)


def _stamp_probe(data: dict[str, Any]) -> dict[str, Any]:
    """The probe's first, unstamped form: the same fields, stamped."""
    return {"format": PROBE_SCHEMA, **data}


#: the door of the probe's JSON
PROBE_FILE: FileFormat[Probe] = FileFormat(Probe, "format", {PROBE_SCHEMA: unchanged, None: _stamp_probe},
                                           fix="run benchmarks/gpu/probe.py of this checkout again")


def is_probe(data: object) -> bool:
    """Whether a JSON object is the probe's (its trainer and attack rows) rather than a cost table."""
    return isinstance(data, dict) and (data.get("format") == PROBE_SCHEMA or (
        "format" not in data and isinstance(data.get("trainer"), list) and isinstance(data.get("attack"), list)))
