"""A description of the machine a suite ran on (cores, memory, CPU model, GPU), for leaderboard headers."""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any

import torch


def cpu_model() -> str:
    info = Path("/proc/cpuinfo")
    if info.exists():
        for line in info.read_text(errors="replace").splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine() or "unknown CPU"


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
    }


def one_line(m: dict[str, Any]) -> str:
    mem = f", {m['memory_gib']:.0f} GiB RAM" if m.get("memory_gib") else ""
    gpu = f", GPU {m['gpu']}" if m.get("gpu") else ""
    return f"{m['cores']} cores ({m['cpu_model']}){mem}{gpu}, torch threads {m.get('torch_threads')}"
