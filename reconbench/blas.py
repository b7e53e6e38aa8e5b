"""What torch's matrix products achieve on this machine: the BLAS and the kernel branch it runs, the processor's
instruction set and expected peak, and the GFLOP/s measured at the KKT attack step's shapes on one thread.

``reconbench doctor`` prints all of it; :func:`provenance_line` is the short form every run records (measured once
per process and cached per machine, BLAS and settings in the cache folder, so a run pays for it once).
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import json
import os
import platform
import re
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from reconbench import fast_blas

#: (m, k, n): the step's products for m = 40 candidates, a hidden layer of 1000 and the MNIST input of 784
STEP_SHAPES = ((40, 1000, 1000), (40, 784, 1000))
DTYPES = ("float64", "float32")
#: MKL's conditional-numerical-reproducibility branch codes (mkl_cbwr.h): the kernel family its dispatcher chose
MKL_BRANCHES = {1: "off", 2: "auto (not an Intel branch: MKL's generic path for other vendors)", 3: "COMPATIBLE",
                4: "SSE2", 6: "SSSE3", 7: "SSE4_1", 8: "SSE4_2", 9: "AVX", 10: "AVX2", 11: "AVX512_MIC", 12: "AVX512",
                13: "AVX512_MIC_E1", 14: "AVX512_E1"}
#: below this fraction of the expected peak, the doctor says what to try
LOW_FRACTION = 0.5


def cpu_model() -> str:
    info = Path("/proc/cpuinfo")
    if info.exists():
        for line in info.read_text(errors="replace").splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine() or "unknown CPU"


def torch_blas() -> dict[str, Any]:
    """torch's BLAS and LAPACK (from its build configuration), the MKL version if it is MKL, and the ATen CPU
    capability (vector instruction set) selected at start-up."""
    config = torch.__config__.show()
    blas = re.search(r"BLAS_INFO=(\w+)", config)
    lapack = re.search(r"LAPACK_INFO=(\w+)", config)
    mkl = re.search(r"Math Kernel Library Version ([^\n]+)", config)
    try:
        capability: str | None = torch.backends.cpu.get_cpu_capability()
    except (AttributeError, RuntimeError):
        capability = None
    return {"blas": blas.group(1) if blas else None, "lapack": lapack.group(1) if lapack else None,
            "mkl_version": mkl.group(1).strip() if mkl else None, "cpu_capability": capability}


def cpu_flags() -> set[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def cpu_field(name: str) -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.split(":", 1)[0].strip() == name:
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def isa(flags: set[str] | None = None) -> str:
    """The widest vector instruction set the processor reports."""
    flags = cpu_flags() if flags is None else flags
    for name, flag in (("AVX-512", "avx512f"), ("AVX2+FMA", "avx2"), ("AVX", "avx"), ("SSE4.2", "sse4_2")):
        if flag in flags and (flag != "avx2" or "fma" in flags):
            return name
    return "unknown" if not flags else "SSE2"


def clock_ghz() -> float | None:
    """The highest clock the kernel reports (cpufreq's maximum, else /proc/cpuinfo's current MHz; virtual machines
    often report the base clock only, so the peak below is then a lower bound)."""
    try:
        return int(Path("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq").read_text()) / 1e6
    except (OSError, ValueError):
        pass
    mhz = cpu_field("cpu MHz")
    try:
        return float(mhz) / 1000 if mhz else None
    except ValueError:
        return None


def flops_per_cycle(dtype: str, flags: set[str] | None = None, vendor: str | None = None,
                    family: str | None = None) -> int | None:
    """Peak float64/float32 flops per cycle of one core: two fused multiply-add units of the vector width (AVX-512:
    8 doubles; AMD before Zen 5 runs 512-bit work on 256-bit units), halved for float64 against float32."""
    if flags is None:
        flags, vendor, family = cpu_flags(), fast_blas.cpu_vendor(), cpu_field("cpu family")
    if "avx512f" in flags:
        older_amd = vendor == "AuthenticAMD" and family is not None and family.isdigit() and int(family) < 26
        lanes = 4 if older_amd else 8
    elif "avx2" in flags and "fma" in flags:
        lanes = 4
    elif "avx" in flags:
        return (8 if dtype == "float64" else 16)   # no FMA: one add and one multiply per cycle, 256 bits wide
    else:
        return None
    per_cycle = 2 * 2 * lanes   # two FMA units, two flops per FMA
    return per_cycle if dtype == "float64" else 2 * per_cycle


def expected_peak(dtype: str) -> float | None:
    """The one-core peak in GFLOP/s, or None where the processor is not known well enough."""
    fpc, ghz = flops_per_cycle(dtype), clock_ghz()
    return fpc * ghz if fpc and ghz else None


def mkl_branch() -> str | None:
    """The kernel branch MKL's dispatcher chose in this process (None where torch's BLAS is not MKL, or the query
    is not exported)."""
    if torch_blas()["blas"] != "mkl":
        return None
    lib_dir = Path(torch.__file__).parent / "lib"
    for name in ("libtorch_cpu.so", "libmkl_core.so.2", "libmkl_rt.so.2"):
        path = lib_dir / name
        if not path.exists():
            continue
        try:
            lib = ctypes.CDLL(str(path))
        except OSError:
            continue
        for symbol in ("mkl_cbwr_get_auto_branch", "MKL_CBWR_Get_Auto_Branch", "mkl_serv_cbwr_get_auto_branch"):
            fn = getattr(lib, symbol, None)
            if fn is not None:
                fn.restype = ctypes.c_int
                code = int(fn())
                return MKL_BRANCHES.get(code, f"branch {code}")
    return None


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def measure_gflops(shape: tuple[int, int, int], dtype: str, seconds: float = 0.15) -> float:
    """Best GFLOP/s of ``(m x k) @ (k x n)`` products (plain layout, into a preallocated output) on one thread,
    over a few timed blocks totalling about ``seconds``."""
    m, k, n = shape
    dt = getattr(torch, dtype)
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(m, k, generator=g, dtype=dt), torch.randn(k, n, generator=g, dtype=dt)
    out = torch.empty(m, n, dtype=dt)
    with one_thread():
        for _ in range(3):
            torch.mm(a, b, out=out)
        t0 = time.perf_counter()
        torch.mm(a, b, out=out)
        once = max(time.perf_counter() - t0, 1e-7)
        reps = max(1, int(seconds / 5 / once))
        best = float("inf")
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(reps):
                torch.mm(a, b, out=out)
            best = min(best, (time.perf_counter() - t0) / reps)
    return 2 * m * k * n / best / 1e9


@dataclass
class Report:
    blas: str | None
    mkl_version: str | None
    branch: str | None
    fast_path: bool
    fast_path_note: str | None
    cpu_model: str
    vendor: str | None
    isa: str
    clock_ghz: float | None
    peak: dict[str, float | None]
    gflops: dict[str, dict[str, float]]

    def best(self, dtype: str) -> float:
        return max(self.gflops[dtype].values())

    def summary(self) -> dict[str, Any]:
        """The record every run carries (the keys :data:`SUMMARY_KEYS`)."""
        return {"blas": self.blas, "mkl_version": self.mkl_version, "branch": self.branch,
                "fast_path": self.fast_path, "isa": self.isa,
                "gflops_1thread": {d: round(self.best(d), 1) for d in self.gflops},
                "peak_gflops": {d: (round(p, 1) if p else None) for d, p in self.peak.items()}}


#: the keys of a BLAS summary (:meth:`Report.summary`); a cached summary that lacks one is measured again
SUMMARY_KEYS = ("blas", "mkl_version", "branch", "fast_path", "isa", "gflops_1thread", "peak_gflops")


def fast_path_note() -> str | None:
    """Where the fast path is not in effect: why, and how to turn it on (None where it is on, or not relevant)."""
    if fast_blas.active():
        return None
    reason = fast_blas.unsupported_reason()
    if reason:
        return f"fast path unavailable: {reason}"
    return f"fast path available: set {fast_blas.FAST_BLAS_ENV}=1"


def examine(seconds: float = 0.15) -> Report:
    blas = torch_blas()
    gflops = {d: {f"{m}x{k}@{k}x{n}": round(measure_gflops((m, k, n), d, seconds), 1) for m, k, n in STEP_SHAPES}
              for d in DTYPES}
    branch = mkl_branch()
    version = blas["mkl_version"].split("-")[0].strip() if blas["mkl_version"] else None
    return Report(blas=blas["blas"], mkl_version=version, branch=branch,
                  fast_path=fast_blas.active(), fast_path_note=fast_path_note(), cpu_model=cpu_model(),
                  vendor=fast_blas.cpu_vendor(), isa=isa(), clock_ghz=clock_ghz(),
                  peak={d: expected_peak(d) for d in DTYPES}, gflops=gflops)


def advice(report: Report) -> list[str]:
    """What to do when the products run far below the expected peak."""
    out: list[str] = []
    for d in DTYPES:
        peak = report.peak[d]
        if peak and report.best(d) < LOW_FRACTION * peak:
            out.append(f"{d}: {report.best(d):.0f} GFLOP/s is {report.best(d) / peak:.0%} of the expected "
                       f"{peak:.0f}")
    if not out:
        return []
    if report.blas == "mkl" and report.vendor != "GenuineIntel" and not report.fast_path:
        out.append(f"MKL runs its generic branch on this {report.vendor or 'non-Intel'} processor: run with "
                   f"{fast_blas.FAST_BLAS_ENV}=1 (see docs/performance.md)")
    elif report.blas != "mkl":
        out.append("torch's BLAS is not MKL: a torch build with MKL (the PyPI wheels on x86-64) is usually faster")
    out.append("other processes on the machine, or a busy core, lower the measurement: re-run on an idle machine; "
               "a virtual machine's reported clock may be its base clock, which makes the peak a lower bound")
    return out


# -- the short record every run carries, cached per machine --------------------------------------------------------

_SUMMARY: list[dict[str, Any]] = []


def cache_key() -> str:
    blas = torch_blas()
    parts = [cpu_model(), str(fast_blas.cpu_vendor()), torch.__version__, str(blas["mkl_version"]),
             str(fast_blas.active()), os.environ.get("MKL_CBWR", ""), os.environ.get("MKL_ENABLE_INSTRUCTIONS", ""),
             os.uname().nodename]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]


def summary() -> dict[str, Any]:
    """The BLAS record of this process (BLAS, branch, fast path, measured one-thread GFLOP/s): measured once per
    machine and setting (cached in the cache folder for a day), once per process at most."""
    if _SUMMARY:
        return _SUMMARY[0]
    path = fast_blas.cache_folder() / f"gflops-{cache_key()}.json"
    rec: dict[str, Any] | None = None
    try:
        if time.time() - path.stat().st_mtime < 86400:
            rec = json.loads(path.read_text())
    except (OSError, ValueError):
        rec = None
    if not isinstance(rec, dict) or not set(SUMMARY_KEYS) <= set(rec):  # none cached, or written by an older version
        rec = examine(seconds=0.05).summary()
        with contextlib.suppress(OSError):   # a cache that cannot be written costs a measurement per process
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
            with os.fdopen(fd, "w") as fh:
                fh.write(json.dumps(rec))
            os.replace(tmp, path)
    rec = {**rec, "fast_path": fast_blas.active()}
    _SUMMARY.append(rec)
    return rec


def provenance_line(rec: dict[str, Any]) -> str:
    """One line: ``BLAS mkl (AVX512_E1, fast path), 1 thread float64 123 / float32 245 GFLOP/s``, of a BLAS summary
    (:func:`summary`, which holds every key of :data:`SUMMARY_KEYS`)."""
    branch = str(rec["branch"] or "?").split(" ")[0]
    fast = ", fast path" if rec["fast_path"] else ""
    g = rec["gflops_1thread"] or {}
    speeds = " / ".join(f"{d} {g[d]:.0f}" for d in DTYPES if d in g)
    return f"BLAS {rec['blas']} ({branch}{fast}), 1 thread {speeds} GFLOP/s"
