"""The KKT reconstruction attacks of Haim et al. 2022 and Buzaglo et al. 2023 over one stationarity engine.

Each attack supplies the per-candidate terms s_i of the stationarity condition
theta = grad_theta (1/m) sum_i s_i and the multipliers' prior; the shared loop (reconbench/attack/kkt/loop.py)
minimises

    L = sum_p ||theta_p - grad_p (1/m) sum_i s_i||^2 + box prior(x) + multiplier penalty(lambda)

over the candidates x (started by the init regime) and the multipliers lambda. See
docs/method/kkt-attacks.md for what the reference code does; the defaults follow
it except where a help text says otherwise.

    haim_binary_kkt   s_i = lambda_i y_i Phi(x_i)                  y_i = -1 for the first half, +1 after
    multiclass_kkt    s_i = lambda_i (Phi_{y_i}(x_i) - max_{j != y_i} Phi_j(x_i))   (max re-evaluated)
                      or, with multipliers=per_pair, s_i = sum_{j != y_i} lambda_ij (Phi_{y_i} - Phi_j)(x_i)
    general_loss_wd   s_i = lambda_i Phi(x_i), lambda_i signed, no labels (weight decay absorbed into lambda)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, TypeVar

import torch
import torch.nn.functional as F

from reconbench import citations, hookimpl, plugins
from reconbench.attack.kkt.batched import (
    BatchTerms,
    bytes_per_run,
    group_runs,
    plan_chunks,
    run_stationarity_batch,
)
from reconbench.attack.kkt.loop import (
    Coefficients,
    Penalty,
    StationarityConfig,
    lambda_floor_penalty,
    run_stationarity_attack,
)
from reconbench.attack.kkt.rescale import rescaled_target
from reconbench.attack.kkt.stationarity import full_chain
from reconbench.config import Limit, LogUniform, Uniform, config_to_dict, option
from reconbench.errors import IncompatibleError
from reconbench.interfaces import Attack, AttackOutput, AttackTarget, ProgressFn, RunDone, ThreatModel
from reconbench.nets import TargetNet

#: the KKT attack for each task, named in the errors that send a user elsewhere
ATTACK_FOR_TASK = {"binary": "haim_binary_kkt", "multiclass": "multiclass_kkt",
                   "regression": "general_loss_wd"}
#: the papers' sweep: random search over these four ranges (docs/method/kkt-attacks.md#sweep-ranges)
PAPER_SPACE = {
    "init_scale": LogUniform(1e-6, 0.1),
    "lr": LogUniform(1e-5, 1.0),
    "lambda_min": Uniform(0.01, 0.5),
    "alpha": Uniform(10.0, 500.0),
}


# -- configs ------------------------------------------------------------------------------------------------
#: ranges of the options every KKT attack shares (checked by build_config before any work); steps = 0 is the null
#: attack (the candidates are the initialisation), which the claims suites measure
STATIONARITY_LIMITS = {
    "steps": Limit(ge=0), "lr": Limit(gt=0), "init_scale": Limit(gt=0), "alpha": Limit(gt=0),
    "lambda_lr": Limit(ge=0), "momentum": Limit(ge=0, lt=1), "box": Limit(gt=0), "eval_every": Limit(ge=1),
}


@dataclass
class ClassifierKKTConfig(StationarityConfig):
    """Classification: lambda_i ~ U[0, 1), a soft floor 5 sum max(0, lambda_min - lambda_i)^2."""

    LIMITS: ClassVar[dict[str, Limit]] = STATIONARITY_LIMITS
    lambda_min: float = option(0.05, "lambda_min of the soft floor on the multipliers (reference 0.05)", ge=0)
    lambda_penalty_weight: float = option(5.0, "weight of the lambda_min penalty (reference 5)", ge=0)


@dataclass
class BinaryKKTConfig(ClassifierKKTConfig):
    """Single-run defaults from the good region of the cpu-mini searches (MNIST and CIFAR-10, n = 20; runs
    with lr 0.28-0.47 recovered the most), inside the range of Haim et al.'s provided runs."""

    lr: float = option(0.3, "eta_x: learning rate of the candidates' SGD-momentum (provided runs 0.03-0.55)")
    init_scale: float = option(3e-4, "s_x: starting candidates x ~ N(0, s_x^2 I) in the centred space, "
                                     "passed to the `gaussian` init regime (provided runs 9e-4-3e-2)")
    alpha: float = option(200.0, "alpha of the surrogate ReLU backward sigma(alpha z) (provided runs 19-150; "
                                 "reference default 300)")
    lambda_min: float = option(0.4, "lambda_min of the soft floor on the multipliers (provided runs "
                                    "0.42-0.50; reference default 0.05)", ge=0)


@dataclass
class MulticlassKKTConfig(ClassifierKKTConfig):
    lambda_lr: float = option(0.1, "eta_lambda: learning rate of the multipliers' SGD-momentum (Buzaglo et "
                                   "al.'s multiclass runs use 0.48-0.95 with m = 1000; binary default 1e-4)")
    multipliers: Literal["per_candidate", "per_pair"] = option(
        "per_candidate",
        "per_candidate: one lambda on the largest wrong logit, re-chosen every step (reference); "
        "per_pair: one lambda per (candidate, wrong class), the general multiclass stationarity condition, "
        "with lambda_min on each candidate's sum and lambda_ij >= 0 (both soft)")


@dataclass
class GeneralLossConfig(StationarityConfig):
    """Regression / any loss trained with weight decay: lambda_i ~ N(0, 1), signed, no penalty, no labels."""

    LIMITS: ClassVar[dict[str, Limit]] = STATIONARITY_LIMITS


# -- checks shared by the three attacks ---------------------------------------------------------------------
def _other_attacks(task: str) -> str:
    kkt = set(ATTACK_FOR_TASK.values())
    names = [n for n in plugins.names("attacks")
             if n not in kkt and task in plugins.attack(n).tasks]
    return ", ".join(names) if names else "none is registered yet"


def check_kkt_target(attack: Attack[Any], target: AttackTarget) -> None:
    """The checks every KKT attack makes before any work; each error names what to use instead."""
    k = target.knowledge
    wrong_outputs = (k.task == "binary" and k.out_dim != 1) or (k.task == "multiclass" and k.out_dim < 2)
    if k.task not in attack.tasks or wrong_outputs:
        fit = ATTACK_FOR_TASK.get(k.task, "another attack")
        raise IncompatibleError(
            f"attack {attack.name!r} handles {', '.join(sorted(attack.tasks))} targets, but this target is a "
            f"{k.task} model with {k.out_dim} output(s) ({k.num_classes} classes); use --attack {fit} "
            "instead")
    family = plugins.model(target.family)
    if not family.swappable_activation or not isinstance(target.model, TargetNet):
        swappable = [n for n in plugins.names("models") if plugins.model(n).swappable_activation]
        raise IncompatibleError(
            f"attack {attack.name!r} replaces the target's ReLU by a surrogate, but model family "
            f"{target.family!r} does not call a swappable activation. Use an attack that does not need it "
            f"(for {k.task} targets: {_other_attacks(k.task)}), or train the target with a family that has "
            f"one ({', '.join(swappable)})")


def _uniform(shape: tuple[int, ...], generator: torch.Generator, like: torch.Tensor) -> torch.Tensor:
    return torch.rand(shape, generator=generator, dtype=torch.float64).to(like)


# -- the equations for R runs at once (batched search; adjoints written out, C being linear in lambda) ------------
def _column(configs: Sequence[Any], name: str, like: torch.Tensor, dims: int) -> torch.Tensor:
    return torch.tensor([float(getattr(c, name)) for c in configs], dtype=like.dtype,
                        device=like.device).reshape(-1, *([1] * dims))


class _FloorPenalty:
    """Per run: w sum max(0, lambda_min - lambda)^2 (see :func:`lambda_floor_penalty`)."""

    def __init__(self, configs: Sequence[ClassifierKKTConfig], like: torch.Tensor, dims: int) -> None:
        self.floor = _column(configs, "lambda_min", like, dims)
        self.weight = _column(configs, "lambda_penalty_weight", like, dims)
        self.neg_twice_weight = -2.0 * self.weight   # exact; the product penalty_grad forms first

    def penalty(self, lam: torch.Tensor) -> torch.Tensor:
        return (self.weight * (self.floor - lam).clamp_min(0) ** 2).flatten(1).sum(dim=1)

    def penalty_grad(self, lam: torch.Tensor) -> torch.Tensor:
        return -2.0 * self.weight * (self.floor - lam).clamp_min(0)

    def penalty_and_grad(self, lam: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`penalty` and :meth:`penalty_grad` from one shortfall max(0, floor - lambda): the same numbers,
        bit for bit, in five tensor operations instead of nine."""
        short = (self.floor - lam).clamp_min_(0)
        return (self.weight * short.square()).flatten(1).sum(dim=1), self.neg_twice_weight * short


class BinaryTerms(_FloorPenalty):
    """C_i = lambda_i y_i."""

    def __init__(self, labels: torch.Tensor, configs: Sequence[ClassifierKKTConfig], like: torch.Tensor) -> None:
        super().__init__(configs, like, 1)
        self.y = (2.0 * labels.to(like) - 1.0)[None, :]

    def coefficients(self, out: torch.Tensor, lam: torch.Tensor) -> torch.Tensor:
        return (lam * self.y)[..., None]

    def lambda_vjp(self, out: torch.Tensor, cbar: torch.Tensor) -> torch.Tensor:
        return cbar[..., 0] * self.y


class MulticlassTerms(_FloorPenalty):
    """C_i = lambda_i (e_{y_i} - e_{j*}), j* the largest wrong output, re-chosen at every step."""

    def __init__(self, labels: torch.Tensor, configs: Sequence[ClassifierKKTConfig], num_classes: int,
                 like: torch.Tensor) -> None:
        super().__init__(configs, like, 1)
        self.y = labels.long().to(like.device)[None, :, None]
        self.own = F.one_hot(labels.long(), num_classes).to(like)[None]
        #: the outputs of the last direction (held, so that no other tensor can take their place), their version
        #: counter then, and the direction
        self._last: tuple[torch.Tensor, int, torch.Tensor] | None = None

    def _direction(self, out: torch.Tensor) -> torch.Tensor:
        """e_y - e_j* for the outputs ``out``; the one of the last call when ``out`` is the same tensor, unchanged
        since (its version counter), as when an evaluation asks for the coefficients and then for their adjoint."""
        last = self._last
        if last is not None and last[0] is out and last[1] == out._version:
            return last[2]
        wrong = out.scatter(2, self.y.expand(len(out), -1, -1), float("-inf")).argmax(dim=2, keepdim=True)
        direction = self.own - torch.zeros_like(out).scatter_(2, wrong, 1.0)   # no one_hot: it syncs on CUDA
        self._last = (out, out._version, direction)
        return direction

    def coefficients(self, out: torch.Tensor, lam: torch.Tensor) -> torch.Tensor:
        return lam[..., None] * self._direction(out)

    def lambda_vjp(self, out: torch.Tensor, cbar: torch.Tensor) -> torch.Tensor:
        return (cbar * self._direction(out)).sum(dim=2)


class PairTerms:
    """C_i = sum_{j != y_i} lambda_ij (e_{y_i} - e_j); floor on sum_j lambda_ij and on each lambda_ij at 0."""

    def __init__(self, labels: torch.Tensor, configs: Sequence[ClassifierKKTConfig], num_classes: int,
                 like: torch.Tensor) -> None:
        y = labels.long()
        self.own = F.one_hot(y, num_classes).to(like)[None]
        self.others = torch.stack([torch.cat([torch.arange(c), torch.arange(c + 1, num_classes)])
                                   for c in y.tolist()]).to(like.device)[None]
        self.floor = _column(configs, "lambda_min", like, 1)
        self.weight = _column(configs, "lambda_penalty_weight", like, 1)

    def coefficients(self, out: torch.Tensor, lam: torch.Tensor) -> torch.Tensor:
        others = self.others.expand(len(lam), -1, -1)
        return self.own * lam.sum(dim=2, keepdim=True) - torch.zeros_like(out).scatter(2, others, lam)

    def lambda_vjp(self, out: torch.Tensor, cbar: torch.Tensor) -> torch.Tensor:
        others = self.others.expand(len(cbar), -1, -1)
        return (cbar * self.own).sum(dim=2, keepdim=True) - cbar.gather(2, others)

    def penalty(self, lam: torch.Tensor) -> torch.Tensor:
        w = self.weight[..., None]
        total = (self.weight * (self.floor - lam.sum(dim=2)).clamp_min(0) ** 2).sum(dim=1)
        return total + (w * (-lam).clamp_min(0) ** 2).flatten(1).sum(dim=1)

    def penalty_grad(self, lam: torch.Tensor) -> torch.Tensor:
        w = self.weight[..., None]
        on_sum = -2.0 * self.weight * (self.floor - lam.sum(dim=2)).clamp_min(0)
        return on_sum[..., None] - 2.0 * w * (-lam).clamp_min(0)

    def penalty_and_grad(self, lam: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.penalty(lam), self.penalty_grad(lam)


class SignedTerms:
    """C_i = lambda_i, no penalty (regression)."""

    def coefficients(self, out: torch.Tensor, lam: torch.Tensor) -> torch.Tensor:
        return lam[..., None]

    def lambda_vjp(self, out: torch.Tensor, cbar: torch.Tensor) -> torch.Tensor:
        return cbar[..., 0]

    def penalty(self, lam: torch.Tensor) -> torch.Tensor:
        return lam.new_zeros(len(lam))

    def penalty_grad(self, lam: torch.Tensor) -> torch.Tensor:
        return torch.zeros_like(lam)

    def penalty_and_grad(self, lam: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.penalty(lam), self.penalty_grad(lam)


def _note_rescale(out: AttackOutput, config: StationarityConfig, factor: float) -> AttackOutput:
    """Say in the run's message by how much the weights were scaled (the multipliers are for the scaled weights)."""
    if config.rescale != "none":
        out.message += (f"; weights scaled by c = {factor:.4g} ({config.rescale}): the multipliers are those of the "
                         "scaled weights")
    return out


#: the options class of one KKT attack
KC = TypeVar("KC", bound=StationarityConfig)


class _KKTAttack(Attack[KC]):
    """Shared plumbing; each attack defines its equations in ``initial_multipliers`` and
    ``stationarity_terms``."""

    def search_space(self) -> dict[str, Any]:
        return dict(PAPER_SPACE)

    def default_search_space(self) -> dict[str, Any]:
        # `run`'s default search: eta_x from the range of Haim et al.'s provided runs (0.03-0.55) up to the papers'
        # 1.0; below it the candidates of MNIST targets do not move in 3,000 steps (docs/search.md)
        return {**self.search_space(), "lr": LogUniform(0.03, 1.0)}

    def check(self, target: AttackTarget) -> None:
        check_kkt_target(self, target)

    def init_overrides(self, config: StationarityConfig, init_name: str) -> dict[str, Any]:
        """The papers search the init scale s_x with the attack's options: hand it to the gaussian regime."""
        return {"scale": config.init_scale} if init_name == "gaussian" else {}

    def initial_multipliers(self, m: int, config: KC, num_classes: int, generator: torch.Generator,
                            like: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def stationarity_terms(self, labels: torch.Tensor, config: KC, num_classes: int,
                           like: torch.Tensor) -> tuple[Coefficients, Penalty]:
        raise NotImplementedError

    def batch_terms(self, labels: torch.Tensor, configs: list[KC], num_classes: int,
                    like: torch.Tensor) -> BatchTerms:
        raise NotImplementedError

    def finish_output(self, target: AttackTarget, output: AttackOutput) -> AttackOutput:
        """A last touch on a run's output (the regression attack labels its candidates)."""
        return output

    def run(self, target: AttackTarget, x0: torch.Tensor, labels: torch.Tensor, config: KC, *,
            generator: torch.Generator, progress: ProgressFn | None = None) -> AttackOutput:
        k = target.knowledge.out_dim
        lam0 = self.initial_multipliers(len(x0), config, k, generator, x0)
        coefficients, penalty = self.stationarity_terms(labels, config, k, x0)
        attacked, factor = rescaled_target(target, config.rescale)
        out = run_stationarity_attack(attacked, x0, labels, lam0, coefficients, penalty, config, progress=progress)
        return self.finish_output(target, _note_rescale(out, config, factor))

    def run_batch(self, target: AttackTarget, x0s: list[torch.Tensor], labels: torch.Tensor, configs: list[KC],
                  *, generators: list[torch.Generator], progress: ProgressFn | None = None,
                  on_done: RunDone | None = None) -> None:
        """Runs i = 0..R-1 (starts ``x0s[i]``, ``configs[i]``, each run's generator) advanced together: runs that
        differ only in per-run options share a batch, split into chunks that fit memory (batched.py). Each
        run's multipliers are drawn from its generator, as :meth:`run` does. ``on_done(i, output, batch)`` is
        called for every run of a chunk as the chunk finishes (batch: :meth:`BatchInfo.to_dict`)."""
        self.run_batched(target, x0s, labels, configs, generators=generators, progress=progress, on_done=on_done)

    def run_batched(self, target: AttackTarget, x0s: list[torch.Tensor], labels: torch.Tensor, configs: list[Any],
                    *, generators: list[torch.Generator], progress: ProgressFn | None = None,
                    on_done: RunDone | None = None) -> list[AttackOutput]:
        """:meth:`run_batch`, returning the outputs in run order."""
        k, m = target.knowledge.out_dim, len(x0s[0])
        lam0s = [self.initial_multipliers(m, c, k, g, x0) for c, g, x0 in zip(configs, generators, x0s, strict=True)]
        chain = full_chain(target.model)
        dims = ([x0s[0][0].numel()] + [layer.out_features for layer in chain] if chain is not None
                else [x0s[0][0].numel(), k])
        results: list[AttackOutput | None] = [None] * len(configs)
        for group in group_runs([config_to_dict(c) for c in configs]):
            cfg0 = configs[group[0]]
            attacked, factor = rescaled_target(target, cfg0.rescale)   # rescale is the same within a group
            chunks, reason = plan_chunks(group, bytes_per_run(target, m, dims), target.device, cfg0.max_batch)
            for j, chunk in enumerate(chunks):
                cfgs = [configs[i] for i in chunk]
                like = x0s[chunk[0]].to(dtype=target.dtype, device=target.device)
                x0 = torch.stack([x0s[i] for i in chunk]).to(like)
                lam0 = torch.stack([lam0s[i] for i in chunk]).to(like)
                per_run = [self.stationarity_terms(labels, c, k, like) for c in cfgs]
                outputs, info = run_stationarity_batch(attacked, x0, labels, lam0, cfgs,
                                                       self.batch_terms(labels, cfgs, k, like), per_run,
                                                       progress=progress)
                info.runs, info.chunk, info.chunks, info.chunk_reason = list(chunk), j, len(chunks), reason
                for i, out in zip(chunk, outputs, strict=True):
                    results[i] = done = self.finish_output(target, _note_rescale(out, cfg0, factor))
                    if on_done is not None:
                        on_done(i, done, info.to_dict())
        return [r for r in results if r is not None]


# -- Haim et al. 2022: binary classifiers -------------------------------------------------------------------
@dataclass(frozen=True)
class HaimBinaryKKT(_KKTAttack[BinaryKKTConfig]):
    name: str = "haim_binary_kkt"
    regime_test: str | None = "theta"   # its premise: the stationarity the regime test measures
    paper: str | None = citations.HAIM_2022
    description: str = ("Haim et al. 2022: KKT stationarity attack on a binary classifier, "
                        "s_i = lambda_i y_i Phi(x_i)")
    needs: frozenset[str] = frozenset({"class_balance"})   # for the labels by halves
    threat: ThreatModel = ThreatModel(labels=True)
    tasks: frozenset[str] = frozenset({"binary"})
    config_cls: type[BinaryKKTConfig] = BinaryKKTConfig
    default_recipe: dict[str, Any] | None = field(default_factory=lambda: {
        "problem": {"dataset": "digits", "task": "binary", "n_per_class": 10},
        "family": "mlp", "model": {"widths": [1000]},
        "train": {"steps": 3000, "lr": 0.01, "schedule": "inverse_loss"}})
    default_search_runs: int = 6

    def initial_multipliers(self, m: int, config: ClassifierKKTConfig, num_classes: int,
                            generator: torch.Generator, like: torch.Tensor) -> torch.Tensor:
        return _uniform((m,), generator, like)                # lambda_i ~ U[0, 1)

    def stationarity_terms(self, labels: torch.Tensor, config: ClassifierKKTConfig, num_classes: int,
                           like: torch.Tensor) -> tuple[Coefficients, Penalty]:
        y = 2.0 * labels.to(like) - 1.0                        # y_i in {-1, +1}; the first half is -1

        def coefficients(out: torch.Tensor, lam: torch.Tensor) -> torch.Tensor:
            return (lam * y)[:, None]                          # s_i = lambda_i y_i Phi(x_i)

        def penalty(lam: torch.Tensor) -> torch.Tensor:        # 5 sum max(0, lambda_min - lambda_i)^2
            return lambda_floor_penalty(lam, config.lambda_min, config.lambda_penalty_weight)

        return coefficients, penalty

    def batch_terms(self, labels: torch.Tensor, configs: Sequence[ClassifierKKTConfig], num_classes: int,
                    like: torch.Tensor) -> BatchTerms:
        return BinaryTerms(labels, configs, like)


# -- Buzaglo et al. 2023: multiclass classifiers ------------------------------------------------------------
@dataclass(frozen=True)
class MulticlassKKT(_KKTAttack[MulticlassKKTConfig]):
    name: str = "multiclass_kkt"
    regime_test: str | None = "theta"   # its premise: the stationarity the regime test measures
    paper: str | None = citations.BUZAGLO_2023
    description: str = ("Buzaglo et al. 2023: KKT attack on a multiclass classifier, "
                        "s_i = lambda_i (Phi_y - max_{j != y} Phi_j)(x_i), or one lambda per wrong class")
    needs: frozenset[str] = frozenset({"class_balance"})   # for the class blocks
    threat: ThreatModel = ThreatModel(labels=True)
    tasks: frozenset[str] = frozenset({"multiclass"})
    config_cls: type[MulticlassKKTConfig] = MulticlassKKTConfig
    # 10 digits (1 per class) keep n well below the 64 pixels: with 2 per class the reconstructions are no closer
    # to the training images than random held-out digits are (docs/calibration.md); with 1 per class they are
    default_recipe: dict[str, Any] | None = field(default_factory=lambda: {
        "problem": {"dataset": "digits", "task": "multiclass", "n_per_class": 1},
        "family": "mlp", "model": {"widths": [1000]},
        "train": {"steps": 5000, "lr": 0.05, "schedule": "inverse_loss"}})
    default_search_runs: int = 6

    def search_space(self) -> dict[str, Any]:
        # the papers' four ranges, plus eta_lambda, which Buzaglo et al. tuned for their multiclass runs
        # (their m = 1000; the lambda-gradient grows like 1/m, so this range sits below their 0.48-0.95)
        return {**PAPER_SPACE, "lambda_lr": LogUniform(1e-3, 0.3)}

    def default_search_space(self) -> dict[str, Any]:
        # `run`'s default search: eta_x where single default runs of 3,000 steps reconstruct every image of the
        # default target (1e-4 to 3e-2 all 10 of 10; 0.1: 9; 0.3 and 1.0: 1 and 0; docs/search.md)
        return {**self.search_space(), "lr": LogUniform(1e-4, 0.05)}

    def initial_multipliers(self, m: int, config: MulticlassKKTConfig, num_classes: int,
                            generator: torch.Generator, like: torch.Tensor) -> torch.Tensor:
        if config.multipliers == "per_candidate":
            return _uniform((m,), generator, like)                  # lambda_i ~ U[0, 1)
        return _uniform((m, num_classes - 1), generator, like)      # lambda_ij ~ U[0, 1)

    def stationarity_terms(self, labels: torch.Tensor, config: MulticlassKKTConfig, num_classes: int,
                           like: torch.Tensor) -> tuple[Coefficients, Penalty]:
        y = labels.long()
        own = F.one_hot(y, num_classes).to(like)                    # e_{y_i}

        if config.multipliers == "per_candidate":
            def coefficients(out: torch.Tensor, lam: torch.Tensor) -> torch.Tensor:
                # j* = argmax_{j != y_i} Phi_j(x_i), re-evaluated at every step
                wrong = out.scatter(1, y[:, None], float("-inf")).argmax(dim=1)
                return lam[:, None] * (own - F.one_hot(wrong, num_classes).to(like))

            def penalty(lam: torch.Tensor) -> torch.Tensor:         # 5 sum max(0, lambda_min - lambda_i)^2
                return lambda_floor_penalty(lam, config.lambda_min, config.lambda_penalty_weight)

            return coefficients, penalty

        others = torch.stack([torch.cat([torch.arange(c), torch.arange(c + 1, num_classes)])
                              for c in y.tolist()]).to(like.device)  # (m, K-1): the wrong classes of i

        def pair_coefficients(out: torch.Tensor, lam: torch.Tensor) -> torch.Tensor:
            # sum_{j != y_i} lambda_ij (e_{y_i} - e_j)
            return own * lam.sum(dim=1, keepdim=True) - torch.zeros_like(own).scatter(1, others, lam)

        def pair_penalty(lam: torch.Tensor) -> torch.Tensor:        # floor on sum_j lambda_ij, lambda_ij >= 0
            return (lambda_floor_penalty(lam.sum(dim=1), config.lambda_min, config.lambda_penalty_weight)
                    + lambda_floor_penalty(lam, 0.0, config.lambda_penalty_weight))

        return pair_coefficients, pair_penalty

    def batch_terms(self, labels: torch.Tensor, configs: list[MulticlassKKTConfig], num_classes: int,
                    like: torch.Tensor) -> BatchTerms:
        if configs[0].multipliers == "per_candidate":
            return MulticlassTerms(labels, configs, num_classes, like)
        return PairTerms(labels, configs, num_classes, like)


# -- Buzaglo et al. 2023: general losses with weight decay --------------------------------------------------
@dataclass(frozen=True)
class GeneralLossWD(_KKTAttack[GeneralLossConfig]):
    name: str = "general_loss_wd"
    regime_test: str | None = "regularised"   # its premise: the stationarity the regime test measures
    paper: str | None = citations.BUZAGLO_2023
    description: str = ("Buzaglo et al. 2023: weight-decay stationarity attack for regression losses (MSE, L2.5, "
                        "Huber), s_i = lambda_i Phi(x_i) with signed lambda and no labels")
    needs: frozenset[str] = frozenset({"loss"})
    threat: ThreatModel = ThreatModel()   # final weights only: signed multipliers, no labels
    tasks: frozenset[str] = frozenset({"regression"})
    config_cls: type[GeneralLossConfig] = GeneralLossConfig
    losses: tuple[str, ...] = ("mse", "l25", "huber")
    default_recipe: dict[str, Any] | None = field(default_factory=lambda: {
        "problem": {"dataset": "digits", "task": "regression", "n_per_class": 10},
        "family": "mlp", "model": {"widths": [1000]},
        "train": {"steps": 3000, "lr": 0.01, "weight_decay": 1e-3}})
    default_search_runs: int = 6

    def search_space(self) -> dict[str, Any]:
        return {k: v for k, v in PAPER_SPACE.items() if k != "lambda_min"}  # no lambda_min without a floor

    def check(self, target: AttackTarget) -> None:
        check_kkt_target(self, target)
        loss = target.knowledge.loss
        if loss not in self.losses:
            raise IncompatibleError(f"attack {self.name!r} covers the losses {', '.join(self.losses)}; this "
                                    f"target was trained with {loss!r}")

    def initial_multipliers(self, m: int, config: GeneralLossConfig, num_classes: int,
                            generator: torch.Generator, like: torch.Tensor) -> torch.Tensor:
        return torch.randn((m,), generator=generator, dtype=torch.float64).to(like)   # lambda_i ~ N(0, 1)

    def stationarity_terms(self, labels: torch.Tensor, config: GeneralLossConfig, num_classes: int,
                           like: torch.Tensor) -> tuple[Coefficients, Penalty]:
        def coefficients(out: torch.Tensor, lam: torch.Tensor) -> torch.Tensor:
            return lam[:, None]                                # s_i = lambda_i Phi(x_i): no labels

        def no_penalty(lam: torch.Tensor) -> torch.Tensor:     # lambda is signed: no floor
            return lam.new_zeros(())

        return coefficients, no_penalty

    def batch_terms(self, labels: torch.Tensor, configs: list[GeneralLossConfig], num_classes: int,
                    like: torch.Tensor) -> BatchTerms:
        return SignedTerms()

    def finish_output(self, target: AttackTarget, output: AttackOutput) -> AttackOutput:
        with torch.no_grad():   # no labels were used; report the side of 0 the model puts each candidate on
            output.labels = (target.model(output.candidates).reshape(-1) > 0).long().to(output.labels.device)
        return output


ATTACKS = [HaimBinaryKKT(), MulticlassKKT(), GeneralLossWD()]


@hookimpl
def register_attacks(register):  # type: ignore[no-untyped-def]
    for attack in ATTACKS:
        register(attack)
