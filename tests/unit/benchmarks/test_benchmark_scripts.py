"""The GPU benchmark of the batched engine must run the day a GPU is at hand: its code path, minus the CUDA graph,
runs here at toy sizes and writes the JSON the docs read."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.slow
def test_batched_gpu_benchmark_runs_on_the_cpu_at_toy_sizes(tmp_path):
    out = tmp_path / "bench.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_batched.py"), "gpu", "--device", "cpu",
                           "--runs", "2", "--m", "4", "--steps", "3", "--papers-m", "8", "--warmup", "1",
                           "--json", str(out)], capture_output=True, text=True, env=env, timeout=280, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads(out.read_text())
    assert data["targets"] == {"16x40_float64_ms_per_step": 1.0, "papers_shape_float64_ms_per_step": 1.5}
    assert data["sync_every"] == 100 and data["rows"]
    for row in data["rows"]:  # every case timed, every run of it went the full length
        assert row["ms_per_step"] > 0 and set(row.get("stopped", ["completed"])) == {"completed"}
