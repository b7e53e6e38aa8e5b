"""Shared fixtures: small generated data, a tiny trained target, and a toy attack plugin for harness tests."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import pytest
import torch

from reconbench import hookimpl, plugins
from reconbench.config import option
from reconbench.interfaces import Attack, AttackOutput, ThreatModel

warnings.filterwarnings("ignore", message=r".*torch\.jit\.script.*")


@dataclass
class ToyConfig:
    steps: int = option(3, "how many no-op steps")
    shift: float = option(0.0, "added to every candidate")


@dataclass(frozen=True)
class ToyAttack(Attack):
    """Returns the starting candidates shifted by a constant: exercises the harness, not an attack."""

    name: str = "toy_identity"
    description: str = "test-only attack that returns its starting candidates"
    needs: frozenset = frozenset({"labels"})
    threat: ThreatModel = ThreatModel(labels=True)
    tasks: frozenset = frozenset({"binary", "multiclass", "regression"})
    config_cls: type = ToyConfig

    def search_space(self) -> dict[str, Any]:
        from reconbench.config import Uniform

        return {"shift": Uniform(0.0, 0.01)}

    def check(self, target: Any) -> None:
        return None

    def run(self, target: Any, x0: torch.Tensor, labels: torch.Tensor, config: ToyConfig, *, generator: Any,
            progress: Any = None) -> AttackOutput:
        for s in range(config.steps):
            if progress:
                progress(s + 1, config.steps, {"loss": 1.0})
        return AttackOutput(candidates=x0 + config.shift, labels=labels, final_loss=float(config.shift),
                            steps=config.steps)


class ToyPlugin:
    @hookimpl
    def register_attacks(self, register):  # type: ignore[no-untyped-def]
        register(ToyAttack())


@pytest.fixture
def toy_attack_registered():
    host = plugins.host()
    name = host.register(ToyPlugin(), name="toy-test-plugin")
    yield ToyAttack()
    host.unregister(name)


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("RECONBENCH_CACHE", str(tmp_path_factory.mktemp("cache")))
    monkeypatch.setenv("RECONBENCH_DOWNLOAD", "0")
    torch.set_num_threads(2)


def _clear_process_state() -> None:
    """Forget what this process keeps between calls: the held-out null's thresholds and draws, the undefended weights
    kept for release-only defenses, and the command line of the last ``reconbench.cli.main`` call (recorded as
    provenance). The data sets stay loaded: their cache is keyed by the data folder a root resolves to (reloading
    digits for every test would add about 30 ms to each)."""
    from reconbench.cli import common
    from reconbench.evaluation import null
    from reconbench.targets import defended

    null.clear_caches()
    defended.clear_caches()
    common.ARGV.clear()
    common.DEBUG[0] = False


@pytest.fixture(autouse=True)
def _no_process_caches():
    """Each test starts without the process caches, so its time and result do not depend on which tests ran before
    it (in any order: CI runs the tests shuffled, pytest-randomly)."""
    _clear_process_state()
    yield
    _clear_process_state()


@pytest.fixture
def no_work(monkeypatch):
    """Every case must be refused before any optimiser exists (so before training and before any attack)."""
    from _helpers.guards import refuse_optimisers

    refuse_optimisers(monkeypatch)


@pytest.fixture
def one_torch_thread():
    """Tiny problems: a second torch thread only adds synchronisation cost (modules opt in with
    ``pytestmark = pytest.mark.usefixtures("one_torch_thread")``)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
