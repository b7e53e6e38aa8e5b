"""A description of the machine a suite ran on (cores, memory, CPU model, GPU, and the numerical libraries and kernels
that computed its numbers), for cell records and leaderboard headers.

Two processors can select different BLAS kernels and vector instruction sets, which sum in different orders: the
``numerics`` record names them (torch's BLAS and its version, the ATen CPU capability chosen, numpy's BLAS with the
core type it selected, and the environment variables that steer them), so that a number that differs in its last
bits between two machines can be traced to its kernels. It is a record only: re-scoring does not compare it.
"""

from __future__ import annotations

import copy
import importlib.util
import os
import platform
import sys
from collections.abc import Mapping
from typing import Any

import torch

from reconbench import blas
from reconbench.blas import cpu_model, torch_blas
from reconbench.records.machine import MachineInfo


def memory_gib() -> float | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        return None


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


#: environment variables that choose BLAS kernels, instruction sets or reproducibility modes
KERNEL_ENV = ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "MKL_ENABLE_INSTRUCTIONS", "MKL_DEBUG_CPU_TYPE", "OPENBLAS_CORETYPE",
              "OPENBLAS_VERBOSE", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "RECONBENCH_FAST_BLAS")


#: the last :func:`numpy_blas` listing and the process state it was read in (see there)
_LISTED: dict[tuple[int, int], list[dict[str, Any]] | None] = {}


def numpy_blas() -> list[dict[str, Any]] | None:
    """The BLAS libraries loaded in this process (numpy's, torch's OpenMP) as threadpoolctl reports them, with the
    core type each selected; None without threadpoolctl (it comes with scikit-learn).

    Read again only when the process has imported a module or changed torch's thread count since the last reading
    (a library is loaded by an import): threadpoolctl's query of every loaded library took about 2 ms, once per
    cell record."""
    state = (len(sys.modules), torch.get_num_threads())
    if state in _LISTED:
        return copy.deepcopy(_LISTED[state])
    if importlib.util.find_spec("threadpoolctl") is None:
        listed = None
    else:
        import numpy  # noqa: F401  (loads its BLAS, so that threadpoolctl sees it)
        from threadpoolctl import threadpool_info

        keys = ("user_api", "internal_api", "version", "architecture", "threading_layer", "num_threads")
        listed = [{k: info.get(k) for k in keys} for info in threadpool_info()]
    _LISTED.clear()
    _LISTED[(len(sys.modules), torch.get_num_threads())] = listed
    return copy.deepcopy(listed)


def numerics() -> dict[str, Any]:
    """The kernels behind the numbers: torch's BLAS and instruction set, numpy's BLAS, the steering variables."""
    return {"torch": torch_blas(), "libraries": numpy_blas(),
            "env": {k: os.environ[k] for k in KERNEL_ENV if k in os.environ}}


def describe(device: str = "cpu") -> dict[str, Any]:
    gpu = None
    if device.startswith("cuda") and torch.cuda.is_available():
        props = torch.cuda.get_device_properties(torch.device(device))
        gpu = f"{props.name} ({props.total_memory / 2**30:.0f} GiB)"
    return {
        "cpu_model": cpu_model(),
        "cores": usable_cores(),
        "memory_gib": memory_gib(),
        "gpu": gpu,
        "torch_threads": torch.get_num_threads(),
        "platform": platform.platform(),
        "numerics": numerics(),
        "blas": blas.summary(),
    }


def one_line(m: Mapping[str, Any]) -> str:
    """A machine record (:func:`describe`) in one line: cores, CPU, memory, GPU, torch threads, BLAS."""
    rec = MachineInfo.from_dict(m, "a machine record")
    mem = f", {rec.memory_gib:.0f} GiB RAM" if rec.memory_gib else ""
    gpu = f", GPU {rec.gpu}" if rec.gpu else ""
    line = f"{rec.cores} cores ({rec.cpu_model}){mem}{gpu}, torch threads {rec.torch_threads}"
    if rec.blas is not None:   # records from before the BLAS measurement render as they did
        line += f"; {blas.provenance_line(dict(rec.blas))}"
    return line
