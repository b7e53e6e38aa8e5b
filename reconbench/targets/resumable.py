"""Training that stops at a deadline and continues elsewhere: a target trained in pieces, each on its own machine.

A slice (docs/slices.md) whose target's training does not finish before the deadline trains what fits with the
resumable trainer (:class:`reconbench.targets.batched_training.BatchedChainGD`, one target), saves its state, and the
state travels in the slice's pack; the next slice continues from it. The trainer's windows of k steps start at
multiples of k of the global step, and a saved state holds everything the next step reads, so a target trained in
any number of pieces has the weights of one uninterrupted run of this trainer, bit for bit on the CPU.

The state leaves out the initial first-layer weights W_1(0) (rebuilt from the recipe's seed, their sha256 checked):
what travels is the factorised first layer (width x n and n x width), the other layers and the biases, in the
training precision: about 16 MB for a 3072-1000-1000-1 network on n = 500 in float64, 8 MB in float32.

Recipes it takes: full-batch GD at a constant learning rate without an early stop or a defense, on a chain of linear
layers with ReLU, with a loss the trainer has in closed form (bce, mse, ce, their ``legacy`` forms: those recipes
name no loss form). A slice trains every such recipe this way, whether or not it would finish, so that where a
target was trained never depends on timing; the card says so (``metrics.trainer``).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from reconbench.errors import DivergedError
from reconbench.precision import training_precision
from reconbench.targets.batched_training import BATCH_LOSSES, BatchedChainGD, from_recipes
from reconbench.targets.cards import ModelCard, save_card
from reconbench.targets.losses import get_loss
from reconbench.targets.problems import build_problem
from reconbench.targets.recipe import DTYPES, TargetRecipe

#: what the card's ``metrics.trainer`` says of a target trained this way
TRAINER = "resumable: reconbench.targets.batched_training, one target, state carried between slices"
#: steps between the host's reads of the loss (and the deadline checks)
LOSS_EVERY = 100
STATE_SUFFIX = ".safetensors"


def resumable_reason(recipe: TargetRecipe) -> str | None:
    """Why the resumable trainer cannot train ``recipe`` (None: it can)."""
    spec = recipe.train
    if spec.schedule != "constant":
        return f"schedule {spec.schedule!r} (the resumable trainer steps at one constant lr)"
    if spec.stop_loss > 0 or spec.certify_every > 0:
        return "an early stop (stop_loss or certify_every)"
    if recipe.defense is not None:
        return f"defense {recipe.defense!r}"
    if spec.loss_form != "legacy":
        return f"loss form {spec.loss_form!r} (the resumable trainer has the legacy forms)"
    if recipe.family not in ("mlp", "mlp_bias", "affine"):
        return f"family {recipe.family!r} (the resumable trainer takes chains of linear layers)"
    try:
        name = get_loss(spec.loss, recipe.problem.task, spec.loss_form)[0]
    except Exception as exc:  # an invalid recipe fails where it is trained, with its own message
        return str(exc)
    if name not in BATCH_LOSSES:
        return f"loss {name!r} (the resumable trainer has {', '.join(BATCH_LOSSES)})"
    return None


@dataclass
class Piece:
    """What one call of :func:`train_piece` did."""

    recipe_key: str
    step: int          # the steps done after it
    steps: int         # the recipe's
    seconds: float
    card: ModelCard | None = None   # the finished target (None: its state was saved)
    state: Path | None = None

    @property
    def finished(self) -> bool:
        return self.card is not None


def state_path(folder: Path, recipe: TargetRecipe) -> Path:
    return folder / f"{recipe.key()}{STATE_SUFFIX}"


def train_piece(recipe: TargetRecipe, card_dir: Path, states: Path, *, seconds: float, data_root: str | None = None,
                device: str = "cpu", clock: Callable[[], float] = time.monotonic) -> Piece:
    """Continue ``recipe``'s training from its state in ``states`` (from step 0 without one) for at most about
    ``seconds``, and save its state (``states/<recipe key>.safetensors``); when it reaches the recipe's steps, also
    write its card into ``card_dir`` (a state at the last step gives the same card on another machine at once).
    Windows of :data:`LOSS_EVERY` steps; a window starts only when the longest so far still fits in ``seconds``."""
    t0 = clock()
    problem = build_problem(recipe.problem, data_root)
    trainer, models = from_recipes([recipe], [problem], device, loss_every=LOSS_EVERY)
    path = state_path(states, recipe)
    spent_before = 0.0
    pieces_before = 0
    if path.exists():
        trainer.load(path)
        spent_before = float(trainer.extra.get("seconds", 0.0))
        pieces_before = int(trainer.extra.get("pieces", 0))
    steps = recipe.train.steps
    window_seconds = 0.0
    while trainer.step_count < steps:
        left = seconds - (clock() - t0)
        if trainer.step_count > 0 and window_seconds > left:
            break
        w0 = clock()
        trainer.run(min(LOSS_EVERY - trainer.step_count % LOSS_EVERY, steps - trainer.step_count))
        window_seconds = max(window_seconds, clock() - w0)
        if trainer.diverged[0] is not None:
            raise DivergedError(f"training diverged: {trainer.diverged[0]}")
    spent = spent_before + (clock() - t0)
    if trainer.step_count < steps:
        states.mkdir(parents=True, exist_ok=True)
        trainer.save(path, with_base=False, extra={"seconds": spent, "pieces": pieces_before + 1})
        return Piece(recipe.key(), trainer.step_count, steps, spent, state=path)
    # the finished state is kept (and travels while the target's cells remain): a card does not leave its machine
    states.mkdir(parents=True, exist_ok=True)
    trainer.save(path, with_base=False, extra={"seconds": spent, "pieces": pieces_before + 1})
    card = _finish(recipe, problem, trainer, models[0], card_dir, spent, pieces_before + 1, device)
    return Piece(recipe.key(), trainer.step_count, steps, spent, card=card, state=path)


def _finish(recipe: TargetRecipe, problem: Any, trainer: BatchedChainGD, model: Any, card_dir: Path, spent: float,
            pieces: int, device: str) -> ModelCard:
    """The card of the trained target, with the metrics :func:`reconbench.targets.training.train` records."""
    from reconbench.targets.training import TrainResult, release_metrics

    spec = recipe.train
    dtype = DTYPES[spec.dtype]
    loss_name, loss_fn = get_loss(spec.loss, problem.task, spec.loss_form)
    trainer.write_into([model])
    model = model.cpu().eval()
    metrics: dict[str, Any] = {"loss_name": loss_name, "steps_run": trainer.step_count,
                               "final_loss": float(trainer.loss_now[0]), "train_seconds": spent,
                               "train_device": str(device), "precision": training_precision(spec.dtype).to_dict(),
                               "trainer": TRAINER, "training_pieces": pieces}
    metrics.update(release_metrics(model, recipe, problem, loss_fn, dtype, trainer.scale, spec.weight_decay))
    history = [{"step": float(h["step"]), "loss": h["loss"][0]} for h in trainer.history]
    return save_card(card_dir, recipe, problem, TrainResult(model=model, metrics=metrics, history=history))


def state_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def state_step(path: Path) -> tuple[int, str]:
    """The step a saved state reached, and its dtype (from the file's metadata)."""
    import json

    with open(path, "rb") as fh:
        header = json.loads(fh.read(int.from_bytes(fh.read(8), "little")))
    meta = json.loads(header.get("__metadata__", {}).get("reconbench", "{}"))
    return int(meta.get("step", 0)), str(meta.get("dtype", ""))


def torch_dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")
