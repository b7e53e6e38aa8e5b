"""The search of one cell: which strategy proposes its runs' configurations, and what the strategy is told.

The harness, not the strategy, decides what a strategy may see: a blind strategy is told each run's final attack
loss (what an attacker has, the number blind selection ranks by); only a strategy declared ``oracle`` is told the
oracle extraction score, which reads the training images.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from reconbench import plugins
from reconbench.attack.outcome import search_run
from reconbench.config import build_config, config_to_dict
from reconbench.errors import ReconbenchError
from reconbench.interfaces import Attack, SearchSession, SearchStrategy, Trial
from reconbench.records import SearchRun

#: the strategy that runs when none is named (its records leave the search out of every hash: see RunSpec.to_dict);
#: suites keep it, so that their cells draw what they always drew
DEFAULT_SEARCH = "random"
#: the strategy of ``reconbench run`` when none is named: the attack's default configuration first
RUN_SEARCH = "default_first"
#: run outcomes whose final loss a blind strategy is told (others are failed trials)
USABLE_STOPS = ("completed", "converged", "early_stop")


def resolve_search(name: str, options: dict[str, Any]) -> tuple[SearchStrategy[Any], Any]:
    """The registered strategy and its built config (unknown names and bad options fail with one line)."""
    strategy = plugins.search(name)
    return strategy, build_config(strategy.config_cls, options, f"search {name}")


def check_search(name: str, options: dict[str, Any]) -> None:
    """The strategy is registered, its options are valid, and its optional dependency is installed: before any work."""
    strategy, _ = resolve_search(name, options)
    strategy.check()


def start_search(attack: Attack[Any], fixed: dict[str, Any], runs: int, seed: int, search: str,
                 options: dict[str, Any]) -> SearchSession | None:
    """The session proposing the runs' searched options; None with one run (it uses the given config)."""
    if runs <= 1:
        return None
    strategy, cfg = resolve_search(search, options)
    return start_session(strategy, cfg, attack, fixed, runs, seed)


def start_session(strategy: SearchStrategy[Any], config: object, attack: Attack[Any], fixed: dict[str, Any],
                  runs: int, seed: int) -> SearchSession | None:
    """:func:`start_search` with the strategy and its config already resolved."""
    if runs <= 1:
        return None
    declared = attack.default_search_space() if strategy.from_default else attack.search_space()
    space = {k: v for k, v in declared.items() if k not in fixed}
    return strategy.start(space, runs, seed, config)


def objective(record: SearchRun | Mapping[str, Any], oracle: bool) -> float | None:
    """What the strategy is told about a finished run: the final attack loss (blind) or the oracle score; None for
    a failed run or a non-finite number."""
    run = search_run(record)
    if run.stopped not in USABLE_STOPS:
        return None
    value = run.oracle_score if oracle else run.final_loss
    return float(value) if value is not None and math.isfinite(value) else None


def tell(session: SearchSession, search: str, asked: list[dict[str, Any]], records: list[dict[str, Any]]) -> None:
    """Report a finished batch back in the order it was asked."""
    oracle = bool(plugins.search(search).oracle)
    session.tell([Trial(run=r["run"], params=p, objective=objective(r, oracle))
                  for p, r in zip(asked, records, strict=True)])


def search_record(search: str, options: dict[str, Any]) -> dict[str, Any]:
    """What result.json and a cell record say about the search that ran (a strategy that is not registered, in the
    record of a cell that failed for it: its name and options only)."""
    try:
        strategy, cfg = resolve_search(search, options)
    except ReconbenchError:
        return {"strategy": search, "config": dict(options), "oracle": None, "objective": None}
    return {"strategy": search, "config": config_to_dict(cfg), "oracle": bool(strategy.oracle),
            "objective": "oracle extraction score (reads training images)" if strategy.oracle
            else "final attack loss (reads no training images)"}


def check_proposals(asked: list[dict[str, Any]], left: int, search: str) -> None:
    if not asked or len(asked) > left:
        raise ReconbenchError(f"search strategy {search!r} proposed {len(asked)} run(s) with {left} left to run; a "
                              "strategy's ask() must propose between 1 and the runs left")
