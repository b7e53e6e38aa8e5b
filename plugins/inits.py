"""Built-in initialisation regimes for attack candidates.

Every regime returns candidates in the problem's *centred* space (pixel value minus the training mean
image), the space the target model reads. Regimes that take images from data take them with the candidate's
own label: the k-th candidate of label c gets the k-th image of label c in the source (training set or decoy
pool, in the problem's order).

``oracle`` (class level) says whether a regime *can* read training images; ``is_oracle(config)`` says whether
a given configuration does (a mixture with l1 * l2 == 0 does not). Runkel et al.'s 5 x 5 mixture grid is built
by :func:`mixture_grid`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

from reconbench import hookimpl
from reconbench.config import option
from reconbench.data import Problem
from reconbench.errors import IncompatibleError, ReconbenchError
from reconbench.interfaces import InitRegime

#: the lambda values of Runkel et al.'s mixture grid (their Figs. 10-12)
PAPER_GRID = (0.0, 0.25, 0.5, 0.75, 1.0)


def rank_within_label(labels: torch.Tensor) -> torch.Tensor:
    """For each candidate, how many earlier candidates share its label (0 for the first of each label)."""
    lab = labels.long().cpu()
    ranks = torch.zeros_like(lab)
    for c in lab.unique():
        where = (lab == c).nonzero().flatten()
        ranks[where] = torch.arange(len(where))
    return ranks


def take_by_label(pool: torch.Tensor, pool_labels: np.ndarray, labels: torch.Tensor, *, overflow: str,
                  source: str, fix: str) -> torch.Tensor:
    """Candidate j (label c, rank k within c) <- the k-th pool image of label c.

    ``overflow`` decides what happens when a label has more candidates than pool images:
    ``cycle`` reuses them in order (image k mod n_c, nothing added), ``error`` raises naming ``fix``.
    """
    out = torch.empty((len(labels), *pool.shape[1:]), dtype=pool.dtype)
    ranks = rank_within_label(labels)
    pool_lab = torch.as_tensor(pool_labels).long()
    for c in labels.long().cpu().unique():
        have = (pool_lab == c).nonzero().flatten()
        want = (labels.long().cpu() == c).nonzero().flatten()
        if len(have) == 0:
            raise IncompatibleError(f"the {source} has no image of label {int(c)}; {fix}")
        if len(want) > len(have) and overflow == "error":
            raise IncompatibleError(f"{len(want)} candidates of label {int(c)} need as many {source} images, "
                                    f"but it holds {len(have)}; {fix}")
        out[want] = pool[have[ranks[want] % len(have)]]
    return out


def uniform_pixels(problem: Problem, m: int, low: float, high: float,
                   generator: torch.Generator) -> torch.Tensor:
    """x ~ U(low, high) per pixel in pixel space, then centred with the problem's mean image like the data."""
    if not high > low:
        raise ReconbenchError(f"uniform init: high ({high}) must exceed low ({low})")
    x = torch.rand((m, *problem.image_shape), generator=generator, dtype=torch.float64)
    return x.mul_(high - low).add_(low) - problem.mean_tensor(torch.float64)[None]


def ground_truth_images(problem: Problem, labels: torch.Tensor, overflow: str) -> torch.Tensor:
    return take_by_label(problem.x_train(torch.float64), problem.train_labels, labels, overflow=overflow,
                         source="training set",
                         fix="use overflow='cycle', or fewer candidates (--candidates n gives one per image)")


def partition_images(problem: Problem, labels: torch.Tensor) -> torch.Tensor:
    return take_by_label(problem.x_decoy(torch.float64), problem.decoy_labels, labels, overflow="error",
                         source="decoy pool",
                         fix="raise ProblemSpec.n_decoy_per_class (recipe [problem] n_decoy_per_class) to at "
                             "least the number of candidates per class, or use fewer candidates")


# -- gaussian -----------------------------------------------------------------------------------------------
@dataclass
class GaussianConfig:
    scale: float = option(1e-3, "standard deviation of x ~ N(0, scale^2) in the centred space (Haim/Buzaglo)",
                          gt=0)


@dataclass(frozen=True)
class Gaussian(InitRegime[GaussianConfig]):
    name: str = "gaussian"
    description: str = "x ~ N(0, scale^2 I) in the centred space: the Haim/Buzaglo default"
    oracle: bool = False
    config_cls: type[GaussianConfig] = GaussianConfig

    def is_oracle(self, config: GaussianConfig) -> bool:
        return False

    def make(self, problem: Problem, labels: torch.Tensor, config: GaussianConfig, *,
             generator: torch.Generator, dtype: torch.dtype) -> torch.Tensor:
        shape = (len(labels), *problem.image_shape)
        return torch.randn(shape, generator=generator, dtype=torch.float64).mul_(config.scale).to(dtype)


# -- uniform ------------------------------------------------------------------------------------------------
@dataclass
class UniformConfig:
    low: float = option(0.0, "lower end of the per-pixel uniform draw, in pixel space ([0, 1] images)")
    high: float = option(1.0, "upper end of the per-pixel uniform draw, in pixel space")


@dataclass(frozen=True)
class Uniform(InitRegime[UniformConfig]):
    name: str = "uniform"
    description: str = ("x ~ U(low, high) per pixel in pixel space, then centred with the mean image like "
                        "the data (Runkel et al.'s random init)")
    oracle: bool = False
    config_cls: type[UniformConfig] = UniformConfig

    def is_oracle(self, config: UniformConfig) -> bool:
        return False

    def make(self, problem: Problem, labels: torch.Tensor, config: UniformConfig, *,
             generator: torch.Generator, dtype: torch.dtype) -> torch.Tensor:
        return uniform_pixels(problem, len(labels), config.low, config.high, generator).to(dtype)


# -- ground truth -------------------------------------------------------------------------------------------
@dataclass
class GroundTruthConfig:
    overflow: Literal["cycle", "error"] = option(
        "cycle", "when a label has more candidates than training images (m_c = 2 n_c by default): cycle "
                 "reuses the training images in order (candidate k of label c gets image k mod n_c, exact "
                 "copies, no noise); error refuses")


@dataclass(frozen=True)
class GroundTruth(InitRegime[GroundTruthConfig]):
    name: str = "ground_truth"
    description: str = ("ORACLE: the training images themselves, label-matched (Runkel et al.'s proof of "
                        "concept)")
    oracle: bool = True
    config_cls: type[GroundTruthConfig] = GroundTruthConfig

    def is_oracle(self, config: GroundTruthConfig) -> bool:
        return True

    def make(self, problem: Problem, labels: torch.Tensor, config: GroundTruthConfig, *,
             generator: torch.Generator, dtype: torch.dtype) -> torch.Tensor:
        return ground_truth_images(problem, labels, config.overflow).to(dtype)


# -- disjoint partition -------------------------------------------------------------------------------------
@dataclass
class PartitionConfig:
    pass


@dataclass(frozen=True)
class Partition(InitRegime[PartitionConfig]):
    name: str = "partition"
    description: str = ("images of the problem's decoy pool (same distribution, disjoint from training), "
                        "label-matched; errors if the pool is too small")
    oracle: bool = False
    config_cls: type[PartitionConfig] = PartitionConfig

    def is_oracle(self, config: PartitionConfig) -> bool:
        return False

    def make(self, problem: Problem, labels: torch.Tensor, config: PartitionConfig, *,
             generator: torch.Generator, dtype: torch.dtype) -> torch.Tensor:
        return partition_images(problem, labels).to(dtype)


# -- Runkel mixtures ----------------------------------------------------------------------------------------
@dataclass
class MixtureConfig:
    l1: float = option(0.5, "lambda1: weight of the training image against the partition image, in [0, 1]",
                       ge=0, le=1)
    l2: float = option(0.5, "lambda2: weight of that blend against uniform noise, in [0, 1]", ge=0, le=1)
    overflow: Literal["cycle", "error"] = option("cycle",
                                                 "ground-truth part: rule when m_c > n_c (see ground_truth)")
    low: float = option(0.0, "noise part: lower end of the per-pixel uniform draw, pixel space")
    high: float = option(1.0, "noise part: upper end of the per-pixel uniform draw, pixel space")


@dataclass(frozen=True)
class Mixture(InitRegime[MixtureConfig]):
    name: str = "mixture"
    description: str = ("x = l2 (l1 x_gt + (1 - l1) x_part) + (1 - l2) x_rnd, x_rnd uniform pixel noise "
                        "centred like the data (Runkel et al.); ORACLE whenever l1 * l2 > 0")
    oracle: bool = True
    config_cls: type[MixtureConfig] = MixtureConfig

    def is_oracle(self, config: MixtureConfig) -> bool:
        return config.l1 * config.l2 > 0

    def make(self, problem: Problem, labels: torch.Tensor, config: MixtureConfig, *,
             generator: torch.Generator, dtype: torch.dtype) -> torch.Tensor:
        for k in ("l1", "l2"):
            if not 0.0 <= getattr(config, k) <= 1.0:
                raise ReconbenchError(f"mixture init: {k} must lie in [0, 1], got {getattr(config, k)}")
        l1, l2 = config.l1, config.l2
        # The noise is always drawn (first), so every cell of a grid sees the same x_rnd for a given seed. The
        # weights sum to one, so mixing centred images equals mixing pixel images and then centring.
        x = (1.0 - l2) * uniform_pixels(problem, len(labels), config.low, config.high, generator)
        if l2 * l1 > 0:
            x += l2 * l1 * ground_truth_images(problem, labels, config.overflow)
        if l2 * (1.0 - l1) > 0:
            x += l2 * (1.0 - l1) * partition_images(problem, labels)
        return x.to(dtype)


def mixture_grid(values: tuple[float, ...] = PAPER_GRID) -> list[dict[str, float]]:
    """The mixture configurations of Runkel et al.'s grid: every (l1, l2) in values x values (25 by default).

    Returned as init_config dicts, l1 varying fastest:
    ``[{"l1": 0.0, "l2": 0.0}, {"l1": 0.25, "l2": 0.0}, ...]``.
    """
    return [{"l1": float(a), "l2": float(b)} for b in values for a in values]


@hookimpl
def register_inits(register):  # type: ignore[no-untyped-def]
    for regime in (Gaussian(), Uniform(), GroundTruth(), Partition(), Mixture()):
        register(regime)
