"""The data prior in the null (protocol ``prior_draws``; reconbench/evaluation/prior.py) and the ``data_prior``
baseline: the construction, the threshold it adds to, the record it leaves, and the rate at which candidates without
member information pass the calibrated headline on digits, with the option off and on."""

from __future__ import annotations

from math import comb

import numpy as np
import pytest
import torch
from reconbench_plugins.baselines import DataPrior, DataPriorConfig
from scipy.ndimage import gaussian_filter

from reconbench.attack.candidates import candidate_labels
from reconbench.data import ProblemSpec
from reconbench.evaluation import evaluate
from reconbench.evaluation import null as null_mod
from reconbench.evaluation.prior import AVERAGE_SIZES, BLUR_SIGMAS, prior_candidates
from reconbench.evaluation.protocol import resolve_protocol
from reconbench.interfaces import AttackTarget, Knowledge
from reconbench.targets.problems import build_problem

LIGHT = {"figures": False, "metrics": ["ssim", "corr"], "calibration_draws": 0, "null_draws": 0}


@pytest.fixture(scope="module")
def digits():
    return build_problem(ProblemSpec(dataset="digits", task="multiclass", n_per_class=2))  # n = 20, 10 classes


def test_each_candidate_is_a_blurred_mean_of_pool_images_of_its_label():
    """Recompute every candidate from the same random choices, drawn here in the documented order."""
    gen = np.random.default_rng(0)
    pool = torch.as_tensor(gen.normal(size=(60, 1, 6, 6)))
    pool_labels = np.repeat(np.arange(3), 20)
    labels = np.array([0, 2, 1, 2, 0, 1, 1])
    got = prior_candidates(pool, pool_labels, labels, np.random.default_rng(5))
    rng = np.random.default_rng(5)
    for j, c in enumerate(labels):
        members = np.flatnonzero(pool_labels == c)
        s = min(int(rng.choice(AVERAGE_SIZES)), len(members))
        mean = pool.numpy()[rng.choice(members, s, replace=False)].mean(0)
        sigma = float(rng.choice(BLUR_SIGMAS))
        want = mean if sigma == 0 else np.stack([gaussian_filter(ch, sigma, mode="reflect") for ch in mean])
        np.testing.assert_allclose(got[j].numpy(), want, rtol=1e-12, atol=1e-12)


def test_the_threshold_covers_the_prior_draws_and_only_new_protocols_record_them(digits):
    m = 40
    labels = candidate_labels("multiclass", 10, m).numpy()
    cand = digits.x_train()[:1].repeat(m, 1, 1, 1)
    proto = {"figures": False, "metrics": ["ssim", "corr"], "calibration_draws": 3, "null_draws": 0}
    ev = evaluate(digits, cand, family="mlp", labels=torch.as_tensor(labels), protocol={**proto, "prior_draws": 4})
    cal = ev["protocol"]["calibration"]
    maxima = []
    for k in range(4):  # recomputed here: each prior draw scored alone, its best correlation on any training image
        scored = evaluate(digits, null_mod.prior_draw(digits, labels, m, 0, k), family="mlp",
                          labels=torch.as_tensor(labels), protocol=LIGHT)
        maxima.append(float(np.nanmax(null_mod.scores_of(scored, "corr"))))
    assert cal["prior_draw_maxima"] == pytest.approx(maxima, abs=1e-12)
    assert cal["threshold"] == pytest.approx(max(cal["draw_maxima"] + maxima), abs=1e-12)
    assert cal["prior"]["draws"] == 4 and cal["prior"]["fpr_bound_for_prior_candidates"] == pytest.approx(0.2)
    # a protocol without the option records what it recorded before the option existed
    plain = resolve_protocol(proto, "mlp").to_dict()["calibration"]
    assert "prior" not in plain and resolve_protocol(proto, "mlp").is_paper() == \
        resolve_protocol({**proto, "prior_draws": 4}, "mlp").is_paper()


def _pass_rate(fresh: list[float], pools: list[list[float]], k: int = 19) -> float:
    """The probability that a fresh draw's best score is above the threshold of k random draws from each pool,
    averaged over the fresh draws: exact over the choice of calibration draws (a U-statistic; no ties here)."""
    total = 0.0
    for v in fresh:
        p = 1.0
        for pool in pools:
            below = sum(1 for u in pool if u < v)
            p *= comb(below, k) / comb(len(pool), k)
        total += p
    return total / len(fresh)


def test_candidates_without_member_information_pass_at_most_five_percent_with_the_prior_on(digits):
    """40 held-out draws and 40 prior draws calibrate (19 of each picked at random: the rate is exact over the
    picks); 60 fresh prior draws (another seed) and 20 data_prior baseline runs on the decoy pool are the
    candidates without member information. Held-out draws alone let the prior pass more often than 1/20 on 10-class
    digits; with the prior draws the rate is at most 1/20 (exchangeable with the fresh prior draws)."""
    m = 40
    labels = candidate_labels("multiclass", 10, m).numpy()

    def best(cand: torch.Tensor) -> float:
        scored = evaluate(digits, cand, family="mlp", labels=torch.as_tensor(labels), protocol=LIGHT)
        return float(np.nanmax(null_mod.scores_of(scored, "corr")))

    held = [best(null_mod.draw(digits, labels, m, 0, null_mod.CALIBRATION_STREAM, k)) for k in range(40)]
    prior = [best(null_mod.prior_draw(digits, labels, m, 0, k)) for k in range(40)]
    fresh = [best(null_mod.prior_draw(digits, labels, m, 1, k)) for k in range(60)]
    knowledge = Knowledge(task="multiclass", num_classes=10, out_dim=10, input_shape=digits.image_shape)
    target = AttackTarget(model=torch.nn.Identity(), family="mlp", homogeneity_degree=None,  # type: ignore[arg-type]
                          knowledge=knowledge)
    x0 = digits.x_decoy()[np.argsort(digits.decoy_labels, kind="stable")]
    x0_labels = torch.as_tensor(np.sort(digits.decoy_labels))
    baseline = [best(DataPrior().run(target, x0, x0_labels, DataPriorConfig(seed=s), generator=torch.Generator())
                     .candidates[_by_label(x0_labels.numpy(), labels)]) for s in range(20)]
    off = _pass_rate(fresh, [held])
    # the failure the option fixes: the prior passes more often than the 1/20 held-out draws are held to (these
    # seeds: 0.091 off, 0.030 on; the baseline 0.083 off, 0.009 on)
    assert off > 0.05
    assert _pass_rate(fresh, [held, prior]) <= 0.05 + 0.02  # 1/20 up to the noise of 60 fresh and 40 pooled draws
    assert _pass_rate(baseline, [held, prior]) <= 0.05 + 0.02


def _by_label(have: np.ndarray, want: np.ndarray) -> torch.Tensor:
    """Indices into ``have`` giving one entry of each wanted label in turn (cycling within a label)."""
    seen: dict[int, int] = {}
    out = []
    for c in want.tolist():
        pos = np.flatnonzero(have == c)
        out.append(int(pos[seen.get(c, 0) % len(pos)]))
        seen[c] = seen.get(c, 0) + 1
    return torch.as_tensor(out)


def test_the_prior_draws_of_reordered_labels_are_not_taken_from_the_cache(digits):
    """Two evaluations in one process whose candidate labels have equal counts in another order: a prior draw builds
    candidate j from images of label j, so the second must get its own draws (as a process that ran it alone does),
    not the first one's cached maxima; the held-out draws depend on the counts only and may be shared."""
    m = 40
    labels = candidate_labels("multiclass", 10, m).numpy()
    reordered = labels[np.random.default_rng(3).permutation(m)]
    assert (np.bincount(labels) == np.bincount(reordered)).all() and (labels != reordered).any()
    cand = digits.x_train()[:1].repeat(m, 1, 1, 1)
    proto = {"figures": False, "metrics": ["ssim", "corr"], "calibration_draws": 2, "null_draws": 0, "prior_draws": 3}

    def prior_maxima(lab: np.ndarray) -> list[float]:
        ev = evaluate(digits, cand, family="mlp", labels=torch.as_tensor(lab), protocol=proto)
        return ev["protocol"]["calibration"]["prior_draw_maxima"]

    null_mod.clear_caches()
    alone = prior_maxima(reordered)
    null_mod.clear_caches()
    first = prior_maxima(labels)
    after = prior_maxima(reordered)
    assert after == pytest.approx(alone, abs=1e-12)
    assert first != pytest.approx(alone, abs=1e-12)   # the draws do depend on the order: the test can fail


def test_candidates_blurred_together_equal_each_blurred_alone():
    """Many candidates, several channels: the stack filtered per blur equals each candidate's own filter calls."""
    gen = np.random.default_rng(1)
    pool = torch.as_tensor(gen.normal(size=(90, 3, 9, 7)))
    pool_labels = np.repeat(np.arange(3), 30)
    labels = gen.integers(0, 3, size=40)
    got = prior_candidates(pool, pool_labels, labels, np.random.default_rng(7))
    rng = np.random.default_rng(7)
    sigmas = set()
    for j, c in enumerate(labels):
        members = np.flatnonzero(pool_labels == c)
        s = min(int(rng.choice(AVERAGE_SIZES)), len(members))
        mean = pool.numpy()[rng.choice(members, s, replace=False)].mean(0)
        sigma = float(rng.choice(BLUR_SIGMAS))
        sigmas.add(sigma)
        want = mean if sigma == 0 else np.stack([gaussian_filter(ch, sigma, mode="reflect") for ch in mean])
        assert np.array_equal(got[j].numpy(), want), (j, sigma)
    assert sigmas == set(BLUR_SIGMAS)


@pytest.mark.parametrize("seed", range(6))
def test_candidates_equal_the_one_at_a_time_construction_bit_for_bit(seed):
    """The construction as first written (rng.choice on the tuples, one mean and one filter call per candidate):
    the same random stream and the same values, exactly."""
    gen = np.random.default_rng(seed)
    pool = torch.as_tensor(gen.normal(size=(90, 2, 7, 6)))
    pool_labels = np.repeat(np.arange(3), 30)
    pool_labels[:4] = 2   # classes of different sizes, one smaller than the largest average
    labels = gen.integers(0, 3, size=25)
    got = prior_candidates(pool, pool_labels, labels, np.random.default_rng(seed + 10)).numpy()
    rng = np.random.default_rng(seed + 10)
    arr = pool.numpy()
    for j, c in enumerate(labels):
        members = np.flatnonzero(pool_labels == c)
        s = min(int(rng.choice(AVERAGE_SIZES)), len(members))
        mean = arr[rng.choice(members, s, replace=False)].mean(axis=0)
        sigma = float(rng.choice(BLUR_SIGMAS))
        want = mean if sigma == 0 else gaussian_filter(mean[None], sigma=(0.0, 0.0, sigma, sigma), mode="reflect")[0]
        np.testing.assert_array_equal(got[j], want)
