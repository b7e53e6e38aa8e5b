"""Discrete decisions of an evaluation and how far rounding can move them.

Every count of the protocol comes from a decision: a per-image score above its threshold (``reconstructed``,
``reconstructed_corr``, the calibrated headline, ...) or a nearest-neighbour choice (which training image a candidate
is nearest to, which candidate an image is nearest to). Another processor or BLAS kernel sums in another order, so a
score or distance can differ in its last bits; a decision whose score sits within that rounding of its threshold (or
whose two nearest distances are that close) may come out either way. Such a decision is *borderline*.

Outside a :func:`guided` block the decisions are plain comparisons (``score > threshold``, ``argmin``), exactly as
stored numbers were computed. Inside one, every borderline decision is recorded (and its margin), and the decisions
named in ``flip`` are taken the other way: re-scoring with them flipped shows whether a stored number differs from a
fresh one only through decisions that rounding can flip ("borderline, agrees within rounding").

Tolerance (how far two machines' results can lie apart), derived from floating-point rounding:

* Unit roundoff u = 2^-53 for float64 (2^-24 for float32). A sum of N terms computed in any order (sequential,
  pairwise, blocked, in SIMD lanes, with or without fused multiply-add) is within ``gamma(N) * sum |t_i|`` of the exact
  sum of its rounded terms, ``gamma(N) = N u / (1 - N u)`` (Higham, *Accuracy and Stability of Numerical
  Algorithms*, 2nd ed., eq. (4.4) and section 3.1). Two kernels are each that close to the exact value, so they agree
  to ``2 gamma(N) sum |t_i|``.
* A per-image score (SSIM, Pearson correlation) is a normalised ratio of at most ``CHAINED = 8`` such reductions over
  at most N = C*H*W values of one image (means, the centred dot product and two norms for the correlation; the five
  local moments and the image mean for SSIM), whose absolute sums the normaliser bounds (Cauchy-Schwarz), so the
  relative error of each factor is at most ``gamma(N)`` and a score of size |s| <= 1 moves by at most
  ``CHAINED * gamma(N)`` on each machine: :func:`score_tolerance` is ``2 * CHAINED * gamma(N)``, applied to
  ``max(1, |s|)``. The same bound covers the summary numbers that average scores (the mean adds one reduction of n
  terms, ``gamma(n)`` with n << N for every board), so :func:`score_tolerance` of N = the largest reduction of the
  evaluation is the relative tolerance of every continuous stored number.
* A ranking distance ``|a|^2 + |b|^2 - 2 a.b`` over D features (:func:`reconbench.evaluation.distances.pairwise`):
  each of its three reductions errs by at most ``gamma(D)`` times ``|a|^2 + |b|^2``, and the features themselves
  (standardised per image) carry a relative error of ``CHAINED * gamma(N)``; a distance moves by at most
  ``(3 + 2 CHAINED) gamma(max(N, D)) (|a|^2 + |b|^2)`` per machine, and the gap between two distances of one row by
  twice that on each of two machines: :func:`gap_tolerance`.

These are worst-case bounds for well-conditioned scores (a normaliser that is not itself a near-cancellation); a
stored number that differs by more than them is a failure, so an ill-conditioned score shows up as one instead of
passing silently.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np
import torch

#: unit roundoff of each floating-point type the evaluation computes in
UNIT_ROUNDOFF = {torch.float64: 2.0 ** -53, torch.float32: 2.0 ** -24}
#: chained reductions behind one per-image score (see the module docstring)
CHAINED = 8


def gamma(n: int, u: float = UNIT_ROUNDOFF[torch.float64]) -> float:
    """Higham's gamma_n = n u / (1 - n u): the relative error bound of a sum of n terms in any order."""
    if n * u >= 1:
        raise ValueError(f"gamma({n}) is undefined for unit roundoff {u} (n u >= 1)")
    return n * u / (1 - n * u)


def score_tolerance(n_terms: int, u: float = UNIT_ROUNDOFF[torch.float64]) -> float:
    """Largest difference between two machines' values of a normalised score (size <= 1) built from reductions of at
    most ``n_terms`` values; relative to ``max(1, |value|)`` for other stored numbers."""
    return 2 * CHAINED * gamma(max(n_terms, 1), u)


#: unit roundoff of float16, the precision a slice's sampled candidates travel in (docs/slices.md)
FLOAT16_ROUNDOFF = 2.0 ** -11


def float16_tolerance(n_terms: int) -> float:
    """Relative tolerance of a stored number scored on the device from the candidates themselves against the same
    number re-scored here from those candidates rounded to float16 (how a slice's sample travels).

    Rounding to float16 moves each candidate value by at most u16 = 2^-11 relative (round to nearest, normal range;
    a value below float16's smallest normal, 6.1e-5, moves by at most 2^-25 absolute, negligible beside pixel-scale
    values). A product of two candidate values (a square, a local second moment) then moves by at most
    (2 u16 + u16^2) relative, and a product with a training value by u16, so each reduction behind a score moves by
    at most (2 u16 + u16^2) times its absolute sum, in place of the gamma(N) of rounding (module docstring); a score
    made of ``CHAINED`` such reductions moves by at most ``CHAINED (2 u16 + u16^2)`` relative to max(1, |s|). Only
    one side is rounded to float16, and both sides carry the float64 rounding of :func:`score_tolerance`: the sum
    of the two, about 7.8e-3.

    This holds for scores of the values as they are. A score that first rescales the image by numbers computed from
    it (min-max scaling for display: the SSIMs; centring or standardising: the correlation, the ncc distances)
    stretches each value's error by the image's size over its spread, without limit at low contrast: those take the
    per-image bounds of :mod:`reconbench.evaluation.float16_bounds`."""
    u = FLOAT16_ROUNDOFF
    return CHAINED * (2 * u + u * u) + score_tolerance(n_terms)


def holds_float16_values(values: torch.Tensor) -> bool:
    """Whether every value of a floating tensor is a float16 number (what a slice's sample carries)."""
    if not values.is_floating_point() or values.numel() == 0:
        return False
    finite = values[torch.isfinite(values)]
    return bool(torch.equal(finite.half().to(finite.dtype), finite))


def gap_tolerance(n_terms: int, u: float = UNIT_ROUNDOFF[torch.float64]) -> float:
    """Relative (to ``|a|^2 + |b|^2``) tolerance of the gap between two ranking distances of one row."""
    return 2 * 2 * (3 + 2 * CHAINED) * gamma(max(n_terms, 1), u)


@dataclass(frozen=True)
class Borderline:
    """One decision that rounding can flip: where it is, how far from its threshold, and the tolerance."""

    scope: str
    site: str
    index: int
    margin: float
    tolerance: float

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.scope, self.site, self.index)

    def describe(self) -> str:
        where = f"{self.scope}: " if self.scope else ""
        if self.site.startswith("nearest"):
            return (f"{where}{self.site} #{self.index}: the runner-up is {abs(self.margin):.2g} farther (rounding "
                    f"tolerance {self.tolerance:.2g})")
        return (f"{where}{self.site} of image #{self.index}: score {self.margin:+.2g} from its threshold (rounding "
                f"tolerance {self.tolerance:.2g})")


@dataclass
class Guide:
    """The state of a guided evaluation: the tolerance, the decisions to flip, the borderline decisions seen."""

    n_terms: int
    flip: frozenset[tuple[str, str, int]] | None = None  # None: flip none; see ``flip_all``
    flip_all: bool = False
    seen: dict[tuple[str, str, int], Borderline] = field(default_factory=dict)
    scope: str = ""
    min_score_tol: float = 0.0  # a floor (e.g. the rounding of scores stored to fewer digits)

    @property
    def score_tol(self) -> float:
        return max(score_tolerance(self.n_terms), self.min_score_tol)

    def note(self, site: str, index: int, margin: float, tolerance: float) -> bool:
        """Record a borderline decision; whether to flip it."""
        b = Borderline(self.scope, site, int(index), float(margin), float(tolerance))
        self.seen.setdefault(b.key, b)
        return self.flip_all or (self.flip is not None and b.key in self.flip)

    def replay(self, seen: list[Borderline]) -> None:
        """Note decisions taken earlier under the same inputs (a cached computation)."""
        for b in seen:
            self.seen.setdefault(b.key, b)

    def flips_in(self, scope_prefix: str) -> bool:
        """Whether a decision under scopes starting with ``scope_prefix`` may be flipped (caches must not serve)."""
        return self.flip_all or any(k[0].startswith(scope_prefix) for k in (self.flip or ()))


_GUIDE: contextvars.ContextVar[Guide | None] = contextvars.ContextVar("reconbench_decision_guide", default=None)


def current() -> Guide | None:
    """The active guide, or None (plain decisions)."""
    return _GUIDE.get()


@contextlib.contextmanager
def guided(n_terms: int, flip: frozenset[tuple[str, str, int]] | None = None,
           flip_all: bool = False, min_score_tol: float = 0.0) -> Iterator[Guide]:
    """Record borderline decisions (tolerances for reductions of at most ``n_terms`` values, at least
    ``min_score_tol``) and flip those named."""
    guide = Guide(n_terms=n_terms, flip=flip, flip_all=flip_all, min_score_tol=min_score_tol)
    token = _GUIDE.set(guide)
    try:
        yield guide
    finally:
        _GUIDE.reset(token)


@contextlib.contextmanager
def scope(name: str) -> Iterator[None]:
    """Name the decisions taken inside (e.g. one null draw), so that the same image index of two draws differs."""
    guide = current()
    if guide is None:
        yield
        return
    old = guide.scope
    guide.scope = f"{old}/{name}" if old else name
    try:
        yield
    finally:
        guide.scope = old


def above(scores: np.ndarray, threshold: float, site: str) -> np.ndarray:
    """(n,) ``score > threshold`` (NaN: never); under a guide, scores within rounding of the threshold are noted and
    flipped when named."""
    filled = np.nan_to_num(np.asarray(scores, dtype=np.float64), nan=-np.inf)
    flags = ~np.isnan(scores) & (filled > threshold)
    guide = current()
    if guide is None or not np.isfinite(threshold):
        return flags
    tol = guide.score_tol * max(1.0, abs(float(threshold)))
    margins = filled - threshold
    for i in np.flatnonzero(np.abs(margins) <= tol):
        if guide.note(site, int(i), float(margins[i]), tol):
            flags[i] = not flags[i]
    return flags


def argmin(dist: torch.Tensor, dim: int, site: str, scale: Callable[[], torch.Tensor]) -> torch.Tensor:
    """``dist.argmin(dim)``; under a guide, a choice whose runner-up lies within the rounding tolerance of the
    distances (``gap_tolerance`` times ``scale()``, a tensor like ``dist`` of ``|a|^2 + |b|^2`` per entry) is noted,
    and when named the runner-up is chosen instead."""
    choice = dist.argmin(dim=dim)
    guide = current()
    if guide is None or dist.numel() == 0 or dist.shape[dim] < 2:
        return choice
    rows = dist if dim == 1 else dist.T
    size = scale() if dim == 1 else scale().T
    tol = gap_tolerance(guide.n_terms) * size
    best = rows.gather(1, choice[:, None])
    gaps = rows - best
    near = gaps <= tol.gather(1, choice[:, None]).expand_as(gaps).maximum(tol)
    near.scatter_(1, choice[:, None], False)
    out = choice.clone()
    for r in torch.nonzero(near.any(1)).flatten().tolist():
        candidates = torch.nonzero(near[r]).flatten()
        alt = int(candidates[gaps[r, candidates].argmin()])
        if guide.note(site, r, float(gaps[r, alt]), float(tol[r, alt])):
            out[r] = alt
    return out
