"""A slice's pack manifest (``manifest.json``, ``reconbench-slice-pack/4``, written by ``bench/slice_pack.py``): the
files the pack holds, the cells it carries and those that remain, the training states that travel with it (and the
card JSON beside a final state, ``PackedState.card``), and what the slice measured (``measured``: one row per phase
of every cell that ran, finished or stopped at the deadline). Version 4 adds the travelling card; version 3 added
the sha256 of the starts a group's runs travel without (``RunGroup.starts``) and the slice's torch version. Version
3 reads as version 4 with no card travelling, version 2 also with every start carried, version 1 also without
``measured`` and ``stopped``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from reconbench.records.measured_rate import MeasuredRate
from reconbench.records.record import FileFormat, Record, unchanged

#: the phases a measured row (:class:`~reconbench.records.measured_rate.MeasuredRate`) names: the attack's batched
#: steps (``steps`` and their ``seconds``), and the seconds before and after them (``steps`` 0): ``card`` (a target's
#: card rebuilt from its final training state, its certificate included), ``card_restored`` (a target's card restored
#: from the card that travelled beside its final state: the weights re-made from the state and checked, no
#: certificate), ``setup`` (from the cell's start to its attack's first step) and ``evaluation`` (from the attack's
#: end to the record). A cross-target batch's ``runs`` are the batch's, and each of its cells has the row.
MEASURED_PHASES = ("attack", "card", "card_restored", "setup", "evaluation")


@dataclass(frozen=True)
class PackFile(Record):
    """One data file of a pack: its name (by its content), size and sha256."""

    name: str
    bytes: int
    sha256: str


@dataclass(frozen=True)
class PackCandidates(Record):
    """The cells whose pooled candidates travel in the pack's safetensors file, and the precision they travel in."""

    cells: list[str] = field(default_factory=list)
    dtype: str = "float16"


@dataclass(frozen=True)
class DeferredCell(Record):
    """A cell the slice's deadline left for the next slice: its estimate and the seconds that were left."""

    cell_id: str
    estimate_seconds: float
    seconds_left: float


@dataclass(frozen=True)
class PackedCard(Record):
    """The card JSON travelling beside a final training state: its member of the records archive
    (``training/<recipe key>.card.json``) and its sha256."""

    member: str
    sha256: str


@dataclass(frozen=True)
class PackedState(Record):
    """A training state travelling in the pack: its target's recipe key, step and dtype, and its file (``name``) or,
    when split, its parts in order with the whole state's size and sha256; ``card``: the target's card JSON, where
    the state is final and the slice holds its card (None: no card travels)."""

    recipe_key: str
    step: int = 0
    dtype: str = ""
    name: str | None = None
    parts: list[str] | None = None
    bytes: int | None = None
    sha256: str | None = None
    card: PackedCard | None = None

    @property
    def files(self) -> list[str]:
        """The pack files holding the state, in the order they join."""
        return list(self.parts) if self.parts is not None else [str(self.name)]


@dataclass(frozen=True)
class LeftOutState(Record):
    """A training state that found no file left in the pack (its training starts again on the next machine)."""

    recipe_key: str
    bytes: int
    reason: str


@dataclass(frozen=True)
class SliceCosts(Record):
    """Each started cell's cost estimate, and the (units, seconds) measured per phase: what the next cost table can
    be made from."""

    estimates: Mapping[str, float] = field(default_factory=dict)
    measured: Mapping[str, list[list[float]]] = field(default_factory=dict)


@dataclass(frozen=True)
class StoppedCell(Record):
    """A cell whose attack the slice's deadline stopped: it is not merged (it runs again in a later slice); the step
    its batched computation reached, of how many."""

    cell_id: str
    step: int
    steps: int
    seconds: float


@dataclass(frozen=True)
class RunGroup(Record):
    """Search runs of a cell that a slice ran as a group, without evaluating the cell (its evaluation pools every
    run): their records travel in the records archive (``runs/<cell id>/run-NNN.json``) and their tensors in
    ``runs-<sha>.safetensors`` files (keyed ``<cell id>/NNN/<tensor>``, float32 where that holds the values exactly,
    else float64); ``search_runs``: the cell's runs in all, ``runs``: those of this group."""

    cell_id: str
    cell_key: str
    search_runs: int
    runs: list[int] = field(default_factory=list)
    #: the runs whose start does not travel (the merge draws it again), by run number as three digits (``"007"``):
    #: the sha256 of the start's bytes in ``start_dtype``, the attack's precision (a run not listed carries its start)
    starts: Mapping[str, str] = field(default_factory=dict)
    start_dtype: str | None = None


@dataclass(frozen=True)
class LeftOutGroup(Record):
    """A group of runs whose tensors found no file left in the pack: a later slice runs them again."""

    cell_id: str
    runs: list[int]
    bytes: int
    reason: str


@dataclass(frozen=True)
class SliceManifest(Record):
    """A pack's ``manifest.json``: the suite (name, file sha256) and commit the slice ran, its device and dtype,
    whether it ended, and every file it holds with its sha256 (fields absent in a file read as their defaults)."""

    SCHEMA = "reconbench-slice-pack/4"

    format: str
    suite: str
    suite_sha256: str
    commit: str | None = None
    device: str | None = None
    dtype: str | None = None
    created: str | None = None
    complete: bool = True
    deadline_seconds: float | None = None
    elapsed_seconds: float | None = None
    invocation: int | None = None
    files: list[PackFile] = field(default_factory=list)
    cells: list[str] = field(default_factory=list)
    candidates: PackCandidates = PackCandidates()
    cells_remaining: list[str] = field(default_factory=list)
    deferred: list[DeferredCell] = field(default_factory=list)
    training: list[PackedState] = field(default_factory=list)
    training_left_out: list[LeftOutState] = field(default_factory=list)
    costs: SliceCosts | None = None
    measured: list[MeasuredRate] = field(default_factory=list)
    stopped: list[StoppedCell] = field(default_factory=list)
    groups: list[RunGroup] = field(default_factory=list)
    groups_left_out: list[LeftOutGroup] = field(default_factory=list)
    #: the torch version of the slice (its CPU generator drew the starts a merge draws again)
    torch: str | None = None


def _from_v1(data: dict[str, Any]) -> dict[str, Any]:
    """A version-1 manifest: the same fields, without ``measured``, ``stopped`` and the groups of runs."""
    return {**data, "format": SliceManifest.SCHEMA}


def _from_v2(data: dict[str, Any]) -> dict[str, Any]:
    """A version-2 manifest: the same fields; its groups' runs carry their starts (no ``starts``)."""
    return {**data, "format": SliceManifest.SCHEMA}


def _from_v3(data: dict[str, Any]) -> dict[str, Any]:
    """A version-3 manifest: the same fields; no card travels beside its states."""
    return {**data, "format": SliceManifest.SCHEMA}


#: the door of a pack's manifest.json
SLICE_MANIFEST_FILE: FileFormat[SliceManifest] = FileFormat(
    SliceManifest, "format", {SliceManifest.SCHEMA: unchanged, "reconbench-slice-pack/3": _from_v3,
                                    "reconbench-slice-pack/2": _from_v2,
                                    "reconbench-slice-pack/1": _from_v1},
    fix="pass the folder that `reconbench bench SUITE --pack DIR` wrote, with this version of reconbench")
