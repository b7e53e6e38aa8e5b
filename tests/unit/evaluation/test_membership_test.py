"""The membership test: members against at least 10n non-members, AUC and TPR at 1% FPR from the candidates."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.metrics import roc_auc_score, roc_curve

from reconbench.attack.candidates import candidate_labels
from reconbench.data import ProblemSpec
from reconbench.errors import ReconbenchError
from reconbench.evaluation import evaluate
from reconbench.evaluation import null as null_mod
from reconbench.evaluation.membership import auc, pearson_matrix, tpr_at_fpr
from reconbench.targets.problems import build_problem

DIGITS = ProblemSpec(dataset="digits", task="multiclass", n_per_class=2)  # n = 20
METRICS = ["ssim", "corr", "membership_test"]


@pytest.fixture(scope="module")
def digits():
    return build_problem(DIGITS)


def test_pairwise_correlation_matches_numpy():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(5, 3, 4, 4)), rng.normal(size=(7, 3, 4, 4))
    b[2] = 1.0  # a constant image correlates 0
    got = pearson_matrix(torch.as_tensor(a), torch.as_tensor(b)).numpy()
    for i in range(5):
        for j in range(7):
            want = np.mean([0.0 if np.ptp(b[j, c]) == 0 else np.corrcoef(a[i, c].ravel(), b[j, c].ravel())[0, 1]
                            for c in range(3)])
            assert got[i, j] == pytest.approx(want, abs=1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_auc_and_tpr_agree_with_scikit_learn(seed):
    rng = np.random.default_rng(seed)
    pos, neg = rng.normal(1.0, 1.0, 20).round(1), rng.normal(0.0, 1.0, 200).round(1)  # rounding makes ties
    y = np.r_[np.ones(20), np.zeros(200)]
    s = np.r_[pos, neg]
    assert auc(pos, neg) == pytest.approx(roc_auc_score(y, s), abs=1e-12)
    tpr, threshold = tpr_at_fpr(pos, neg, 0.01)
    assert (neg > threshold).sum() <= 2 and (pos > threshold).mean() == tpr
    # scikit-learn's ROC: the best TPR among operating points with FPR <= 1% that the ">" rule can realise
    fpr_s, tpr_s, thr_s = roc_curve(y, s)
    best = max(float((pos > t).mean()) for t in np.r_[thr_s, np.inf] if (neg > t).mean() <= 0.01)
    assert tpr == pytest.approx(best)


@pytest.mark.slow
def test_members_separate_from_non_members_and_the_null_does_not(digits):
    m = 240
    ids = np.arange(m) % digits.n
    truth = digits.x_train()[torch.as_tensor(ids)]
    labels = torch.as_tensor(digits.train_labels[ids])
    ev = evaluate(digits, truth, family="mlp", labels=labels, protocol={"figures": False, "metrics": METRICS})
    s = ev["summary"]
    assert s["membership_auc"] == 1.0 and s["membership_tpr_at_fpr"] == 1.0
    details = ev["metrics"]["membership_test"]["details"]
    assert details["non_members"] >= 10 * digits.n and details["left_out_as_drawn"] == 0
    # held-out images as candidates know nothing of the members: AUC near one half, TPR near the FPR
    draws = ev["null"]["per_draw"]
    assert len(draws) == 5
    for d in draws:
        assert 0.2 <= d["membership_auc"] <= 0.8 and d["membership_tpr_at_fpr"] <= 0.15


@pytest.mark.slow
def test_a_null_draw_cannot_score_its_own_images_as_non_member_hits(digits):
    """Candidates that are held-out images inside the non-member pool are left out of it, so the null is not pushed
    below chance by its own draw; decoys (which partition starts copy) are no non-members by default."""
    m = 240
    labels = candidate_labels("multiclass", 10, m).numpy()
    cand = null_mod.draw(digits, labels, m, 0, null_mod.REPORT_STREAM, 0)
    ev = evaluate(digits, cand, family="mlp", labels=torch.as_tensor(labels),
                  protocol={"figures": False, "metrics": METRICS, "calibration_draws": 0, "null_draws": 0})
    details = ev["metrics"]["membership_test"]["details"]
    assert details["non_members"] == details["decoys"] + details["held_out"] - details["left_out_as_drawn"]
    decoys = digits.x_decoy()

    def decoy_copies(non_members: str) -> dict:
        return evaluate(digits, decoys, family="mlp", labels=torch.as_tensor(digits.decoy_labels),
                        protocol={"figures": False, "metrics": METRICS, "calibration_draws": 0, "null_draws": 0,
                                  "membership_test.non_members": non_members})["metrics"]["membership_test"]
    # an attack that returns the decoys themselves (a partition start left unchanged) is no member evidence: with
    # decoys among the non-members (decoys_first) the copies outscore every member; the default pool holds none
    old = decoy_copies("decoys_first")
    assert old["summary"]["membership_tpr_at_fpr"] == 0.0 and old["details"]["decoys"] > 0
    assert decoy_copies("held_out")["details"]["decoys"] == 0


def test_too_small_a_pool_is_reported_unavailable_with_the_fix():
    small = build_problem(ProblemSpec(dataset="digits", task="multiclass", n_per_class=2))
    ev = evaluate(small, small.x_train(), family="mlp", labels=torch.as_tensor(small.train_labels),
                  protocol={"figures": False, "metrics": METRICS, "calibration_draws": 0, "null_draws": 0,
                            "membership_test.pool_per_member": 10_000})
    info = ev["metrics"]["membership_test"]
    assert info["available"] is False and "pool_per_member" in info["reason"]
    assert ev["summary"]["membership_auc"] is None


@pytest.mark.parametrize("key, value", [("pool_per_member", 0), ("fpr", 0.0), ("fpr", 1.0)])
def test_out_of_range_options_are_refused(digits, key, value):
    with pytest.raises(ReconbenchError, match=f"{key}.*out of range"):
        evaluate(digits, digits.x_train(), family="mlp", labels=torch.as_tensor(digits.train_labels),
                 protocol={"figures": False, "metrics": METRICS, f"membership_test.{key}": value})
