"""Checks made before any work: the target's problem and architecture, and whether the memory a command needs fits.

Each estimate is a lower bound on what the command will allocate, so a refusal is never wrong about the size:

- a target: its weights and their gradients (full-batch gradient descent holds both), counted on PyTorch's ``meta``
  device, which builds the architecture without allocating its tensors;
- an attack: the released weights, plus the candidates of every search run (the runs of a cell advance together,
  so their candidates are all in memory at once).

The limit is the memory available to this process now (Linux: ``MemAvailable``, lowered to the cgroup's limit
where one is set); where it cannot be read, nothing is refused.
"""

from __future__ import annotations

import functools
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import torch
from torch.overrides import TorchFunctionMode

from reconbench import plugins
from reconbench.errors import ReconbenchError
from reconbench.interfaces import Attack

ITEMSIZE = {"float64": 8, "float32": 4}


class MemoryLimitError(ReconbenchError):
    """A command whose estimated memory exceeds what this machine has available."""


@dataclass(frozen=True)
class TargetSize:
    """What the attack-side estimates need to know about a target."""

    input_shape: tuple[int, ...]
    n_train: int
    parameters: int | None  # None: the family cannot be sized without allocating it (checked when it is built)


# -- the limit ---------------------------------------------------------------------------------------------------
def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _cgroup_headroom() -> int | None:
    """Bytes left below this process's cgroup memory limit (v2, then v1); None without a limit."""
    root = Path("/sys/fs/cgroup")
    for limit_file, usage_file in (("memory.max", "memory.current"),
                                   ("memory/memory.limit_in_bytes", "memory/memory.usage_in_bytes")):
        limit, usage = _read_int(root / limit_file), _read_int(root / usage_file)
        if limit is not None and limit < 2**60:  # v1 writes "no limit" as a huge number
            return max(0, limit - (usage or 0))
    return None


def available_memory() -> int | None:
    """Bytes of memory this process can still allocate without swapping; None where the system does not say.

    Read by hand because the standard library has no portable call and the one library that has (psutil) is not
    otherwise a dependency."""
    available = None
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    available = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        pass
    if available is None:
        try:
            available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            return None
    headroom = _cgroup_headroom()
    return available if headroom is None else min(available, headroom)


def format_bytes(n: float) -> str:
    """1536 -> '1.5 KiB'; binary units up to EiB (beyond: '1.2e+05 EiB')."""
    units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"]
    k = 0
    while n >= 1024 and k < len(units) - 1:
        n, k = n / 1024, k + 1
    return f"{n:.3g} {units[k]}"


def check_fits(need: int, what: str, fix: str) -> None:
    """Refuse ``need`` bytes when more than the available memory, naming the estimate, the limit and the fix."""
    have = available_memory()
    if have is not None and need > have:
        raise MemoryLimitError(f"{what} needs at least {format_bytes(need)} of memory, but this machine has "
                               f"{format_bytes(have)} available; {fix}")


# -- the estimates -----------------------------------------------------------------------------------------------
class _NoInPlaceOnMeta(TorchFunctionMode):
    """Skips in-place operations on meta tensors (the random initialisation: ``normal_``, ``uniform_``, ...): they
    change values, which meta tensors do not have, and some of their meta kernels import torch's compiler (seconds)."""

    SHAPE_CHANGING = frozenset({"resize_", "resize_as_", "set_", "as_strided_", "squeeze_", "unsqueeze_", "t_",
                                "transpose_", "swapdims_", "swapaxes_"})

    def __torch_function__(self, func: Callable[..., Any], types: object, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        name = getattr(func, "__name__", "")
        if (name.endswith("_") and not name.endswith("__") and name not in self.SHAPE_CHANGING and args
                and isinstance(args[0], torch.Tensor) and args[0].is_meta):
            return args[0]
        return func(*args, **(kwargs or {}))


def model_parameters(family_name: str, input_shape: tuple[int, ...], out_dim: int, spec: dict[str, Any]) -> int | None:
    """The number of parameters of a family's network, built on the ``meta`` device (no memory is allocated).

    The family's own errors (an unknown option, an architecture that does not exist or does not fit the images)
    surface here, before any work. None when the family cannot be built without real tensors."""
    family = plugins.model(family_name)
    try:
        with torch.device("meta"), _NoInPlaceOnMeta():
            net = family.build(cast(tuple[int, int, int], tuple(input_shape)), int(out_dim), dict(spec), generator=None)
    except ReconbenchError:
        raise
    except Exception:  # e.g. a third-party family that reads a tensor's value while building: sized when built
        return None
    return sum(p.numel() for p in net.parameters())


def check_model_memory(family_name: str, input_shape: tuple[int, ...], out_dim: int, spec: dict[str, Any],
                       dtype: str, *, gradients: bool, what: str, fix: str) -> int | None:
    """Size the network and refuse it when its weights (and gradients, for training) cannot fit; its parameter count."""
    parameters = model_parameters(family_name, input_shape, out_dim, spec)
    if parameters is not None:
        copies = 2 if gradients else 1
        check_fits(copies * parameters * ITEMSIZE.get(dtype, 8),
                   f"{what} ({parameters:.3g} parameters in {dtype}{', with their gradients' if gradients else ''})",
                   fix)
    return parameters


def check_target(recipe: Any, problem: Any, *, fix: str = "pass smaller --widths (or other model "
                 "options)", what: str = "the target") -> TargetSize:
    """Size the recipe's network for training on its built problem (the caller builds it, so the data set is loaded
    and its checks ran; this module stays below the targets package)."""
    parameters = check_model_memory(recipe.family, problem.image_shape, problem.out_dim, recipe.model,
                                    recipe.train.dtype, gradients=True, what=f"training {what}", fix=fix)
    return TargetSize(tuple(problem.image_shape), problem.n, parameters)


def card_size(data: dict[str, Any]) -> TargetSize:
    """The size of a model card's network, from its (schema-checked) fields; refused when it cannot fit."""
    dtype = str(data.get("recipe", {}).get("train", {}).get("dtype", "float64"))
    parameters = check_model_memory(str(data["family"]), tuple(data["input_shape"]), int(data["out_dim"]),
                                    dict(data["model_spec"]), dtype, gradients=False,
                                    what="the model card's network", fix="the card's architecture is too large for "
                                    "this machine (or the card was edited); use the card on a larger machine")
    return TargetSize(tuple(data["input_shape"]), int(sum(data["class_counts"])), parameters)


def check_attack(size: TargetSize, *, candidates: int | None, search_runs: int, dtype: str,
                 fix: str = "pass a smaller --candidates or --search-runs") -> None:
    """The candidates of every search run (they advance together) and the released weights must fit."""
    m = candidates if candidates is not None else 2 * size.n_train
    itemsize = ITEMSIZE.get(dtype, 8)
    pixels = math.prod(size.input_shape)
    need = search_runs * m * pixels * itemsize + (size.parameters or 0) * itemsize
    check_fits(need, f"the attack ({search_runs:,} search run(s) x {m:,} candidates of {pixels:,} pixels in {dtype})",
               fix)


# -- the time a command will take ----------------------------------------------------------------------------------
class CostLimitError(ReconbenchError):
    """A command whose estimated time exceeds the ceiling, refused without --yes."""


#: a command estimated to take longer than this is refused unless --yes is given (a day)
COST_CEILING_SECONDS = 86400.0
#: the least time one optimisation step takes beyond its arithmetic (a few kernel launches and Python)
STEP_OVERHEAD_SECONDS = 1e-5
#: arithmetic of one step per parameter and example: a forward pass (2: a multiply and an add) and its backward (4)
FLOPS_PER_PARAMETER = 6.0


@functools.cache
def machine_flops() -> float:
    """Floating-point operations per second this process reaches at best: the fastest of a few float64 matrix
    products (the kernel the networks spend their time in), so that estimates below are lower bounds."""
    n = 256
    a = torch.rand(n, n, dtype=torch.float64)
    best = math.inf
    for _ in range(5):
        start = time.perf_counter()
        torch.mm(a, a)
        best = min(best, time.perf_counter() - start)
    return 2.0 * n**3 / max(best, 1e-9)


def step_seconds(parameters: int | None, batch: int, steps: float) -> float:
    """At least how long ``steps`` full-batch steps of a network of ``parameters`` weights on ``batch`` inputs take."""
    flops = FLOPS_PER_PARAMETER * float(parameters or 0) * float(batch) * float(steps)
    return flops / machine_flops() + float(steps) * STEP_OVERHEAD_SECONDS


def attack_steps(attack: Attack[Any], config: dict[str, Any]) -> int:
    """The optimisation steps of one search run of ``attack`` under ``config`` (its ``steps`` or ``outer_steps``
    option, with the attack's default where ``config`` leaves it out; 1 for an attack with neither)."""
    from reconbench.config import build_config

    return config_steps(build_config(attack.config_cls, dict(config), "--set"))


def config_steps(config: object) -> int:
    """The optimisation steps of one search run under a built attack config (``steps`` or ``outer_steps``; 1 for an
    attack with neither)."""
    for name in ("steps", "outer_steps"):
        value = getattr(config, name, None)
        if isinstance(value, int) and not isinstance(value, bool):
            return max(value, 1)
    return 1


def attack_seconds(size: TargetSize, *, steps: int, candidates: int | None, search_runs: int) -> float:
    """At least how long a cell's attack takes: every search run's ``steps`` on its candidates."""
    m = candidates if candidates is not None else 2 * size.n_train
    return step_seconds(size.parameters, m, steps) * search_runs


def format_seconds(s: float) -> str:
    """12 -> '12 s', 5400 -> '1.5 hours', 3e7 -> '347 days', 1e20 -> '3.2e+12 years'."""
    for unit, length in (("years", 365.25 * 86400), ("days", 86400), ("hours", 3600), ("minutes", 60)):
        if s >= 2 * length:
            return f"{s / length:.3g} {unit}"
    return f"{s:.2g} s"


def check_cost(parts: list[tuple[str, float]], *, yes: bool, fix: str,
               ceiling: float = COST_CEILING_SECONDS, deadline: float | None = None) -> float:
    """Refuse work estimated above ``ceiling`` unless ``yes`` or a ``deadline`` (seconds) bounds the command (it
    runs what fits and leaves the rest: :func:`ceiling_note` says so); the estimate (seconds, a lower bound)."""
    total = sum(s for _, s in parts)
    if total > ceiling and not yes and deadline is None:
        detail = ", ".join(f"{what} {format_seconds(s)}" for what, s in parts if s > 0)
        raise CostLimitError(f"this would take at least {format_seconds(total)} on this machine ({detail}), more "
                             f"than the {format_seconds(ceiling)} a command may take unasked; {fix}, or pass --yes "
                             "to run it anyway")
    return total


def ceiling_note(total: float, deadline: float | None, ceiling: float = COST_CEILING_SECONDS) -> str | None:
    """The line that says the ceiling was not applied because ``deadline`` bounds the command (None when the
    estimate is under the ceiling or no deadline is given)."""
    if deadline is None or total <= ceiling:
        return None
    return (f"note: the cells still to run would take at least {format_seconds(total)} on this machine, more than "
            f"the {format_seconds(ceiling)} a command may take unasked; --deadline {deadline:g} bounds this command "
            "(it runs what fits and leaves the rest), so that ceiling is not applied")


def cost_line(total: float) -> str:
    """The estimate as the plan prints it."""
    return f"estimated time: at least {format_seconds(total)} of computation on this machine"
