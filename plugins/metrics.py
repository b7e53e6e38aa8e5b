"""Built-in evaluation metrics. Each scores an :class:`reconbench.evaluation.context.Evaluation` (candidates already
matched to training images under the protocol) and returns ``{"summary", "per_image", "details"}``.

``higher_is_better`` refers to the metric's ``headline`` summary key. Options are set per metric through the
protocol as ``METRIC.OPTION=value`` (``--protocol-set ssim.window_size=5``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch

from reconbench import hookimpl
from reconbench.config import option
from reconbench.data import Problem
from reconbench.errors import IncompatibleError
from reconbench.evaluation.context import Evaluation, finite_rows
from reconbench.evaluation.lpips_metric import ALEXNET_FILE, LpipsScorer, LpipsUnavailable
from reconbench.evaluation.matching import Matching, match
from reconbench.evaluation.membership import (
    auc,
    collapse,
    correlations,
    init_copy,
    nearest_distance,
    nearest_member,
    population_mean,
    tpr_at_fpr,
    unit_rows,
)
from reconbench.evaluation.null import MEMBERSHIP_STREAM
from reconbench.evaluation.problem_memo import memo
from reconbench.evaluation.scores import column_values, threshold_summary
from reconbench.evaluation.ssim import KORNIA_SIGMA, display, skimage_defaults, ssim_paper, ssim_standard
from reconbench.interfaces import Metric, MetricResult, NoOptions, Reported


def _nan_unmatched(values: np.ndarray, matched: np.ndarray) -> np.ndarray:
    return np.where(matched, values, np.nan)


def _unavailable(reason: str, key: str) -> MetricResult:
    return {"available": False, "reason": reason, "summary": {key: "unavailable", f"{key}_unavailable_reason": reason},
            "per_image": {}}


# -- SSIM, the papers' variant ---------------------------------------------------------------------------------
@dataclass
class SsimConfig:
    window_size: int = option(3, "side of the Gaussian window (odd); kornia's sigma is fixed at 1.5")
    data_range: float = option(1.0, "data range L of the images: C1 = (0.01 L)^2, C2 = (0.03 L)^2", gt=0)
    eps: float = option(1e-12, "kornia's denominator epsilon (the reference value)")


@dataclass(frozen=True)
class PaperSsim(Metric[SsimConfig]):
    name: str = "ssim"
    description: str = ("the papers' SSIM: kornia, Gaussian window 3 (sigma 1.5), data range 1, reflect padding, per "
                        "channel; reconstruction un-centred and min-max scaled, original not rescaled")
    higher_is_better: bool = True
    headline: str = "reconstructed"
    reports: tuple[Reported, ...] = (
        Reported("reconstructed", "papers' protocol", "count", fmt=".1f", column=10, aliases=("n_reconstructed", "good_count"),
                 console=10),
        Reported("top_k_mean_ssim", "top-10 SSIM", "similarity", fmt=".3f", column=20, aliases=("ssim_top10", "top10_ssim"),
                 console=30),
        Reported("mean_ssim_matched", "mean SSIM of matched images", "similarity", fmt=".3f"),
    )
    config_cls: type[SsimConfig] = SsimConfig

    def check_config(self, cfg: SsimConfig) -> None:
        if cfg.window_size < 1 or cfg.window_size % 2 == 0:
            raise IncompatibleError(f"ssim.window_size must be odd and positive, got {cfg.window_size}")

    def fixed(self, cfg: SsimConfig) -> dict[str, Any]:
        return {"sigma": KORNIA_SIGMA, "padding": "same (reflect)", "channels": "independent; map averaged over C*H*W",
                "reconstruction": "mean image added back, min-max scaled per image over all channels",
                "original": "training image in [0, 1], not rescaled", "library": "kornia.metrics.ssim"}

    def compute(self, ev: Evaluation, cfg: SsimConfig) -> MetricResult:
        raw = ssim_paper(ev.recon_display, ev.originals, cfg.window_size, cfg.data_range, cfg.eps).numpy()
        scores = _nan_unmatched(raw, ev.matching.matched)
        p = ev.protocol.base
        summary, per_image = threshold_summary(scores, p.good_threshold, p.top_k, "ssim")
        return {"summary": summary, "per_image": per_image}

    def compute_many(self, evs: list[Evaluation], cfg: SsimConfig) -> list[MetricResult]:
        """:meth:`compute` of every context, their images in one SSIM pass (equal numbers)."""
        out: list[MetricResult] = []
        for ev, scores in zip(evs, self.column_scores_many(evs, cfg), strict=True):
            p = ev.protocol.base
            summary, per_image = threshold_summary(scores, p.good_threshold, p.top_k, "ssim")
            out.append({"summary": summary, "per_image": per_image})
        return out

    def column_scores_many(self, evs: list[Evaluation], cfg: SsimConfig) -> list[np.ndarray]:
        """The ``ssim`` column of each context (NaN where unmatched), the contexts' images scored in one SSIM pass
        (reconbench/evaluation/batched.py); equal to :meth:`compute`'s column."""
        if not evs:
            return []
        raw = ssim_paper(torch.cat([ev.recon_display for ev in evs]), torch.cat([ev.originals for ev in evs]),
                         cfg.window_size, cfg.data_range, cfg.eps).numpy()
        return [_nan_unmatched(part, ev.matching.matched) for part, ev in zip(np.split(raw, len(evs)), evs,
                                                                               strict=True)]


# -- SSIM, the standard variant --------------------------------------------------------------------------------
@dataclass
class StandardSsimConfig:
    data_range: float = option(1.0, "data range passed to scikit-image (its other parameters keep their defaults)", gt=0)
    win_size: int | None = option(None, "window side (None: scikit-image's default 7)")
    gaussian_weights: bool = option(False, "scikit-image's Gaussian weighting (default off: a uniform window)")


@dataclass(frozen=True)
class StandardSsim(Metric[StandardSsimConfig]):
    name: str = "ssim_standard"
    description: str = ("standard SSIM: scikit-image structural_similarity with its defaults (7x7 uniform window, "
                        "borders cropped), data range 1, same image pairs as `ssim`")
    higher_is_better: bool = True
    headline: str = "reconstructed_ssim_standard"
    reports: tuple[Reported, ...] = (
        Reported("reconstructed_ssim_standard", "reconstructed (scikit-image SSIM)", "count", fmt=".1f", console=40),
        Reported("top_k_mean_ssim_standard", "top-10 scikit-image SSIM", "similarity", fmt=".3f"),
        Reported("mean_ssim_standard_matched", "mean scikit-image SSIM of matched images", "similarity", fmt=".3f"),
    )
    config_cls: type[StandardSsimConfig] = StandardSsimConfig

    def check_config(self, cfg: StandardSsimConfig) -> None:
        if cfg.win_size is not None and (cfg.win_size < 3 or cfg.win_size % 2 == 0):
            raise IncompatibleError(f"ssim_standard.win_size must be odd and at least 3, got {cfg.win_size}")

    def fixed(self, cfg: StandardSsimConfig) -> dict[str, Any]:
        d = skimage_defaults()
        if cfg.win_size is not None:
            d["win_size"] = cfg.win_size
        d["gaussian_weights"] = cfg.gaussian_weights
        return {**d, "library": "skimage.metrics.structural_similarity"}

    def compute(self, ev: Evaluation, cfg: StandardSsimConfig) -> MetricResult:
        matched = ev.matching.matched
        raw = np.full(ev.n, np.nan)
        if matched.any():
            raw[matched] = ssim_standard(ev.recon_display[matched].numpy(), ev.originals[matched].numpy(),
                                         cfg.data_range, cfg.win_size, cfg.gaussian_weights)
        p = ev.protocol.base
        summary, per_image = threshold_summary(raw, p.good_threshold, p.top_k, "ssim_standard",
                                               suffix="_ssim_standard")
        return {"summary": summary, "per_image": per_image}

    def compute_many(self, evs: list[Evaluation], cfg: StandardSsimConfig) -> list[MetricResult]:
        """:meth:`compute` of every context, the matched pairs of all contexts in one scikit-image pass (each pair
        scored on its own: equal numbers)."""
        masks = [ev.matching.matched for ev in evs]
        raws = [np.full(ev.n, np.nan) for ev in evs]
        if any(mask.any() for mask in masks):
            pairs = list(zip(evs, masks, strict=True))
            values = ssim_standard(np.concatenate([ev.recon_display[mask].numpy() for ev, mask in pairs]),
                                   np.concatenate([ev.originals[mask].numpy() for ev, mask in pairs]),
                                   cfg.data_range, cfg.win_size, cfg.gaussian_weights)
            parts = np.split(values, np.cumsum([int(mask.sum()) for mask in masks])[:-1])
            for raw, mask, part in zip(raws, masks, parts, strict=True):
                raw[mask] = part
        out: list[MetricResult] = []
        for ev, raw in zip(evs, raws, strict=True):
            p = ev.protocol.base
            summary, per_image = threshold_summary(raw, p.good_threshold, p.top_k, "ssim_standard",
                                                   suffix="_ssim_standard")
            out.append({"summary": summary, "per_image": per_image})
        return out


# -- the notebooks' variant -------------------------------------------------------------------------------------
@dataclass
class NotebookConfig:
    window_size: int = option(3, "SSIM window (kornia, as `ssim`)")


@dataclass(frozen=True)
class NotebookSsim(Metric[NotebookConfig]):
    name: str = "ssim_notebook"
    description: str = ("the shipped notebooks' variant, for comparison only: nearest candidate per training image "
                        "(min vote, no best-buddy), so one candidate can count for many images")
    higher_is_better: bool = True
    headline: str = "reconstructed_notebook"
    reports: tuple[Reported, ...] = (
        Reported("reconstructed_notebook", "reconstructed (notebooks' variant)", "count", fmt=".1f"),
        Reported("top_k_mean_notebook_ssim", "top-10 notebook SSIM", "similarity", fmt=".3f"),
        Reported("mean_notebook_ssim_matched", "mean notebook SSIM of matched images", "similarity", fmt=".3f"),
        Reported("notebook_distinct_candidates_reconstructed", "distinct candidates reconstructed (notebooks)",
                 "count_unbounded", fmt=".1f"),
    )
    config_cls: type[NotebookConfig] = NotebookConfig

    def check_config(self, cfg: NotebookConfig) -> None:
        PaperSsim().check_config(SsimConfig(window_size=cfg.window_size))

    def compute(self, ev: Evaluation, cfg: NotebookConfig) -> MetricResult:
        m, recon = self._pairs(ev)
        return self._result(ev, m, ssim_paper(recon, ev.originals, cfg.window_size).numpy())

    def compute_many(self, evs: list[Evaluation], cfg: NotebookConfig) -> list[MetricResult]:
        """:meth:`compute` of every context, the pairs of all contexts in one SSIM pass (equal numbers)."""
        pairs = [self._pairs(ev) for ev in evs]
        raw = ssim_paper(torch.cat([recon for _, recon in pairs]), torch.cat([ev.originals for ev in evs]),
                         cfg.window_size).numpy()
        return [self._result(ev, m, part) for ev, (m, _), part in zip(evs, pairs, np.split(raw, len(evs)),
                                                                        strict=True)]

    @staticmethod
    def _pairs(ev: Evaluation) -> tuple[Matching, torch.Tensor]:
        """The notebooks' matching and, per training image, its nearest candidate as displayed (zeros: unmatched)."""
        p = ev.protocol.base
        m = match(ev.train_features, ev.candidate_features, ev.valid_ids, ev.candidates.shape[0],
                  best_buddy=False, vote="min", avg_threshold=1.0, per_dimension=p.per_dimension,
                  dist=ev.matching.dist)
        recon = torch.zeros_like(ev.originals)
        if m.matched.any():
            recon[torch.as_tensor(m.matched)] = display(ev.candidates[torch.as_tensor(m.best[m.matched])],
                                                        ev.problem.mean_tensor(), p.constant_tol)
        return m, recon

    @staticmethod
    def _result(ev: Evaluation, m: Matching, raw: np.ndarray) -> MetricResult:
        p = ev.protocol.base
        scores = _nan_unmatched(raw, m.matched)
        summary, per_image = threshold_summary(scores, p.good_threshold, p.top_k, "notebook_ssim",
                                               suffix="_notebook")
        good = np.asarray(per_image["reconstructed_notebook"], dtype=bool)
        summary["notebook_distinct_candidates_reconstructed"] = int(len(np.unique(m.best[good])))
        per_image["notebook_candidate"] = [int(b) if b >= 0 else None for b in m.best]
        return {"summary": summary, "per_image": per_image,
                "details": {"label": "notebook variant (min vote, no best-buddy); over-counts repeated matches"}}


# -- correlation ------------------------------------------------------------------------------------------------
@dataclass
class CorrelationConfig:
    threshold: float = option(0.9, "a training image counts in reconstructed_corr iff its correlation is above this "
                                   "(the docs' corr > 0.9)", ge=-1.0, le=1.0)


def pearson(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """(n,) Pearson correlation of paired images (n, C, H, W), per channel over pixels, averaged over channels."""
    fa, fb = a.flatten(2), b.flatten(2)
    fa = fa - fa.mean(-1, keepdim=True)
    fb = fb - fb.mean(-1, keepdim=True)
    denom = fa.norm(dim=-1) * fb.norm(dim=-1)
    r = (fa * fb).sum(-1) / torch.where(denom > 0, denom, torch.ones_like(denom))
    return r.mean(-1)


@dataclass(frozen=True)
class Correlation(Metric[CorrelationConfig]):
    name: str = "corr"
    description: str = ("Pearson (NCC) correlation of each matched reconstruction with its training image in the "
                        "centred space (the papers' NCC), per channel, averaged over channels; the headline "
                        "reconstructed_corr counts correlations above the threshold")
    higher_is_better: bool = True
    headline: str = "reconstructed_corr"
    reports: tuple[Reported, ...] = (
        Reported("reconstructed_corr", "corr > {threshold:g}", "count", fmt=".1f", console=20),
        Reported("top_k_mean_corr", "top-10 correlation", "similarity", fmt=".3f"),
        Reported("mean_corr_matched", "mean correlation of matched images", "similarity", fmt=".3f"),
    )
    config_cls: type[CorrelationConfig] = CorrelationConfig

    def fixed(self, cfg: CorrelationConfig) -> dict[str, Any]:
        return {"space": "centred, full resolution", "reconstruction": "the protocol's matched average",
                "constant image": "correlation 0"}

    def compute(self, ev: Evaluation, cfg: CorrelationConfig) -> MetricResult:
        raw = pearson(ev.recon_centred, ev.problem.x_train(torch.float64)).numpy()
        scores = _nan_unmatched(raw, ev.matching.matched)
        summary, per_image = threshold_summary(scores, cfg.threshold, ev.protocol.base.top_k, "corr", suffix="_corr")
        return {"summary": summary, "per_image": per_image}

    def compute_many(self, evs: list[Evaluation], cfg: CorrelationConfig) -> list[MetricResult]:
        """:meth:`compute` of every context, in one pass over their images (equal numbers)."""
        out: list[MetricResult] = []
        for ev, scores in zip(evs, self.column_scores_many(evs, cfg), strict=True):
            summary, per_image = threshold_summary(scores, cfg.threshold, ev.protocol.base.top_k, "corr",
                                                   suffix="_corr")
            out.append({"summary": summary, "per_image": per_image})
        return out

    def column_scores_many(self, evs: list[Evaluation], cfg: CorrelationConfig) -> list[np.ndarray]:
        """The ``corr`` column of each context (NaN where unmatched), in one pass over the contexts' images
        (reconbench/evaluation/batched.py); equal to :meth:`compute`'s column."""
        if not evs:
            return []
        x_train = evs[0].problem.x_train(torch.float64)
        raw = pearson(torch.cat([ev.recon_centred for ev in evs]), x_train.repeat(len(evs), 1, 1, 1)).numpy()
        return [_nan_unmatched(part, ev.matching.matched) for part, ev in zip(np.split(raw, len(evs)), evs,
                                                                               strict=True)]


# -- LPIPS -------------------------------------------------------------------------------------------------------
@dataclass
class LpipsConfig:
    backbone_weights: str | None = option(
        None, f"path of torchvision's ImageNet AlexNet weights ({ALEXNET_FILE}); None: torch's hub cache. "
              "Never downloaded")
    min_size: int = option(64, "images are bilinearly up-sampled so that their shorter side is at least this (AlexNet's "
                               "pooling needs 32)", ge=32)


@dataclass(frozen=True)
class Lpips(Metric[LpipsConfig]):
    name: str = "lpips"
    description: str = ("LPIPS (AlexNet, v0.1) via the `lpips` package between the scaled reconstruction and the "
                        "original; reported unavailable when the ImageNet backbone weights are absent")
    higher_is_better: bool = False
    headline: str = "lpips_mean"
    reports: tuple[Reported, ...] = (
        Reported("lpips_mean", "mean LPIPS", "nonnegative", higher_is_better=False, fmt=".3f", console=130),
    )
    config_cls: type[LpipsConfig] = LpipsConfig

    def fixed(self, cfg: LpipsConfig) -> dict[str, Any]:
        return {"net": "alex", "version": "0.1", "input": "[0, 1] images scaled to [-1, 1]; grayscale repeated to 3 "
                "channels", "resize": "bilinear, align_corners=False"}

    def compute(self, ev: Evaluation, cfg: LpipsConfig) -> MetricResult:
        try:
            scorer = LpipsScorer(backbone_weights=cfg.backbone_weights, min_size=cfg.min_size)
        except LpipsUnavailable as exc:
            return _unavailable(str(exc), "lpips_mean")
        return score_lpips(ev, scorer)

    def compute_many(self, evs: list[Evaluation], cfg: LpipsConfig) -> list[MetricResult]:
        """:meth:`compute` of every context with one scorer (its network is fixed: the same numbers), or the same
        reason for each where it is unavailable."""
        try:
            scorer = LpipsScorer(backbone_weights=cfg.backbone_weights, min_size=cfg.min_size)
        except LpipsUnavailable as exc:
            return [_unavailable(str(exc), "lpips_mean") for _ in evs]
        return [score_lpips(ev, scorer) for ev in evs]


def score_lpips(ev: Evaluation, scorer: LpipsScorer) -> MetricResult:
    """LPIPS of every matched pair; the output says whether the backbone was random (tests only)."""
    matched = ev.matching.matched
    values = np.full(ev.n, np.nan)
    if matched.any():
        values[matched] = scorer(ev.recon_display[torch.as_tensor(matched)], ev.originals[torch.as_tensor(matched)])
    rec = ev.reconstructed() & matched
    summary = {"lpips_mean": float(values[matched].mean()) if matched.any() else None,
               "lpips_mean_reconstructed": float(values[rec].mean()) if rec.any() else None}
    return {"summary": summary, "per_image": {"lpips": column_values(values)},
            "details": {"random_backbone": scorer.random_backbone}}


# -- membership against decoys ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class MembershipMetric(Metric[NoOptions]):
    name: str = "membership"
    description: str = ("for each reconstructed training image, is the reconstruction's nearest neighbour among "
                        "training images and the problem's decoys a training image? (precision of the claims)")
    higher_is_better: bool = True
    headline: str = "membership_precision"
    reports: tuple[Reported, ...] = (
        Reported("membership_precision", "membership precision", "share", fmt=".2f", column=30,
                 aliases=("precision_vs_decoys",), console=50),
        Reported("member_claims", "member claims", "count_unbounded", fmt=".1f"),
        Reported("member_claims_confirmed", "member claims confirmed", "count_unbounded", fmt=".1f"),
        Reported("candidates_nearer_decoy_share", "candidates nearer a decoy", "share", higher_is_better=False,
                 fmt=".2f"),
    )
    config_cls: type[NoOptions] = NoOptions

    def compute(self, ev: Evaluation, cfg: NoOptions) -> MetricResult:
        decoys = ev.problem.x_decoy(torch.float64)
        if decoys.shape[0] == 0:
            return _unavailable("the problem has no decoy pool (n_decoy_per_class = 0)", "membership_precision")
        p = ev.protocol.base
        decoy_feat = memo(ev.problem, ("decoy_features", p.distance, p.ncc_eps), lambda: ev.features(decoys))
        claims = ev.reconstructed() & ev.matching.matched
        query = ev.features(ev.recon_centred[torch.as_tensor(claims)])
        res = nearest_member(query, ev.train_features, decoy_feat, p.per_dimension)
        is_train = np.full(ev.n, None, dtype=object)
        d_decoy = np.full(ev.n, np.nan)
        dec_idx = np.full(ev.n, None, dtype=object)
        is_train[claims] = res.nearest_is_train
        d_decoy[claims] = res.decoy_dist
        dec_idx[claims] = [int(ev.problem.decoy_indices[k]) for k in res.nearest_decoy]
        # every valid candidate: is a decoy nearer than every training image? (partition inits stay at decoys)
        cand_train = ev.matching.nearest_dist[ev.valid_ids]
        cand_decoy = nearest_distance(ev.candidate_features, decoy_feat, p.per_dimension)
        n_claims = int(claims.sum())
        summary = {
            "membership_precision": float(res.nearest_is_train.mean()) if n_claims else None,
            "member_claims": n_claims,
            "member_claims_confirmed": int(res.nearest_is_train.sum()),
            "candidates_nearer_decoy_share": float((cand_decoy <= cand_train).mean()) if len(ev.valid_ids) else None,
        }
        per_image: dict[str, list[Any]] = {"nearest_is_train": [None if v is None else bool(v) for v in is_train],
                     "nearest_decoy_distance": column_values(d_decoy),
                     "nearest_decoy_dataset_index": list(dec_idx)}
        return {"summary": summary, "per_image": per_image,
                "details": {"decoys": int(decoys.shape[0]), "ties": "a tie counts against membership"}}


# -- the membership test against a pool of non-members ------------------------------------------------------------
@dataclass
class MembershipTestConfig:
    pool_per_member: int = option(
        10, "non-members per training image: the decoys plus held-out images (seeded) up to this many times n", ge=1)
    fpr: float = option(0.01, "false-positive rate of the reported true-positive rate", gt=0, lt=1)
    seed: int = option(0, "seed of the held-out part of the non-member pool")
    method: Literal["offset_removed", "train_centred"] = option(
        "offset_removed",
        "offset_removed: correlations after removing, from every image and candidate, the one direction in which the "
        "released training mean differs from the population mean (estimated from the held-out pool), with "
        "non-members drawn in the members' class proportions; train_centred: correlations in the model's input "
        "space and the pool as drawn before (biased below 0.5; what evaluations recorded without this option used)",
        absent="train_centred")
    non_members: Literal["held_out", "decoys_first"] = option(
        "held_out",
        "held_out: non-members are held-out images only (handed to no attack and no init regime); decoys_first: the "
        "decoy pool first, then held-out images (what evaluations recorded without this option used; the partition "
        "init starts from the decoys, so its copies of them score as non-members that look reconstructed)",
        absent="decoys_first")


@dataclass(frozen=True)
class MembershipTest(Metric[MembershipTestConfig]):
    name: str = "membership_test"
    description: str = ("membership inference from the candidates: each training image and each of pool_per_member "
                        "x n non-members (10n by default: held-out images no attack or init saw) scores its highest correlation "
                        "with any candidate, the public mean image's offset removed; AUC and the true-positive rate at "
                        "1% false positives (docs/calibration.md)")
    higher_is_better: bool = True
    headline: str = "membership_auc"
    reports: tuple[Reported, ...] = (
        Reported("membership_auc", "membership AUC", "share", fmt=".2f", column=40, optional_column=True, console=60),
        Reported("membership_tpr_at_fpr", "membership TPR at low FPR", "share", fmt=".2f", console=70),
    )
    config_cls: type[MembershipTestConfig] = MembershipTestConfig

    def compute(self, ev: Evaluation, cfg: MembershipTestConfig) -> MetricResult:
        keys = ("membership_auc", "membership_tpr_at_fpr")
        side = memo(ev.problem, ("membership_test", cfg.pool_per_member, cfg.seed, cfg.method, cfg.non_members),
                    lambda: _non_member_side(ev.problem, cfg))
        if isinstance(side, str):
            return {"available": False, "reason": side, "summary": {k: None for k in keys}, "per_image": {}}
        remove, extra, n_decoys = side.remove, side.held_out, side.decoys
        cand = ev.candidates[torch.as_tensor(ev.valid_ids, dtype=torch.long)]
        if cand.shape[0] == 0:
            return {"summary": {"membership_auc": 0.5, "membership_tpr_at_fpr": 0.0}, "per_image": {},
                    "details": {"note": "no valid candidate: every image scores alike"}}
        unit_cand = unit_rows(cand, remove)

        def best(unit_images: torch.Tensor) -> torch.Tensor:
            return correlations(unit_images, unit_cand)

        pos = best(side.train).max(1).values.numpy()
        neg_decoy = best(side.decoy_rows).max(1).values.numpy() if n_decoys else np.zeros(0)
        neg_held_r = best(side.held_rows) if extra else torch.zeros(0, cand.shape[0], dtype=torch.float64)
        # Held-out images are handed to no attack and no init regime: a candidate identical to one can only be a
        # held-out null draw's own image, which is then no test of membership; such non-members are left out.
        drawn = (neg_held_r >= 1.0 - 1e-12).any(1).numpy() if extra else np.zeros(0, dtype=bool)
        neg = np.concatenate([neg_decoy, neg_held_r.max(1).values.numpy()[~drawn]])
        tpr, threshold = tpr_at_fpr(pos, neg, cfg.fpr)
        summary = {"membership_auc": auc(pos, neg), "membership_tpr_at_fpr": tpr}
        space = ("per channel, the direction (training mean - population mean) removed" if remove is not None
                 else "per channel, in the model's input space (centred on the training mean)")
        return {"summary": summary, "per_image": {"membership_score": column_values(pos)},
                "details": {"non_members": int(len(neg)), "decoys": int(n_decoys),
                            "held_out": int(extra), "left_out_as_drawn": int(drawn.sum()), "fpr": cfg.fpr,
                            "threshold": threshold, "method": cfg.method,
                            "score": f"highest correlation with any valid candidate ({space})"}}


@dataclass(frozen=True)
class _NonMemberSide:
    """The candidate-independent side of the membership test: the members' and non-members' unit rows
    (``membership.unit_rows``), computed once per problem and configuration (``problem_memo``)."""

    remove: torch.Tensor | None   # the direction taken out (offset_removed), or None
    train: torch.Tensor           # unit rows of the training images
    decoy_rows: torch.Tensor      # of the decoys in the pool
    held_rows: torch.Tensor       # of the held-out images in the pool
    decoys: int
    held_out: int


def _non_member_side(problem: Problem, cfg: MembershipTestConfig) -> _NonMemberSide | str:
    """The pool and direction of ``cfg.method`` as unit rows, or why the test cannot be run."""
    pool = _non_member_pool(problem, cfg) if cfg.method == "offset_removed" else _legacy_pool(problem, cfg)
    remove = _mean_offset(problem) if cfg.method == "offset_removed" else None
    for reason in (pool, remove):
        if isinstance(reason, str):
            return reason
    assert not isinstance(pool, str) and not isinstance(remove, str)
    decoys, positions = pool
    extra = len(positions)
    held = problem.centred(problem.held_out_images(positions)) if extra else decoys[:0]
    return _NonMemberSide(remove=remove, train=unit_rows(problem.x_train(torch.float64), remove),
                          decoy_rows=unit_rows(decoys, remove), held_rows=unit_rows(held, remove),
                          decoys=int(decoys.shape[0]), held_out=extra)


def _legacy_pool(problem: Problem, cfg: MembershipTestConfig) -> tuple[torch.Tensor, np.ndarray] | str:
    """method train_centred: every decoy, then held-out images of any of the problem's labels (seeded)."""
    want = cfg.pool_per_member * problem.n
    decoys = problem.x_decoy(torch.float64)
    eligible = np.flatnonzero(problem.held_out_labels < problem.num_classes) if problem.source_images is not None \
        else np.zeros(0, dtype=np.int64)
    extra = min(max(want - decoys.shape[0], 0), len(eligible))
    if decoys.shape[0] + extra < want:
        return (f"the problem has {decoys.shape[0] + extra} non-members for a pool of {want} "
                f"({cfg.pool_per_member} x n); lower membership_test.pool_per_member")
    positions = np.sort(np.random.default_rng([cfg.seed, MEMBERSHIP_STREAM]).choice(eligible, extra, replace=False))
    return decoys, positions


def _non_member_pool(problem: Problem, cfg: MembershipTestConfig) -> tuple[torch.Tensor, np.ndarray] | str:
    """method offset_removed: per class, pool_per_member times the class's members: held-out images of that class
    (seeded; with non_members = decoys_first its decoys first), so that members and non-members have the same class
    proportions."""
    rng = np.random.default_rng([cfg.seed, MEMBERSHIP_STREAM])
    decoy_rows, positions = [], []
    for c, members in enumerate(problem.class_counts):
        want = cfg.pool_per_member * members
        rows = np.flatnonzero(problem.decoy_labels == c)[:want] if cfg.non_members == "decoys_first" \
            else np.zeros(0, dtype=np.int64)
        pool = np.flatnonzero(problem.held_out_labels == c) if problem.source_images is not None \
            else np.zeros(0, dtype=np.int64)
        if len(rows) + len(pool) < want:
            return (f"the problem has {len(rows) + len(pool)} non-members of class {c} for a pool of {want} "
                    f"({cfg.pool_per_member} x its {members} members); lower membership_test.pool_per_member")
        decoy_rows.append(rows)
        positions.append(rng.choice(pool, want - len(rows), replace=False))
    decoys = problem.x_decoy(torch.float64)[torch.as_tensor(np.concatenate(decoy_rows), dtype=torch.long)]
    return decoys, np.sort(np.concatenate(positions))


def _mean_offset(problem: Problem) -> torch.Tensor | str:
    """(C, H, W) released training mean minus the population mean (held-out class means weighted as the members),
    or why it cannot be estimated."""
    means = problem.held_out_class_means() if problem.source_images is not None else None
    if means is None or np.isnan(means[np.asarray(problem.class_counts) > 0]).any():
        return ("the held-out pool lacks a class of the training images, so the population mean cannot be estimated; "
                "use membership_test.method=train_centred")
    return torch.as_tensor(problem.mean - population_mean(means, problem.class_counts), dtype=torch.float64)


# -- staying at the initialisation ------------------------------------------------------------------------------
@dataclass(frozen=True)
class InitCopy(Metric[NoOptions]):
    name: str = "init_copy"
    description: str = ("share of candidates closer to their own starting image than to any training image "
                        "(partition inits: natural-looking non-members)")
    higher_is_better: bool = False
    headline: str = "init_copy_share"
    reports: tuple[Reported, ...] = (
        Reported("init_copy_share", "init copies", "share", higher_is_better=False, fmt=".2f", column=60, console=110),
        Reported("init_copy_candidates", "candidates that stayed copies of their start", "count_unbounded",
                 higher_is_better=False, fmt=".1f"),
    )
    config_cls: type[NoOptions] = NoOptions

    def compute(self, ev: Evaluation, cfg: NoOptions) -> MetricResult:
        if ev.x0 is None:
            return _unavailable("no starting candidates (x0) were given", "init_copy_share")
        p = ev.protocol.base
        ids = ev.valid_ids
        start = ev.x0[torch.as_tensor(ids)]
        flat = start.flatten(1)
        usable = finite_rows(flat)
        usable[usable.clone()] = (flat[usable].amax(1) - flat[usable].amin(1)) > p.constant_tol
        if not usable.any():
            return _unavailable("every starting candidate is constant or non-finite", "init_copy_share")
        sel = torch.nonzero(usable).flatten()
        copies = init_copy(ev.candidate_features[sel], ev.features(start[sel]),
                           ev.matching.nearest_dist[ids[sel.numpy()]], p.per_dimension)
        return {"summary": {"init_copy_share": float(copies.mean()), "init_copy_candidates": int(len(sel))},
                "details": {"skipped_constant_starts": int((~usable).sum())}}


# -- collapse ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Collapse(Metric[NoOptions]):
    name: str = "collapse"
    description: str = ("distinct training images chosen as nearest by some candidate, against the number of "
                        "candidates (1 = no collapse)")
    higher_is_better: bool = True
    headline: str = "distinct_share"
    reports: tuple[Reported, ...] = (
        Reported("distinct_share", "distinct share", "share", fmt=".2f", column=50, console=100),
        Reported("distinct_matched", "distinct candidates matched", "count_unbounded", fmt=".1f"),
        Reported("candidates_valid", "valid candidates", "count_unbounded", fmt=".1f"),
        Reported("candidates_per_matched_image", "candidates per matched image", "nonnegative", fmt=".3g"),
        Reported("max_candidates_per_image", "most candidates on one image", "count_unbounded", fmt=".1f"),
        Reported("reconstructed_per_candidate", "reconstructed per candidate", "share", fmt=".3g"),
    )
    config_cls: type[NoOptions] = NoOptions

    def compute(self, ev: Evaluation, cfg: NoOptions) -> MetricResult:
        stats = collapse(ev.matching, len(ev.valid_ids))
        rec = ev.reconstructed() & ev.matching.matched
        stats["reconstructed_per_candidate"] = float(rec.sum() / len(ev.valid_ids)) if len(ev.valid_ids) else None
        return {"summary": stats,
                "details": {"distinct_share": "distinct matched / min(valid candidates, training images)"}}


# -- reconstruction against the distance from the decision boundary ---------------------------------------------
@dataclass
class MarginScoreConfig:
    near_min: float = option(1.1, "margin_near_min_share counts training images whose margin is at most this "
                                  "times the smallest margin (binary targets: margins y Phi(x) > 0)", gt=1)


@dataclass(frozen=True)
class MarginScore(Metric[MarginScoreConfig]):
    name: str = "margin_score"
    description: str = ("Spearman correlation of each training image's margin (from the model card) with its "
                        "primary score (unmatched images rank lowest): negative when images nearer the decision "
                        "boundary are reconstructed better; and the share of training images on or near the margin")
    higher_is_better: bool = False
    headline: str = "margin_score_spearman"
    reports: tuple[Reported, ...] = (
        Reported("margin_score_spearman", "margin-score rank correlation", "similarity", higher_is_better=False,
                 fmt=".2f"),
        Reported("margin_near_min_share", "share of training images near the smallest margin", "share", fmt=".2f"),
    )
    config_cls: type[MarginScoreConfig] = MarginScoreConfig

    def compute(self, ev: Evaluation, cfg: MarginScoreConfig) -> MetricResult:
        from reconbench.claims.stats import spearman

        keys = ("margin_score_spearman", "margin_near_min_share")
        if ev.margins is None or len(ev.margins) != ev.n or not np.isfinite(ev.margins).all():
            return {"available": False, "reason": "no per-training-image margins (evaluated without a model card)",
                    "summary": {k: None for k in keys}, "per_image": {}}
        scores = ev.primary_scores()
        floor = float(np.nanmin(scores)) - 1.0 if np.isfinite(scores).any() else 0.0
        rho = spearman(ev.margins.tolist(), np.where(np.isfinite(scores), scores, floor).tolist())
        near = None
        if ev.problem.task == "binary" and float(ev.margins.min()) > 0:
            near = float((ev.margins <= cfg.near_min * float(ev.margins.min())).mean())
        return {"summary": {"margin_score_spearman": rho, "margin_near_min_share": near},
                "details": {"score": ev.protocol.base.primary_metric, "unmatched_rank": "lowest",
                            "near_min": cfg.near_min}}


# -- the reference's in-run extraction score --------------------------------------------------------------------
@dataclass
class ExtractionConfig:
    k: int = option(10, "number of best distinct matches averaged", ge=1)


@dataclass(frozen=True)
class ExtractionScore(Metric[ExtractionConfig]):
    name: str = "extraction_score"
    # method: docs/method/evaluation-protocol.md#in-run-extraction-score
    description: str = ("the reference's in-run score: mean NCC distance (not per dimension) of the k best distinct "
                        "training matches; the papers' oracle selection criterion")
    higher_is_better: bool = False
    headline: str = "extraction_score"
    reports: tuple[Reported, ...] = (
        Reported("extraction_score", "extraction score", "nonnegative", higher_is_better=False, fmt=".4g", console=120),
    )
    config_cls: type[ExtractionConfig] = ExtractionConfig

    def compute(self, ev: Evaluation, cfg: ExtractionConfig) -> MetricResult:
        from reconbench.evaluation import extraction_score_from_features

        p = ev.protocol.base
        if p.distance == "ncc":  # the matching features are the score's features: reuse their distances
            train, cand, dist = ev.train_features, ev.candidate_features, ev.matching.dist
            if dist is not None and p.per_dimension:
                dist = dist * train.shape[1]
        else:
            train, cand, dist = ev.features(ev.problem.x_train(), "ncc"), ev.features_of(ev.valid_ids, "ncc"), None
        score = extraction_score_from_features(train, cand, cfg.k, dist)
        return {"summary": {"extraction_score": score if np.isfinite(score) else None}}


METRICS = [PaperSsim(), StandardSsim(), NotebookSsim(), Correlation(), Lpips(), MembershipMetric(), MembershipTest(),
           InitCopy(), Collapse(), ExtractionScore(), MarginScore()]


@hookimpl
def register_metrics(register):  # type: ignore[no-untyped-def]
    for metric in METRICS:
        register(metric)
