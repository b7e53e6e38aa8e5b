"""The contracts between the harness and its plugins.

Each plugin kind is a base class (:class:`Attack`, :class:`InitRegime`, :class:`Metric`, :class:`Defense`,
:class:`ModelFamily`, :class:`DatasetSource`, :class:`SearchStrategy`) that holds every attribute the harness reads,
with its default. Plugins subclass it and register instances through the hooks in :mod:`reconbench.hookspecs`. The
data carriers passed between stages (:class:`Knowledge`, :class:`AttackTarget`, :class:`AttackOutput`) are plain dataclasses.

The separation follows the threat model: an *init regime* may read the problem (and is flagged ``oracle`` if it
reads training images); an *attack* sees only the target's weights and the public :class:`Knowledge`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypedDict, TypeVar

import torch

from reconbench.data import TASKS, ImageData
from reconbench.errors import DivergedError


@dataclass
class NoOptions:
    """The options of a plugin that has none."""


if TYPE_CHECKING:
    from reconbench.config import Distribution
    from reconbench.data import Problem
    from reconbench.nets import TargetNet

#: a plugin's options dataclass (``config_cls``); the kinds with options are generic in it: ``Attack[KKTConfig]``
C = TypeVar("C")


class Plugin(Generic[C]):
    """What every plugin has: a registry ``name``, a one-line ``description`` and ``config_cls``, the dataclass of its
    options (one help text per field; :class:`NoOptions` when it has none). Plugins are declared as frozen
    dataclasses that subclass their kind's base class below and override the attributes they need; the plugin host
    refuses an object that does not subclass its kind's base, so optional attributes always exist with a default.

    The kinds that take options are generic in their options class: ``class MyAttack(Attack[MyConfig])`` with
    ``config_cls: type[MyConfig] = MyConfig`` types the ``config`` the harness hands to ``run``. A plugin written
    against the plain base (``class MyAttack(Attack)``, ``config_cls: type = MyConfig``) works unchanged: its
    config is then typed ``Any``."""

    name: str = ""
    description: str = ""
    config_cls: type[C] = NoOptions  # type: ignore[assignment]  # the default of the kinds without options


class DatasetSource(Plugin[NoOptions]):
    #: binary rule used when a binary task is asked for without one (see :data:`reconbench.targets.problems.BINARY_RULES`)
    default_binary_rule: str = "parity"

    def load(self, data_root: Path | None) -> ImageData:
        """Load the data, or raise :class:`reconbench.errors.DataError` naming the file to place and where."""
        raise NotImplementedError


# -- target models ------------------------------------------------------------------------------------------
class ModelFamily(Plugin[NoOptions]):
    #: whether the forward pass calls a swappable activation (needed by the KKT attacks' surrogate ReLU)
    swappable_activation: bool = False

    def default_spec(self) -> dict[str, Any]:
        """The architecture options and their defaults (widths, depth, kernel, ...)."""
        return {}

    def homogeneity_degree(self, spec: dict[str, Any]) -> int | None:
        """k such that Phi(x; c theta) = c^k Phi(x; theta) for c > 0, or None when not homogeneous."""
        return None

    def build(self, input_shape: tuple[int, int, int], out_dim: int, spec: dict[str, Any],
              generator: torch.Generator | None = None) -> TargetNet:
        """A freshly initialised network; with ``generator`` the init is deterministic."""
        raise NotImplementedError


# -- attacks ------------------------------------------------------------------------------------------------
#: what an attack may declare it needs to know; the harness withholds the rest
KNOWLEDGE_ITEMS = ("task", "labels", "class_balance", "loss", "weight_decay", "mean_image")
#: knowledge items that tell the training labels, so need a threat model with ``labels``
LABEL_ITEMS = frozenset({"labels", "class_balance"})


@dataclass(frozen=True)
class ThreatModel:
    """What an attack reads about the training run besides the released (final) weights, which it always reads.

    The harness hands an attack exactly this: ``initial_weights`` adds the target's weights before training
    (:attr:`AttackTarget.initial_model`), ``labels`` the class counts of the training set (and so n), ``n`` the
    number of training points alone (:attr:`Knowledge.n`), ``all_but_one`` every training point but the one to
    reconstruct (the informed adversary; declared, not yet run by the harness). The default, ``ThreatModel()``,
    is the final weights only. Facts of the training recipe (loss, weight decay, mean image) are declared in
    :attr:`Attack.needs` and allowed under any threat model."""

    initial_weights: bool = False
    labels: bool = False
    n: bool = False
    all_but_one: bool = False

    @property
    def label(self) -> str:
        """A short name for tables: ``θ`` (final weights only), ``θ0+θ``, ``θ+labels``, ``θ0+θ+n``, ..."""
        parts = ["θ0+θ" if self.initial_weights else "θ"]
        if self.labels:
            parts.append("labels")
        elif self.n:
            parts.append("n")
        if self.all_but_one:
            parts.append("all but one")
        return "+".join(parts)

    @property
    def final_weights_only(self) -> bool:
        return self == ThreatModel()

    def to_dict(self) -> dict[str, bool]:
        return {"initial_weights": self.initial_weights, "labels": self.labels, "n": self.n,
                "all_but_one": self.all_but_one}


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
    n: int | None = None                    # the number of training points (threat model ``n`` or ``labels``)

    @property
    def n_train(self) -> int | None:
        return self.n if self.class_counts is None else int(sum(self.class_counts))


@dataclass
class AttackTarget:
    """What an attack is handed: the released model and the public knowledge."""

    model: TargetNet
    family: str
    homogeneity_degree: int | None
    knowledge: Knowledge
    dtype: torch.dtype = torch.float64
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    #: the target's weights before training, same architecture; only for an attack whose threat model reads them
    initial_model: TargetNet | None = None


@dataclass
class AttackOutput:
    """What an attack returns. Candidates live in the centred input space, like the model's inputs."""

    candidates: torch.Tensor               # (m, C, H, W)
    labels: torch.Tensor                   # (m,) candidate labels (class ids; binary 0/1; regression sign)
    final_loss: float                      # the attack's own objective at the end (used for blind selection)
    multipliers: torch.Tensor | None = None
    trace: list[dict[str, float]] = field(default_factory=list)  # e.g. [{"step": 0, "loss": ...}, ...]
    steps: int = 0
    stopped: str = "completed"             # completed | converged | diverged | early_stop | interrupted
    message: str = ""
    early_stop: dict[str, Any] | None = None   # converged: the rule, the step and the changes measured there


class ProgressFn(Protocol):
    def __call__(self, step: int, total: int, info: dict[str, float] | None = None) -> None: ...


class Attack(Plugin[C]):
    """A reconstruction attack. It sees the released model and the public :class:`Knowledge`, never training images."""

    #: items of :data:`KNOWLEDGE_ITEMS` the attack needs; the harness checks them before any work
    needs: frozenset[str] = frozenset()
    #: what it reads besides the final weights (default: nothing); the harness hands over exactly that
    threat: ThreatModel = ThreatModel()
    #: the stationarity its premise needs of the released weights, read by the regime test (docs/regime.md): "theta"
    #: (theta a KKT point), "regularised" (a stationary point of the weight-decayed loss), "learned" (theta - theta0);
    #: None: no stationarity premise (the target is not gated)
    regime_test: str | None = None
    #: tasks the attack handles
    tasks: frozenset[str] = frozenset(TASKS)
    #: the target `reconbench run --attack NAME` trains when no model is given (a recipe table), or None
    default_recipe: dict[str, Any] | None = None
    #: random-search runs of `reconbench run` when --search-runs is not given
    default_search_runs: int = 1
    #: candidates per training point when --candidates is not given (the papers' m = 2n; the projection loss: n)
    candidate_factor: int = 2
    #: problems of :mod:`reconbench.theory` whose known outcome the attack declares it reproduces (the theory track
    #: holds it to the theorem's promise there: recovery where it promises recovery, none where it promises failure)
    theorems: frozenset[str] = frozenset()
    #: the model family the conformance suite attacks, and the config of its smoke run
    conformance_family: str | None = None
    smoke_config: dict[str, Any] | None = None
    #: BibTeX of the paper the attack implements (``reconbench cite NAME`` prints it); None for baselines and for
    #: attacks that implement no paper. :mod:`reconbench.citations` holds the built-in attacks' entries.
    paper: str | None = None

    def search_space(self) -> dict[str, Distribution]:
        """Distributions over config fields for random search (e.g. the papers' sweep ranges); empty: no search."""
        return {}

    def default_search_space(self) -> dict[str, Distribution]:
        """The space ``reconbench run``'s default search draws from after the default configuration: ranges whose
        runs can move within the default step budget (default: :meth:`search_space`)."""
        return self.search_space()

    def check(self, target: AttackTarget) -> None:
        """Raise :class:`reconbench.errors.IncompatibleError` if the target cannot be attacked, naming what to use."""

    def init_overrides(self, config: C, init_name: str) -> dict[str, Any]:
        """Options of the init regime that this run's config decides (e.g. the KKT attacks search the gaussian
        init scale); the pipeline merges them into the init config unless the user set them."""
        return {}

    def run(self, target: AttackTarget, x0: torch.Tensor, labels: torch.Tensor, config: C, *,
            generator: torch.Generator, progress: ProgressFn | None = None) -> AttackOutput:
        """Reconstruct from starting candidates ``x0`` (m, C, H, W) with fixed ``labels``."""
        raise NotImplementedError

    def run_batch(self, target: AttackTarget, x0s: list[torch.Tensor], labels: torch.Tensor, configs: list[C], *,
                  generators: list[torch.Generator], progress: ProgressFn | None = None,
                  on_done: RunDone | None = None) -> None:
        """Runs i = 0..R-1 of a search (start ``x0s[i]``, ``configs[i]``, ``generators[i]``). The default runs them
        one after another through :meth:`run`; an attack may advance them together (the KKT attacks do).
        ``on_done(i, result, batch)`` is called as run i finishes, with its output or the DivergedError that
        failed it, and a dict saying how it was batched (None: alone)."""
        for i, (x0, config, gen) in enumerate(zip(x0s, configs, generators, strict=True)):
            result: AttackOutput | Exception
            try:
                result = self.run(target, x0, labels, config, generator=gen, progress=progress)
            except DivergedError as exc:  # one failed run must not end the search
                result = exc
            if on_done is not None:
                on_done(i, result, None)


class RunDone(Protocol):
    def __call__(self, index: int, result: AttackOutput | Exception, batch: dict[str, Any] | None) -> None: ...


# -- initialisation regimes ---------------------------------------------------------------------------------
class InitRegime(Plugin[C]):
    #: True when the regime reads training images (ground truth, mixtures with l1*l2 > 0)
    oracle: bool = False

    def is_oracle(self, config: C) -> bool:
        """Whether this configuration reads training images."""
        return self.oracle

    def make(self, problem: Problem, labels: torch.Tensor, config: C, *,
             generator: torch.Generator, dtype: torch.dtype) -> torch.Tensor:
        """Starting candidates (m, C, H, W) in the problem's centred space, with labels matching ``labels``."""
        raise NotImplementedError


# -- metrics ------------------------------------------------------------------------------------------------
class MetricResult(TypedDict, total=False):
    """What :meth:`Metric.compute` returns: ``summary`` (flat scalars), ``per_image`` (one list per column, one value
    per training image), ``details``; or ``available: False`` with a ``reason``. None where undefined, never NaN."""

    summary: dict[str, Any]
    per_image: dict[str, list[Any]]
    details: dict[str, Any]
    available: bool
    reason: str


#: what a reported number can take, for clipping intervals over seeds: training-image counts lie in [0, n], other
#: counts in [0, inf), shares in [0, 1], similarities (SSIM, correlation) in [-1, 1]
VALUE_KINDS = ("count", "count_unbounded", "share", "similarity", "nonnegative", "any")


@dataclass(frozen=True)
class Reported:
    """One summary number a metric reports, declared by the metric: what it is called, which values it can take,
    which direction means more leakage, and whether leaderboards and ``reconbench run`` show it by default.

    Tables, the console summary and the claims page read these declarations, so a new metric that declares its
    numbers is shown with no change elsewhere."""

    key: str
    #: may name options of the declaring metric's config, filled in from the protocol that computed the number
    #: (``"corr > {threshold:g}"``: :func:`reconbench.evaluation.reported.label_of`)
    label: str
    values: str = "any"                  # one of VALUE_KINDS
    higher_is_better: bool = True        # True: a larger value means the attack recovered more
    fmt: str = ".3g"
    #: position among a leaderboard's default columns (smaller first); None: not a default column
    column: int | None = None
    #: older summary keys of the same number, tried after ``key`` when reading stored cells
    aliases: tuple[str, ...] = ()
    #: the default column is shown only when some cell records the key (a metric that older cells lack)
    optional_column: bool = False
    #: position in ``reconbench run``'s printed summary (smaller first); None: not printed
    console: int | None = None


class Metric(Plugin[C]):
    """An evaluation metric."""

    higher_is_better: bool = True
    #: the summary key ``higher_is_better`` refers to; None: the metric's name
    headline: str | None = None
    #: names of metrics to compute first
    requires: tuple[str, ...] = ()
    #: the summary numbers this metric reports, as tables and the console show them (see :class:`Reported`)
    reports: tuple[Reported, ...] = ()

    @property
    def headline_key(self) -> str:
        return self.headline or self.name

    def check_config(self, config: C) -> None:
        """Raise :class:`reconbench.errors.ReconbenchError` on a bad option value."""

    def fixed(self, config: C) -> dict[str, Any]:
        """Choices that are not options, recorded with the protocol (e.g. a library's fixed sigma)."""
        return {}

    def compute(self, evaluation: Any, config: C) -> MetricResult:
        """Score an evaluation context (:class:`reconbench.evaluation.context.Evaluation`: candidates matched to a
        problem)."""
        raise NotImplementedError


# -- defenses -----------------------------------------------------------------------------------------------
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


#: the optional training-time methods of a defense (a defense that overrides none acts only before release)
TRAINING_HOOKS = ("start_training", "after_step", "end_training")


class Defense(Plugin[C]):
    """A defense: ``apply`` changes the trained model before release; a defense that acts during training overrides
    any of the training-time methods below (its ``apply`` may then do nothing)."""

    #: the option that sets how strong the defense is (the privacy-utility axis of a suite varies it)
    strength: str | None = None

    def apply(self, model: TargetNet, problem: Problem, config: C, *,
              generator: torch.Generator) -> dict[str, Any] | None:
        """Modify the trained model in place before release (e.g. add noise to the weights); may return numbers to
        record in the model card."""
        raise NotImplementedError

    def start_training(self, run: TrainingRun, config: C, *, generator: torch.Generator) -> None:
        """Change the loop's pieces in ``run`` before the first step."""

    def after_step(self, run: TrainingRun, step: int, loss: float, config: C) -> bool:
        """Called after every optimiser step; return True to stop training now."""
        return False

    def end_training(self, run: TrainingRun, config: C) -> None:
        """Undo wrappers (``run.model`` must be the plain target network afterwards) and record final numbers."""


def acts_during_training(defense: Defense[Any]) -> bool:
    """Whether a defense overrides any training-time method of :class:`Defense`."""
    return any(getattr(type(defense), m, None) not in (None, getattr(Defense, m)) for m in TRAINING_HOOKS)


# -- search strategies --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Trial:
    """What a search strategy is told about one finished search run."""

    run: int                     # the run's index in the cell (0..R-1)
    params: dict[str, Any]       # the values the strategy proposed for it (the searched options only)
    objective: float | None      # the number to minimise; None: the run failed (no usable objective)


class SearchSession(Protocol):
    """One cell's search in progress: ``ask`` proposes the next batch of runs (the harness runs them together), ``tell``
    reports them back in the order they were asked."""

    def ask(self) -> list[dict[str, Any]]: ...

    def tell(self, trials: list[Trial]) -> None: ...


class SearchStrategy(Plugin[C]):
    """How the configurations of a cell's search runs are chosen from the attack's declared search space.

    The harness asks the session for a batch of option values, runs the batch (the KKT attacks advance it as one
    batched computation), and tells the session each run's objective: the run's final attack loss, which an attacker
    has. Only a strategy declared ``oracle`` is told the oracle extraction score instead, which reads the training
    images; its results are marked ‡ like oracle selection."""

    #: True: the objective is the oracle extraction score (reads training images); False: the final attack loss
    oracle: bool = False
    #: True: the session is given the attack's ``default_search_space()`` (ranges that move within the default step
    #: budget) instead of its declared ``search_space()``, and proposes the default configuration as run 0 ({})
    from_default: bool = False

    def check(self) -> None:
        """Raise :class:`reconbench.errors.ReconbenchError` naming the fix when the strategy cannot run here (e.g. an
        optional dependency is missing); called before any training."""

    def start(self, space: dict[str, Distribution], runs: int, seed: int, config: C) -> SearchSession:
        """A session proposing ``runs`` configurations over ``space`` (options the user fixed are left out of it),
        deterministic given ``seed`` and what it is told."""
        raise NotImplementedError


#: the base class a registered object of each plugin kind must subclass
PLUGIN_BASES: dict[str, type[Plugin[Any]]] = {"attacks": Attack, "models": ModelFamily, "datasets": DatasetSource,
                                         "inits": InitRegime, "metrics": Metric, "defenses": Defense,
                                         "searches": SearchStrategy}
