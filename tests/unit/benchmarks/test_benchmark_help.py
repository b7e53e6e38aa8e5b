"""Every benchmark script the docs name answers --help with its usage, without measuring anything or writing its
JSON (a script that ignored its arguments ran the whole measurement on --help)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
#: the scripts run as programs (the bench_*.py files are pytest-benchmark modules, and benchmarks/gpu/ has its own)
SCRIPTS = sorted(p.name for p in (REPO / "benchmarks").glob("*.py") if not p.name.startswith("bench_"))


@pytest.mark.parametrize("script", ["calibration_nulls.py", "rescore_kkt_docs.py"])
def test_a_script_without_options_answers_help_without_running(script, tmp_path):
    env = {**os.environ, "RECONBENCH_DATA": str(tmp_path / "no-data"), "RECONBENCH_DOWNLOAD": "0",
           "RECONBENCH_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / script), "--help"], capture_output=True,
                          text=True, env=env, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("usage:") and "Traceback" not in proc.stderr
    assert not (tmp_path / "cache").exists()   # nothing was trained or measured


def test_every_benchmark_script_parses_its_command_line():
    silent = [name for name in SCRIPTS
              if "argparse" not in (text := (REPO / "benchmarks" / name).read_text()) and "sys.argv" not in text]
    assert not silent, f"these scripts ignore their arguments (--help runs them): {silent}"
