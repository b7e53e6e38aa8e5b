"""Matching on constructed cases: planted near-copies, duplicates, best-buddy, the B vote, pooling, unmatched images."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from _helpers.evalkit import FAST, centred, make_problem, noisy, smooth_images

from reconbench.evaluation import evaluate, resolve_protocol

ONLY_SSIM = {**FAST, "metrics": ["ssim"]}


@pytest.fixture(scope="module")
def problem():
    return make_problem(smooth_images(6, seed=10))


def test_planted_near_copies_are_found_and_the_rest_reported_unmatched(problem):
    train = problem.train_images
    rng_imgs = smooth_images(3, seed=99)  # unrelated images
    cands = np.concatenate([noisy(train[[4, 0, 2]], 0.01, 1), rng_imgs])
    out = evaluate(problem, centred(problem, cands), family="mlp", protocol=ONLY_SSIM)
    rows = out["per_image"]
    found = {r["index"]: r["best_candidate"] for r in rows if r["reconstructed"]}
    assert found == {4: 0, 0: 1, 2: 2}
    assert out["summary"]["reconstructed"] == 3
    for r in rows:
        if r["index"] not in found and not r["matched"]:
            assert r["ssim"] is None and r["best_distance"] is None and r["candidate_ids"] == []
    # every candidate is someone's nearest, so at most 6 images matched; the 3 random ones land somewhere
    assert out["summary"]["matched_images"] <= 6
    json.dumps(out, allow_nan=False)


def test_an_image_no_candidate_chose_is_not_reconstructed_and_never_paired(problem):
    train = problem.train_images
    cands = noisy(train[[1, 1, 1]], 0.01, 2)
    out = evaluate(problem, centred(problem, cands), family="mlp", protocol=ONLY_SSIM)
    matched = [r["index"] for r in out["per_image"] if r["matched"]]
    assert matched == [1]
    assert out["summary"]["reconstructed"] == 1  # duplicates counted once
    unmatched = [r for r in out["per_image"] if not r["matched"]]
    assert len(unmatched) == 5 and all(r["ssim"] is None and not r["reconstructed"] for r in unmatched)
    # the top-k mean counts unmatched images as 0: one image of SSIM s gives s / min(k, n)
    s = out["per_image"][1]["ssim"]
    assert out["summary"]["top_k_mean_ssim"] == pytest.approx(s / 6)


def test_mean_vote_averages_exactly_the_candidates_within_b_times_the_best(problem):
    train = problem.train_images
    base = train[3]
    rng = np.random.default_rng(5)
    direction = rng.normal(size=(4, *base.shape))
    direction *= np.sqrt(base.size) / np.linalg.norm(direction.reshape(4, -1), axis=1)[:, None, None, None]
    # mean squared distances to image 3 are exactly s^2: ratios 1, 1.0506, 1.1025 (> B = 1.1), 100
    cands = np.stack([base + s * d for s, d in zip([0.02, 0.0205, 0.021, 0.2], direction, strict=True)])
    x = centred(problem, cands)
    out = evaluate(problem, x, family="mlp", protocol={**ONLY_SSIM, "distance": "l2"})
    row = out["per_image"][3]
    # independent: numpy distances to every training image, nearest image, then the set d < 1.1 * d_best
    d_all = ((cands[:, None] - train[None]) ** 2).reshape(4, len(train), -1).mean(-1)
    assert (d_all.argmin(1) == 3).all()
    d = d_all[:, 3]
    expected = [j for j in np.argsort(d) if d[j] < 1.1 * d.min()]
    assert row["candidate_ids"] == expected == [0, 1]
    assert row["best_candidate"] == 0 and row["best_distance"] == pytest.approx(0.02**2, rel=1e-9)
    # the reconstruction is the average of those candidates: its SSIM equals the SSIM of that average
    from reconbench.evaluation.ssim import display, ssim_paper

    avg = x[expected].mean(0, keepdim=True)
    ref = ssim_paper(display(avg, problem.mean_tensor()), torch.as_tensor(train[3:4]))
    assert row["ssim"] == pytest.approx(float(ref[0]), abs=1e-12)
    # B = 1.11 admits the third candidate; vote=min keeps the best only
    wider = evaluate(problem, x, family="mlp", protocol={**ONLY_SSIM, "distance": "l2", "avg_threshold": 1.11})
    assert wider["per_image"][3]["candidate_ids"] == [0, 1, 2]
    out_min = evaluate(problem, x, family="mlp", protocol={**ONLY_SSIM, "distance": "l2", "vote": "min"})
    assert out_min["per_image"][3]["candidate_ids"] == [0]


def test_b_depends_on_the_family_and_is_recorded():
    for family, b in [("mlp", 1.1), ("mlp_bias", 1.1), ("affine", 1.1), ("conv", 1.5)]:
        p = resolve_protocol({}, family)
        assert p.avg_threshold == b and family in p.avg_threshold_source
        assert p.to_dict()["avg_threshold"] == b
    p = resolve_protocol({"avg_threshold": 2.0}, "conv")
    assert p.avg_threshold == 2.0 and p.to_dict()["avg_threshold_source"] == "set by the protocol"


def test_best_buddy_keeps_a_candidate_to_its_nearest_image_only():
    # training images 0 and 1 are near each other; one candidate copies image 0
    imgs = smooth_images(4, seed=20)
    imgs[1] = np.clip(imgs[0] + np.random.default_rng(3).normal(scale=0.08, size=imgs[0].shape), 0, 1)
    problem = make_problem(imgs)
    x = centred(problem, noisy(imgs[[0]], 0.005, 4))
    out = evaluate(problem, x, family="mlp", protocol={**FAST, "metrics": ["ssim", "ssim_notebook"]})
    rows = out["per_image"]
    assert rows[0]["matched"] and not rows[1]["matched"]
    assert out["summary"]["reconstructed"] == 1
    # the notebook variant (no best-buddy, min vote) pairs the same candidate with image 1 as well
    assert rows[1]["notebook_candidate"] == 0 and rows[0]["notebook_candidate"] == 0
    assert out["summary"]["reconstructed_notebook"] >= 2
    assert out["summary"]["notebook_distinct_candidates_reconstructed"] == 1


def test_runs_are_pooled_before_matching(problem):
    train = problem.train_images
    # run 0 has a poor copy of image 2, run 1 a good one: the pooled match picks run 1's
    cands = np.concatenate([noisy(train[[2]], 0.15, 6), noisy(train[[2]], 0.005, 7)])
    out = evaluate(problem, centred(problem, cands), family="mlp", protocol=ONLY_SSIM,
                   run_ids=torch.tensor([0, 1]))
    row = out["per_image"][2]
    assert row["best_candidate"] == 1 and row["candidate_runs"][0] == 1
    assert out["candidates"]["runs"] == [0, 1]


def test_l2_and_ncc_options_change_the_recorded_protocol(problem):
    x = centred(problem, noisy(problem.train_images, 0.01, 8))
    for dist in ("l2", "ncc", "ncc2"):
        out = evaluate(problem, x, family="mlp", protocol={**ONLY_SSIM, "distance": dist})
        assert out["protocol"]["distance"] == dist
        assert out["summary"]["reconstructed"] == 6
    out = evaluate(problem, x, family="mlp", protocol={**ONLY_SSIM, "distance": "l2", "best_buddy": False})
    assert out["protocol"]["best_buddy"] is False and out["protocol"]["name"] == "custom"


def _loop_best_buddy(near: np.ndarray, d: np.ndarray, cand_ids: np.ndarray, n: int, vote: str, threshold: float):
    """The best-buddy groups image by image (the construction as first written)."""
    best, best_dist = np.full(n, -1), np.full(n, np.nan)
    members = [np.zeros(0, dtype=np.int64) for _ in range(n)]
    order = np.lexsort((np.arange(len(near)), d, near))
    for i in range(n):
        group = order[near[order] == i]
        if len(group) == 0:
            continue
        keep = group[:1] if vote == "min" else np.concatenate([group[:1], group[1:][d[group[1:]] < threshold
                                                                                   * d[group[0]]]])
        best[i], best_dist[i], members[i] = cand_ids[group[0]], d[group[0]], cand_ids[keep]
    return best, best_dist, members


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("vote", ["mean", "min"])
def test_best_buddy_groups_equal_the_image_by_image_construction(seed, vote):
    """Duplicated candidates (equal distances), images no candidate chose, and invalid candidates left out."""
    from reconbench.evaluation.matching import match

    rng = np.random.default_rng(seed)
    n, m = 7, 30
    train = torch.as_tensor(rng.normal(size=(n, 12)))
    cand = train[torch.as_tensor(rng.integers(0, 4, size=m))] + torch.as_tensor(rng.normal(scale=0.3, size=(m, 12)))
    cand[5] = cand[6]   # an exact tie
    ids = np.sort(rng.choice(m + 5, m, replace=False))   # pooled ids with gaps (invalid candidates)
    got = match(train, cand, ids, m + 5, best_buddy=True, vote=vote, avg_threshold=1.3, per_dimension=False)
    near, d = got.nearest[ids], got.nearest_dist[ids]
    best, best_dist, members = _loop_best_buddy(near, d, ids, n, vote, 1.3)
    np.testing.assert_array_equal(got.best, best)
    np.testing.assert_array_equal(got.best_dist, best_dist)
    assert len(got.members) == n
    for a, b in zip(got.members, members, strict=True):
        np.testing.assert_array_equal(a, b)
        assert a.dtype == np.int64
    assert (got.best < 0).any() and (vote == "min" or max(len(x) for x in got.members) > 1)
    # the averages: one member is the row itself (0.0 + row), several their mean
    full = torch.as_tensor(rng.normal(size=(m + 5, 12)))
    full[ids[0], :3] = -0.0
    avg = got.average(full)
    for i, mem in enumerate(members):
        want = full[torch.as_tensor(mem)].mean(0) if len(mem) else torch.zeros(12, dtype=torch.float64)
        assert torch.equal(avg[i], want)
