"""The evaluation protocol: one dataclass of matching parameters plus one config per metric plugin.

Defaults are the canonical "paper" protocol (docs/method/evaluation-protocol.md#headline-protocol):
``ncc2`` distances divided by the dimension, best-buddy matching, per training image the mean of its candidates
within B times its best distance (B = 1.1 for MLP-like families, 1.5 for convolutional ones), then the window-3 SSIM
of the min-max scaled reconstruction against the original, and "reconstructed" iff SSIM > 0.4.

Options come as a flat ``{key: value}`` dict (``--protocol-set key=value``). Plain keys are fields of
:class:`Protocol`; ``metric.option`` keys set an option of one metric plugin (``ssim.window_size=5``). Unknown keys
are rejected with close matches drawn from both.
"""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass
from typing import Any, Literal

from reconbench import plugins
from reconbench.config import build_config, config_to_dict, option
from reconbench.errors import ReconbenchError

#: distance name -> bicubic down-sampling factor applied before the distance (1: none)
DISTANCES: dict[str, int] = {"l2": 1, "ncc": 1, "ncc2": 2, "ncc4": 4}

#: the averaging threshold B per model family: 1.1 for MLPs, 1.5 for conv targets (docs/method/evaluation-protocol.md#b-vote)
FAMILY_AVG_THRESHOLD: dict[str, float] = {"mlp": 1.1, "mlp_bias": 1.1, "affine": 1.1, "conv": 1.5}
DEFAULT_AVG_THRESHOLD = 1.1


@dataclass
class Protocol:
    """Matching and headline parameters of every metric (defaults: docs/method/evaluation-protocol.md#headline-protocol)."""

    distance: Literal["ncc2", "ncc", "ncc4", "l2"] = option(
        "ncc2", "matching distance in the centred space: ncc (per-image, per-channel standardised squared L2), "
                "ncc2/ncc4 (the same after bicubic down-sampling by 2/4, no antialias) or l2 (squared L2)")
    ncc_eps: float = option(1e-10, "epsilon added to the per-channel standard deviation in NCC (the reference has "
                                   "none and gives NaN on constant images)", gt=0)
    per_dimension: bool = option(True, "divide distances by the (down-sampled) dimension C*H*W")
    best_buddy: bool = option(True, "each candidate may only be matched to its nearest training image")
    vote: Literal["mean", "min"] = option(
        "mean", "per training image: mean of its candidates within B times its best distance, or its best only")
    avg_threshold: float | None = option(
        None, "B of the mean vote: candidates with distance < B * best distance are averaged; "
              "None: 1.1 for the families mlp/mlp_bias/affine, 1.5 for conv", ge=1.0)
    good_threshold: float = option(0.4, "a training image counts as reconstructed iff its primary score (SSIM) "
                                        "is above this (the papers: 0.4)", ge=0.0, lt=1.0)
    top_k: int = option(10, "headline: mean score of the k best-reconstructed training images (unmatched images "
                            "count as 0)", ge=1)
    constant_tol: float = option(1e-10, "a candidate whose value range (centred or with the mean added back) is "
                                        "at most this is constant: not matched, counted as invalid", ge=0)
    primary_metric: str = option("ssim", "the metric whose per-image `reconstructed` column defines reconstructed "
                                         "training images (headline count, membership claims, figures)")
    metrics: list[str] | None = option(None, "metric plugins to compute, in order (None: every registered one)")
    calibration_draws: int = option(
        19, "held-out null draws that calibrate the headline: a training image counts (reconstructed_calibrated) "
            "only when its score is above every score these draws reached on any training image (and above "
            "good_threshold); a fresh null draw passes with probability at most 1/(K+1). 0: no calibrated headline",
        ge=0, le=999)
    prior_draws: int = option(
        0, "draws of the data prior added to the calibration (docs/calibration.md#the-data-prior): candidates built "
           "from held-out images alone (class prototypes, blurred averages); the threshold is then also above every "
           "score these reached, so such candidates pass with probability at most 1/(J+1). 0: held-out draws only "
           "(every protocol recorded before the option)", ge=0, le=999)
    null_draws: int = option(5, "further held-out null draws reported next to the attack's numbers (mean, spread)",
                             ge=0, le=999)
    null_seed: int = option(0, "seed of the held-out null draws (calibration and reported draws use separate "
                               "streams)")
    calibrated_score: str = option(
        "corr", "per-image column the calibrated threshold applies to: corr (the matched reconstruction's "
                "correlation with its training image; see docs/calibration.md for why not SSIM) or another "
                "metric's per-image score column")
    figures: bool = option(True, "write PNG figures when a result folder is given")
    figure_max_images: int = option(60, "at most this many reconstruction/original pairs in the image figure", ge=0)


@dataclass
class ResolvedProtocol:
    """A protocol with every default resolved, the metric plugins and their configs."""

    base: Protocol
    family: str
    avg_threshold: float
    avg_threshold_source: str
    metric_names: list[str]
    metric_configs: dict[str, Any]
    overrides: dict[str, Any]

    @property
    def downsample(self) -> int:
        return DISTANCES[self.base.distance]

    def metric(self, name: str) -> Any:
        return plugins.metric(name)

    def to_dict(self) -> dict[str, Any]:
        """Every parameter, as recorded in result.json."""
        p = self.base
        factor = self.downsample
        out: dict[str, Any] = {
            "name": "paper" if self.is_paper() else "custom",  # paper: docs/method/evaluation-protocol.md#headline-protocol
            "distance": p.distance,
            "space": "centred (the model's input space: image minus the training mean image)",
            "downsample": None if factor == 1 else {"factor": factor, "mode": "bicubic", "align_corners": False,
                                                     "antialias": False, "library": "torch.nn.functional.interpolate"},
            "ncc": None if not p.distance.startswith("ncc") else {
                "standardise": "per image and per channel", "std": "unbiased (N-1)", "eps": p.ncc_eps},
            "per_dimension": p.per_dimension,
            "best_buddy": p.best_buddy,
            "vote": p.vote,
            "avg_threshold": self.avg_threshold,
            "avg_threshold_source": self.avg_threshold_source,
            "avg_rule": "average (centred space) the candidates with d < B * d_best; the best is always included"
                        if p.vote == "mean" else "the best candidate only",
            "unmatched": "a training image that no candidate chose is not reconstructed (never paired)",
            "runs": "candidates of all runs are pooled before matching",
            "good_threshold": p.good_threshold,
            "top_k": p.top_k,
            "top_k_rule": "mean of the k highest primary scores; unmatched training images count as 0",
            "constant_tol": p.constant_tol,
            "primary_metric": p.primary_metric,
            "family": self.family,
            "calibration": self.calibration_dict(),
            "figures": p.figures,
            "figure_max_images": p.figure_max_images,
            "metrics": {},
            "overrides": dict(self.overrides),
        }
        for name in self.metric_names:
            metric = self.metric(name)
            cfg = self.metric_configs[name]
            out["metrics"][name] = {
                "description": metric.description,
                "higher_is_better": bool(metric.higher_is_better),
                "headline": metric.headline_key,
                "config": config_to_dict(cfg) if dataclasses.is_dataclass(cfg) else cfg,
                **({"fixed": dict(fixed)} if (fixed := metric.fixed(cfg)) else {}),
            }
        return out

    def calibration_dict(self) -> dict[str, Any]:
        """The calibration's parameters (the threshold it yields is added by the evaluation)."""
        p = self.base
        k = p.calibration_draws
        return {
            "null": "held_out: random images of the problem's held-out pool (never trained on, disjoint from the "
                    "decoys), as many as the candidates, candidate j replaced by an image of its label",
            "calibration_draws": k,
            "null_draws": p.null_draws,
            "null_seed": p.null_seed,
            "score": p.calibrated_score,
            "rule": "threshold = the highest score any calibration draw reached on any training image; "
                    "reconstructed_calibrated iff score > threshold" if k else "off",
            "family_wise_fpr_bound": 1.0 / (k + 1) if k else None,
            # only when set, so protocols recorded before the option keep their record
            **({"prior": {"draws": p.prior_draws, "construction": "per candidate of label c: the mean of s random "
                          "held-out images of label c (s uniform in 1, 2, 4, 8, 16, 32), blurred with sigma uniform "
                          "in 0, 0.5, 1, 2 pixels (reconbench/evaluation/prior.py)",
                          "fpr_bound_for_prior_candidates": 1.0 / (p.prior_draws + 1)}}
               if p.prior_draws and k else {}),
        }

    def is_paper(self) -> bool:
        """Whether the headline numbers are the papers' protocol: default matching and primary-metric options, family B
        (docs/method/evaluation-protocol.md#headline-protocol)."""
        p, d = self.base, Protocol()
        presentation = {"figures", "figure_max_images", "metrics", "calibration_draws", "null_draws", "null_seed",
                        "calibrated_score", "prior_draws"}
        same = all(getattr(p, f.name) == getattr(d, f.name) for f in dataclasses.fields(Protocol)
                   if f.name not in presentation | {"avg_threshold"})
        primary = self.metric(p.primary_metric)
        default_cfg = build_config(primary.config_cls, {}, primary.name)
        return (same and self.metric_configs[p.primary_metric] == default_cfg
                and self.avg_threshold == family_avg_threshold(self.family)[0])


def _known_keys(metric_names: list[str]) -> list[str]:
    keys = [f.name for f in dataclasses.fields(Protocol)]
    for name in metric_names:
        cls = plugins.metric(name).config_cls
        if dataclasses.is_dataclass(cls):
            keys += [f"{name}.{f.name}" for f in dataclasses.fields(cls)]
    return keys


def resolve_protocol(values: dict[str, Any] | None, family: str) -> ResolvedProtocol:
    """Build the protocol from user overrides, rejecting unknown keys and bad values with a clear message."""
    values = dict(values or {})
    plain = {k: v for k, v in values.items() if "." not in k}
    dotted = {k: v for k, v in values.items() if "." in k}
    all_metrics = plugins.names("metrics")
    fields = {f.name for f in dataclasses.fields(Protocol)}
    for key in plain:
        if key not in fields:
            close = difflib.get_close_matches(key, _known_keys(all_metrics), n=3, cutoff=0.5)
            close += [k for k in _known_keys(all_metrics) if k.endswith("." + key) and k not in close]
            hint = f" Did you mean: {', '.join(close[:4])}?" if close else ""
            raise ReconbenchError(f"protocol: unknown option {key!r}.{hint} Protocol options: "
                                  f"{', '.join(sorted(fields))}; metric options are set as METRIC.OPTION "
                                  "(see `reconbench list metrics -v`).")
    base = build_config(Protocol, plain, "protocol")   # the bounds declared on its fields included
    names = list(base.metrics) if base.metrics is not None else list(all_metrics)
    for name in names:
        plugins.metric(name)  # UnknownNameError with close matches
    if len(set(names)) != len(names):
        raise ReconbenchError(f"protocol.metrics lists a metric twice: {names}")
    if base.primary_metric not in names:
        raise ReconbenchError(f"protocol: the primary metric {base.primary_metric!r} is not among the metrics "
                              f"computed ({', '.join(names) or 'none'}); add it to `metrics` or change "
                              "`primary_metric`")
    if base.calibration_draws and base.calibrated_score in all_metrics and base.calibrated_score not in names:
        names.append(base.calibrated_score)  # the calibrated headline needs its score
    names = _order([base.primary_metric] + [n for n in names if n != base.primary_metric])
    per_metric: dict[str, dict[str, Any]] = {name: {} for name in names}
    for key, value in dotted.items():
        mname, _, opt = key.partition(".")
        if mname not in names:
            if mname in all_metrics:
                raise ReconbenchError(f"protocol: option {key!r} is for metric {mname!r}, which is not computed "
                                      f"(metrics: {', '.join(names)})")
            plugins.metric(mname)
        per_metric[mname][opt] = value
    configs = {}
    for name in names:
        metric = plugins.metric(name)
        configs[name] = build_config(metric.config_cls, per_metric[name], f"protocol: metric {name}")
        metric.check_config(configs[name])
    if base.avg_threshold is not None:
        b, source = float(base.avg_threshold), "set by the protocol"
    else:
        b, source = family_avg_threshold(family)
    return ResolvedProtocol(base=base, family=family, avg_threshold=b, avg_threshold_source=source,
                            metric_names=names, metric_configs=configs, overrides=values)


def family_avg_threshold(family: str) -> tuple[float, str]:
    """The averaging threshold B a family takes when the protocol sets none, and where it comes from in words."""
    if family in FAMILY_AVG_THRESHOLD:
        b = FAMILY_AVG_THRESHOLD[family]
        return b, f"default for family {family!r} ({'convolutional' if b == 1.5 else 'MLP-like'}: {b})"
    return DEFAULT_AVG_THRESHOLD, (f"default {DEFAULT_AVG_THRESHOLD} (family {family!r} has no recorded default; "
                                   "treated as MLP-like)")


def as_resolved(protocol: dict[str, Any] | ResolvedProtocol | None, family: str) -> ResolvedProtocol:
    """``protocol`` as resolved: a protocol resolved once by the run that scores is used as it is; options are resolved
    here (:func:`resolve_protocol`)."""
    return protocol if isinstance(protocol, ResolvedProtocol) else resolve_protocol(protocol, family)


def _order(names: list[str]) -> list[str]:
    """Keep the given order (the primary metric first) but put every metric after the metrics it ``requires``."""
    done: list[str] = []

    def visit(name: str, stack: tuple[str, ...]) -> None:
        if name in done:
            return
        if name in stack:
            raise ReconbenchError(f"metrics require each other in a cycle: {' -> '.join((*stack, name))}")
        for dep in plugins.metric(name).requires:
            if dep not in names:
                raise ReconbenchError(f"metric {name!r} needs metric {dep!r}; add it to protocol.metrics")
            visit(dep, (*stack, name))
        done.append(name)

    for n in names:
        visit(n, ())
    return done
