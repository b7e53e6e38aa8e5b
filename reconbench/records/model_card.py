"""A model card (``targets/<recipe key>.json``, ``reconbench-card/1``): the recipe a target was trained from, its
training metrics, its problem's indices; in the form ``reconbench train`` writes or the compact one a board keeps."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from reconbench.config import build_config
from reconbench.data import ProblemSpec
from reconbench.errors import ReconbenchError
from reconbench.records.parameter_ratio import ParameterRatio
from reconbench.records.record import FileFormat, Record, mapping, register_value_type, unchanged
from reconbench.targets.problems import recorded_spec_dict
from reconbench.targets.recipe import TargetRecipe, recorded_recipe


def read_problem_spec(d: Any) -> ProblemSpec:
    """A problem spec as a card records it (checked as the command line checks it)."""
    if not isinstance(d, dict):
        raise ReconbenchError(f"a problem spec is an object, got {type(d).__name__}")
    return build_config(ProblemSpec, recorded_spec_dict(d), "problem spec")


# the recipe and problem spec of a card are the classes targets are trained from, read with their own checks
register_value_type(TargetRecipe, recorded_recipe)
register_value_type(ProblemSpec, read_problem_spec)


@dataclass(frozen=True)
class RegimeFit(Record):
    """One regime test of a certificate (``regime.theta``, ``regime.regularised``, ``regime.learned``;
    ``targets/regime.py``): its residual ‖v − Jᵀλ‖/‖v‖ with the best λ ≥ 0, and for θ its multipliers and margin set."""

    residual: float | None = None
    multipliers: list[float] | None = None
    margin_set: list[int] | None = None
    margin_set_margins: list[float] | None = None
    margins: list[float] | None = None
    weight_decay: float | None = None
    init_decay: float | None = None


@dataclass(frozen=True)
class Regime(Record):
    """The regime tests of a certificate, one per threat model, and the largest residual a premise allows."""

    max_residual: float | None = None
    n_terms: int | None = None
    nonnegative_multipliers: bool | None = None
    theta: RegimeFit | None = None
    regularised: RegimeFit | None = None
    learned: RegimeFit | None = None

    def fit(self, test: str) -> RegimeFit | None:
        """The fit of a regime test by name (theta, regularised, learned; None: not recorded)."""
        return {"theta": self.theta, "regularised": self.regularised, "learned": self.learned}[test]


@dataclass(frozen=True)
class LearnedPart(Record):
    """The certificate of the learned part θ − d·θ0 (``learned`` of a certificate): its residuals at the training
    data and at random inputs, their ratio, per layer, and the decay d that weight decay left of θ0."""

    residual_at_train: float | None = None
    residual_at_random: float | None = None
    ratio: float | None = None
    residual_by_layer: Mapping[str, Any] | None = None
    norm_share_by_layer: Mapping[str, Any] | None = None
    #: the factor d of θ0 in the learned part (1: no weight decay, or none recorded)
    init_decay: float = 1.0
    share_of_theta: float | None = None


@dataclass(frozen=True)
class Certificate(Record):
    """A target's stationarity certificate (``targets/certificate.py``): the residual at the training data and at
    random inputs, their ratio, the same for the learned part θ − d·θ0, and the regime tests."""

    residual_at_train: float | None = None
    residual_at_random: float | None = None
    ratio: float | None = None
    n_terms: int | None = None
    nonnegative_multipliers: bool | None = None
    method: str | None = None
    seconds: float | None = None
    residual_by_layer: Mapping[str, Any] | None = None
    norm_share_by_layer: Mapping[str, Any] | None = None
    learned: LearnedPart | None = None
    regime: Regime | None = None


@dataclass(frozen=True)
class TrainedPiece(Record):
    """One piece of a target's training as its card lists it (``metrics.trained_in``): the device type (``cpu``,
    ``cuda``, or ``unknown``), the device's name (the GPU's, or the processor), the steps it covered (from, to) and
    its seconds."""

    device: str
    device_name: str
    steps: list[int]
    seconds: float | None = None


@dataclass(frozen=True)
class TrainMetrics(Record):
    """A target's training evidence as its model card records it."""

    loss_name: str | None = None
    steps_run: int | None = None
    final_loss: float | None = None
    train_seconds: float | None = None
    train_device: str | None = None
    stopped_by: str | None = None
    train_loss: float | None = None
    train_error: float | None = None
    test_loss: float | None = None
    test_error: float | None = None
    stalled_samples: int | None = None
    param_count: int | None = None
    param_norm_sq: float | None = None
    #: why the weights were reused instead of trained (a defense applied to an undefended recipe's weights)
    training_reused: str | None = None
    certificate: Certificate | None = None
    before_defense: Mapping[str, Any] | None = None
    defense: Mapping[str, Any] | None = None
    margins: list[float] | None = None
    #: the training half of the precision policy (dtype and loss accumulation), on cards that record it
    precision: Mapping[str, Any] | None = None
    #: which trainer wrote the weights and in how many pieces (targets trained across GPU slices, docs/slices.md)
    trainer: str | None = None
    training_pieces: int | None = None
    #: the pieces that trained the weights, in order: device, device name, steps (from, to) and seconds of each
    #: (targets trained in pieces, on cards that record them; "unknown" where the state did not record them)
    trained_in: list[TrainedPiece] | None = None

    @property
    def stationarity_ratio(self) -> float | None:
        """The certificate's stationarity ratio (None: no certificate, or none recorded)."""
        return None if self.certificate is None or self.certificate.ratio is None else float(self.certificate.ratio)

    @property
    def defense_records(self) -> Mapping[str, Any]:
        """What a defense recorded when it was applied (its privacy budget, ...); empty without a defense."""
        return mapping(mapping(self.defense).get("records"))

    @property
    def certificate_dict(self) -> dict[str, Any] | None:
        """The certificate as its JSON (for the readers of ``targets/``, which take it as read from a card)."""
        return None if self.certificate is None else self.certificate.to_dict()

    @property
    def regime(self) -> Regime:
        """The certificate's regime tests (empty: no certificate, or one recorded before the regime test)."""
        return self.certificate.regime if self.certificate is not None and self.certificate.regime else Regime()


@dataclass(frozen=True)
class Digest(Record):
    """What a board card keeps of a list it leaves out: its length (``count`` of indices, ``points`` of a
    training curve) and the sha256 of its bytes (``leaderboard/board_cards.py``)."""

    count: int | None = None
    points: int | None = None
    sha256: str | None = None


@dataclass(frozen=True)
class ProblemIndices(Record):
    """The data-set indices of a target's training problem; a board card keeps the held-out ``test`` indices as a
    :class:`Digest`, a card as ``reconbench train`` writes it as the list."""

    train: list[int] | None = None
    test: list[int] | Digest | None = None
    decoy: list[int] | None = None


@dataclass(frozen=True)
class CardProblem(Record):
    """A card's training problem: its spec, indices, training labels and the sha256 of its training pixels."""

    spec: ProblemSpec | None = None
    indices: ProblemIndices = ProblemIndices()
    train_labels: list[int] | None = None
    train_sha256: str | None = None


@dataclass(frozen=True)
class StoredFile(Record):
    """A file beside a card (``weights``, ``mean_image``): its name, its sha256 and, for the weights, each tensor's
    shape."""

    file: str | None = None
    sha256: str | None = None
    tensors: Mapping[str, list[int]] | None = None


@dataclass(frozen=True)
class POverDn(Record):
    """The axis of the projection law: p trained parameters over the input dimension d times the n training points."""

    p: int
    d: int
    n: int
    ratio: float


@dataclass(frozen=True)
class BoardCardNote(Record):
    """The ``board_card`` field of a model card as a board keeps it: its schema, and the digest of the training
    curve it leaves out."""

    schema: str | None = None
    history: Digest | None = None


@dataclass(frozen=True)
class TrainingMachine(Record):
    """The machine side of a target's training (``training_machine`` of a card; cards written before it have none
    and read as "unknown"): torch's BLAS, MKL's version and kernel branch, whether MKL's fast path was on
    (``RECONBENCH_FAST_BLAS``, ``reconbench/fast_blas.py``), torch's version and the processor. Not covered by
    ``content_sha256``: the same recipe trained on another machine keeps its key and its content hash, and only
    its weights' sha256 tells the two apart."""

    blas: str | None = None
    mkl_version: str | None = None
    branch: str | None = None
    fast_path: bool | None = None
    torch_version: str | None = None
    processor: str | None = None
    cpu_capability: str | None = None
    #: the device type and its name (the GPU's, or the processor), on cards of targets trained in pieces
    device: str | None = None
    device_name: str | None = None

    @property
    def blas_path(self) -> str | None:
        """``fast`` or ``stock`` (None: not recorded)."""
        return None if self.fast_path is None else "fast" if self.fast_path else "stock"


@dataclass(frozen=True)
class CardData(Record):
    """A model card's JSON (``targets/<recipe key>.json``), as ``reconbench train`` writes it or in the compact
    form a board keeps (``board_card`` set: no ``history``, the test indices as a :class:`Digest`): the parts a
    board's readers check against."""

    SCHEMA = "reconbench-card/1"

    format: str | None = None
    reconbench_version: str | None = None
    created: str | None = None
    recipe: TargetRecipe | None = None
    recipe_key: str | None = None
    family: str | None = None
    model_spec: Mapping[str, Any] | None = None
    homogeneity_degree: int | None = None
    task: str | None = None
    num_classes: int | None = None
    out_dim: int | None = None
    input_shape: list[int] | None = None
    class_counts: list[int] | None = None
    problem: CardProblem = CardProblem()
    weights: StoredFile | None = None
    mean_image: StoredFile | None = None
    metrics: TrainMetrics = TrainMetrics()
    history: list[Any] | None = None
    content_sha256: str | None = None
    #: the hash of the metrics evaluation reads (test error, margins, certificate), on cards that record it
    metrics_sha256: str | None = None
    #: trained parameters p, input dimension d, n and p / (d n), on cards that record it
    p_over_dn: POverDn | None = None
    board_card: BoardCardNote | None = None
    #: the BLAS path, torch version and processor the weights were trained with, on cards that record it
    training_machine: TrainingMachine | None = None

    @property
    def training_path(self) -> str | None:
        """The BLAS path the card's weights were trained on (``stock``, ``fast``; None: the card does not say)."""
        return None if self.training_machine is None else self.training_machine.blas_path

    @property
    def is_board_card(self) -> bool:
        return isinstance(self.board_card, BoardCardNote)

    @property
    def test_indices(self) -> list[int] | Digest | None:
        """The held-out test indices (a list), their :class:`Digest` (a board card), or None when not recorded."""
        indices = self.problem.indices if isinstance(self.problem, CardProblem) else None
        test = indices.test if isinstance(indices, ProblemIndices) else None
        return test if isinstance(test, (list, Digest)) else None


#: the door of a model card: ``reconbench-card/1`` (a board card has the same stamp and a ``board_card`` note)
CARD_FILE: FileFormat[CardData] = FileFormat(CardData, "format", {CardData.SCHEMA: unchanged})


@dataclass(frozen=True)
class CardRunFields(Record):
    """The fields of a model card a run reads (``runs/prepare.py``, ``runs/result.py``): of a card reconbench
    trained, or of the card ``reconbench audit`` builds in memory (``auditing/card.py``: no format stamp, its
    ``recipe`` what the audit recorded, not a training recipe). Open: the card's other fields are the card's own
    door's to check (:data:`CARD_FILE`, read when the card is loaded); the fields named here are read strictly."""

    OPEN = True

    family: str
    recipe_key: str
    content_sha256: str | None = None
    homogeneity_degree: int | None = None
    metrics: TrainMetrics = TrainMetrics()
    p_over_dn: ParameterRatio | None = None
    #: the training recipe as the card holds it; of an audit card (``recipe_key`` ``audit-...``), the audit's record
    recipe: Mapping[str, Any] | None = None

    @property
    def is_audit(self) -> bool:
        """Whether the card is one ``reconbench audit`` built for a model it did not train."""
        return self.recipe_key.startswith("audit-")

    @property
    def run_metrics(self) -> TrainMetrics:
        """The training metrics a run records of its target: all but the per-point margins."""
        return self.metrics.without("margins")
