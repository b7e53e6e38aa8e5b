"""Re-scoring a stored evaluation with the options it was computed with.

A metric option added after numbers were published declares, with ``option(..., absent=VALUE)``, what a stored
configuration without it was computed with. :func:`absent_options` turns a stored evaluation's recorded metric
configurations into the protocol overrides that reproduce it: ``{"METRIC.OPTION": VALUE}`` for every such option
the record lacks and the caller did not set.
"""

from __future__ import annotations

from typing import Any

from reconbench import plugins
from reconbench.config import absent_values
from reconbench.errors import ReconbenchError


def absent_options(recorded_metrics: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """Overrides for the options a stored evaluation's metrics did not record (their pre-option behaviour)."""
    computed = overrides.get("metrics")
    out: dict[str, Any] = {}
    for name, info in recorded_metrics.items():
        if computed is not None and name not in computed:
            continue
        try:
            metric = plugins.metric(name)
        except ReconbenchError:
            continue  # a metric that is not installed here cannot be re-scored; the evaluation says so itself
        config = info.get("config") if isinstance(info, dict) else None
        if not isinstance(config, dict):
            continue
        for option, value in absent_values(metric.config_cls).items():
            key = f"{name}.{option}"
            if option not in config and key not in overrides:
                out[key] = value
    return out
