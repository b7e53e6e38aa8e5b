"""Re-scoring a stored evaluation with the options it was computed with.

A metric option added after numbers were published declares, with ``option(..., absent=VALUE)``, what a stored
configuration without it was computed with. :func:`absent_options` turns a stored evaluation's recorded metric
configurations into the protocol overrides that reproduce it: ``{"METRIC.OPTION": VALUE}`` for every such option
the record lacks and the caller did not set.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from reconbench import plugins
from reconbench.config import absent_values
from reconbench.errors import ReconbenchError
from reconbench.records.recorded_protocol import ProtocolMetric


def absent_options(recorded_metrics: Mapping[str, ProtocolMetric], overrides: Mapping[str, Any],
                   computed: Collection[str] | None) -> dict[str, Any]:
    """Overrides for the options a stored evaluation's metrics did not record (their pre-option behaviour), for the
    metrics ``computed`` (None: every recorded one) that ``overrides`` does not set."""
    out: dict[str, Any] = {}
    for name, info in recorded_metrics.items():
        if computed is not None and name not in computed:
            continue
        try:
            metric = plugins.metric(name)
        except ReconbenchError:
            continue  # a metric that is not installed here cannot be re-scored; the evaluation says so itself
        if info.config is None:
            continue
        for option, value in absent_values(metric.config_cls).items():
            key = f"{name}.{option}"
            if option not in info.config and key not in overrides:
                out[key] = value
    return out
