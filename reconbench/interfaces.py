"""The contracts between the harness and its plugins.

Each plugin kind is a small protocol: an object with a ``name``, a one-line ``description`` and a few methods.
Plugins register instances through the hooks in :mod:`reconbench.hookspecs`. The data carriers passed between
stages (:class:`Knowledge`, :class:`AttackTarget`, :class:`AttackOutput`) are plain dataclasses.

The separation follows the threat model: an *init regime* may read the problem (and is flagged ``oracle`` if it
reads training images); an *attack* sees only the target's weights and the public :class:`Knowledge`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

import torch

from reconbench.targets.images import ImageData

if TYPE_CHECKING:
    from reconbench.config import Distribution
    from reconbench.targets.nets import TargetNet
    from reconbench.targets.problems import Problem

@runtime_checkable
class DatasetSource(Protocol):
    name: str
    description: str
    #: binary rule used when a binary task is asked for without one (see :data:`reconbench.targets.problems.BINARY_RULES`)
    default_binary_rule: str

    def load(self, data_root: Path | None) -> ImageData:
        """Load the data, or raise :class:`reconbench.errors.DataError` naming the file to place and where."""
        ...


# -- target models ------------------------------------------------------------------------------------------
@runtime_checkable
class ModelFamily(Protocol):
    name: str
    description: str
    #: whether the forward pass calls a swappable activation (needed by the KKT attacks' surrogate ReLU)
    swappable_activation: bool

    def default_spec(self) -> dict[str, Any]:
        """The architecture options and their defaults (widths, depth, kernel, ...)."""
        ...

    def homogeneity_degree(self, spec: dict[str, Any]) -> int | None:
        """k such that Phi(x; c theta) = c^k Phi(x; theta) for c > 0, or None when not homogeneous."""
        ...

    def build(self, input_shape: tuple[int, int, int], out_dim: int, spec: dict[str, Any],
              generator: torch.Generator | None = None) -> TargetNet:
        """A freshly initialised network; with ``generator`` the init is deterministic."""
        ...


# -- attacks ------------------------------------------------------------------------------------------------
#: what an attack may declare it needs to know; the harness withholds the rest
KNOWLEDGE_ITEMS = ("task", "labels", "class_balance", "loss", "weight_decay", "mean_image")


@dataclass
class Knowledge:
    """The public facts an attacker is given about a released model (never training images)."""

    task: str
    num_classes: int
    out_dim: int
    input_shape: tuple[int, int, int]
    class_counts: list[int] | None = None   # class balance of the training set (labels / class_balance)
    loss: str | None = None                 # training loss name (bce, ce, mse, l25, huber)
    weight_decay: float | None = None       # training weight-decay coefficient
    mean_image: torch.Tensor | None = None  # the per-pixel mean the model's inputs were centred with

    @property
    def n_train(self) -> int | None:
        return None if self.class_counts is None else int(sum(self.class_counts))


@dataclass
class AttackTarget:
    """What an attack is handed: the released model and the public knowledge."""

    model: TargetNet
    family: str
    homogeneity_degree: int | None
    knowledge: Knowledge
    dtype: torch.dtype = torch.float64
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))


@dataclass
class AttackOutput:
    """What an attack returns. Candidates live in the centred input space, like the model's inputs."""

    candidates: torch.Tensor               # (m, C, H, W)
    labels: torch.Tensor                   # (m,) candidate labels (class ids; binary 0/1; regression sign)
    final_loss: float                      # the attack's own objective at the end (used for blind selection)
    multipliers: torch.Tensor | None = None
    trace: list[dict[str, float]] = field(default_factory=list)  # e.g. [{"step": 0, "loss": ...}, ...]
    steps: int = 0
    stopped: str = "completed"             # completed | diverged | early_stop | interrupted
    message: str = ""


class ProgressFn(Protocol):
    def __call__(self, step: int, total: int, info: dict[str, float] | None = None) -> None: ...


@runtime_checkable
class Attack(Protocol):
    """A reconstruction attack.

    Optional attributes the harness uses when present: ``default_recipe`` (the target `reconbench run --attack
    NAME` trains when no model is given), ``default_search_runs``, and ``init_overrides(config, init_name) ->
    dict``, options of the init regime that the attack's config decides for a run (e.g. the KKT attacks search
    the gaussian init scale); the pipeline merges them into the init config unless the user set them.
    """

    name: str
    description: str
    #: items of :data:`KNOWLEDGE_ITEMS` the attack needs; the harness checks them before any work
    needs: frozenset[str]
    #: tasks the attack handles
    tasks: frozenset[str]
    #: the attack's options (a dataclass with a help text per field)
    config_cls: type

    def search_space(self) -> dict[str, Distribution]:
        """Distributions over config fields for random search (the papers' sweep ranges)."""
        ...

    def check(self, target: AttackTarget) -> None:
        """Raise :class:`reconbench.errors.IncompatibleError` if the target cannot be attacked, naming what to use."""
        ...

    def run(self, target: AttackTarget, x0: torch.Tensor, labels: torch.Tensor, config: Any, *,
            generator: torch.Generator, progress: ProgressFn | None = None) -> AttackOutput:
        """Reconstruct from starting candidates ``x0`` (m, C, H, W) with fixed ``labels``."""
        ...


# -- initialisation regimes ---------------------------------------------------------------------------------
@runtime_checkable
class InitRegime(Protocol):
    name: str
    description: str
    #: True when the regime reads training images (ground truth, mixtures with l1*l2 > 0)
    oracle: bool
    config_cls: type

    def is_oracle(self, config: Any) -> bool:
        """Whether this configuration reads training images."""
        ...

    def make(self, problem: Problem, labels: torch.Tensor, config: Any, *,
             generator: torch.Generator, dtype: torch.dtype) -> torch.Tensor:
        """Starting candidates (m, C, H, W) in the problem's centred space, with labels matching ``labels``."""
        ...


# -- metrics ------------------------------------------------------------------------------------------------
@runtime_checkable
class Metric(Protocol):
    """An evaluation metric. Optional attributes: ``headline`` (the summary key ``higher_is_better`` refers to;
    default the name), ``requires`` (names of metrics to compute first), ``check_config(config)`` (raise on bad
    option values) and ``fixed(config)`` (choices that are not options, recorded with the protocol)."""

    name: str
    description: str
    higher_is_better: bool
    config_cls: type

    def compute(self, evaluation: Any, config: Any) -> dict[str, Any]:
        """Score an evaluation context (:class:`reconbench.evaluation.context.Evaluation`: candidates matched to a
        problem) and return ``{"summary": {key: scalar}, "per_image": {column: [one value per training image]},
        "details": {...}}``, or ``{"available": False, "reason": ..., ...}``; None where undefined, never NaN."""
        ...


# -- defenses -----------------------------------------------------------------------------------------------
@runtime_checkable
class Defense(Protocol):
    """A defense. ``apply`` acts on the trained model before release; a defense that acts during training also
    defines the optional methods of :class:`TrainingDefense` (its ``apply`` may then do nothing). Optional
    attribute ``strength``: the option that sets how strong it is (the privacy-utility axis of a suite)."""

    name: str
    description: str
    config_cls: type

    def apply(self, model: TargetNet, problem: Problem, config: Any, *,
              generator: torch.Generator) -> dict[str, Any] | None:
        """Modify the trained model in place before release (e.g. add noise to the weights); may return numbers to
        record in the model card."""
        ...


@dataclass
class TrainingRun:
    """The pieces of the trainer's loop that a training-time defense may replace before the first step.

    The loop computes ``loss = loss_fn(model(x), targets)``, calls ``backward`` and ``optimizer.step()``. A defense
    may wrap ``model`` and ``optimizer`` (e.g. per-sample clipping and noise), replace ``loss_fn`` or ``targets``
    (label smoothing), change the optimizer's hyperparameters (weight decay), and writes what it did into
    ``records`` (JSON values; they land in the model card under ``metrics.defense``).
    """

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    x: torch.Tensor
    targets: torch.Tensor
    problem: Problem
    steps: int                      # the step budget of the recipe
    records: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class TrainingDefense(Protocol):
    """The optional training-time methods of a :class:`Defense` (each may be left out)."""

    def start_training(self, run: TrainingRun, config: Any, *, generator: torch.Generator) -> None:
        """Change the loop's pieces in ``run`` before the first step."""
        ...

    def after_step(self, run: TrainingRun, step: int, loss: float, config: Any) -> bool:
        """Called after every optimiser step; return True to stop training now."""
        ...

    def end_training(self, run: TrainingRun, config: Any) -> None:
        """Undo wrappers (``run.model`` must be the plain target network afterwards) and record final numbers."""
        ...


class PluginBase:
    """Optional convenience base: sensible defaults for the protocol attributes."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
