"""Built-in search strategies: how a cell's search runs get their configurations.

- ``random`` (the default of suites): every run's options drawn independently from the attack's declared
  distributions, all runs proposed at once (one batch), from ``numpy.random.default_rng(seed)``.
- ``default_first`` (the default of ``reconbench run``): run 0 is the attack's own default configuration (nothing
  drawn); the other runs are drawn like ``random`` from the attack's ``default_search_space()``, ranges that can
  move within the default step budget (docs/search.md). A search of R runs is then never worse than the default run
  by blind selection's choice of the lowest loss alone, and spends no run where the candidates cannot move.
- ``optuna``: Optuna's TPE sampler, seeded, in rounds of ``batch`` runs (ask a batch, run it as one batched
  computation, tell each run's final attack loss); the first round is random, later rounds are guided by the
  losses seen so far. The objective is the attack's own loss: what an attacker has.
- ``optuna_oracle``: the same sampler told the oracle extraction score (reads the training images): an upper bound
  of what tuning could reach, marked ‡ like oracle selection.

Optuna is an optional extra (``pip install 'reconbench[optuna]'``), imported when a search starts.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from reconbench import hookimpl
from reconbench.config import Choice, Distribution, LogUniform, Uniform, option
from reconbench.errors import ReconbenchError
from reconbench.interfaces import NoOptions, SearchSession, SearchStrategy, Trial

INSTALL_HINT = "pip install 'reconbench[optuna]'"


# -- random -------------------------------------------------------------------------------------------------
class _RandomSession:
    """All runs drawn up front (run by run, option by option in the space's order), proposed as one batch."""

    def __init__(self, space: dict[str, Distribution], runs: int, seed: int, default_first: bool = False) -> None:
        rng = np.random.default_rng(seed)
        first: list[dict[str, Any]] = [{}] if default_first else []   # {}: no option drawn, the config's defaults
        self._configs = first + [{k: dist.sample(rng) for k, dist in space.items()} for _ in range(runs - len(first))]

    def ask(self) -> list[dict[str, Any]]:
        configs, self._configs = self._configs, []
        return configs

    def tell(self, trials: list[Trial]) -> None:
        """Random search learns nothing from the runs."""


@dataclass(frozen=True)
class RandomSearch(SearchStrategy[NoOptions]):
    name: str = "random"
    description: str = "independent draws from the attack's declared space, all runs in one batch (the default)"
    config_cls: type[NoOptions] = NoOptions

    def start(self, space: dict[str, Distribution], runs: int, seed: int, config: NoOptions) -> SearchSession:
        return _RandomSession(space, runs, seed)


@dataclass(frozen=True)
class DefaultFirstSearch(SearchStrategy[NoOptions]):
    name: str = "default_first"
    description: str = ("run 0 the attack's default configuration, the rest drawn from ranges that move within the "
                        "step budget, one batch (the default of `reconbench run`)")
    config_cls: type[NoOptions] = NoOptions
    from_default: bool = True

    def start(self, space: dict[str, Distribution], runs: int, seed: int, config: NoOptions) -> SearchSession:
        return _RandomSession(space, runs, seed, default_first=True)


# -- optuna TPE ---------------------------------------------------------------------------------------------
@dataclass
class OptunaConfig:
    batch: int = option(0, "runs asked (and advanced together) per round; 0: half the budget, rounded up", ge=0)
    startup: int = option(0, "finished runs drawn at random before TPE models the objective; 0: the first round",
                          ge=0)
    multivariate: bool = option(True, "multivariate TPE (models the options jointly) instead of one per option")


def optuna_distribution(dist: Distribution) -> Any:
    """The Optuna distribution of one of reconbench's search distributions."""
    import optuna.distributions as od

    if isinstance(dist, LogUniform):
        return od.FloatDistribution(dist.low, dist.high, log=True)
    if isinstance(dist, Uniform):
        return od.FloatDistribution(dist.low, dist.high)
    if isinstance(dist, Choice):
        return od.CategoricalDistribution(dist.values)
    raise ReconbenchError(f"the optuna search cannot draw from {type(dist).__name__}; use LogUniform, Uniform or Choice")


def import_optuna() -> Any:
    try:
        import optuna
    except ImportError:
        raise ReconbenchError(f"the optuna search strategies need Optuna: {INSTALL_HINT}") from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


class _OptunaSession:
    """Rounds of ``batch`` runs through Optuna's ask/tell interface on an in-memory study."""

    def __init__(self, space: dict[str, Distribution], runs: int, seed: int, config: OptunaConfig) -> None:
        optuna = import_optuna()
        self._optuna = optuna
        self._space = {k: optuna_distribution(d) for k, d in space.items()}
        self._left = runs
        self._batch = config.batch or math.ceil(runs / 2)
        with warnings.catch_warnings():   # multivariate TPE is flagged experimental
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=config.startup or self._batch,
                                                 multivariate=config.multivariate, constant_liar=True)
        self._study = optuna.create_study(direction="minimize", sampler=sampler)
        self._asked: list[Any] = []

    def ask(self) -> list[dict[str, Any]]:
        n = min(self._batch, self._left)
        self._left -= n
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", self._optuna.exceptions.ExperimentalWarning)
            self._asked = [self._study.ask(self._space) for _ in range(n)]
        return [dict(t.params) for t in self._asked]

    def tell(self, trials: list[Trial]) -> None:
        if len(trials) != len(self._asked):
            raise ReconbenchError(f"the search was told {len(trials)} run(s) for a batch of {len(self._asked)}")
        state = self._optuna.trial.TrialState
        for asked, trial in zip(self._asked, trials, strict=True):
            if trial.objective is None or not math.isfinite(trial.objective):
                self._study.tell(asked, state=state.FAIL)
            else:
                self._study.tell(asked, trial.objective)
        self._asked = []


@dataclass(frozen=True)
class OptunaSearch(SearchStrategy[OptunaConfig]):
    name: str = "optuna"
    description: str = "Optuna TPE, seeded, in rounds of runs told their final attack loss (blind; reconbench[optuna])"
    config_cls: type[OptunaConfig] = OptunaConfig

    def check(self) -> None:
        import_optuna()

    def start(self, space: dict[str, Distribution], runs: int, seed: int, config: OptunaConfig) -> SearchSession:
        return _OptunaSession(space, runs, seed, config)


@dataclass(frozen=True)
class OptunaOracleSearch(OptunaSearch):
    name: str = "optuna_oracle"
    description: str = "Optuna TPE told the oracle extraction score, which reads training images (‡)"
    oracle: bool = True


@hookimpl
def register_searches(register):  # type: ignore[no-untyped-def]
    for strategy in (RandomSearch(), DefaultFirstSearch(), OptunaSearch(), OptunaOracleSearch()):
        register(strategy)
