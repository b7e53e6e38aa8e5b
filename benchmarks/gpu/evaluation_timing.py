"""The seconds of one cell's evaluation, with the functions ``reconbench.runs.result.finish`` calls, on synthetic
candidates of the cell's sizes: shared by ``merge_cost.py`` (the merge's evaluation on the CPU machine) and
``probe.py``'s ``evaluation`` case (the same evaluation on the device machine's CPU, where a slice evaluates a cell).

The evaluation's cost depends on the sizes (candidates, training images, pixels, the protocol's null and calibration
draws) and on how many candidates match a training image, not on the pixels' values: each run's candidates are
Gaussian images at the training images' per-pixel scale, and a share of them (``close``) a training image of the
candidate's label plus noise, so that matching, SSIM and the null see near and far candidates alike.
:func:`synthetic_problem` builds a problem of a data set's shape from generated images (the probe runs where no
data file is), through the same ``build_problem`` a cell's problem goes through.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from reconbench.data import ImageData, Problem, ProblemSpec
from reconbench.evaluation.bars import calibration_bars
from reconbench.evaluation.evaluate import evaluate_many
from reconbench.runs.result import selection_set
from reconbench.targets.problems import build_problem

#: CIFAR-10's class names, in its labels' order (the ``vehicles_animals`` rule reads them); written out here because
#: the synthetic data set has no file to read them from
CIFAR10_CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


def synthetic_problem(spec: ProblemSpec, shape: tuple[int, int, int], images_per_class: int, seed: int = 0
                      ) -> Problem:
    """``spec``'s problem built from generated uint8 images of ``shape`` (``images_per_class`` of each of
    CIFAR-10's ten classes, in turn), so that its training, decoy, test and held-out splits have the sizes a data
    set of that many images gives them."""
    rng = np.random.default_rng(seed)
    count = images_per_class * len(CIFAR10_CLASSES)
    images = rng.integers(0, 256, size=(count, *shape), dtype=np.uint8)
    labels = np.arange(count) % len(CIFAR10_CLASSES)
    data = ImageData(name="synthetic", images=images, labels=labels, classes=list(CIFAR10_CLASSES),
                     source="generated (benchmarks/gpu/evaluation_timing.py)")
    return build_problem(spec, data=data)


def synthetic_pool(problem: Problem, runs: int, m: int, close: float, seed: int) -> dict[str, torch.Tensor]:
    """``runs`` x ``m`` candidates as a cell's pooled tensors (candidates, labels, run ids, starts), in the
    centred space the attacks work in."""
    gen = torch.Generator().manual_seed(seed)
    train = problem.x_train(torch.float32)
    scale = float(train.std())
    train_labels = torch.as_tensor(problem.train_labels, dtype=torch.long)
    classes = int(train_labels.max()) + 1
    lab = torch.arange(m) * classes // m   # every run the same labels, in equal blocks (as the KKT attacks set them)
    near = torch.rand(m, generator=gen) < close
    cands, labels, starts = [], [], []
    for _ in range(runs):
        x0 = torch.randn((m, *train.shape[1:]), generator=gen) * scale
        x = x0.clone()
        for j in torch.nonzero(near).flatten().tolist():   # a training image of the candidate's label, plus noise
            same = torch.nonzero(train_labels == lab[j]).flatten()
            i = same[torch.randint(0, len(same), (1,), generator=gen)]
            x[j] = train[i] + 0.3 * scale * torch.randn(train.shape[1:], generator=gen)
        cands.append(x)
        labels.append(lab)
        starts.append(x0)
    run_ids = torch.arange(runs).repeat_interleave(m)
    return {"candidates": torch.cat(cands), "labels": torch.cat(labels), "run_ids": run_ids, "x0": torch.cat(starts)}


def evaluation_units(problem: Problem, runs: int, m: int) -> int:
    """The planner's units of a cell's evaluation (``reconbench.bench.slice_costs``): pooled candidates x training
    images x pixels."""
    return runs * m * problem.n * int(problem.x_train(torch.float32)[0].numel())


def time_case(problem: Problem, family: str, resolved: Any, runs: int, m: int, close: float, seed: int,
              figures: bool = True) -> dict[str, Any]:
    """The seconds of one cell's evaluation with ``runs`` x ``m`` candidates, as ``finish`` runs it: the pooled and
    the selected runs' evaluations (with their nulls; the pooled one's figures into a temporary folder where
    ``figures`` and the protocol asks for them, as ``finish`` writes them into the run's folder), then the
    calibration bars."""
    pooled = synthetic_pool(problem, runs, m, close, seed)
    blind, oracle = (0, 1) if runs > 1 else (None, None)
    picks = [0, 1] if runs > 1 else []
    with tempfile.TemporaryDirectory(prefix="reconbench-evaluation-") as tmp:
        dirs: list[str | Path | None] = [Path(tmp) if figures else None, *[None] * len(picks)]
        t1 = time.perf_counter()
        evaluations = evaluate_many(problem, [selection_set(pooled, r) for r in [None, *picks]], family=family,
                                    protocol=resolved, card=None, out_dirs=dirs)
        evaluate_s = time.perf_counter() - t1
        wrote = any(Path(tmp).rglob("*.png"))
    t2 = time.perf_counter()
    bars = calibration_bars(problem, pooled, family=family, protocol=resolved, evaluation=evaluations[0],
                            blind=blind, oracle=oracle)
    bars_s = time.perf_counter() - t2
    summary = evaluations[0]["summary"]
    units = evaluation_units(problem, runs, m)
    return {"runs": runs, "candidates": runs * m, "evaluations": 1 + len(picks), "bars": bars is not None,
            "figures": wrote,
            "seconds": {"evaluations": evaluate_s, "calibration_bars": bars_s, "total": evaluate_s + bars_s},
            "units": units, "seconds_per_unit": (evaluate_s + bars_s) / units,
            "pooled_summary": {k: summary.get(k) for k in ("reconstructed_calibrated", "matched_images",
                                                              "calibrated_threshold")}}
