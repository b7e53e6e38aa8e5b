"""The paper targets trained before the float32 trainer remade its first-layer pre-activations every step (the
tracked states in benchmarks/gpu/ledger/paper/training/, 10^6 float32 steps each) stay what their cards are made
from: their checkpoints read, they load at their last step, their weights are re-made from the factorised first
layer, and only continuing them is refused (reconbench/targets/batched_training.py, ``FIRST_LAYER``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from reconbench.errors import DataError, ReconbenchError
from reconbench.targets.batched_training import from_recipes, read_checkpoint
from reconbench.targets.cards import ModelCard
from reconbench.targets.problems import build_problem
from reconbench.targets.recipe import TargetRecipe
from reconbench.targets.resumable import restore_card

ROOT = Path(__file__).resolve().parents[2]
TRAINING = ROOT / "benchmarks" / "gpu" / "ledger" / "paper" / "training"
STATES = sorted(TRAINING.glob("*.safetensors"))


def recipe_of(state: Path) -> TargetRecipe:
    card = json.loads(state.with_name(state.name.removesuffix(".safetensors") + ".card.json").read_text())
    recipe = TargetRecipe.from_dict(card["recipe"], recorded=True)
    assert recipe.key() == card["recipe_key"] == state.name.removesuffix(".safetensors")
    return recipe


@pytest.mark.skipif(not STATES, reason="no paper training state is tracked")
@pytest.mark.parametrize("state", STATES, ids=[p.name for p in STATES])
def test_a_finished_state_of_the_stepped_copy_reads_at_its_last_step(state):
    meta = read_checkpoint(state)
    recipe = recipe_of(state)
    assert meta.first_layer is None and meta.dtype == "torch.float32"
    assert meta.step == recipe.train.steps == 10**6


@pytest.mark.skipif(not STATES, reason="no paper training state is tracked")
@pytest.mark.parametrize("state", STATES, ids=[p.name for p in STATES])
@pytest.mark.usefixtures("one_torch_thread")
def test_a_finished_state_of_the_stepped_copy_loads_for_its_card_and_is_not_continued(state, tmp_path):
    """Loaded as restore_card loads it (a trainer of its recipe, on the CPU), and by restore_card: the released
    first layer is s W_1(0) + C X of the state's float32 tensors, to the rounding of that float32 product and sum
    (n + 2 terms, Higham's γ_{n+2}, entrywise against |s W_1(0)| + |C||X|); one more step is refused in one line."""
    recipe = recipe_of(state)
    try:
        problem = build_problem(recipe.problem)
    except DataError as exc:
        pytest.skip(f"data for {recipe.key()} not available here: {exc}")
    trainer, _ = from_recipes([recipe], [problem])
    trainer.load(state, target=0)
    assert trainer.step_count == recipe.train.steps and trainer.stepped_copy == {0}
    w1 = trainer.state_dicts()[0]["0.weight"].double()
    s, base, c, x = trainer.scales[0], trainer.base[0].double(), trainer.coef[0].double(), trainer.xs[0].double()
    m = trainer.n + 2
    gamma = m * 2.0 ** -24 / (1 - m * 2.0 ** -24)
    assert bool(((w1 - (s * base + c @ x)).abs() <= gamma * (s * base.abs() + c.abs() @ x.abs())).all())
    trainer.run(0)
    with pytest.raises(ReconbenchError, match="restart its training from step 0"):
        trainer.run(1)
    assert torch.equal(trainer.state_dicts()[0]["0.weight"].double(), w1)
    # the card itself: restored where the re-made weights' sha256 is the card's (the GPU that trained it), else
    # refused for that reason alone (another machine rounds the product differently), never for the trainer
    card = restore_card(recipe, tmp_path / "card", TRAINING)
    assert isinstance(card, ModelCard) or "sha256" in card, card
