"""How far float16 rounding of a stored image can move a per-image score, per image (docs/leaderboard-entries.md).

A score re-computed from a candidate stored in float16 (x16) differs from the one computed from the unknown
candidate x it was rounded from. :func:`reconbench.evaluation.decisions.float16_tolerance` bounds that for scores
of values that are used as they are (each moves by u = 2^-11 relative). Three scores first rescale the image by
numbers computed from it, which stretches the rounding:

* **Rounding, from the stored side.** Round to nearest moves a normal value by at most u|x|, and |x| <=
  |x16| / (1 - u); a subnormal (|x| < 2^-14) by at most 2^-25. So ``|x_i - x16_i| <= b_i = u |x16_i| / (1 - u) +
  2^-25`` (:func:`rounding_bounds`), computable from the stored values alone; Δ = max b_i.
* **Min-max scaling** (``ssim.display``, the SSIMs): s(y) = (y - m) / R, m = min y, R = max y - min y, y = x + mean.
  With y' = y + δ, |δ_i| <= Δ: m' - m = α and (max y') - (max y) = β, |α|, |β| <= Δ, so s'_i - s_i =
  (δ_i - (1 - s_i) α - s_i β) / R', and since 0 <= s_i <= 1, **|s'_i - s_i| <= 2Δ / R'** (:func:`minmax_shift`),
  R' the stored image's range. The stretch over float16's own u is 2 max|x16| / R' / (1 - u) (plus the subnormal
  term): about 1 for a full-contrast image, 100 for one whose range is 1% of its values.
* **SSIM of scaled values** (both variants): values in [0, 1], each moved by at most e = 2Δ / R', the original
  exact, windows of non-negative weights summing to 1. The map is (A1 A2) / (B1 B2), A1 = 2 μx μy + c1,
  B1 = μx^2 + μy^2 + c1, A2 = 2 k σxy + c2, B2 = k (σx^2 + σy^2) + c2 (k = 1, or scikit-image's sample covariance
  NP / (NP - 1) <= 9/8). They move by at most 2e, 2e + e^2, k e (σxy moves by Cov(δ, y) <= e σy, σy <= 1/2) and
  k (e + e^2); as :func:`~reconbench.evaluation.decisions.float16_tolerance` adds its factors' moves (a
  well-conditioned normaliser, ``decisions.py``), a score moves by at most **(4 + 2k) e + (1 + k) e^2 <= 6.25 e +
  2.125 e^2** (:func:`ssim_shift_tolerance`): 12.5 u = 6.1e-3 at e = 2u, a full-contrast image.
* **Centring and standardising** (the correlation, the ncc distances): per channel, with A the centred values and E
  the centred error (|E|_2 <= |b|_2: centring does not lengthen it), the unit vector A / |A| moves by at most
  |E| / (|A'| - |E|) (|v/|v| - w/|w|| <= |v - w| / min(|v|, |w|)), so a correlation by at most that
  (:func:`correlation_shift`); a standardised channel sqrt(n - 1) A / (|A| + eps sqrt(n - 1)) by sqrt(n - 1) times
  that (and eps's share), after a bicubic down-sampling that moves each value by at most its absolute weights times
  b; a squared distance d = |z - g|^2 / D by ζ (2 sqrt(D d') + ζ) / D, ζ the features' move
  (:func:`distance_shift`).

Where a bound reaches the score's whole range (a range R' within 2Δ of 0, a channel whose error may be as large as
its spread), the score cannot be re-scored from float16: the functions return None.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch

from reconbench.evaluation.decisions import FLOAT16_ROUNDOFF, score_tolerance

#: half the spacing of float16's subnormals: how far rounding moves a value below its smallest normal, 2^-14
FLOAT16_SUBNORMAL_ERROR = 2.0 ** -25
#: a score of values in [-1, 1] (SSIM, correlation) cannot move by more than this
SCORE_RANGE = 2.0
#: the most a whole cell's float16 tolerance may be widened to by one candidate's contrast: a candidate whose own
#: bound passes it is counted with the flat ones (named, left out of the tolerance), so that one near-flat candidate
#: cannot turn every number of its cell into a non-check (a tolerance near SCORE_RANGE passes anything). A convention:
#: at the contrast of real images the bounds are 4e-3 to 6e-3; a stored number that does depend on such a candidate
#: and moves past the cell's tolerance is reported as a mismatch, loudly, never passed.
CELL_TOLERANCE_CEILING = 0.05
#: scikit-image's sample-covariance factor NP / (NP - 1) is at most 9/8 (a window of at least 3 x 3)
_COV_NORM_MAX = 9 / 8


def rounding_bounds(stored: torch.Tensor) -> torch.Tensor:
    """Per value, the most that rounding to float16 moved the unknown value behind a stored float16 one:
    u |x16| / (1 - u) + 2^-25 (module docstring), in float64."""
    u = FLOAT16_ROUNDOFF
    return stored.to(torch.float64).abs() * (u / (1 - u)) + FLOAT16_SUBNORMAL_ERROR


def minmax_shift(stored_centred: torch.Tensor, mean: torch.Tensor, constant_tol: float = 0.0) -> float | None:
    """The most each min-max scaled value of ``stored_centred + mean`` (one image, jointly over channels and pixels,
    as ``ssim.display``) differs from that of the unrounded image: 2Δ / R'. None where the image cannot be scaled
    from float16 (a value not finite, or a range R' within 2Δ of ``constant_tol``: it may be a constant image)."""
    if not bool(torch.isfinite(stored_centred).all()):
        return None
    delta = float(rounding_bounds(stored_centred).max())
    shown = stored_centred.to(torch.float64) + mean.to(torch.float64)
    rng = float(shown.max() - shown.min())
    if rng - 2 * delta <= constant_tol:
        return None
    return 2 * delta / rng


def ssim_shift_tolerance(shift: float, n_terms: int) -> float | None:
    """Absolute tolerance of an SSIM (either variant, data range 1) of an image whose scaled values each moved by at
    most ``shift``: (4 + 2k) e + (1 + k) e^2, k = 9/8 (module docstring), plus the float64 rounding of two
    machines; None where it reaches the score's whole range."""
    k = _COV_NORM_MAX
    tol = (4 + 2 * k) * shift + (1 + k) * shift ** 2 + score_tolerance(n_terms)
    return tol if tol < SCORE_RANGE else None


def _unit_vector_move(err: float, spread: float, eps: float = 0.0) -> float | None:
    """The most v / (|v| + eps) moves when v = A (stored, |A| = ``spread``) is off the true one by at most ``err``
    in 2-norm: |v/|v| - w/|w|| <= |v - w| / min(|v|, |w|) (from |v - w|^2 >= 2 |v| |w| (1 - cos θ)), plus the eps
    term's own move; None where it may reach 2, the most a unit vector can move."""
    low = spread - err
    if low <= 0:
        return None
    move = err / low * (1 + eps / (low + eps))
    return move if move < SCORE_RANGE else None


def correlation_shift(stored: torch.Tensor, n_terms: int) -> float | None:
    """Absolute tolerance of the ``corr`` metric (per channel Pearson correlation with an exact image, averaged over
    channels) of a (C, H, W) image stored in float16: per channel |E|_2 / (|A'|_2 - |E|_2) (the centred values'
    unit vector's move), averaged; plus the float64 rounding of two machines. None where a channel's bound reaches
    its whole range."""
    if not bool(torch.isfinite(stored).all()):
        return None
    flat = stored.to(torch.float64).flatten(1)
    errs = rounding_bounds(flat).norm(dim=1)
    spreads = (flat - flat.mean(1, keepdim=True)).norm(dim=1)
    moves = [_unit_vector_move(float(e), float(s)) for e, s in zip(errs, spreads, strict=True)]
    if any(m is None for m in moves):
        return None
    return sum(m for m in moves if m is not None) / len(moves) + score_tolerance(n_terms)


@functools.cache
def _abs_downsample(h: int, w: int, factor: int) -> torch.Tensor:
    """|H|: the absolute weights (outputs, inputs) of ``distances.downsample`` of an h x w image, read from torch's
    own down-sampling of each basis image (so the bound follows the operation, borders included). Never written."""
    from reconbench.evaluation.distances import downsample

    basis = torch.eye(h * w, dtype=torch.float64).reshape(h * w, 1, h, w)
    return downsample(basis, factor).reshape(h * w, -1).T.abs().contiguous()


def distance_shift(stored: torch.Tensor, value: float, *, factor: int, standardised: bool, eps: float,
                   per_dimension: bool, n_terms: int) -> float | None:
    """Absolute tolerance of the squared distance ``value`` between the features of a (C, H, W) image stored in
    float16 and exact features (``distances.features``: down-sampled by ``factor``, ``standardised`` per channel with
    ``eps``), with the float64 rounding of two machines (relative to max(1, value)). None where a standardised
    channel's bound reaches its whole range."""
    if not bool(torch.isfinite(stored).all()):
        return None
    from reconbench.evaluation.distances import downsample

    c, h, w = stored.shape
    bound = rounding_bounds(stored).reshape(c, h * w)
    if factor > 1:   # each down-sampled value moves by at most |H| times the inputs' moves
        bound = bound @ _abs_downsample(h, w, factor).T
    small = downsample(stored.to(torch.float64)[None], factor)[0].flatten(1)
    n = small.shape[1]
    moves = []
    for channel, channel_bound in zip(small, bound, strict=True):
        err = float(channel_bound.norm())            # centring does not lengthen the error
        if not standardised:
            moves.append(err)
            continue
        spread = float((channel - channel.mean()).norm())
        move = _unit_vector_move(err, spread, eps * math.sqrt(n - 1))
        if move is None:
            return None
        moves.append(math.sqrt(n - 1) * move)
    zeta = math.sqrt(sum(m * m for m in moves))
    dims = small.numel() if per_dimension else 1
    return zeta * (2 * math.sqrt(dims * max(value, 0.0)) + zeta) / dims + score_tolerance(n_terms) * max(1.0, value)


@dataclass(frozen=True)
class CandidatesBound:
    """The float16 tolerance of a whole cell's display-scaled and centred scores (:func:`candidates_tolerance`)."""

    #: the largest per-image SSIM or correlation tolerance over the candidates float16 can re-score
    tolerance: float
    #: candidates too flat for float16 to re-score within ``CELL_TOLERANCE_CEILING`` (their bound passes it)
    flat: int


def candidates_tolerance(candidates: torch.Tensor, mean: torch.Tensor, constant_tol: float,
                         n_terms: int) -> CandidatesBound:
    """Over a cell's float16 candidates (N, C, H, W, centred), the largest tolerance of an SSIM (min-max scaled,
    :func:`minmax_shift`, :func:`ssim_shift_tolerance`) or correlation (:func:`correlation_shift`) of one of them
    as a reconstruction, and how many are too flat to re-score; the same bounds, over every candidate at once."""
    values = candidates.to(torch.float64)
    if values.shape[0] == 0:
        return CandidatesBound(score_tolerance(n_terms), 0)
    b = rounding_bounds(values)
    delta = b.flatten(1).max(1).values
    shown = (values + mean.to(torch.float64)[None]).flatten(1)
    rng = shown.max(1).values - shown.min(1).values
    shift = 2 * delta / rng.clamp_min(1e-300)
    k = _COV_NORM_MAX
    ssim_tol = (4 + 2 * k) * shift + (1 + k) * shift ** 2
    channels = values.flatten(2)
    err = b.flatten(2).norm(dim=2)
    low = (channels - channels.mean(2, keepdim=True)).norm(dim=2) - err
    corr_tol = (err / low.clamp_min(1e-300)).mean(1)
    finite = torch.isfinite(values.flatten(1)).all(1)
    flat = ~finite | (rng - 2 * delta <= constant_tol) | (low <= 0).any(1) | (torch.maximum(ssim_tol, corr_tol)
                                                                            >= CELL_TOLERANCE_CEILING)
    worst = torch.maximum(ssim_tol, corr_tol)[~flat]
    top = float(worst.max()) if worst.numel() else 0.0
    return CandidatesBound(top + score_tolerance(n_terms), int(flat.sum()))
