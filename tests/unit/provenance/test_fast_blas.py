"""The opt-in MKL fast path (RECONBENCH_FAST_BLAS=1) and `reconbench doctor`: the shim builds, a process started
with it multiplies within the rounding bound of the stock kernels, the CLI restarts itself with it, and a machine
that cannot use it runs as without it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from _helpers.cli import run_cli

from reconbench import blas, fast_blas
from reconbench.evaluation.decisions import UNIT_ROUNDOFF, gamma

REPO = Path(__file__).resolve().parents[3]
REASON = fast_blas.unsupported_reason()
needs_shim = pytest.mark.skipif(REASON is not None, reason=f"the fast path cannot be enabled here: {REASON}")

PRODUCTS = textwrap.dedent("""
    import json, sys
    import torch
    from reconbench import blas, fast_blas
    torch.set_num_threads(1)
    out = {}
    for dtype in (torch.float64, torch.float32):
        for m, k, n in blas.STEP_SHAPES:
            g = torch.Generator().manual_seed(m + k)
            a, b = torch.randn(m, k, generator=g, dtype=dtype), torch.randn(k, n, generator=g, dtype=dtype)
            out[f"{dtype}-{k}"] = (a @ b).double().tolist()
    print(json.dumps({"active": fast_blas.active(), "branch": blas.mkl_branch(), "products": out}))
""")


def child(env: dict[str, str]) -> dict:
    proc = subprocess.run([sys.executable, "-c", PRODUCTS], env=env, capture_output=True, text=True, timeout=300,
                          cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def clean_env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("LD_PRELOAD", fast_blas.ACTIVE_ENV, fast_blas.FAST_BLAS_ENV, "MKL_CBWR", "MKL_ENABLE_INSTRUCTIONS")}
    return {**env, "OMP_NUM_THREADS": "1", "RECONBENCH_CACHE": str(tmp / "cache")}


@needs_shim
def test_the_shim_builds_once_and_its_products_stay_within_the_rounding_bound(tmp_path):
    shim = fast_blas.build_shim(tmp_path / "blas")
    assert shim.exists() and fast_blas.build_shim(tmp_path / "blas") == shim
    stock = child(clean_env(tmp_path))
    fast = child(fast_blas.preload_env(shim, clean_env(tmp_path)))
    assert fast["active"] and not stock["active"]
    if stock["branch"] is not None and fast_blas.cpu_vendor() == "AuthenticAMD":
        assert fast["branch"] != stock["branch"], "the shim did not change MKL's kernel branch"
    for dtype in (torch.float64, torch.float32):
        for m, k, n in blas.STEP_SHAPES:
            g = torch.Generator().manual_seed(m + k)
            a, b = torch.randn(m, k, generator=g, dtype=dtype), torch.randn(k, n, generator=g, dtype=dtype)
            # each kernel's product is within gamma_k |A||B| of the exact one (a dot product of k terms in any order),
            # so two kernels differ by at most twice that
            bound = 2 * gamma(k, UNIT_ROUNDOFF[dtype]) * (a.abs().double() @ b.abs().double())
            key = f"{dtype}-{k}"
            diff = (torch.tensor(fast["products"][key]) - torch.tensor(stock["products"][key])).abs()
            assert bool((diff <= bound).all()), (key, float((diff / bound).max()))
            # and the bound is not vacuous: the two kernels' results are close to each other relative to it
            assert float((diff / bound).max()) < 1


@needs_shim
def test_the_cli_restarts_itself_with_the_shim_and_the_doctor_says_so(tmp_path):
    env = {**clean_env(tmp_path), fast_blas.FAST_BLAS_ENV: "1"}
    proc = subprocess.run([sys.executable, "-m", "reconbench", "doctor", "--json", "--seconds", "0.01"], env=env,
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    assert report["fast_path"] is True and "fast path" in report["line"]
    assert list((tmp_path / "cache" / "blas").glob("mkl-intel-cpu-shim-*.so"))


def test_a_machine_without_a_compiler_runs_as_today_with_one_line(monkeypatch, capsys):
    monkeypatch.setenv(fast_blas.FAST_BLAS_ENV, "1")
    monkeypatch.delenv(fast_blas.ACTIVE_ENV, raising=False)
    monkeypatch.setenv("LD_PRELOAD", "")
    monkeypatch.setattr(fast_blas, "compiler", lambda: None)
    monkeypatch.setattr(fast_blas, "cpu_vendor", lambda: "AuthenticAMD")
    monkeypatch.setattr(fast_blas.platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(fast_blas.sys, "platform", "linux")
    monkeypatch.delitem(sys.modules, "torch")   # the CLI checks before torch is imported
    fast_blas.reexec_with_shim()   # returns: the command goes on without the shim
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no C compiler" in err and "stock BLAS path" in err


def test_the_switch_reads_the_usual_spellings(monkeypatch):
    for value, expected in (("1", True), ("yes", True), ("ON", True), ("0", False), ("", False), ("no", False)):
        assert fast_blas.requested({fast_blas.FAST_BLAS_ENV: value}) is expected


def test_doctor_names_the_blas_and_measures_the_step_shapes(capsys):
    code, out, err = run_cli(["doctor", "--json", "--seconds", "0.01"], capsys)
    assert code == 0, err
    report = json.loads(out)
    assert report["blas"] == blas.torch_blas()["blas"]
    for dtype in ("float64", "float32"):
        assert set(report["gflops"][dtype]) == {f"{m}x{k}@{k}x{n}" for m, k, n in blas.STEP_SHAPES}
        assert all(g > 0 for g in report["gflops"][dtype].values())


def test_the_peak_is_two_fma_units_of_the_vector_width():
    # AVX-512 with two FMA units: 8 doubles x 2 flops x 2 units per cycle; float32 twice that
    flags = {"avx512f", "avx2", "fma", "avx"}
    assert blas.flops_per_cycle("float64", flags, "GenuineIntel", "6") == 32
    assert blas.flops_per_cycle("float32", flags, "AuthenticAMD", "26") == 64
    assert blas.flops_per_cycle("float64", flags, "AuthenticAMD", "25") == 16   # Zen 4: 512-bit work on 256-bit units
    assert blas.flops_per_cycle("float64", {"avx2", "fma", "avx"}) == 16
    assert blas.flops_per_cycle("float64", {"sse2"}) is None
    assert blas.isa({"avx2", "fma", "avx"}) == "AVX2+FMA" and blas.isa({"avx512f", "avx2", "fma"}) == "AVX-512"
