"""Published numbers under other kernels on one machine: re-scoring stored cells, and regenerating a tiny suite, in
subprocesses whose BLAS / instruction-set / thread settings differ (what another processor changes)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch
from _helpers.suitekit import toy_targets
from safetensors.torch import load_file

from reconbench import fast_blas
from reconbench.bench import machine
from reconbench.bench.seal import seal_problem
from reconbench.evaluation import decisions
from reconbench.leaderboard.slim import candidates_file
from reconbench.leaderboard.verify import compare_selection

REPO = Path(__file__).resolve().parents[2]
CI = REPO / "leaderboards" / "ci"
#: stored cells re-scored under every setting: one with exact ties between pooled candidates, one of each task
CELLS = ["digits-binary-bias--runkel_bilevel--partition--s1", "digits-binary--haim_binary_kkt--gaussian--s0",
         "digits-multiclass--multiclass_kkt--mixture--s0"]
#: a cell whose copy gets a count edited: verify must fail on it under every setting
EDITED = "digits-binary--haim_binary_kkt--gaussian--s0"


def kernel_settings() -> dict[str, dict[str, str]]:
    """Settings that change the kernels torch and numpy pick on this machine."""
    settings = {"default": {}, "two-threads": {"OMP_NUM_THREADS": "2"},
                "aten-default": {"ATEN_CPU_CAPABILITY": "default"},
                "openblas-haswell": {"OPENBLAS_CORETYPE": "Haswell"}}
    if machine.torch_blas()["blas"] == "mkl":
        settings["mkl-cbwr-compatible"] = {"MKL_CBWR": "COMPATIBLE"}
        settings["mkl-avx2"] = {"MKL_ENABLE_INSTRUCTIONS": "AVX2"}
        if fast_blas.unsupported_reason() is None:   # MKL's fast path on a non-Intel processor (the shim)
            settings["mkl-fast-path"] = {fast_blas.FAST_BLAS_ENV: "1"}
    return settings


def subprocess_env(extra: dict[str, str], tmp: Path) -> dict[str, str]:
    # the settings choose the kernels and the thread count: none of the caller's choices leak into the children
    env = {k: v for k, v in os.environ.items() if k not in
           ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "MKL_ENABLE_INSTRUCTIONS", "OPENBLAS_CORETYPE", "MKL_NUM_THREADS",
            "LD_PRELOAD", fast_blas.FAST_BLAS_ENV, fast_blas.ACTIVE_ENV)}
    env.update({"OMP_NUM_THREADS": "1", "RECONBENCH_CACHE": str(tmp / "cache"), **extra})
    if fast_blas.requested(env):   # a child that is not the CLI gets the shim preloaded here, as the CLI would
        env = fast_blas.preload_env(fast_blas.build_shim(tmp / "blas"), env)
    return env


RESCORE = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    import torch
    from reconbench import fast_blas
    from reconbench.bench import machine
    from reconbench.leaderboard.verify import check_cell
    board, edited, cells = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3].split(",")
    out = {"threads": torch.get_num_threads(), "numerics": machine.numerics(), "fast_path": fast_blas.active(),
           "cells": {}}
    for cid in cells:
        c = check_cell(board, cid)
        out["cells"][cid] = {"problems": c.problems, "borderline": len(c.borderline), "explained": c.explained}
    out["edited"] = check_cell(edited, sys.argv[4]).problems
    print(json.dumps(out))
""")


@pytest.mark.slow
@pytest.mark.skipif(not (CI / "results.json").exists(), reason="the ci leaderboard is not published")
@pytest.mark.parametrize("setting", list(kernel_settings()))
def test_stored_cells_verify_under_other_kernels_and_an_edit_still_fails(setting, tmp_path):
    edited = tmp_path / "edited"
    for sub in ("cells", "targets", "candidates"):
        (edited / sub).mkdir(parents=True)
    rec = json.loads((CI / "cells" / f"{EDITED}.json").read_text())
    rec["selections"]["pool"]["summary"]["reconstructed_corr"] += 1
    (edited / "cells" / f"{EDITED}.json").write_text(json.dumps(rec))
    stored = candidates_file(CI, EDITED)
    assert stored is not None, f"the ci board stores no candidates of {EDITED}"
    (edited / "candidates" / stored.name).write_bytes(stored.read_bytes())
    key = rec["target"]["recipe_key"]
    (edited / "targets" / f"{key}.json").write_bytes((CI / "targets" / f"{key}.json").read_bytes())
    if (CI / "protocols").is_dir():   # a slim board's entries name their evaluation protocol there
        shutil.copytree(CI / "protocols", edited / "protocols")

    env = subprocess_env(kernel_settings()[setting], tmp_path)
    proc = subprocess.run([sys.executable, "-c", RESCORE, str(CI), str(edited), ",".join(CELLS), EDITED],
                          env=env, capture_output=True, text=True, timeout=900, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    if setting == "two-threads":
        assert out["threads"] == 2
    if setting == "aten-default":
        assert out["numerics"]["torch"]["cpu_capability"] == "DEFAULT"
    if setting == "mkl-fast-path":
        assert out["fast_path"] is True
    assert out["numerics"]["env"].items() >= kernel_settings()[setting].items()
    for cid, res in out["cells"].items():
        assert res["problems"] == [], (setting, cid, res)
    assert len(out["edited"]) == 1 and "reconstructed_corr" in out["edited"][0], out["edited"]


REGEN_SUITE = """\
[suite]
name = "regen"
seeds = [0, 1]
device = "cpu"
dtype = "float64"

[protocol]
figures = false

[leaderboard]
store_candidates = "all"
figures = false

""" + toy_targets(40) + """
[attacks.init_only]
search_runs = 1

[inits.gaussian]
[inits.partition]

[[grid]]
targets = ["bin", "mc"]
attacks = ["init_only"]
"""

#: the two settings the regeneration test runs the suite under
REGEN = {"a": {}, "b": {"ATEN_CPU_CAPABILITY": "default", "OMP_NUM_THREADS": "2", "MKL_CBWR": "COMPATIBLE",
                        "OPENBLAS_CORETYPE": "Haswell"}}


def regenerated_differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """What the suites README promises for a cell whose candidates involve no optimisation, run under two kernel
    settings: every stored number of ``a`` reproduced by ``b`` (numbers to the rounding tolerance of
    ``decisions.py``), except counts that differ through a decision within that tolerance of its threshold."""
    out = []
    n_terms = max(64, int(b["selections"]["pool"]["summary"]["n_candidates"]), int(b["target"]["n_train"]))
    rtol = decisions.score_tolerance(n_terms)
    per_image = b["evaluation"]["per_image"]
    for name, sel in a["selections"].items():
        fresh = {"summary": b["selections"][name]["summary"], "per_image": per_image,
                 "null": {"available": True, "draws": b["selections"][name]["null"].get("draws"),
                          "threshold": b["selections"][name]["null"].get("threshold"),
                          "spread": b["selections"][name]["null"].get("spread", {})}}
        for m in compare_selection(f"{a['cell_id']} [{name}]", sel, fresh, rtol):
            key = m.where.rsplit(" ", 1)[-1]
            margins = [abs(r[f"{key}_margin"]) for r in per_image if r.get(f"{key}_margin") is not None]
            if not (name == "pool" and margins and min(margins) <= rtol):
                out.append(m.describe())
    return out


@pytest.mark.slow
def test_a_tiny_suite_regenerates_under_two_kernel_settings(tmp_path):
    suite = tmp_path / "regen.toml"
    suite.write_text(REGEN_SUITE)
    cells: dict[str, dict[str, Any]] = {}
    for name, extra in REGEN.items():
        env = subprocess_env(extra, tmp_path / name)
        proc = subprocess.run([sys.executable, "-m", "reconbench", "bench", str(suite), "--out", str(tmp_path / name),
                               "-q"], env=env, capture_output=True, text=True, timeout=900, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr[-3000:]
        cells[name] = {p.stem: json.loads(p.read_text()) for p in (tmp_path / name / "cells").glob("*.json")}
    assert cells["a"].keys() == cells["b"].keys() and len(cells["a"]) == 8
    for cid, a in cells["a"].items():
        b = cells["b"][cid]
        assert a["status"] == b["status"] == "ok", (a.get("error"), b.get("error"))
        # the machine record names the kernels each run used (and is not a stored number re-scoring compares)
        assert a["machine"]["numerics"]["torch"]["blas"] == machine.torch_blas()["blas"]
        assert b["machine"]["numerics"]["torch"]["cpu_capability"] == "DEFAULT"
        assert b["machine"]["numerics"]["env"]["MKL_CBWR"] == "COMPATIBLE" and b["machine"]["torch_threads"] == 2
        assert seal_problem(a) is None and seal_problem(b) is None and a["record_sha256"] != b["record_sha256"]
        # the candidates involve no optimisation: the same seeded draws under both settings
        pooled = [load_file(str(tmp_path / n / "work" / cid / "candidates.safetensors")) for n in REGEN]
        assert torch.equal(pooled[0]["candidates"], pooled[1]["candidates"])
        assert regenerated_differences(a, b) == [] and regenerated_differences(b, a) == []
    edited = json.loads(json.dumps(b))  # the comparison can fail: a count one off is not a rounding difference
    edited["selections"]["pool"]["summary"]["reconstructed_corr"] += 1
    assert len(regenerated_differences(a, edited)) == 1
