"""The evaluation context that metric plugins score: checked candidates, features, the matching, reconstructions.

Metric plugins receive an :class:`Evaluation` and return ``{"summary": {...}, "per_image": {column: [n values]},
"details": {...}}`` (see :mod:`reconbench.evaluation`). Building the context validates the input: candidates of the
wrong type, dtype or shape raise :class:`CandidateError`; non-finite and constant candidates are set aside (counted,
never matched), so no NaN reaches a metric.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from reconbench.data import Problem
from reconbench.errors import IncompatibleError
from reconbench.evaluation.distances import features
from reconbench.evaluation.matching import Matching, match
from reconbench.evaluation.problem_memo import memo
from reconbench.evaluation.protocol import ResolvedProtocol
from reconbench.evaluation.ssim import display
from reconbench.records.model_card import TrainMetrics
from reconbench.targets.cards import ModelCard


class CandidateError(IncompatibleError):
    """Candidates (or their labels, run ids, starting points) that cannot be scored against the problem."""


def as_images(x: object, problem: Problem, what: str = "candidates") -> torch.Tensor:
    """Check type, dtype and shape of an image stack in the problem's centred space; return it as float64."""
    if isinstance(x, np.ndarray):
        x = torch.from_numpy(x)
    if not isinstance(x, torch.Tensor):
        raise CandidateError(f"{what} must be a torch tensor (M, C, H, W), got {type(x).__name__}")
    if not x.is_floating_point():
        raise CandidateError(f"{what} must be floating point (images in the problem's centred space, float64), "
                             f"got dtype {str(x.dtype).replace('torch.', '')}; convert with .double()")
    shape = tuple(problem.image_shape)
    if x.ndim != 4 or tuple(x.shape[1:]) != shape:
        raise CandidateError(f"{what} must have shape (M, {', '.join(map(str, shape))}) for this problem, got "
                             f"{tuple(x.shape)}; reshape with x.reshape(-1, {', '.join(map(str, shape))})")
    if x.shape[0] == 0:
        raise CandidateError(f"{what} is empty: there is nothing to evaluate")
    return x.detach().to("cpu", torch.float64)


def as_vector(x: object, m: int, what: str) -> np.ndarray | None:
    """Per-candidate integers (labels, run ids) of length m, or None."""
    if x is None:
        return None
    arr = x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)
    arr = arr.reshape(-1)
    if len(arr) != m:
        raise CandidateError(f"{what} has {len(arr)} entries for {m} candidates; give one per candidate")
    if not np.issubdtype(arr.dtype, np.integer):
        if not np.all(np.isfinite(arr)) or not np.all(arr == np.round(arr)):
            raise CandidateError(f"{what} must hold integers (class ids / run numbers), got dtype {arr.dtype}")
        arr = arr.astype(np.int64)
    return arr.astype(np.int64)


def finite_rows(flat: torch.Tensor) -> torch.Tensor:
    """(N,) whether each row is all finite: a row sum is finite unless the row holds inf/NaN (or overflows, which is
    then checked element-wise), so one pass without an (N, D) boolean temporary."""
    ok = torch.isfinite(flat.sum(1))
    suspect = torch.nonzero(~ok).flatten()
    if len(suspect):
        ok[suspect] = torch.isfinite(flat[suspect]).all(1)
    return ok


def validity(c: torch.Tensor, mean: torch.Tensor, tol: float) -> tuple[np.ndarray, dict[str, list[int]]]:
    """Valid candidates (finite and not constant, centred or un-centred) and the ids of the others by reason."""
    flat = c.reshape(c.shape[0], -1)
    finite = finite_rows(flat)
    const = torch.zeros_like(finite)
    ok = torch.nonzero(finite).flatten()
    mflat = mean.reshape(1, -1).to(c.dtype)
    for s in range(0, len(ok), 2048):  # batches: no full-size temporaries
        rows = flat[ok[s:s + 2048]]
        unc = rows + mflat
        const[ok[s:s + 2048]] = ((rows.amax(1) - rows.amin(1)) <= tol) | ((unc.amax(1) - unc.amin(1)) <= tol)
    valid = (finite & ~const).numpy()
    return valid, {"nonfinite": torch.nonzero(~finite).flatten().tolist(),
                   "constant": torch.nonzero(const).flatten().tolist()}


@dataclass
class Evaluation:
    """Everything a metric plugin may read (build it with :func:`build_context`)."""

    problem: Problem
    protocol: ResolvedProtocol
    candidates: torch.Tensor            # (M, C, H, W) float64, centred, as given (invalid ones included)
    valid: np.ndarray                   # (M,) finite and non-constant
    invalid: dict[str, list[int]]       # reason -> candidate ids
    labels: np.ndarray | None           # (M,) candidate labels
    run_ids: np.ndarray | None          # (M,) run of each pooled candidate
    x0: torch.Tensor | None             # (M, C, H, W) starting candidates
    card: Any
    margins: np.ndarray | None          # (n,) per-training-image margins from the model card
    train_features: torch.Tensor        # (n, D') matching features of the training images
    valid_ids: np.ndarray               # ids of the valid candidates
    candidate_features: torch.Tensor    # (len(valid_ids), D')
    matching: Matching
    recon_centred: torch.Tensor         # (n, C, H, W) per training image its averaged candidates (zeros: unmatched)
    recon_display: torch.Tensor         # the same with the mean added back, min-max scaled to [0, 1]
    originals: torch.Tensor             # (n, C, H, W) the training images in [0, 1], not rescaled
    results: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def n(self) -> int:
        return self.problem.n

    def features(self, x: torch.Tensor, distance: str | None = None) -> torch.Tensor:
        """Matching features of centred images (the protocol's distance unless another is named)."""
        p = self.protocol.base
        return features(x, distance or p.distance, p.ncc_eps)

    def features_of(self, ids: np.ndarray, distance: str | None = None, batch: int = 2048) -> torch.Tensor:
        """Features of the candidates ``ids``, computed in batches (no full copy of the candidates)."""
        parts = [self.features(self.candidates[torch.as_tensor(ids[s:s + batch])], distance)
                 for s in range(0, len(ids), batch)]
        return torch.cat(parts) if parts else self.features(self.candidates[:0], distance)

    def primary(self) -> dict[str, Any]:
        name = self.protocol.base.primary_metric
        if name not in self.results:
            raise IncompatibleError(f"the primary metric {name!r} has not been computed yet")
        return self.results[name]

    def reconstructed(self) -> np.ndarray:
        """(n,) bool: training images whose primary score is above the protocol's threshold."""
        columns = self.primary()["per_image"]
        if "reconstructed" not in columns or columns["reconstructed"] is None:
            raise IncompatibleError(f"the primary metric {self.protocol.base.primary_metric!r} gives no per-image "
                                    "`reconstructed` column")
        return np.asarray([bool(v) for v in columns["reconstructed"]], dtype=bool)

    def primary_scores(self) -> np.ndarray:
        """(n,) primary score per training image, NaN where unmatched (internal use; never written)."""
        name = self.protocol.base.primary_metric
        columns = self.primary()["per_image"]
        if name not in columns or columns[name] is None:
            raise IncompatibleError(f"the primary metric {name!r} gives no per-image {name!r} column")
        return np.asarray([np.nan if v is None else float(v) for v in columns[name]], dtype=np.float64)


def train_features(problem: Problem, distance: str, eps: float) -> torch.Tensor:
    """The training images' matching features, computed once per problem (``problem_memo``; never written)."""
    return memo(problem, ("train_features", distance, eps),
                lambda: features(problem.x_train(torch.float64), distance, eps))


def card_margins(card: object, problem: Problem) -> np.ndarray | None:
    """(n,) per-training-image margins the model card records, or None."""
    if isinstance(card, ModelCard):
        raw = TrainMetrics.from_dict(card.data["metrics"], card.path / "card.json").margins
        if raw is not None and len(raw) == problem.n:
            return np.asarray(raw, dtype=np.float64)
    return None


def build_context(problem: Problem, candidates: object, protocol: ResolvedProtocol, *, labels: object = None,
                  run_ids: object = None, x0: object = None, card: object = None) -> Evaluation:
    cands = as_images(candidates, problem)
    m = cands.shape[0]
    lab = as_vector(labels, m, "labels")
    runs = as_vector(run_ids, m, "run_ids")
    start = as_images(x0, problem, "x0 (starting candidates)") if x0 is not None else None
    if start is not None and start.shape[0] != m:
        raise CandidateError(f"x0 has {start.shape[0]} starting candidates for {m} candidates; give one per "
                             "candidate")
    p = protocol.base
    mean = problem.mean_tensor(torch.float64)
    valid, invalid = validity(cands, mean, p.constant_tol)
    valid_ids = np.flatnonzero(valid)
    train_feat = train_features(problem, p.distance, p.ncc_eps)
    cand_feat = torch.cat([features(cands[torch.as_tensor(valid_ids[s:s + 2048])], p.distance, p.ncc_eps)
                           for s in range(0, len(valid_ids), 2048)]) if len(valid_ids) else \
        features(cands[:0], p.distance, p.ncc_eps)
    matching = match(train_feat, cand_feat, valid_ids, m, best_buddy=p.best_buddy, vote=p.vote,
                     avg_threshold=protocol.avg_threshold, per_dimension=p.per_dimension)
    recon = matching.average(cands)
    shown = display(recon, mean, p.constant_tol)
    margins = card_margins(card, problem)
    return Evaluation(problem=problem, protocol=protocol, candidates=cands, valid=valid, invalid=invalid, labels=lab,
                      run_ids=runs, x0=start, card=card, margins=margins, train_features=train_feat,
                      valid_ids=valid_ids, candidate_features=cand_feat, matching=matching, recon_centred=recon,
                      recon_display=shown, originals=torch.as_tensor(problem.train_images, dtype=torch.float64))
