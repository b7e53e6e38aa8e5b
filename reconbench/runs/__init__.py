"""One attack on one target, run, evaluated and persisted. This package stands above :mod:`reconbench.attack` and
:mod:`reconbench.evaluation` and joins them; neither imports it.

Layout of a result folder::

    result.json               resolved config, selections, metrics, provenance
    candidates.safetensors    pooled candidates (centred space), their labels and run ids
    runs/run-000.json         one file per search run, written the moment it finishes (resume skips these), with
                              its outcome (ok / diverged / non_finite / stopped_early: reconbench.attack.outcome);
    runs/run-000.safetensors  runs an attack advances together (run_batch) finish with their batch

    figures/*.png
"""

from reconbench.runs.execute import run_attack
from reconbench.runs.pool import load_pooled, select_runs
from reconbench.runs.prepare import init_config_for_run, prepare, sample_configs
from reconbench.runs.resolved import ResolvedRun, resolve_run
from reconbench.runs.result import finish
from reconbench.runs.spec import RunSpec
from reconbench.runs.traces import plot_traces

__all__ = ["ResolvedRun", "RunSpec", "finish", "init_config_for_run", "load_pooled", "plot_traces", "prepare", "run_attack",
           "resolve_run", "sample_configs", "select_runs"]
