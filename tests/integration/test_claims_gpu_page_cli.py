"""``python -m reconbench.claims --gpu FOLDER --out PAGE``, the command an occasion's results go through, run as a
process on a claims-gpu results folder that grew over two slices (synthetic cells, each merge's invocation record
in the form ``bench --unpack`` writes it): the page it writes says "k of N cells" and the commits, the claims whose
cells have not run yet say so, ``--check`` agrees with the page it wrote and fails once the folder grows."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
from _helpers.claims_cells import write_cells

from reconbench.bench.cells import expand
from reconbench.bench.runner import invocation_path, write_json
from reconbench.bench.suite import load_suite
from reconbench.claims import verdicts as V

SUITE = "claims-gpu"
A, B = "1" * 40, "2" * 40


def _claims(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "reconbench.claims", *args], capture_output=True, text=True,
                          check=False)


def _merge(folder: Path, number: int, commit: str, cells: list[str]) -> None:
    """The invocation record a merge of a slice's pack writes, naming the seal of each cell it brought."""
    seals = {}
    for cid in cells:
        path = folder / "cells" / f"{cid}.json"
        seals[cid] = f"{number}-{cid}"
        path.write_text(json.dumps({**json.loads(path.read_text()), "record_sha256": seals[cid]}))
    write_json(invocation_path(folder, number), {
        "invocation": number, "command": f"reconbench bench {SUITE} --unpack pack-{number}",
        "slice_pack": {"created": "2026-11-28T00:00:00Z", "commit": commit, "device": "cuda",
                       "deadline_seconds": 480, "elapsed_seconds": 470.0, "invocation": 0,
                       "manifest_sha256": commit[:1] * 64, "cells": seals}})


def test_the_gpu_page_of_a_results_folder_grown_over_two_slices(tmp_path: Path) -> None:
    folder = tmp_path / "runs" / "bench" / SUITE
    planned = sorted(c.cell_id for c in expand(load_suite(SUITE)))
    write_cells(folder, SUITE, np.random.default_rng(5))
    # the first two seeds came in, one slice each; the others wait
    first = [c for c in planned if c.endswith("--s0")]
    second = [c for c in planned if c.endswith("--s1")]
    for cid in set(planned) - set(first) - set(second):
        (folder / "cells" / f"{cid}.json").unlink()
    _merge(folder, 0, A, first)
    _merge(folder, 1, B, second)
    page = tmp_path / "claims-gpu.md"

    done = _claims("--gpu", str(folder), "--out", str(page))
    assert done.returncode == 0, done.stderr
    text = page.read_text()
    held = len(first) + len(second)
    assert (f"`{SUITE}`: {held} of {len(planned)} cells, from commits `{A[:12]}` ({len(first)} cell(s)), "
            f"`{B[:12]}` ({len(second)} cell(s)).") in text
    waiting = [ln for ln in text.splitlines() if ln.startswith("| `") and f"**{V.NOT_RUN_YET}**" in ln]
    assert waiting and f"{len(waiting)} claim(s) read *{V.NOT_RUN_YET}*" in text
    assert _claims("--gpu", str(folder), "--out", str(page), "--check").returncode == 0

    # a third slice brings the rest: the page it wrote is out of date, and the new one is complete
    rest = sorted(set(planned) - set(first) - set(second))
    write_cells(tmp_path / "all", SUITE, np.random.default_rng(5))
    for cid in rest:
        (folder / "cells" / f"{cid}.json").write_bytes((tmp_path / "all" / "cells" / f"{cid}.json").read_bytes())
    _merge(folder, 2, A, rest)
    assert _claims("--gpu", str(folder), "--out", str(page), "--check").returncode == 1
    assert _claims("--gpu", str(folder), "--out", str(page)).returncode == 0
    text = page.read_text()
    assert V.NOT_RUN_YET not in text and f"of {len(planned)} cells" not in text
