"""Every summary number an evaluation reports, as declared: by the evaluation itself (the calibrated headline, counts
of candidates, timings) and by each registered metric (:attr:`reconbench.interfaces.Metric.reports`).

Leaderboard columns, the clipping of intervals to the values a number can take, the ``reconbench run`` summary and
the claims page read these declarations; a metric plugin that declares its numbers is shown everywhere with no other
change.
"""

from __future__ import annotations

import dataclasses
import string
from collections.abc import Mapping

from reconbench import plugins
from reconbench.config import build_config
from reconbench.interfaces import VALUE_KINDS, Reported

#: the calibrated headline (training images whose reconstruction beats every calibration draw of the held-out null)
CALIBRATED_HEADLINE = "reconstructed_calibrated"
#: the papers' count (SSIM > 0.4 under their protocol), the secondary headline
PAPERS_HEADLINE = "reconstructed"

#: numbers the evaluation reports itself (not a metric plugin); ``attack_loss`` and ``attack_seconds`` come from the
#: attack run, not from the evaluation summary
CORE: tuple[Reported, ...] = (
    Reported(CALIBRATED_HEADLINE, "reconstructed (calibrated)", "count", fmt=".1f", column=0),
    Reported("n_train", "training images", "count_unbounded", fmt=".0f", console=1),
    Reported("n_candidates", "candidates", "count_unbounded", fmt=".0f", console=2),
    Reported("matched_images", "matched training images", "count_unbounded", fmt=".1f"),
    Reported("invalid_candidates", "invalid candidates", "count_unbounded", higher_is_better=False, fmt=".1f"),
    Reported("label_agreement_reconstructed", "label agreement of reconstructions", "share", fmt=".2f"),
    Reported("mean_best_distance", "mean best distance", "any", higher_is_better=False),
    Reported("attack_seconds", "attack seconds", "nonnegative", higher_is_better=False, fmt=".1f"),
    Reported("attack_loss", "attack loss", "nonnegative", higher_is_better=False),
)


def declared() -> dict[str, Reported]:
    """Every declared number by key (and by each older alias); the evaluation's own first, then each metric's in
    registration order; the first declaration of a key wins."""
    out: dict[str, Reported] = {}
    decls: list[Reported] = list(CORE)
    for name in plugins.names("metrics"):
        decls.extend(getattr(plugins.metric(name), "reports", ()) or ())
    for rep in decls:
        if rep.values not in VALUE_KINDS:
            raise ValueError(f"reported number {rep.key!r} declares values={rep.values!r}; use one of {VALUE_KINDS}")
        for key in (rep.key, *rep.aliases):
            out.setdefault(key, rep)
    return out


def lookup(key: str) -> Reported | None:
    return declared().get(key)


def declaring_metric(rep: Reported) -> str | None:
    """The registered metric that declares ``rep`` (None: the evaluation itself, or no registered metric)."""
    for name in plugins.names("metrics"):
        if rep in (getattr(plugins.metric(name), "reports", ()) or ()):
            return name
    return None


def label_of(rep: Reported, metric_configs: Mapping[str, object] | None = None) -> str:
    """The label of a declared number with its metric's options filled in: a label may name options of the metric
    that declares it (``"corr > {threshold:g}"``), which take the values of ``metric_configs`` (metric name -> its
    resolved config, as :class:`reconbench.evaluation.protocol.ResolvedProtocol` holds them, or the config as a result
    records it), else the metric's defaults."""
    if not any(field for _, field, _, _ in string.Formatter().parse(rep.label)):
        return rep.label
    name = declaring_metric(rep)
    if name is None:
        return rep.label
    config = (metric_configs or {}).get(name)
    if config is None:
        config = build_config(plugins.metric(name).config_cls, {}, name)
    values = dict(config) if isinstance(config, Mapping) else dataclasses.asdict(config)  # type: ignore[call-overload]
    return rep.label.format_map(values)


def bounds(rep: Reported, n_train: int | None) -> tuple[float | None, float | None]:
    """The values a declared number can take; a count of training images is bounded by n when n is known."""
    return {
        "count": (0.0, None if n_train is None else float(n_train)),
        "count_unbounded": (0.0, None),
        "share": (0.0, 1.0),
        "similarity": (-1.0, 1.0),
        "nonnegative": (0.0, None),
        "any": (None, None),
    }[rep.values]


def _ordered(position: str) -> list[Reported]:
    """Each distinct declaration that sets ``position`` (``column`` or ``console``), in that order."""
    seen: dict[str, Reported] = {}
    for rep in declared().values():
        if getattr(rep, position) is not None:
            seen.setdefault(rep.key, rep)
    return sorted(seen.values(), key=lambda r: int(getattr(r, position)))


def board_columns() -> list[Reported]:
    """The numbers a leaderboard shows by default, in column order."""
    return _ordered("column")


def console_keys() -> list[Reported]:
    """The numbers ``reconbench run`` prints, in order."""
    return _ordered("console")
