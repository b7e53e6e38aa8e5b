"""The data prior: candidates built from non-member images alone (class prototypes and blurred averages), the
``data_prior`` baseline row and the optional prior part of the calibration draws (docs/calibration.md#the-data-prior).

A held-out draw is a set of natural images; an attacker without member information can do better than that, by
averaging images of a class (a prototype looks like every member a little) and by smoothing them (a blurred image
loses the details in which a member and a non-member differ). One candidate of label c is built as:

1. s images of label c drawn at random from the pool (without replacement while it has enough), with s drawn
   uniformly from :data:`AVERAGE_SIZES` (capped at the pool's count of label c);
2. their mean, in the model's input space (centred);
3. a Gaussian blur of that mean over the spatial axes with sigma drawn uniformly from :data:`BLUR_SIGMAS`
   (0: no blur; scipy.ndimage.gaussian_filter, each channel separately, edges reflected).

The calibration's prior draws and the baseline use this one construction, the first on the held-out pool, the
second on the attack's starting candidates (the decoy pool of a ``partition`` start): both pools are non-members
of the same distribution, so the baseline is a fresh draw of the distribution the prior draws calibrate against.
"""

from __future__ import annotations

import numpy as np
import torch

from reconbench.evaluation.image_filters import gaussian_filter_2d

#: how many images one candidate averages (1: a single image, as the held-out draws)
AVERAGE_SIZES = (1, 2, 4, 8, 16, 32)
#: the blur of one candidate, in pixels (0: none)
BLUR_SIGMAS = (0.0, 0.5, 1.0, 2.0)
_SIZES, _SIGMAS = np.asarray(AVERAGE_SIZES), np.asarray(BLUR_SIGMAS)


def prior_candidates(pool: torch.Tensor, pool_labels: np.ndarray, labels: np.ndarray,
                     rng: np.random.Generator) -> torch.Tensor:
    """(m, C, H, W) candidates of the given labels, each the blurred mean of random pool images of its label."""
    pool_labels = np.asarray(pool_labels)
    labels = np.asarray(labels)
    arr = pool.detach().cpu().double().numpy()
    out = np.empty((len(labels), *arr.shape[1:]), dtype=np.float64)
    by_label = {int(c): np.flatnonzero(pool_labels == c) for c in np.unique(labels)}
    sigmas = np.empty(len(labels))
    picks: dict[int, list[tuple[int, np.ndarray]]] = {}   # average size -> (candidate, its pool rows)
    for j, c in enumerate(labels.tolist()):
        members = by_label[int(c)]
        if len(members) == 0:
            raise ValueError(f"the pool has no image of label {c}")
        # rng.choice(seq) draws seq[rng.integers(len(seq))]: the same numbers from the same stream, without
        # converting the tuple on every call (tests/unit/evaluation/test_data_prior.py holds the two equal)
        s = min(int(_SIZES[rng.integers(len(_SIZES))]), len(members))
        picks.setdefault(s, []).append((j, rng.choice(members, s, replace=False)))
        sigmas[j] = float(_SIGMAS[rng.integers(len(_SIGMAS))])
    # the means of all candidates that average s images in one call: each is the sum of its s images in their
    # drawn order divided by s, as arr[rows].mean(axis=0) computes it alone
    for chosen in picks.values():
        rows = np.stack([r for _, r in chosen])
        out[[j for j, _ in chosen]] = arr[rows].mean(axis=1)
    # one filter call per blur over the candidates that drew it: the filter runs along each spatial line on its own,
    # so the stack's values equal the per-candidate calls' (tests/unit/evaluation/test_data_prior.py)
    for sigma in BLUR_SIGMAS:
        rows = np.flatnonzero(sigmas == sigma)
        if sigma > 0 and len(rows):   # scipy.ndimage.gaussian_filter's numbers, without its import (image_filters)
            out[rows] = gaussian_filter_2d(out[rows], sigma)
    return torch.as_tensor(out, dtype=pool.dtype)
