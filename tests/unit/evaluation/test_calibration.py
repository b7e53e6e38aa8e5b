"""The held-out null, the calibrated headline, the correlation metric and the weight-rows baseline."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from reconbench_plugins.baselines import WeightRows, WeightRowsConfig
from reconbench_plugins.metrics import pearson
from reconbench_plugins.models import MLP
from torch import nn

from reconbench.attack.candidates import candidate_labels
from reconbench.data import ProblemSpec
from reconbench.evaluation import evaluate
from reconbench.evaluation import null as null_mod
from reconbench.interfaces import AttackTarget, Knowledge
from reconbench.targets.problems import build_problem

DIGITS = ProblemSpec(dataset="digits", task="multiclass", n_per_class=2)  # n = 20, as in the calibration study


@pytest.fixture(scope="module")
def digits():
    return build_problem(DIGITS)


def test_held_out_pool_is_disjoint_from_training_and_decoys(digits):
    held = set(digits.held_out_indices.tolist())
    assert held and not held & set(digits.train_indices.tolist()) and not held & set(digits.decoy_indices.tolist())
    # every other image of the data set is in it (the test split included)
    n_all = len(digits.source_images)
    assert len(held) + digits.n + len(digits.decoy_indices) == n_all
    assert set(digits.test_indices.tolist()) <= held
    labels = candidate_labels("multiclass", 10, 240)
    x = null_mod.draw(digits, labels.numpy(), 240, seed=0, stream=0, k=0)
    # each null candidate is a held-out image of its candidate's label: find it in the pool
    pool = digits.centred(digits.held_out_images(np.arange(len(digits.held_out_indices))))
    d = torch.cdist(x.flatten(1), pool.flatten(1))
    nearest = d.argmin(1)
    assert float(d.min(1).values.max()) < 1e-6
    assert np.array_equal(digits.held_out_labels[nearest.numpy()], labels.numpy())


@pytest.mark.slow
def test_null_stays_under_the_bound_and_ground_truth_scores_n_of_n(digits):
    """The embedded digits set-up of the calibration study: m = 240 candidates for n = 20 images."""
    m = 240
    ids = np.arange(m) % digits.n
    truth = digits.x_train()[torch.as_tensor(ids)]
    ev = evaluate(digits, truth, family="mlp", labels=torch.as_tensor(digits.train_labels[ids]),
                  protocol={"figures": False, "metrics": ["ssim", "corr", "membership"]})
    assert ev["summary"]["reconstructed_calibrated"] == digits.n
    per_draw = [d["reconstructed_calibrated"] for d in ev["null"]["per_draw"]]
    assert len(per_draw) == 5 and max(per_draw) <= 1
    # the papers' count does not separate the two: random held-out digits pass it almost always
    assert min(d["reconstructed"] for d in ev["null"]["per_draw"]) >= digits.n // 2
    # the threshold is the highest calibration score; a candidate set of the calibration's own draw 0 reaches it
    # on at most its own maximum, so it counts at most the images at that maximum
    cal = ev["protocol"]["calibration"]
    assert cal["threshold"] == max(cal["draw_maxima"]) and len(cal["draw_maxima"]) == 19


@pytest.mark.slow
def test_calibration_threshold_is_the_max_corr_over_calibration_draws(digits):
    """Recompute the threshold with an independent correlation (numpy's corrcoef) of the matched reconstructions."""
    m = 40
    labels = candidate_labels("multiclass", 10, m).numpy()
    ev = evaluate(digits, digits.x_train()[:1].repeat(m, 1, 1, 1), family="mlp", labels=torch.as_tensor(labels),
                  protocol={"figures": False, "metrics": ["ssim", "corr"], "calibration_draws": 3, "null_draws": 0})
    best = -1.0
    for k in range(3):
        cand = null_mod.draw(digits, labels, m, 0, null_mod.CALIBRATION_STREAM, k)
        scored = evaluate(digits, cand, family="mlp", labels=torch.as_tensor(labels),
                          protocol={"figures": False, "metrics": ["ssim", "corr"], "calibration_draws": 0,
                                    "null_draws": 0})
        for row in scored["per_image"]:
            if row["matched"]:
                recon = cand[torch.as_tensor(row["candidate_ids"])].mean(0).numpy().ravel()
                truth = digits.x_train()[row["index"]].numpy().ravel()
                best = max(best, float(np.corrcoef(recon, truth)[0, 1]))
    assert ev["summary"]["calibrated_threshold"] == pytest.approx(best, abs=1e-9)


def test_pearson_matches_numpy_per_channel():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(4, 3, 5, 5)), rng.normal(size=(4, 3, 5, 5))
    b[1] = 2 * a[1] + 1  # perfectly correlated in every channel
    want = [np.mean([np.corrcoef(a[i, c].ravel(), b[i, c].ravel())[0, 1] for c in range(3)]) for i in range(4)]
    got = pearson(torch.as_tensor(a), torch.as_tensor(b)).numpy()
    assert np.allclose(got, want) and got[1] == pytest.approx(1.0)


def test_weight_rows_returns_signed_first_layer_rows_by_importance():
    net = MLP(4, [3, 3], 1, hidden_bias=False, output_bias=False)
    with torch.no_grad():
        net.layers[0].weight.copy_(torch.tensor([[1.0, 0, 0, 0], [0, 2.0, 0, 0], [0, 0, 0, 3.0]]))
        net.layers[1].weight.fill_(1.0)
    knowledge = Knowledge(task="binary", num_classes=2, out_dim=1, input_shape=(1, 2, 2))
    target = AttackTarget(model=net.double(), family="mlp", homogeneity_degree=None, knowledge=knowledge)
    x0 = torch.zeros(5, 1, 2, 2, dtype=torch.float64)
    out = WeightRows().run(target, x0, torch.zeros(5, dtype=torch.long), WeightRowsConfig(rms=1.0, rank="norm"),
                           generator=torch.Generator())
    rows = out.candidates.reshape(5, 4)
    # row norms 3 > 2 > 1, each followed by its negation, scaled to unit RMS (a single pixel of value 2)
    expected = torch.tensor([[0, 0, 0, 2.0], [0, 0, 0, -2.0], [0, 2.0, 0, 0], [0, -2.0, 0, 0], [2.0, 0, 0, 0]])
    assert torch.allclose(rows, expected.double())


def test_weight_rows_refuses_a_model_without_an_image_sized_linear_layer():
    class Conv(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(1, 2, 2)

    from reconbench.errors import IncompatibleError

    knowledge = Knowledge(task="binary", num_classes=2, out_dim=1, input_shape=(1, 4, 4))
    target = AttackTarget(model=Conv(), family="conv", homogeneity_degree=None,  # type: ignore[arg-type]
                          knowledge=knowledge)
    with pytest.raises(IncompatibleError, match="init_only"):
        WeightRows().check(target)


def test_trace_plot_survives_a_diverging_run(tmp_path):
    from reconbench.runs import plot_traces

    # a run of the ci suite that diverged to 7.6e282: matplotlib's log ticks overflowed and the cell was lost
    runs = [{"run": 0, "trace": [{"step": 0, "loss": 16.5}, {"step": 100, "loss": 214.2}, {"step": 200, "loss": 7.57e282}]},
            {"run": 1, "trace": [{"step": 0, "loss": 20.1}, {"step": 100, "loss": 15.5}]}]
    assert plot_traces(runs, tmp_path / "loss.png", "t") == tmp_path / "loss.png"
