"""The three rules that keep a claim from being judged, on synthetic cell records of a claims suite with an unchanged-
start entry: targets outside the attack's regime, a verdict the unchanged start already reaches (or no unchanged
start to compare with), and oracle starts."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from reconbench.bench.cells import expand
from reconbench.bench.runner import CELL_FORMAT
from reconbench.bench.suite import Suite, load_suite
from reconbench.claims import records
from reconbench.claims import verdicts as V
from reconbench.claims.measure import comparison, measure_point, point_specs, records_of
from reconbench.claims.page import _summary_lines, measure_claims
from reconbench.targets.regime import MAX_RESIDUAL

REPO = Path(__file__).resolve().parents[3]
DATA = records.load(REPO / "benchmarks" / "claims.toml")
CLAIM = next(c for c in DATA.claims if c.id == "haim-mnist")  # above the null, haim-binary block of claims-a


def suite_with_unchanged(tmp_path: Path) -> Suite:
    """claims-a with an ``init_only`` entry (the start left unchanged) in the haim-binary block."""
    text = (REPO / "reconbench" / "bench" / "suites" / "claims-a.toml").read_text()
    text = text.replace('[attacks.haim_binary_kkt]\n', '[attacks.unchanged]\nattack = "init_only"\n\n'
                        '[attacks.haim_binary_kkt]\n', 1)
    block = '[comparisons.haim-binary]'
    head, rest = text.split(block, 1)
    rest = rest.replace('attacks = ["haim_binary_kkt"]', 'attacks = ["haim_binary_kkt", "unchanged"]', 1)
    path = tmp_path / "claims-a.toml"
    path.write_text(head + block + rest)
    return load_suite(path)


def cells(suite: Suite, counts: dict[str, list[float]], residual_sq: float | None = 0.01,
          oracle: bool = False, block: str = "haim-binary",
          key: str = "reconstructed_calibrated") -> dict[str, dict[str, Any]]:
    """A finished cell per planned cell of the haim-binary block; ``counts``: attack -> calibrated count per seed;
    the targets' certificates record ``residual_sq`` as their squared theta residual (None: no certificate)."""
    found = {}
    for cell in expand(suite):
        if f"comparison:{block}" not in cell.groups:
            continue
        summary = {key: counts[cell.attack.label][cell.seed], "n_train": 10}
        spread = {key: {"mean": 0.0, "max": 0.0, "min": 0.0, "draws": 19}}
        metrics: dict[str, Any] = {"param_norm_sq": 4.0}
        if residual_sq is not None:
            metrics["certificate"] = {"residual_at_train": residual_sq, "ratio": residual_sq}
        found[cell.cell_id] = {
            "format": CELL_FORMAT, "cell_id": cell.cell_id, "cell_key": cell.key(suite), "status": "ok",
            "spec": {"dtype": suite.dtype}, "protocol": cell.protocol(suite),
            "target": {"name": cell.target, "n_train": 10, "train_metrics": metrics},
            "attack": {"label": cell.attack.label, "name": cell.attack.attack},
            "init": {"label": cell.init.label, "regime": cell.init.regime, "is_oracle": oracle},
            "runs": [{"run": 0, "steps": 10, "stopped": "completed", "config": {"steps": 10},
                      "candidates_finite": True, "initial_loss": 2.0, "final_loss": 1.0}],
            "selections": {"pool": {"summary": summary, "attack_loss": 0.01,
                                    "null": {"available": True, "spread": spread}}}}
    return found


def judge(suite: Suite, found: dict[str, dict[str, Any]], claim: records.Claim = CLAIM) -> V.Decision:
    comp = comparison(suite, claim.comparison)
    plan = {c.cell_id: c for c in expand(suite)}
    points = [measure_point(claim, suite, comp, records_of(found), plan, *s) for s in point_specs(claim, comp)]
    return V.decide(claim, points)


@pytest.fixture
def suite(tmp_path: Path) -> Suite:
    return suite_with_unchanged(tmp_path)


def seeds(suite: Suite, value: int) -> list[int]:
    return [value] * (max(comparison(suite, "haim-binary").seeds) + 1)


def test_a_verdict_the_attack_earns_over_an_unchanged_start_stands(suite):
    d = judge(suite, cells(suite, {"haim_binary_kkt": seeds(suite, 3), "unchanged": seeds(suite, 0)}))
    assert d.verdict == V.REPRODUCED and "the unchanged start does not" in d.reason


def test_a_verdict_the_unchanged_start_already_reaches_is_not_judged(suite):
    d = judge(suite, cells(suite, {"haim_binary_kkt": seeds(suite, 3), "unchanged": seeds(suite, 2)}))
    assert d.verdict == V.NOT_JUDGED and "unchanged start already meets it" in d.reason
    assert "the cells alone give reproduced" in d.reason and d.p is not None  # nothing computed is lost


def test_without_unchanged_cells_a_verdict_is_not_judged(suite):
    found = cells(suite, {"haim_binary_kkt": seeds(suite, 3), "unchanged": seeds(suite, 0)})
    found = {k: v for k, v in found.items() if "--unchanged--" not in k}
    d = judge(suite, found)
    assert d.verdict == V.NOT_JUDGED and "no unchanged-start comparison" in d.reason


def test_a_claim_the_attack_does_not_meet_needs_no_unchanged_start(suite):
    found = cells(suite, {"haim_binary_kkt": seeds(suite, 0), "unchanged": seeds(suite, 0)})
    assert judge(suite, found).verdict == V.NOT_REPRODUCED


@pytest.mark.parametrize(("residual", "judged"), [(MAX_RESIDUAL * 0.9, True), (MAX_RESIDUAL * 1.1, False),
                                                  (None, True)])
def test_targets_outside_the_attacks_regime_are_not_judged(suite, residual, judged):
    """The cards record the squared residual; the bound is on the norm ratio (its square root)."""
    found = cells(suite, {"haim_binary_kkt": seeds(suite, 3), "unchanged": seeds(suite, 0)},
                  residual_sq=None if residual is None else residual ** 2)
    d = judge(suite, found)
    if judged:
        assert d.verdict == V.REPRODUCED
    else:
        assert d.verdict == V.NOT_JUDGED and "outside the regime" in d.reason
        assert f"{residual:.3g}" in d.reason and "theta" in d.reason  # the residuals are shown


def test_oracle_starts_are_refused_and_the_page_says_so_from_the_cells(suite):
    found = cells(suite, {"haim_binary_kkt": seeds(suite, 3), "unchanged": seeds(suite, 0)}, oracle=True)
    d = judge(suite, found)
    assert d.verdict == V.NOT_JUDGED and "oracle start refused" in d.reason
    flagged = records.Claim(**{**CLAIM.__dict__, "oracle": True})
    clean = cells(suite, {"haim_binary_kkt": seeds(suite, 3), "unchanged": seeds(suite, 0)})
    assert judge(suite, clean, flagged).verdict == V.NOT_JUDGED


def test_the_pages_oracle_sentence_counts_the_cells_read(tmp_path):
    """On the published claims boards: the sentence names the claims whose cells start from training images."""
    results = {name: REPO / "leaderboards" / name for name in ("claims-a", "claims-b")}
    measured = measure_claims(DATA, results)
    from_cells = sorted(r.claim.id for r in measured if any(s.oracle for p in r.points for s in p.seeds))
    text = " ".join(_summary_lines(measured))
    for cid in from_cells:
        assert f"`{cid}`" in text
    assert ("refused, not judged" in text) == bool(from_cells)
    for r in measured:
        if r.claim.id in from_cells:
            assert r.verdict == V.NOT_JUDGED


def test_the_weight_decay_attack_reads_the_regularised_residual_or_its_lower_bound():
    from reconbench.targets.regime import residual_for

    value, how = residual_for({"residual_at_train": 0.81}, "regularised")
    assert value == pytest.approx(math.sqrt(0.81)) and "lower bound" in how
    value, how = residual_for({"regime": {"theta": {"residual": 0.1}, "regularised": {"residual": 0.7}}},
                              "regularised")
    assert value == 0.7 and how == "regularised"



@pytest.mark.parametrize(("claim_id", "value", "verdict"), [
    ("runkel-table1-partition", 1.0, V.NOT_JUDGED),   # init-copy share 1: what an unchanged start scores
    ("runkel-table1-theta", 0.01, V.REPRODUCED),      # the attack loss fell to 1%: an unchanged start keeps 100%
])
def test_measures_whose_unchanged_value_is_known_need_no_unchanged_cells(claim_id, value, verdict):
    claim = next(c for c in DATA.claims if c.id == claim_id)
    suite = load_suite(claim.suite)
    comp = comparison(suite, claim.comparison)
    plan = {c.cell_id: c for c in expand(suite)}
    found = {}
    for cell in expand(suite):
        if f"comparison:{comp.name}" in cell.groups:
            rec = cells(suite, {cell.attack.label: [value] * (max(comp.seeds) + 1)}, block=comp.name,
                        key=claim.measure)[cell.cell_id]
            rec["runs"][0]["final_loss"] = value * rec["runs"][0]["initial_loss"]
            found[cell.cell_id] = rec
    points = [measure_point(claim, suite, comp, records_of(found), plan, *s) for s in point_specs(claim, comp)]
    d = V.decide(claim, points)
    assert d.verdict == verdict
    if verdict == V.NOT_JUDGED:
        assert "unchanged start already meets it" in d.reason
