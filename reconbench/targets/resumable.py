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

When a target's training ends, its card JSON is kept beside its final state (``<recipe key>.card.json``) and
travels with it; a later slice restores the card from it (:func:`restore_card`: the weights re-made from the state
and checked against the card's sha256) instead of rebuilding it, which costs the stationarity certificate again.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from reconbench.errors import DivergedError, ReconbenchError
from reconbench.precision import training_precision
from reconbench.provenance import write_bytes_atomic
from reconbench.records.model_card import TrainingMachine
from reconbench.records.training_checkpoint import PieceNotes, PieceRun
from reconbench.targets.batched_training import (
    BATCH_LOSSES,
    OWN_SETTINGS,
    BatchedChainGD,
    from_recipes,
    read_checkpoint,
)
from reconbench.targets.cards import (
    CARD_FILE,
    MEAN_FILE,
    WEIGHTS_FILE,
    ModelCard,
    load_card,
    save_card,
    training_machine,
    write_card_tensors,
)
from reconbench.targets.data_files import file_digest
from reconbench.targets.losses import get_loss
from reconbench.targets.problems import build_problem
from reconbench.targets.recipe import DTYPES, TargetRecipe

#: what the card's ``metrics.trainer`` says of a target trained this way
TRAINER = ("resumable: reconbench.targets.batched_training, targets of one shape as one stack, state carried "
           "between slices")
#: steps between the host's reads of the loss (and the deadline checks)
LOSS_EVERY = 100
STATE_SUFFIX = ".safetensors"
#: the suffix of the card JSON kept beside a final state (``<recipe key>.card.json``): it travels with the state
CARD_SUFFIX = ".card.json"


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


def batch_group(recipe: TargetRecipe) -> str:
    """Which targets can train as one stack (:class:`BatchedChainGD`): equal architecture, training-set size,
    outputs (one output with a float target, bce or mse; or one per class, ce) and training settings but
    :data:`OWN_SETTINGS`: the learning rate, weight decay, loss (within its output layout), initialisation seed and
    data set may differ (the input dimension enters the trainer only through X Xᵀ). Targets of one group that are at
    the same step train together in a slice. The key is not stored anywhere: it may change between versions."""
    import json

    p = recipe.problem
    train = {k: v for k, v in recipe.to_dict()["train"].items() if k not in OWN_SETTINGS}
    outputs = "classes" if p.task == "multiclass" else "one"   # binary (bce) and regression (mse): one output
    size: dict[str, Any] = {"outputs": outputs, "num_classes": p.num_classes, "n_per_class": p.n_per_class}
    if p.task == "multiclass" and p.num_classes is None:   # the number of outputs comes from the data set
        size["dataset"] = p.dataset
    key = {"family": recipe.family, "model": recipe.model, "problem": size, "train": train}
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:16]


@dataclass
class Piece:
    """What one call of :func:`train_piece` did."""

    recipe_key: str
    step: int          # the steps done after it
    steps: int         # the recipe's
    seconds: float
    card: ModelCard | None = None   # the finished target (None: its state was saved)
    state: Path | None = None
    stacked: int = 1   # the targets of the stack it trained in (itself included)
    begun: int = 0     # the step it began at (``step - begun`` steps done by this call)
    stepping: float = 0.0   # the seconds of its steps alone (its set-up, the data and the stack built, aside)

    @property
    def finished(self) -> bool:
        return self.card is not None


def state_path(folder: Path, recipe: TargetRecipe) -> Path:
    return folder / f"{recipe.key()}{STATE_SUFFIX}"


def card_beside(state: Path) -> Path:
    """Where the card JSON of the target whose final state is ``state`` is kept, beside it."""
    return state.with_name(f"{state.stem}{CARD_SUFFIX}")


def train_piece(recipe: TargetRecipe, card_dir: Path, states: Path, *, seconds: float, data_root: str | None = None,
                device: str = "cpu", clock: Callable[[], float] = time.monotonic) -> Piece:
    """Continue ``recipe``'s training from its state in ``states`` (from step 0 without one) for at most about
    ``seconds``, and save its state (``states/<recipe key>.safetensors``); when it reaches the recipe's steps, also
    write its card into ``card_dir`` (a state at the last step gives the same card on another machine at once).
    Windows of :data:`LOSS_EVERY` steps; a window starts only when the longest so far still fits in ``seconds``."""
    return train_pieces([recipe], [card_dir], states, seconds=seconds, data_root=data_root, device=device,
                        clock=clock)[0]


def train_pieces(recipes: list[TargetRecipe], card_dirs: list[Path], states: Path, *, seconds: float,
                 data_root: str | None = None, device: str = "cpu",
                 clock: Callable[[], float] = time.monotonic, card_seconds: float = 0.0) -> list[Piece]:
    """:func:`train_piece` of several targets of one :func:`batch_group` at one step, as one stack: one
    :class:`BatchedChainGD` of T targets, each continued from its own state and saved to its own state file (as
    training it alone would save it: each resumes alone or in any stack). Their weights equal training each alone
    (on the CPU the stack steps its targets one after another with the same operations).

    ``card_seconds``: what the cards made when the training ends take (all of them). The window of steps that ends
    the training runs only when it and the cards fit in what is left of ``seconds``; else the piece stops before it,
    at most one window short of the end, and the next piece ends the training and makes the cards. So a stack that
    steps faster than it was priced at still ends inside ``seconds``."""
    t0 = clock()
    problems = [build_problem(r.problem, data_root) for r in recipes]
    trainer, models = from_recipes(recipes, problems, device, loss_every=LOSS_EVERY)
    paths = [state_path(states, r) for r in recipes]
    at = {state_step(p)[0] if p.exists() else 0 for p in paths}
    if len(at) > 1:
        raise ReconbenchError(f"training in pieces: the targets {', '.join(r.key() for r in recipes)} are at "
                              f"different steps ({', '.join(str(s) for s in sorted(at))}); train them in separate "
                              "stacks")
    spent_before = [0.0] * len(recipes)
    pieces_before = [0] * len(recipes)
    runs_before: list[list[PieceRun]] = [[] for _ in recipes]
    for t, path in enumerate(paths):
        if path.exists():
            trainer.load(path, target=t)
            notes = PieceNotes.from_dict(trainer.target_extra[t], f"{path} (its notes)")
            spent_before[t], pieces_before[t] = float(notes.seconds), notes.pieces
            runs_before[t] = carried_runs(notes, trainer.step_count)
    steps = recipes[0].train.steps
    start_step = trainer.step_count
    window_seconds = 0.0
    s0 = clock()
    while trainer.step_count < steps:
        left = seconds - (clock() - t0)
        if trainer.step_count > 0 and window_seconds > left:
            break
        window = min(LOSS_EVERY - trainer.step_count % LOSS_EVERY, steps - trainer.step_count)
        if card_seconds > 0 and trainer.step_count + window >= steps and window_seconds + card_seconds > left:
            break   # the last window would end the training with no time left for its cards
        w0 = clock()
        trainer.run(window)
        window_seconds = max(window_seconds, clock() - w0)
        diverged = [(r.key(), d) for r, d in zip(recipes, trainer.diverged, strict=True) if d is not None]
        if diverged:
            raise DivergedError(f"training of target {diverged[0][0]} diverged: {diverged[0][1]}")
    stepping = clock() - s0
    now = clock() - t0
    states.mkdir(parents=True, exist_ok=True)
    # a piece is a call that advanced the training (a finished state restored on another machine is none)
    advanced = trainer.step_count > start_step
    pieces_now = [p + (1 if advanced or p == 0 else 0) for p in pieces_before]
    this_run = this_piece(device, start_step, trainer.step_count, now) if advanced else None
    runs_now = [[*r, this_run] if this_run is not None else r for r in runs_before]
    # the finished state is kept too (and travels while the target's cells remain, its card's JSON beside it)
    for t, path in enumerate(paths):
        trainer.save(path, with_base=False, target=t,
                     extra=PieceNotes(seconds=spent_before[t] + now, pieces=pieces_now[t], runs=runs_now[t]).to_dict())
    finished = trainer.step_count >= steps
    if finished:
        trainer.write_into(models)
    out = []
    for t, (recipe, path) in enumerate(zip(recipes, paths, strict=True)):
        card = None
        if finished:
            card = _finish(recipe, problems[t], trainer, models[t], card_dirs[t], spent_before[t] + now,
                           pieces_now[t], runs_now[t], advanced, t)
            # the card's JSON travels with the final state (the weights do not: restore_card re-makes them)
            write_bytes_atomic(card_beside(path), (card.path / CARD_FILE).read_bytes())
        out.append(Piece(recipe.key(), trainer.step_count, steps, spent_before[t] + now, card=card, state=path,
                         stacked=len(recipes), begun=start_step, stepping=stepping))
    return out


def _finish(recipe: TargetRecipe, problem: Any, trainer: BatchedChainGD, model: Any, card_dir: Path, spent: float,
            pieces: int, runs: list[PieceRun], stepped: bool, t: int) -> ModelCard:
    """The card of trained target ``t`` (its weights already written into ``model``), with the metrics
    :func:`reconbench.targets.training.train` records. Where and how it was trained comes from ``runs`` (the pieces
    that advanced it, carried in its state), not from this process, which may only rebuild the card from the final
    state (``stepped`` False: then the final loss is the last one the trainer read, the history's last)."""
    from reconbench.targets.training import TrainResult, release_metrics

    spec = recipe.train
    dtype = DTYPES[spec.dtype]
    loss_name, loss_fn = get_loss(spec.loss, problem.task, spec.loss_form)
    model = model.cpu().eval()
    final_loss = float(trainer.loss_now[t]) if stepped or not trainer.history else float(trainer.history[-1]["loss"][t])
    metrics: dict[str, Any] = {"loss_name": loss_name, "steps_run": trainer.step_count,
                               "final_loss": final_loss, "train_seconds": spent,
                               "train_device": runs_device(runs), "precision": training_precision(spec.dtype).to_dict(),
                               "trainer": TRAINER, "training_pieces": pieces,
                               "trained_in": [listed_piece(r) for r in runs]}
    metrics.update(release_metrics(model, recipe, problem, loss_fn, dtype, trainer.scales[t], spec.weight_decay))
    history = [{"step": float(h["step"]), "loss": h["loss"][t]} for h in trainer.history]
    return save_card(card_dir, recipe, problem, TrainResult(model=model, metrics=metrics, history=history),
                     machine=last_machine(runs))


#: what a card says of a device or machine its state did not record (a state written before pieces were recorded)
UNKNOWN = "unknown"


def device_of(device: str) -> tuple[str, str]:
    """The type of ``device`` (``cpu``, ``cuda``) and its name: the GPU's, or the processor's."""
    kind = torch.device(device).type
    if kind == "cuda":
        return kind, torch.cuda.get_device_name(torch.device(device))
    from reconbench import blas
    return kind, blas.cpu_model()


def this_piece(device: str, start: int, end: int, seconds: float) -> PieceRun:
    """The run of the piece this process trained, steps ``start`` to ``end`` on ``device``."""
    kind, name = device_of(device)
    return PieceRun(steps=[start, end], device=kind, device_name=name, seconds=seconds,
                    machine=TrainingMachine.from_dict(training_machine()))


def carried_runs(notes: PieceNotes, step: int) -> list[PieceRun]:
    """The runs a state's notes record, with the steps before them that no run covers (a state written before runs
    were recorded) as one run of unknown device and machine."""
    runs = list(notes.runs or [])
    covered = runs[-1].steps[1] if runs else 0
    if covered < step:
        known = sum(r.seconds or 0.0 for r in runs)
        runs.append(PieceRun(steps=[covered, step], seconds=max(float(notes.seconds) - known, 0.0)))
    return runs


def runs_device(runs: list[PieceRun]) -> str:
    """The device the pieces ran on: one value where they agree (``cuda``), else each in order of first use joined
    by ``+`` (``cuda+cpu``); ``unknown`` for pieces whose device was not recorded."""
    kinds = list(dict.fromkeys(r.device or UNKNOWN for r in runs))
    return "+".join(kinds) if kinds else UNKNOWN


def listed_piece(run: PieceRun) -> dict[str, Any]:
    """A piece as the card's ``metrics.trained_in`` lists it."""
    return {"device": run.device or UNKNOWN, "device_name": run.device_name or UNKNOWN, "steps": list(run.steps),
            "seconds": run.seconds}


def last_machine(runs: list[PieceRun]) -> dict[str, Any] | None:
    """The card's ``training_machine``: the machine of the last piece that advanced the training, with its device
    (None: not recorded, and the card leaves the field out: unknown)."""
    last = runs[-1] if runs else None
    if last is None or last.machine is None:
        return None
    return {**last.machine.to_dict(), "device": last.device, "device_name": last.device_name}


def restore_card(recipe: TargetRecipe, card_dir: Path, states: Path, *, data_root: str | None = None,
                 device: str = "cpu") -> ModelCard | str:
    """The card of ``recipe``'s finished target written into ``card_dir`` from the card that travelled beside its
    final state (:func:`card_beside`), without computing its release metrics again: the weights re-made from the
    state as :func:`_finish` gets them, the mean image, and the travelled card JSON written verbatim, only once the
    weights' and the mean image's sha256 equal those the card records and the card's recipe key is the target's.
    The card, or why it was not restored (then ``card_dir`` holds no card: a rebuild writes one)."""
    state = state_path(states, recipe)
    travelled = card_beside(state)
    if not state.exists() or not travelled.exists():
        return "no card travelled beside its final state"
    text = travelled.read_bytes()
    try:
        data = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return f"the travelled card {travelled.name} is not JSON"
    if not isinstance(data, dict) or data.get("recipe_key") != recipe.key():
        return f"the travelled card {travelled.name} is another target's (its recipe key is not {recipe.key()})"
    recorded = {name: str(data.get(field, {}).get("sha256", "")) if isinstance(data.get(field), dict) else ""
                for name, field in ((WEIGHTS_FILE, "weights"), (MEAN_FILE, "mean_image"))}
    problem = build_problem(recipe.problem, data_root)
    trainer, models = from_recipes([recipe], [problem], device, loss_every=LOSS_EVERY)
    trainer.load(state, target=0)
    if trainer.step_count < recipe.train.steps:
        return f"its state is at step {trainer.step_count} of {recipe.train.steps}, not final"
    trainer.write_into(models)
    write_card_tensors(card_dir, models[0].cpu().eval(), problem)   # no card until its weights are checked
    for name, want in recorded.items():
        got = file_digest(card_dir / name, "sha256")
        if got != want:
            return (f"the {name} re-made from its state has sha256 {got[:12]}, the travelled card records "
                    f"{want[:12] or 'none'} (another machine's rounding, or another state)")
    write_bytes_atomic(card_dir / CARD_FILE, text)
    return load_card(card_dir)


def state_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def state_step(path: Path) -> tuple[int, str]:
    """The step a saved state reached, and its dtype (from the file's metadata)."""
    meta = read_checkpoint(path)
    return meta.step, meta.dtype


def torch_dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")
