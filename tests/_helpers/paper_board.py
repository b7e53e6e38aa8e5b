"""A paper-size board from generated numbers: what a full ``paper-gpu`` board would weigh, measured by the board's
own writers without a run.

Each of ``paper.toml``'s cells becomes a synthetic full cell record of the papers' size (n = 500 per-image rows,
16 search runs of m = 1000), made from the shape of a published KKT cell with every number drawn at random (at full
precision, as computed numbers are), and goes through the slim writer a publication uses
(``slim.write_entry``); each target gets a board card of n = 500 (``board_cards.write_board_card``), each attack's
figure cell its figure pairs (``figure_pairs.FigurePairs``, CIFAR-10-sized float16 images), and the reconstructions
figure is drawn (``pair_figure.draw_pairs``) and palette-encoded (``slim.compact_figures``) as a board's is.
``results.json`` and README.md are not rendered (they need a results folder of the suite's cells): they are
priced per cell at the largest bytes per cell of the complete published boards. Used by
tests/unit/leaderboard/test_leaderboard_slim.py and benchmarks/paper_board_size.py.
"""

from __future__ import annotations

import copy
import json
import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[2]
#: the published cell and board whose record shape the synthetic cells take
TEMPLATE_BOARD, TEMPLATE_CELL = REPO / "leaderboards" / "ci", "digits-binary--haim_binary_kkt--gaussian--s0"
PAPER_N, PAPER_M, PAPER_RUNS, PAPER_SHAPE = 500, 1000, 16, (3, 32, 32)
BLOCK = 4096


@dataclass(frozen=True)
class CellSize:
    """What a synthetic cell holds: ``n`` training images, ``runs`` search runs of ``m`` candidates, images of
    ``shape``; labels of ``classes`` (the default: a paper cell)."""

    n: int = PAPER_N
    runs: int = PAPER_RUNS
    m: int = PAPER_M
    shape: tuple[int, ...] = PAPER_SHAPE
    classes: int = 2


def cell_size(cell: Any) -> CellSize:
    """A suite cell's own size: n from its recipe, its attack's search runs and candidates (2n unless it says),
    CIFAR-10's or MNIST's image shape by its data set."""
    p = cell.recipe.problem
    n = p.n_per_class * (p.num_classes or 2)
    m = cell.attack.candidates if cell.attack.candidates is not None else 2 * n
    shape = (3, 32, 32) if "cifar" in p.dataset else (1, 28, 28)
    return CellSize(n=n, runs=int(cell.attack.search_runs), m=int(m), shape=shape, classes=p.num_classes or 2)


def disk_use(folder: Path) -> int:
    """Disk use in 4 KiB blocks, each file and folder at least one (as the size budget counts it)."""
    blocks = 0
    for p in [folder, *folder.rglob("*")]:
        blocks += 1 if p.is_dir() else math.ceil(p.stat().st_size / BLOCK)
    return blocks * BLOCK


def _digits(x: float) -> float:
    return float(f"{x:.7g}")


def _noisy(value: Any, rng: random.Random) -> Any:
    """A number of the same kind drawn at random (floats at full precision, as a record stores a computed float; an
    entry's per-image rows round theirs to 7 digits on their own), other values unchanged."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return value
    if isinstance(value, int):
        return rng.randrange(0, max(abs(value) * 2, 10))
    return value * rng.uniform(0.5, 1.5) + rng.uniform(-1e-3, 1e-3)


def _rows(template: list[dict[str, Any]], n: int, rng: random.Random, pool: int = PAPER_RUNS * PAPER_M,
          classes: int = 2) -> list[dict[str, Any]]:
    """n per-image rows: about 60% matched, scores, distances and candidates (of ``pool``) drawn at random."""
    base = [k for k in template[0] if not (k.startswith("reconstructed") or k == "index")]
    rows = []
    for _ in range(n):
        matched = rng.random() < 0.6
        row: dict[str, Any] = {}
        for k in base:
            if k == "dataset_index":
                row[k] = rng.randrange(50_000)
            elif k == "label":
                row[k] = rng.randrange(classes)
            elif k == "matched":
                row[k] = matched
            elif k in ("best_candidate", "notebook_candidate"):
                row[k] = rng.randrange(pool) if matched or k == "notebook_candidate" else None
            elif k == "best_candidate_label":
                row[k] = rng.randrange(classes) if matched else None
            elif k == "nearest_is_train":
                row[k] = rng.random() < 0.5 if matched else None
            elif k in ("membership_score", "notebook_ssim"):
                row[k] = _digits(rng.uniform(-0.2, 1.0))
            else:   # a score or distance of a matched image
                row[k] = _digits(rng.uniform(-0.2, 1.0)) if matched else None
        rows.append(row)
    return rows


def synthetic_record(template: dict[str, Any], cell_id: str, recipe_key: str, rng: random.Random,
                     size: CellSize | None = None) -> dict[str, Any]:
    """A full record of ``size`` (default: paper size) shaped like ``template`` (an expanded KKT cell), every number
    drawn at random."""
    from reconbench.bench.seal import sealed

    rec = copy.deepcopy(template)
    for k in ("entry", "record_sha256"):
        rec.pop(k, None)
    rec["cell_id"] = cell_id
    rec["target"]["recipe_key"] = recipe_key
    size = size or CellSize()
    rec["target"]["n_train"] = size.n
    run0 = template["runs"][0]
    runs = []
    for r in range(size.runs):
        run = {k: _noisy(v, rng) for k, v in run0.items()}
        run["run"], run["run_key"] = r, f"{rng.getrandbits(64):016x}"
        run["config"] = {k: _noisy(v, rng) for k, v in run0["config"].items()}
        run["init_config"] = {k: _noisy(v, rng) for k, v in run0["init_config"].items()}
        run["outcome"] = dict(run0["outcome"])
        runs.append(run)
    rec["runs"] = runs
    for sel in rec["selections"].values():
        sel["summary"] = {k: _noisy(v, rng) for k, v in sel["summary"].items()}
        if isinstance(sel.get("runs"), list) and len(sel["runs"]) > 1:
            sel["runs"] = list(range(size.runs))
    rec["selections"]["pool"]["summary"]["n_train"] = size.n
    ev = rec["evaluation"]
    ev["per_image"] = [{k: v for k, v in r.items() if not (k.startswith("reconstructed") or k == "index")}
                       for r in _rows(ev["per_image"], size.n, rng, size.runs * size.m, size.classes)]
    return sealed(rec)   # type: ignore[no-any-return]


def synthetic_card(template: dict[str, Any], recipe_key: str, rng: random.Random, n: int = PAPER_N) -> dict[str, Any]:
    """A board card of ``n`` training images shaped like ``template``: its per-image lists drawn at random."""
    card = copy.deepcopy(template)
    card["recipe_key"] = recipe_key

    def grow(d: Any) -> Any:
        if isinstance(d, dict):
            return {k: grow(v) for k, v in d.items()}
        if isinstance(d, list) and len(d) >= 10 and all(isinstance(v, (int, float)) for v in d):
            return [_noisy(d[i % len(d)], rng) for i in range(n * (2 if len(d) >= 20 else 1))]
        return d

    return grow(card)   # type: ignore[no-any-return]


def figure_pairs(cell_id: str, k: int, rng: random.Random, size: CellSize | None = None) -> Any:
    """A figure's subset of k images of ``size``'s shape (default: CIFAR-10's; every third averaging several
    candidates), float16."""
    from reconbench.leaderboard.figure_pairs import PAIRS_DTYPE, FigurePairs

    size = size or CellSize()
    gen = torch.Generator().manual_seed(rng.getrandbits(31))
    members = [3 if j % 3 == 0 else 1 for j in range(k)]
    best = torch.randn((k, *size.shape), generator=gen).to(PAIRS_DTYPE)
    averaged = torch.randn((sum(m > 1 for m in members), *size.shape), generator=gen).to(PAIRS_DTYPE)
    return FigurePairs(cell_id, list(range(k)), [rng.randrange(size.runs * size.m) for _ in range(k)], members,
                       best, averaged)


def complete(results: Path) -> bool:
    """Whether the board of ``results`` (its results.json) holds every cell its suite plans."""
    cells = json.loads(results.read_text())["header"]["cells"]
    return int(cells["planned"]) > 0 and int(cells["ok"]) == int(cells["planned"])


def published_bytes_per_cell(boards: Path = REPO / "leaderboards") -> dict[str, float]:
    """The largest bytes per cell of results.json and of README.md among the complete boards under ``boards``; a
    partial board prices no cell (its header, notes and list of missing cells spread over the few cells it holds:
    1 of 79 cells would price each cell at the whole file)."""
    out = {"results.json": 0.0, "README.md": 0.0}
    for results in sorted(boards.glob("*/results.json")):
        if not complete(results):
            continue
        cells = len(list((results.parent / "cells").glob("*.json")))
        for name in out:
            out[name] = max(out[name], (results.parent / name).stat().st_size / max(cells, 1))
    return out


def build_paper_board(out: Path, *, suite_name: str = "paper", seed: int = 0, own_sizes: bool = False) -> dict[str, Any]:
    """Write a synthetic full board of ``suite_name``'s cells to ``out`` (see the module docstring); what each part
    weighs (bytes, and disk use in 4 KiB blocks). ``own_sizes``: each cell and card at its own size
    (:func:`cell_size`: claims-gpu's n = 100, 4 runs of m = 200, MNIST or CIFAR-10 images); else every cell at paper
    size (16 runs of m = 1000 at n = 500: an upper bound for paper's 4-run A/B cells)."""
    from reconbench.bench.cells import expand
    from reconbench.bench.entries import expand as expand_entry
    from reconbench.bench.runner import card_reader, protocol_reader
    from reconbench.bench.suite import load_suite
    from reconbench.evaluation.pair_figure import Pair, PairGroup, draw_pairs
    from reconbench.leaderboard.board_cards import write_board_card
    from reconbench.leaderboard.figure_pairs import BOARD_FOLDER, write_pairs
    from reconbench.leaderboard.slim import compact_figures, write_entry

    rng = random.Random(seed)
    suite = load_suite(suite_name)
    cells = expand(suite)
    template = expand_entry(json.loads((TEMPLATE_BOARD / "cells" / f"{TEMPLATE_CELL}.json").read_text()),
                            card_reader(TEMPLATE_BOARD), protocol_reader(TEMPLATE_BOARD))
    template_card = json.loads((TEMPLATE_BOARD / "targets" / f"{template['target']['recipe_key']}.json").read_text())
    for sub in ("cells", "targets", "protocols", "figures", BOARD_FOLDER):
        (out / sub).mkdir(parents=True, exist_ok=True)
    sizes = {c.cell_id: cell_size(c) if own_sizes else CellSize() for c in cells}
    n_of = {c.recipe.key(): sizes[c.cell_id].n for c in cells}
    for key in sorted(n_of):
        write_board_card(out / "targets" / f"{key}.json", synthetic_card(template_card, key, rng, n_of[key]))
    for cell in cells:
        rec = synthetic_record(template, cell.cell_id, cell.recipe.key(), rng, sizes[cell.cell_id])
        write_entry(out / "cells" / f"{cell.cell_id}.json", rec, suite, out)
    k = suite.leaderboard.sample_images
    picks = [next(c.cell_id for c in cells if c.attack.label == label) for label in suite.attacks
             if any(c.attack.label == label for c in cells)]
    groups = []
    for cid in picks:   # one figure cell per attack, as reconstruction_picks takes them
        pairs = figure_pairs(cid, k, rng, sizes[cid])
        shape = sizes[cid].shape
        write_pairs(out / BOARD_FOLDER / f"{cid}.safetensors", pairs)
        shown = [Pair(i, np.random.default_rng(i).random(shape), np.random.default_rng(i + 1).random(shape), 0.5, 0.3)
                 for i in pairs.shown]
        groups.append(PairGroup(cid, shown))
    draw_pairs(out / "figures" / "reconstructions.png", groups, per_row=k)
    compact_figures(out)
    per_cell = published_bytes_per_cell()
    for name, per in per_cell.items():   # priced, not rendered (module docstring)
        (out / name).write_bytes(b"x" * int(per * len(cells)))
    parts = {sub: disk_use(out / sub) for sub in ("cells", "targets", "protocols", "figures", BOARD_FOLDER)}
    parts.update({name: math.ceil((out / name).stat().st_size / BLOCK) * BLOCK for name in per_cell})
    return {"cells": len(cells), "targets": len(list((out / "targets").glob("*.json"))), "figure_cells": len(picks),
            "disk_use": disk_use(out), "parts": parts,
            "entry_bytes_mean": sum(p.stat().st_size for p in (out / "cells").glob("*.json")) / len(cells),
            "priced_per_cell": per_cell}
