"""The GPU step A/B (benchmarks/gpu/step_ab.py) at tiny sizes on the CPU: it runs end to end and writes its JSON, the
step as it was and today's step give the same numbers bit for bit (as do the dot products as a product and a sum,
the CPU's own form), and it stops with one line where reconbench cannot be imported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from _helpers.examples import load_module

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "gpu" / "step_ab.py"


def load_script() -> ModuleType:
    return load_module('gpu_step_ab', SCRIPT)


def test_the_step_ab_runs_tiny_on_the_cpu(tmp_path):
    script = load_script()
    out = tmp_path / "ab.json"
    script.main([str(out), "--tiny", "--steps", "2", "--check-steps", "3", "--budget", "1e9"])
    data = json.loads(out.read_text())
    assert data["tiny"] and not data["skipped"] and data["reference"] == "before"
    variants = [v[0] for v in script.VARIANTS]
    runs = script.SIZES["tiny"]["runs"]
    assert len(data["rows"]) == len(runs) * (2 * len(variants) + 2)   # and two eager rows per batch size
    for r in runs:
        for precision in ("tf32", "float32"):
            got = [row["variant"] for row in data["rows"]
                   if row["runs"] == r and row["precision"] == precision and row["graph_asked"]]
            assert got == variants
    profiled = [row for row in data["rows"] if "kernel_profile" in row]   # the two eager rows of the largest R
    assert [(r["runs"], r["variant"], r["graph_asked"]) for r in profiled] == [(runs[0], "default", False),
                                                                               (runs[0], "dots=bmm", False)]
    for row in profiled:
        top = row["kernel_profile"]["top"]
        assert top and all(t["us_per_step"] > 0 for t in top)
        assert any(t["name"] in ("aten::bmm", "aten::baddbmm", "aten::mm") for t in top)
    for row in data["rows"]:
        assert row["seconds_per_step"] > 0 and row["all_finite"] and row["cuda_graph"] is False
        assert row["tf32"] is False   # TF32 is a CUDA opt-in
        diff = row["max_relative_difference"]
        assert set(diff) == {f"{w}_vs_{a}" for w in ("candidates", "loss", "gradient") for a in ("before", "float64")}
        if row["graph_asked"] and row["variant"] in ("before", "default"):
            # bit for bit on the CPU: the same arithmetic in the same order
            assert all(diff[f"{w}_vs_before"] == 0.0 for w in ("candidates", "loss", "gradient"))
        # float32 against float64 after three steps: float32 rounding, far from a wrong step's difference
        assert diff["gradient_vs_float64"] < 1e-4 and diff["candidates_vs_float64"] < 1e-4


def test_the_step_ab_stops_with_one_line_where_reconbench_cannot_be_imported(tmp_path):
    """Without the site folders (-S: no site-packages, an empty TMPDIR) nothing can be imported: one line, exit 1."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["TMPDIR"] = str(tmp_path)
    proc = subprocess.run([sys.executable, "-S", str(SCRIPT), str(tmp_path / "ab.json"), "--tiny"], env=env,
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: cannot import reconbench here")
    assert "reconbench-slice-site" in lines[0] and not (tmp_path / "ab.json").exists()


def test_the_step_ab_imports_reconbench_through_the_folders_slice_sh_leaves(tmp_path):
    """No site-packages (-S), PYTHONPATH unset: the script finds torch (and the package's metadata) in the site's
    ``wheels`` folder and the plugins where slice.sh registers them by hand, and runs."""
    import torch

    site = tmp_path / "reconbench-slice-site"
    site.mkdir()
    (site / "wheels").symlink_to(Path(torch.__file__).resolve().parent.parent, target_is_directory=True)
    (site / "reconbench_plugins").symlink_to(SCRIPT.parents[2] / "plugins", target_is_directory=True)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(TMPDIR=str(tmp_path), OMP_NUM_THREADS="1")
    out = tmp_path / "ab.json"
    proc = subprocess.run([sys.executable, "-S", str(SCRIPT), str(out), "--tiny", "--steps", "1", "--check-steps", "1"],
                          env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(out.read_text())["rows"]
