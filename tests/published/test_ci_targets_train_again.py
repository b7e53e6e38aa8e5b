"""The published ci board's targets, trained again from their recipes, give their cards' training metrics to a
re-run's rounding (``RERUN_RTOL``), the tolerance `leaderboard add` compares an outside submission's target with.

Bit for bit they need not agree: the certificate's float64 sums round differently with another torch thread count
or another (equally exact) Jacobian code path, by up to a few 1e-14 relative (CONTRIBUTING.md, "Why a re-run's
rounding"). The tolerance must stay far above that and far below a real difference.

That holds for the same weights. Another processor or library can round training itself differently and train other
weights (the board's were trained on an AMD EPYC; an Intel Xeon's MKL trains others), which `leaderboard add` refuses
by their sha256 before it compares a metric; there the rounding the tolerance absorbs is measured on this machine's
weights instead: the target trained again, its certificate taken along the other Jacobian path (dense autograd) with
each Jacobian entry one unit in the last place apart (the two paths alone agree bit for bit on some processors).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from _helpers.metric_numbers import last_place_apart, numbers

from reconbench.leaderboard.slim import RERUN_RTOL
from reconbench.targets import certificate
from reconbench.targets.cache import train_target
from reconbench.targets.recipe import TargetRecipe

REPO = Path(__file__).resolve().parents[2]
CARDS = sorted((REPO / "leaderboards" / "ci" / "targets").glob("*.json"))


@pytest.mark.parametrize("card_file", CARDS, ids=[p.stem for p in CARDS])
def test_a_ci_target_trained_again_has_its_cards_certificate_to_a_reruns_rounding(
        card_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    board = json.loads(card_file.read_text())
    recipe = TargetRecipe.from_dict(board["recipe"])
    assert recipe.key() == board["recipe_key"]
    card = train_target(recipe, tmp_path / "card", quiet=True).data
    reference, fresh = board["metrics"], card["metrics"]
    if card["weights"]["sha256"] != board["weights"]["sha256"]:   # other weights: see the module docstring
        monkeypatch.setattr(certificate, "chain_jacobian", lambda *args, **kwargs: None)
        monkeypatch.setattr(certificate, "dense_jacobian", last_place_apart(certificate.dense_jacobian))
        other = train_target(recipe, tmp_path / "again", quiet=True).data
        assert other["weights"]["sha256"] == card["weights"]["sha256"]
        reference, fresh = card["metrics"], other["metrics"]
        assert dict(numbers(reference)) != dict(numbers(fresh)), "the certificates agree bit for bit: nothing is tested"
    stored = dict(numbers(reference))
    again = dict(numbers(fresh))
    assert set(stored) == set(again)
    assert any(path.startswith("certificate.learned.") for path in stored)   # the gate's measure is compared
    far = {path: (stored[path], again[path]) for path in stored
           if not math.isclose(again[path], stored[path], rel_tol=RERUN_RTOL, abs_tol=1e-15)}
    assert not far, far
