"""The numbers docs/regime.md states are the ones its sources hold: the training-length table is the committed JSON
of benchmarks/training_length.py, the experiment table is benchmarks/results/regime/regime.json, and the residual
ranges it quotes for the published claims boards are what the claims page reads from those boards' cards."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reconbench.claims import records
from reconbench.claims.page import measure_claims

REPO = Path(__file__).resolve().parents[2]
DOC = (REPO / "docs" / "regime.md").read_text()


def table_rows(first_header_cell: str) -> list[list[str]]:
    """The body rows of the markdown table whose header starts with ``first_header_cell``, as stripped cells."""
    lines = DOC.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith(f"| {first_header_cell} |"))
    rows = []
    for ln in lines[start + 2:]:
        if not ln.startswith("|"):
            break
        rows.append([c.strip() for c in ln.strip().strip("|").split("|")])
    return rows


def g3(x: float) -> str:
    return f"{x:.3g}"


def test_the_training_length_table_is_the_committed_json():
    data = json.loads((REPO / "benchmarks" / "results" / "regime" / "training_length_small.json").read_text())
    rows = table_rows("task")
    assert len(rows) == len(data["points"])
    for row, p in zip(rows, data["points"], strict=True):
        task, steps, seed, loss, theta, margin_set, margins, learned, calibrated = row
        assert task == p["task"] and int(steps.replace(",", "")) == p["steps"] and int(seed) == p["seed"]
        assert loss == f"{p['train']['final_loss']:.2g}"
        assert theta == f"{p['theta_residual']:.3f}" and learned == f"{p['learned_residual']:.3f}"
        assert int(margin_set) == len(p["margin_set"])
        assert margins == f"{g3(min(p['margins']))} / {g3(max(p['margins']))}"
        assert calibrated == f"{p['calibrated']} ({p['calibrated_null']:.1f})"


@pytest.fixture(scope="module")
def claims_on_boards():
    data = records.load(REPO / records.DEFAULT_FILE)
    results = {name: REPO / "leaderboards" / name for name in ("claims-a", "claims-b")}
    return {r.claim.id: r for r in measure_claims(data, results)}


def span(res, label: str) -> tuple[float, float]:
    point = next(p for p in res.points if p.label == label)
    values = [s.regime_residual for s in point.seeds if s.regime_residual is not None]
    return min(values), max(values)


@pytest.mark.parametrize(("phrase", "claim_id", "label"), [
    ("cpu-mini's binary MLP {}", "haim-mnist", "n_per_class = 5"),
    ("the same at width 250 {}", "buzaglo-neurons", "widths = 250-250"),
    ("10-class MNIST {}", "buzaglo-multiclass", "num_classes = 10"),
    ("claims-b's three-layer MLP with biases {}", "runkel-kkt-partition-single", "n_per_class = 5"),
])
def test_the_residual_ranges_quoted_for_the_claims_boards_are_the_boards(claims_on_boards, phrase, claim_id, label):
    lo, hi = span(claims_on_boards[claim_id], label)
    assert phrase.format(f"{lo:.3g}-{hi:.3g}") in " ".join(DOC.split())


def test_the_weight_decay_ranges_quoted_for_the_claims_boards_are_the_boards(claims_on_boards):
    res = claims_on_boards["buzaglo-wd-binary"]
    lo = min(span(res, lab)[0] for lab in ("weight_decay = 0.0005", "weight_decay = 0.002"))
    hi = max(span(res, lab)[1] for lab in ("weight_decay = 0.0005", "weight_decay = 0.002"))
    assert f"with weight decay 5e-4 and 2e-3 {lo:.3g}-{hi:.3g}" in " ".join(DOC.split())
    losses = claims_on_boards["buzaglo-losses"]
    least = min(span(losses, p.label)[0] for p in losses.points)
    assert f"at least {least:.3g}" in " ".join(DOC.split())
