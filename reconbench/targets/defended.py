"""A recipe's defense, as the trainer meets it: hooks into the training loop, then the change before release.

The trainer makes one :class:`DefenseSession` per run. Without a defense every call is a no-op. With one, the
session calls the defense's optional training-time methods (those of :class:`reconbench.interfaces.Defense`) around
the loop and its ``apply`` before release, and gathers what goes into the model card (``metrics.defense``): the
defense's name, its full configuration, which phases it acted in, and the numbers it recorded.
"""

from __future__ import annotations

import copy
import dataclasses
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

import torch

from reconbench import plugins
from reconbench.config import build_config, config_to_dict
from reconbench.errors import ReconbenchError
from reconbench.interfaces import TrainingRun, acts_during_training

if TYPE_CHECKING:
    from reconbench.data import Problem
    from reconbench.nets import TargetNet
    from reconbench.targets.losses import LossFn
    from reconbench.targets.recipe import TargetRecipe


@dataclasses.dataclass(frozen=True)
class TrainedLoop:
    """The outcome of an undefended recipe's training loop: its weights, last step, loss, curve and wall time, and
    what coupled weight decay left of the initial weights (None: not known, as of a card read from the cache)."""

    state: dict[str, torch.Tensor]
    step: int
    loss: float
    history: list[dict[str, Any]]
    wall: float
    init_decay: float | None = None

    def copy(self) -> TrainedLoop:
        """A copy whose weights and curve the caller may change."""
        return dataclasses.replace(self, state=copy.deepcopy(self.state), history=list(self.history))


#: trained weights of undefended recipes in this process, so that a release-only defense of the same recipe does
#: not train again (a suite's privacy axis trains its base target once); at most this many are kept
_TRAINED: OrderedDict[str, TrainedLoop] = OrderedDict()
_TRAINED_KEEP = 4


def clear_caches() -> None:
    """Forget the undefended weights kept in this process (the next release-only defense trains its recipe again)."""
    _TRAINED.clear()


class DefenseSession:
    def __init__(self, recipe: TargetRecipe, defense: object = None) -> None:
        """``defense``: the defense object itself (default: the registered one the recipe names)."""
        self.defense: Any = None
        self.config: Any = None
        self.run: TrainingRun | None = None
        self.release_records: dict[str, Any] = {}
        self.seed = recipe.train.seed
        if defense is not None or recipe.defense is not None:
            self.defense = defense if defense is not None else plugins.defense(str(recipe.defense))
            self.config = build_config(self.defense.config_cls, recipe.defense_config, f"defense {self.defense.name}")

    def _hook(self, name: str) -> Any:
        if self.defense is None or not acts_during_training(self.defense):
            return None
        return getattr(self.defense, name, None)

    def start(self, model: TargetNet, optimizer: torch.optim.Optimizer, loss_fn: LossFn, x: torch.Tensor,
              targets: torch.Tensor, problem: Problem, steps: int) -> TrainingRun:
        """The loop's pieces, after the defense (if it acts during training) has changed them."""
        self.run = TrainingRun(model=model, optimizer=optimizer, loss_fn=loss_fn, x=x, targets=targets, problem=problem,
                               steps=steps)
        hook = self._hook("start_training")
        if hook is not None:
            hook(self.run, self.config, generator=torch.Generator().manual_seed(self.seed + 2))
        return self.run

    def after_step(self, step: int, loss: float) -> bool:
        hook = self._hook("after_step")
        return bool(hook(self.run, step, loss, self.config)) if hook is not None and self.run is not None else False

    def end(self, model: TargetNet) -> TargetNet:
        """The plain target network after training (wrappers removed by the defense)."""
        hook = self._hook("end_training")
        if hook is None or self.run is None:
            return model
        hook(self.run, self.config)
        out = self.run.model
        from reconbench.nets import TargetNet

        if not isinstance(out, TargetNet):
            raise ReconbenchError(f"defense {self.defense.name!r}: end_training must leave run.model as the plain "
                                  f"target network, not a {type(out).__name__}")
        return out

    def release_only(self) -> bool:
        return self.defense is None or not acts_during_training(self.defense)

    def recall(self, recipe: TargetRecipe, device: str) -> TrainedLoop | None:
        """The training loop's outcome for the undefended recipe, when it ran in this process and this defense
        acts only before release (the loop would be the same)."""
        if not self.release_only():
            return None
        hit = _TRAINED.get(_undefended_key(recipe, device))
        return None if hit is None else hit.copy()

    def remember(self, recipe: TargetRecipe, device: str, model: TargetNet, *, step: int, loss: float,
                 history: list[dict[str, Any]], wall: float, init_decay: float) -> None:
        if self.release_only():
            key = _undefended_key(recipe, device)
            _TRAINED[key] = TrainedLoop(copy.deepcopy(model.state_dict()), step, loss, history, wall, init_decay)
            _TRAINED.move_to_end(key)
            while len(_TRAINED) > _TRAINED_KEEP:
                _TRAINED.popitem(last=False)

    def release(self, model: TargetNet, problem: Problem) -> None:
        """The defense's change to the trained weights before release."""
        if self.defense is not None:
            out = self.defense.apply(model, problem, self.config, generator=torch.Generator().manual_seed(self.seed + 1))
            if isinstance(out, dict):  # a defense may return numbers to record (e.g. the quantisation error)
                self.release_records.update(out)
            bad = next((name for name, p in model.named_parameters() if not bool(torch.isfinite(p).all())), None)
            if bad is not None:
                raise ReconbenchError(f"defense {self.defense.name!r} with {config_to_dict(self.config)} made the released "
                                      f"weights non-finite (tensor {bad!r}); choose a milder setting")

    def card_record(self) -> dict[str, Any] | None:
        if self.defense is None:
            return None
        during = acts_during_training(self.defense)
        records = {**(self.run.records if self.run is not None else {}), **self.release_records}
        return {"name": self.defense.name, "config": config_to_dict(self.config), "during_training": during,
                "records": records}


def _undefended_key(recipe: TargetRecipe, device: str) -> str:
    return f"{dataclasses.replace(recipe, defense=None, defense_config={}).key()}@{device}"


def remember_card(recipe: TargetRecipe, card: Any, device: str) -> None:
    """Make a trained undefended card (e.g. from the target cache) available to :meth:`DefenseSession.recall`."""
    rec = card.record
    m = rec.metrics
    _TRAINED[_undefended_key(recipe, device)] = TrainedLoop(
        copy.deepcopy(card.load_model().state_dict()), int(m.steps_run) - 1, m.final_loss, list(rec.history or []),
        m.train_seconds)
    while len(_TRAINED) > _TRAINED_KEEP:
        _TRAINED.popitem(last=False)
