"""The machine a cell or an invocation ran on (``machine`` of a cell record and of ``invocations/NNN.json``, as
``bench/machine.describe`` writes it): cores, memory, CPU model, GPU, torch threads, platform, and the kernels
behind the numbers."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from reconbench.records.record import Record


@dataclass(frozen=True)
class MachineInfo(Record):
    """One machine: its CPU model and usable cores (always recorded), memory in GiB and GPU (None: not known, or
    none), torch's threads, platform, the BLAS kernels and libraries (``numerics``) and the BLAS measurement
    (``blas``: records written before it have none)."""

    cpu_model: str
    cores: int
    memory_gib: float | None = None
    gpu: str | None = None
    torch_threads: int | None = None
    platform: str | None = None
    numerics: Mapping[str, Any] | None = None
    blas: Mapping[str, Any] | None = None
