"""Experiment tracking: each finished run (or suite cell) logged to MLflow after its files are written.

What one MLflow run holds: the resolved configuration as parameters (the spec, the init config, the target and the
search, flattened to dotted keys) and the seed; the numeric summary of every evaluated selection as metrics
(``pool.<key>``, ``blind.<key>``, ``oracle.<key>``) with the held-out null's mean and max beside them
(``null.<key>.mean``, ``null.<key>.max``); every search run's loss trace as metric steps (``run_000.loss``, ...);
and result.json and the figures as artefacts.

Tracking comes after the result folder is complete and never feeds back into it: when MLflow is unreachable or
refuses something, a one-line warning says so and the command goes on (the result folder is the record). MLflow is
an optional extra (``pip install 'reconbench[mlflow]'``), imported only when a run is logged. Without ``--track-uri``
MLflow's own default applies (``MLFLOW_TRACKING_URI``, else a local store in the working folder: ``./mlruns``, with
MLflow 3's ``mlflow.db`` beside it), which ``mlflow ui`` started in the same folder reads.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import math
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click

from reconbench.errors import ReconbenchError
from reconbench.records import RUN_RESULT_FILE, RunResult, SearchRun, Spread, mapping, plain

INSTALL_HINT = "pip install 'reconbench[mlflow]'"
TRACKERS = ("mlflow",)
SELECTIONS = ("blind", "oracle")
#: MLflow's HTTP client settings unless the user set them: an unreachable server costs seconds, not the hours its own
#: defaults allow (seven retries with exponential back-off, two minutes per request), after the result is written
HTTP_DEFAULTS = {"MLFLOW_HTTP_REQUEST_TIMEOUT": "10", "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1",
                 "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1"}
#: MLflow's batch limits (parameters and tags per call, metrics per call) and its parameter value length
MAX_PARAMS, MAX_METRICS, MAX_VALUE = 100, 1000, 6000


def check_tracker(track: str | None, uri: str | None = None, experiment: str | None = None) -> None:
    """Before any work: the tracker is known and its package is installed (one line naming the extra if not);
    --track-uri or --track-experiment without --track is refused (it would be ignored)."""
    if track is None:
        given = [opt for opt, value in (("--track-uri", uri), ("--track-experiment", experiment)) if value]
        if given:
            raise ReconbenchError(f"{' and '.join(given)} only apply with --track mlflow; add --track mlflow or leave "
                                  f"{'them' if len(given) > 1 else 'it'} out")
        return
    if track not in TRACKERS:
        raise ReconbenchError(f"unknown tracker {track!r}; choose one of: {', '.join(TRACKERS)}")
    if importlib.util.find_spec("mlflow") is None:
        raise ReconbenchError(f"--track mlflow needs MLflow: {INSTALL_HINT}")


def flatten(value: object, prefix: str = "") -> dict[str, str]:
    """Nested dicts as dotted keys; other values as JSON text (MLflow parameters are strings)."""
    if isinstance(value, dict) and (value or not prefix):
        out: dict[str, str] = {}
        for k, v in value.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return {prefix: text[:MAX_VALUE]}


def numbers(summary: Mapping[str, Any]) -> dict[str, float]:
    """The finite numbers of a summary (booleans, text and non-finite values left out)."""
    return {k: float(v) for k, v in summary.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}


def result_metrics(result: RunResult) -> dict[str, float]:
    """Headline numbers of a result: every selection's summary and the held-out null's mean and max."""
    out = {f"pool.{k}": v for k, v in numbers(result.evaluation.numbers).items()}
    for name, selected in result.evaluation_selected.items():
        if name in SELECTIONS:
            out.update({f"{name}.{k}": v for k, v in numbers(selected.numbers).items()})
    for key, spread in (result.evaluation.held_out.spread or {}).items():
        if not isinstance(spread, Spread):
            continue
        for stat, value in (("mean", spread.mean), ("max", spread.max)):
            if isinstance(value, (int, float)) and math.isfinite(value):
                out[f"null.{key}.{stat}"] = float(value)
    return out


def result_params(result: RunResult) -> dict[str, str]:
    """The resolved configuration of a result as flat parameters."""
    t = result.target
    return flatten({"spec": result.spec, "init_config": result.init_config, "search": result.search,
                    "target": {"recipe": plain(t.recipe), "recipe_key": t.recipe_key, "family": t.family,
                               "task": t.task, "n_train": t.n_train}})


def traces(out: Path) -> list[tuple[str, float, int]]:
    """(key, value, step) of every search run's trace, read from the run records (result.json leaves them out)."""
    rows = []
    for path in sorted((out / "runs").glob("run-*.json")):
        run = SearchRun.from_dict(json.loads(path.read_text()), path)
        for point in run.trace or []:
            step = int(point.get("step", 0))   # a trace row is the attack's own dict (interfaces.AttackOutput.trace)
            for key, value in numbers({k: v for k, v in point.items() if k != "step"}).items():
                rows.append((f"run_{int(run.run or 0):03d}.{key}", value, step))
    return rows


class MlflowTracker:
    """Logs results to one MLflow experiment; every failure becomes a warning."""

    def __init__(self, uri: str | None, experiment: str) -> None:
        self.uri, self.experiment = uri, experiment

    def log_result(self, out: Path, name: str, extra_params: dict[str, Any] | None = None,
                   tags: dict[str, str] | None = None) -> str | None:
        """Log the result folder ``out`` (its result.json, runs/ and figures/) as one MLflow run; its id, or None
        (with a warning) when tracking failed."""
        try:
            return self._log(out, name, extra_params or {}, tags or {})
        except Exception as exc:  # tracking must never cost a computed result
            message = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
            click.echo(f"warning: MLflow tracking of {name} failed ({message}); the result stays in {out}", err=True)
            return None

    def _log(self, out: Path, name: str, extra_params: dict[str, Any], tags: dict[str, str]) -> str:
        logging.getLogger("mlflow").setLevel(logging.WARNING)   # MLflow's INFO lines (creating tables, ...)
        for key, value in HTTP_DEFAULTS.items():
            os.environ.setdefault(key, value)
        from mlflow import MlflowClient
        from mlflow.entities import Metric, Param

        result = RUN_RESULT_FILE.read(out / "result.json")
        client = MlflowClient(self.uri)
        found = client.get_experiment_by_name(self.experiment)
        experiment = found.experiment_id if found else client.create_experiment(self.experiment)
        run_tags = {"reconbench.attack": str(result.attack), "reconbench.outcome":
                    str(None if result.outcome is None else result.outcome.status), "reconbench.search":
                    str(result.recorded_search.strategy), **{f"reconbench.{k}": str(v) for k, v in
                                                                     mapping(result.provenance).items()
                                                                     if isinstance(v, str)},
                    **tags}
        run = client.create_run(experiment, run_name=name, tags=run_tags)
        run_id = run.info.run_id
        params = [Param(k, v) for k, v in {**result_params(result), **flatten(extra_params), "seed":
                                            str(result.recorded_spec.seed)}.items()]
        for i in range(0, len(params), MAX_PARAMS):
            client.log_batch(run_id, params=params[i:i + MAX_PARAMS])
        now = int(time.time() * 1000)
        metrics = [Metric(k, v, now, 0) for k, v in result_metrics(result).items()]
        metrics += [Metric(k, v, now, step) for k, v, step in traces(out)]
        for i in range(0, len(metrics), MAX_METRICS):
            client.log_batch(run_id, metrics=metrics[i:i + MAX_METRICS])
        client.log_artifact(run_id, str(out / "result.json"))
        if (out / "figures").is_dir():
            client.log_artifacts(run_id, str(out / "figures"), "figures")
        client.set_terminated(run_id)
        return str(run_id)


def tracker(track: str | None, uri: str | None, experiment: str, *,
            experiment_given: str | None = None) -> MlflowTracker | None:
    """The tracker named by ``--track`` (None: no tracking); see :func:`check_tracker`."""
    check_tracker(track, uri, experiment_given)
    return MlflowTracker(uri, experiment) if track else None

