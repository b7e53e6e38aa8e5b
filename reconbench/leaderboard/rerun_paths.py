"""On which BLAS path a re-run trains each target and runs each attack (``leaderboard B --verify --rerun``).

MKL's stock path and its fast path (``RECONBENCH_FAST_BLAS=1``, ``reconbench/fast_blas.py``) round products
differently, so a target trained on one has other weights than on the other, and an attack's numbers move with the
path it ran on. A cell is reproduced only when its target is trained on the path that trained the published weights
and its attack runs on the path the cell ran on, which need not be the same (a target taken from a recipe cache that
another process filled on the other path).

* A model card written since it was recorded names its training path (``training_machine``, ``CardData
  .training_path``); a cell names its attack's (``provenance.blas.fast_path``).
* :func:`plan_paths` chooses, as a pure function of the two and of this process's path: train on the card's path;
  where the card does not say, on the cell's attack path first and, when the weights' sha256 differs from the card's,
  on the other path; attack on the cell's path (this process's where the cell does not say).
* :func:`retrain_target` carries out a plan's training with a trainer (:func:`train_on_path`: in this process where
  the path is this process's, else in a child process started with or without the shim preloaded), each attempt in
  its own staging cache, and installs the target that reproduced the card (else the first one trained) into the
  re-run's cache, saying in one line what it did.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reconbench import fast_blas
from reconbench.fast_blas import FAST, STOCK

#: the module a child process runs (``python -m``): a training or an attack on a chosen BLAS path
CHILD_MODULE = "reconbench.leaderboard.rerun_child"


def other_path(path: str) -> str:
    return FAST if path == STOCK else STOCK


@dataclass(frozen=True)
class PathPlan:
    """Where a cell's target is trained (``train``: the paths to try, in order; a second one only where the first
    one's weights differ from the card's) and where its attack runs; ``card_says``: the card records its path."""

    train: tuple[str, ...]
    attack: str
    card_says: bool


def plan_paths(card_path: str | None, cell_path: str | None, current: str) -> PathPlan:
    """The paths of a re-run of a cell whose card records ``card_path`` and whose provenance records ``cell_path``
    (each ``stock``, ``fast`` or None: not recorded), from a process on ``current``."""
    for name, value in (("card", card_path), ("cell", cell_path), ("current", current)):
        if value is not None and value not in fast_blas.PATHS:
            raise ValueError(f"{name} BLAS path {value!r} is not one of {', '.join(fast_blas.PATHS)}")
    attack = cell_path or current
    if card_path is not None:
        return PathPlan(train=(card_path,), attack=attack, card_says=True)
    return PathPlan(train=(attack, other_path(attack)), attack=attack, card_says=False)


def cell_attack_path(provenance: Mapping[str, Any] | None) -> str | None:
    """The BLAS path a cell's attack ran on, from its provenance's ``blas.fast_path`` (None: not recorded)."""
    block = (provenance or {}).get("blas")
    return fast_blas.path_name(block.get("fast_path")) if isinstance(block, Mapping) else None


@dataclass(frozen=True)
class Trained:
    """One training of a target: the path it really ran on, its weights' sha256 (None: it failed), where its cache
    holds it, and why it ran on another path than asked, or why it failed."""

    path: str
    sha256: str | None
    cache: Path
    note: str | None = None


#: trains the recipe of a card (its JSON) on a path into a cache folder: ``(recipe, path, cache) -> Trained``
Trainer = Callable[[Mapping[str, Any], str, Path], Trained]


@dataclass(frozen=True)
class TargetOutcome:
    """What the re-run did for one target: its one line, the problem (None: its weights are the card's) and the
    training installed into the re-run's cache (None: none finished)."""

    line: str
    problem: str | None
    installed: Trained | None


def retrain_target(key: str, recipe: Mapping[str, Any], plan: PathPlan, card_sha256: str | None,
                   trainer: Trainer, staging: Path, cache: Path) -> TargetOutcome:
    """Train target ``key`` on the plan's paths (each attempt in ``staging/<n>-<path>``) until its weights' sha256
    is ``card_sha256``; install that training, else the first that finished, into ``cache/targets``."""
    done: list[Trained] = []
    for n, path in enumerate(plan.train):
        if any(t.path == path for t in done):
            continue   # the fast path is not available here: the stock path already ran
        got = trainer(recipe, path, staging / f"{n}-{path}")
        done.append(got)
        if got.sha256 is not None and got.sha256 == card_sha256:
            break
    finished = [t for t in done if t.sha256 is not None]
    match = next((t for t in finished if t.sha256 == card_sha256), None)
    chosen = match or (finished[0] if finished else None)
    if chosen is not None:
        install(chosen.cache, cache)
    notes = "".join(f"; {t.note}" for t in done if t.note)
    unsaid = "" if plan.card_says else "; the card does not record its path"
    if match is not None:
        tried = "" if len(done) == 1 else f" (on the {done[0].path} path its weights were {_short(done[0].sha256)})"
        line = f"target {key} reproduced on the {match.path} path{tried}{unsaid}{notes}"
        return TargetOutcome(line, None, match)
    shas = ", ".join(f"{t.path} path {_short(t.sha256)}" for t in done)
    theirs = card_sha256[:16] if card_sha256 else "none recorded"
    line = (f"target {key} not reproduced: weights sha256 {shas}, the board's model card {theirs}"
            f"{unsaid}{notes}")
    if chosen is not None:
        line += f"; the cells run on the target trained on the {chosen.path} path"
    problem = (f"target {key}: trained again from its recipe, its weights sha256 ({shas}) is not the board's model "
               f"card's {theirs} (another processor or library rounds training differently; compare "
               "the cells' machine and provenance)")
    return TargetOutcome(line, problem, chosen)


def _short(sha: str | None) -> str:
    return "none (the training failed)" if sha is None else sha[:16]


def install(staged: Path, cache: Path) -> None:
    """Move each target a staging cache holds (a defended recipe's undefended target too) into ``cache/targets``,
    unless one is there already."""
    dest = cache / "targets"
    dest.mkdir(parents=True, exist_ok=True)
    for folder in sorted((staged / "targets").glob("*")):
        if folder.is_dir() and ".partial-" not in folder.name and not (dest / folder.name).exists():
            shutil.move(str(folder), str(dest / folder.name))


def child_command(job: str, args: Sequence[str]) -> list[str]:
    return [sys.executable, "-m", CHILD_MODULE, job, *args]


def run_child(job: str, args: Sequence[str], path: str, result: Path) -> tuple[dict[str, Any] | None, str | None]:
    """Run a child job (``train``, ``attack``) on BLAS ``path``; its JSON result (None where it failed) and a note:
    why it ran on the stock path though asked for the fast one, or why it failed (its last line of error)."""
    env, unavailable = fast_blas.child_env(path)
    note = None if unavailable is None else f"the fast path is not available here ({unavailable}): ran on the stock path"
    proc = subprocess.run(child_command(job, [*args, "--result", str(result)]), env=env, capture_output=True,
                          text=True)
    if proc.returncode != 0 or not result.exists():
        lines = [ln for ln in (proc.stderr or proc.stdout or "").splitlines() if ln.strip()]
        why = lines[-1].strip() if lines else f"exit status {proc.returncode}"
        return None, f"the child process on the {path} path failed ({why[:300]})"
    return json.loads(result.read_text()), note


def train_here(recipe: Mapping[str, Any], cache: Path, data_root: str | None, device: str) -> dict[str, Any]:
    """Train ``recipe`` (a card's JSON of it) into ``cache`` in this process; the weights' sha256 and the path."""
    from reconbench.targets.cache import get_or_train
    from reconbench.targets.recipe import recorded_recipe

    card = get_or_train(recorded_recipe(dict(recipe)), cache, data_root, quiet=True, log=False, device=device)
    return {"path": fast_blas.current_path(), "weights_sha256": card.record.weights.sha256
            if card.record.weights is not None else None, "recipe_key": card.record.recipe_key}


def train_on_path(device: str, data_root: str | None, threads: int) -> Trainer:
    """A trainer: in this process where the path is this process's, else in a child process on that path."""

    def train(recipe: Mapping[str, Any], path: str, staged: Path) -> Trained:
        staged.mkdir(parents=True, exist_ok=True)
        if path == fast_blas.current_path():
            try:
                out = train_here(recipe, staged, data_root, device)
            except Exception as exc:  # a failed training is reported for its target, the other targets go on
                return Trained(path, None, staged, f"training on the {path} path failed ({exc})")
            return Trained(out["path"], out["weights_sha256"], staged)
        spec = staged / "recipe.json"
        spec.write_text(json.dumps(dict(recipe)))
        args = ["--recipe", str(spec), "--cache", str(staged), "--device", device, "--threads", str(threads),
                *(["--data-root", data_root] if data_root else [])]
        got, note = run_child("train", args, path, staged / "trained.json")
        if got is None:
            return Trained(path, None, staged, note)
        return Trained(str(got["path"]), got.get("weights_sha256"), staged, note)

    return train


@dataclass(frozen=True)
class MixedCell:
    """A cell whose attack ran on another BLAS path than its target's training."""

    cell_id: str
    recipe_key: str
    trained: str
    attacked: str


def mixed_cells(cells: Mapping[str, Mapping[str, Any]], card_path: Callable[[str], str | None]) -> list[MixedCell]:
    """The cells (JSON of cell records or entries, by id) whose provenance records another BLAS path than the model
    card of their target (``card_path``: a recipe key's recorded training path, None where unknown)."""
    out = []
    for cid, rec in sorted(cells.items()):
        target = rec.get("target")
        key = target.get("recipe_key") if isinstance(target, Mapping) else None
        provenance = rec.get("provenance")
        attacked = cell_attack_path(provenance if isinstance(provenance, Mapping) else None)
        trained = card_path(str(key)) if key is not None else None
        if attacked is not None and trained is not None and attacked != trained:
            out.append(MixedCell(cid, str(key), trained, attacked))
    return out


def mixed_paths_line(folder: Path) -> str | None:
    """One line where cells of a results folder or board were attacked on another BLAS path than their targets were
    trained on (their cards record it: cards written before it have no path and are not counted); None where none."""
    from reconbench.bench.runner import card_reader, load_cells
    from reconbench.records.model_card import CardData

    read = card_reader(folder)

    def card_path(key: str) -> str | None:
        data = read(key)
        try:
            return None if data is None else CardData.from_dict(data).training_path
        except Exception:  # a damaged card is reported by the readers that need it
            return None

    mixed = mixed_cells(load_cells(folder), card_path)
    if not mixed:
        return None
    keys = sorted({m.recipe_key for m in mixed})
    first = mixed[0]
    return (f"{len(mixed)} cell(s) of {folder} were attacked on another BLAS path than their target was trained on "
            f"(first: {first.cell_id}, attacked on the {first.attacked} path, target {first.recipe_key} trained on "
            f"the {first.trained} path; {len(keys)} target(s)): a re-run reproduces them only by training and "
            "attacking on different paths; to avoid the mix, run the suite with a target cache trained on the "
            f"attack's path (or with {fast_blas.FAST_BLAS_ENV} set as the targets were trained)")
