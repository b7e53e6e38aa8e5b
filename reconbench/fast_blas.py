"""The opt-in fast path of MKL on non-Intel x86 processors (``RECONBENCH_FAST_BLAS=1``).

PyTorch's PyPI wheels multiply with MKL, which picks its kernels by asking whether the processor is an Intel one
(``mkl_serv_intel_cpu_true``); on an AMD processor the answer is no and it runs a slower generic branch, even where
the processor has AVX-512. A one-line shared library that defines that function to return 1, preloaded before torch
loads (``LD_PRELOAD``), makes MKL pick the branch the processor's instruction set supports. The library is compiled
from the source below with the system C compiler at first use and kept in the cache folder; the CLI then replaces
its own process with one started with the library preloaded (the variable must be set before the dynamic loader
loads torch, so it cannot be set from inside a running process).

This module imports nothing heavy: the CLI calls :func:`reexec_with_shim` before torch is imported. A machine where
the path cannot be enabled (not Linux on x86-64, an Intel processor, no C compiler, the compile fails) runs as
without it, with one line on standard error saying why.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

#: the opt-in variable, and the marker a re-executed process carries (the shim's path)
FAST_BLAS_ENV = "RECONBENCH_FAST_BLAS"
ACTIVE_ENV = "RECONBENCH_FAST_BLAS_ACTIVE"
#: the whole shim: MKL's processor check answers "an Intel processor"
SHIM_SOURCE = "int mkl_serv_intel_cpu_true(void) { return 1; }\n"
SHIM_SYMBOL = "mkl_serv_intel_cpu_true"
#: the two BLAS paths a result can be produced on, as cards and re-runs name them
STOCK, FAST = "stock", "fast"
PATHS = (STOCK, FAST)


def requested(environ: dict[str, str] | None = None) -> bool:
    value = (os.environ if environ is None else environ).get(FAST_BLAS_ENV, "").strip().lower()
    return value in ("1", "true", "yes", "on")


def cpu_vendor() -> str | None:
    """``vendor_id`` of /proc/cpuinfo (``AuthenticAMD``, ``GenuineIntel``, ...), or None where there is none."""
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.startswith("vendor_id"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def cache_folder() -> Path:
    """Where the compiled shim is kept: ``$RECONBENCH_CACHE/blas``, else ``~/.cache/reconbench/blas`` (the targets'
    cache folder)."""
    env = os.environ.get("RECONBENCH_CACHE")
    return (Path(env).expanduser() if env else Path.home() / ".cache" / "reconbench") / "blas"


def compiler() -> str | None:
    """The system C compiler: ``$CC`` when set and found, else ``cc``, ``gcc`` or ``clang`` on the PATH."""
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def unsupported_reason() -> str | None:
    """Why this machine cannot use the fast path, or None where it can."""
    if sys.platform != "linux":
        return f"needs Linux (this is {sys.platform})"
    if platform.machine() not in ("x86_64", "AMD64"):
        return f"needs an x86-64 processor (this is {platform.machine()})"
    vendor = cpu_vendor()
    if vendor == "GenuineIntel":
        return "not needed on an Intel processor: MKL already runs its fast kernels"
    if compiler() is None:
        return "no C compiler found (install cc/gcc, or set $CC)"
    return None


def build_shim(folder: Path | None = None) -> Path:
    """Compile the shim into ``folder`` (default :func:`cache_folder`) unless it is already there; its path. The name
    carries a hash of the source, so a changed source is rebuilt. Raises OSError or CalledProcessError on failure."""
    folder = cache_folder() if folder is None else folder
    digest = hashlib.sha256(SHIM_SOURCE.encode()).hexdigest()[:12]
    out = folder / f"mkl-intel-cpu-shim-{digest}.so"
    if out.exists():
        return out
    cc = compiler()
    if cc is None:
        raise OSError("no C compiler found")
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        src = Path(tmp) / "shim.c"
        src.write_text(SHIM_SOURCE)
        built = Path(tmp) / out.name
        subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", str(built), str(src)], check=True,
                       capture_output=True, text=True, timeout=120)
        os.replace(built, out)   # atomic: two processes building at once both end with a whole file
    return out


def preload_env(shim: Path, environ: dict[str, str] | None = None) -> dict[str, str]:
    """A copy of the environment with the shim first in ``LD_PRELOAD`` and the marker set."""
    env = dict(os.environ if environ is None else environ)
    rest = env.get("LD_PRELOAD", "")
    env["LD_PRELOAD"] = f"{shim}:{rest}" if rest else str(shim)
    env[ACTIVE_ENV] = str(shim)
    return env


def active() -> bool:
    """This process was started with the shim preloaded (by the CLI, or by hand with ``LD_PRELOAD``)."""
    marker, preload = os.environ.get(ACTIVE_ENV), os.environ.get("LD_PRELOAD", "")
    return bool(marker and marker in preload) or "mkl-intel-cpu-shim" in preload


def note(text: str) -> None:
    print(f"note: {FAST_BLAS_ENV}=1: {text}", file=sys.stderr)


def reexec_with_shim() -> None:
    """Where the fast path is asked for and not yet active: build the shim and replace this process by the same
    command with the shim preloaded (does not return). Where it cannot be enabled, print one line and return, so
    the command runs as without it."""
    if not requested() or active():
        return
    if "torch" in sys.modules:
        note("torch is already loaded in this process; the fast path is not enabled (set the variable before "
             "starting the command)")
        return
    reason = unsupported_reason()
    if reason is not None:
        if cpu_vendor() != "GenuineIntel":
            note(f"the fast path is not enabled: {reason}; running with the stock BLAS path")
        return
    try:
        shim = build_shim()
    except (OSError, subprocess.SubprocessError) as exc:
        detail = getattr(exc, "stderr", None) or str(exc)
        note(f"compiling the shim failed ({' '.join(str(detail).split())[:200]}); running with the stock BLAS path")
        return
    argv = list(getattr(sys, "orig_argv", []) or [sys.executable, *sys.argv])
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(sys.executable, [sys.executable, *argv[1:]], preload_env(shim))
    except OSError as exc:
        note(f"restarting with the shim failed ({exc}); running with the stock BLAS path")


def path_name(fast: object) -> str | None:
    """The path a recorded ``fast_path`` flag names: ``fast`` (True), ``stock`` (False), None (not recorded)."""
    return None if not isinstance(fast, bool) else FAST if fast else STOCK


def current_path() -> str:
    """The BLAS path of this process: ``fast`` where the shim is preloaded, else ``stock``."""
    return FAST if active() else STOCK


def without_shim(environ: dict[str, str] | None = None) -> dict[str, str]:
    """A copy of the environment that starts a process on the stock path: the shim out of ``LD_PRELOAD``, the marker
    and the opt-in variable removed (so a CLI child does not re-execute itself with the shim)."""
    env = dict(os.environ if environ is None else environ)
    marker = env.pop(ACTIVE_ENV, None)
    kept = [p for p in env.get("LD_PRELOAD", "").split(":")
            if p and p != marker and "mkl-intel-cpu-shim" not in p]
    if kept:
        env["LD_PRELOAD"] = ":".join(kept)
    else:
        env.pop("LD_PRELOAD", None)
    env.pop(FAST_BLAS_ENV, None)
    return env


def child_env(path: str, environ: dict[str, str] | None = None) -> tuple[dict[str, str], str | None]:
    """The environment of a child process on BLAS ``path`` (``stock`` or ``fast``), and where the fast path cannot
    be enabled on this machine, why (the child then runs on the stock path)."""
    if path not in PATHS:
        raise ValueError(f"BLAS path {path!r} is not one of {', '.join(PATHS)}")
    stock = without_shim(environ)
    if path == STOCK:
        return stock, None
    reason = unsupported_reason()
    if reason is not None:
        return stock, reason
    try:
        shim = build_shim()
    except (OSError, subprocess.SubprocessError) as exc:
        detail = getattr(exc, "stderr", None) or str(exc)
        return stock, f"compiling the shim failed ({' '.join(str(detail).split())[:200]})"
    return preload_env(shim, stock), None
