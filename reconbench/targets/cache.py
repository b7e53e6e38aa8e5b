"""Training targets on demand, with a cache keyed by the recipe hash."""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
from pathlib import Path

from reconbench.errors import ModelCardError
from reconbench.targets.cards import CARD_FILE, ModelCard, load_card, save_card
from reconbench.targets.defended import DefenseSession, remember_card
from reconbench.targets.problems import build_problem
from reconbench.targets.recipe import TargetRecipe
from reconbench.targets.training import train

CACHE_ENV = "RECONBENCH_CACHE"


def cache_dir(explicit: str | os.PathLike[str] | None = None) -> Path:
    if explicit:
        return Path(explicit).expanduser()
    env = os.environ.get(CACHE_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "reconbench"


def train_target(recipe: TargetRecipe, out_dir: str | os.PathLike[str], data_root: str | None = None,
                 quiet: bool = False, device: str = "cpu", weights_from: ModelCard | None = None) -> ModelCard:
    """Train ``recipe`` and write its card to ``out_dir`` (``weights_from``: the undefended card whose weights a
    release-only defense starts from, whose training machine the card records)."""
    problem = build_problem(recipe.problem, data_root)
    result = train(recipe, problem, quiet=quiet, device=device)
    return save_card(Path(out_dir), recipe, problem, result, weights_from=weights_from)


def get_or_train(recipe: TargetRecipe, cache: str | os.PathLike[str] | None = None, data_root: str | None = None,
                 quiet: bool = False, log: bool = True, device: str = "cpu") -> ModelCard:
    """Reuse ``<cache>/targets/<recipe key>`` when present and intact, else train into it (on ``device``; the
    device is not part of the key)."""
    folder = cache_dir(cache) / "targets" / recipe.key()
    if (folder / CARD_FILE).exists():
        try:
            card = load_card(folder)
            card.load_model()  # verifies hashes and shapes
            if log and not quiet:
                print(f"reusing cached target {folder}")
            return card
        except ModelCardError as exc:
            if not quiet:
                print(f"cached target {folder} is unusable ({exc}); retraining")
            shutil.rmtree(folder, ignore_errors=True)
    weights_from = None
    if recipe.defense is not None and DefenseSession(recipe).release_only():
        # a defense that acts only before release: train (or reuse) the undefended target, then apply it
        undefended = dataclasses.replace(recipe, defense=None, defense_config={})
        weights_from = get_or_train(undefended, cache, data_root, quiet, log, device)
        remember_card(recipe, weights_from, device)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=folder.name + ".partial-", dir=folder.parent))  # one per writer
    if log and not quiet:
        print(f"training target {recipe.key()} ({recipe.family} on {recipe.problem.dataset}, "
              f"{recipe.problem.task}, {recipe.problem.n_per_class} per class)")
    try:
        train_target(recipe, tmp, data_root, quiet, device, weights_from)
        if (folder / CARD_FILE).exists():  # another process trained the same recipe meanwhile: keep its card
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            shutil.rmtree(folder, ignore_errors=True)
            try:
                os.replace(tmp, folder)
            except OSError:  # lost the race to another writer between the check and the rename
                if not (folder / CARD_FILE).exists():
                    raise
                shutil.rmtree(tmp, ignore_errors=True)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return load_card(folder)
