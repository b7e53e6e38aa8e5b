"""What the reference's pairing of unchosen training images would add to the papers' count, on published cells.

Under best-buddy matching a training image that no candidate chose has no match; reconbench counts it as not
reconstructed. The original authors' code pairs it with an arbitrary candidate instead. For every stored cell of the
named leaderboards this script re-scores the pooled candidates with the cell's protocol and, for each unmatched
training image, computes the papers' SSIM (window 3, reconstruction min-max scaled) against (a) the first valid
candidate and (b) every valid candidate (the expected outcome of a uniformly random choice). The count under the
reference's rule is reconbench's count plus the unmatched images that pass SSIM > good_threshold with that candidate.

Writes benchmarks/results/unmatched_pairing.json. Needs RECONBENCH_DATA for the MNIST and CIFAR-10 boards.

      python benchmarks/unmatched_pairing.py ci cpu-mini
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file

from reconbench.evaluation.context import build_context
from reconbench.evaluation.protocol import resolve_protocol
from reconbench.evaluation.rescore import pinned_protocol
from reconbench.evaluation.ssim import display, ssim_paper
from reconbench.targets.cards import ModelCard, check_card_data

REPO = Path(__file__).resolve().parents[1]


def cell_effect(board: Path, cell_id: str) -> dict[str, Any]:
    rec = json.loads((board / "cells" / f"{cell_id}.json").read_text())
    card_path = board / "targets" / f"{rec['target']['recipe_key']}.json"
    data = json.loads(card_path.read_text())
    check_card_data(data, card_path)
    problem = ModelCard(path=board / "targets", data=data).problem()
    pooled = load_file(str(board / "candidates" / f"{cell_id}.safetensors"))
    protocol = pinned_protocol({**rec["protocol"], "metrics": ["ssim"]}, rec.get("evaluation"))
    resolved = resolve_protocol(protocol, rec["target"]["recipe"]["family"])
    ev = build_context(problem, pooled["candidates"], resolved, labels=pooled.get("labels"))
    p = resolved.base
    unmatched = np.flatnonzero(~ev.matching.matched)
    valid = ev.candidates[torch.as_tensor(ev.valid_ids, dtype=torch.long)]
    shown = display(valid, problem.mean_tensor(), p.constant_tol)
    first_pass, expected = 0, 0.0
    for i in unmatched:
        orig = ev.originals[i:i + 1].expand(len(valid), -1, -1, -1)
        s = ssim_paper(shown, orig, 3, 1.0, 1e-12).numpy()
        first_pass += int(s[0] > p.good_threshold)
        expected += float((s > p.good_threshold).mean())
    stored = rec["selections"]["pool"]["summary"]["reconstructed"]
    return {"cell": cell_id, "n": problem.n, "candidates": int(len(valid)), "reconstructed": stored,
            "unmatched": int(len(unmatched)), "added_first_candidate": first_pass,
            "added_expected_random_candidate": round(expected, 2)}


def main(boards: list[str]) -> None:
    rows: list[dict[str, Any]] = []
    for name in boards:
        board = REPO / "leaderboards" / name
        for path in sorted((board / "candidates").glob("*.safetensors")):
            row = {"board": name, **cell_effect(board, path.stem)}
            print(json.dumps(row), flush=True)
            rows.append(row)
    total = {k: round(sum(float(r[k]) for r in rows), 2)
             for k in ("n", "reconstructed", "unmatched", "added_first_candidate", "added_expected_random_candidate")}
    out = REPO / "benchmarks" / "results" / "unmatched_pairing.json"
    out.write_text(json.dumps({"boards": boards, "total": total, "cells": rows}, indent=1) + "\n")
    print(json.dumps(total))


if __name__ == "__main__":
    torch.set_num_threads(1)
    main(sys.argv[1:] or ["ci", "cpu-mini"])
