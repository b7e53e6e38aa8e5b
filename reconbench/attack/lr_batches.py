"""Runs that differ only in their learning rate advance as one batch: the grouping and the hand-over of a batch's
results, shared by the attacks whose optimiser steps several runs at once (``loo_ntk``, ``projection_law``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from reconbench.interfaces import AttackOutput, RunDone


def lr_groups(configs: Sequence[Any]) -> list[list[int]]:
    """Indices of the runs whose configurations agree on every field but ``lr``, in first-seen order."""
    groups: dict[str, list[int]] = {}
    for i, c in enumerate(configs):
        groups.setdefault(repr(sorted((k, v) for k, v in vars(c).items() if k != "lr")), []).append(i)
    return list(groups.values())


def hand_over(ids: list[int], outs: Sequence[AttackOutput | Exception], labels: torch.Tensor,
              on_done: RunDone | None) -> None:
    """Give each run of a batch its labels and report it (with the batch it advanced in, when it had company)."""
    for j, i in enumerate(ids):
        out = outs[j]
        if not isinstance(out, Exception):
            out.labels = labels.clone()
        if on_done is not None:
            on_done(i, out, {"runs": ids, "size": len(ids)} if len(ids) > 1 else None)


def advance_by_lr(configs: Sequence[Any], labels: torch.Tensor, on_done: RunDone | None,
                  optimise_group: Callable[[list[int]], Sequence[AttackOutput | Exception]]) -> None:
    """Advance the runs in groups that differ only in the learning rate (``optimise_group`` takes the group's run
    indices) and hand each group's results over as it finishes."""
    for ids in lr_groups(configs):
        hand_over(ids, optimise_group(ids), labels, on_done)


def run_alone(run_batch: Callable[..., None], target: object, x0: torch.Tensor, labels: torch.Tensor, config: object, *,
              generator: torch.Generator, progress: object = None) -> AttackOutput:
    """One run through an attack's ``run_batch``; its exception raised."""
    results: list[AttackOutput | Exception] = []
    run_batch(target, [x0], labels, [config], generators=[generator], progress=progress,
              on_done=lambda i, r, b: results.append(r))
    (result,) = results
    if isinstance(result, Exception):
        raise result
    return result
