"""Membership against planted decoys, copies of the initialisation, and collapse."""

from __future__ import annotations

import numpy as np
import pytest
from _helpers.evalkit import FAST, centred, make_problem, noisy, smooth_images

from reconbench.evaluation import evaluate


@pytest.fixture(scope="module")
def planted():
    """8 training images; decoys 0-2 are perturbed versions of training images 0-2 (same look, not members)."""
    train = smooth_images(8, (1, 16, 16), seed=30)
    near = np.clip(noisy(train[:3], 0.06, 31), 0, 1)        # decoys that look like training images 0-2
    far = smooth_images(5, (1, 16, 16), seed=32)            # unrelated decoys
    return make_problem(train, decoys=np.concatenate([near, far]))


def test_precision_of_reconstructed_claims_against_planted_decoys(planted):
    train, decoys = planted.train_images, planted.decoy_images
    # members: copies of training images 3-5; non-members: copies of the look-alike decoys 0-2
    cands = np.concatenate([noisy(train[3:6], 0.002, 1), noisy(decoys[:3], 0.002, 2)])
    out = evaluate(planted, centred(planted, cands), family="mlp",
                   protocol={**FAST, "metrics": ["ssim", "membership"]})
    rows = out["per_image"]
    # the decoy copies do look like training images 0-2: they are claimed as reconstructions
    assert [r["index"] for r in rows if r["reconstructed"]] == [0, 1, 2, 3, 4, 5]
    # but their nearest neighbour among training images and decoys is a decoy
    assert [r["nearest_is_train"] for r in rows] == [False, False, False, True, True, True, None, None]
    assert [r["nearest_decoy_dataset_index"] for r in rows[:3]] == [1000, 1001, 1002]
    s = out["summary"]
    assert s["member_claims"] == 6 and s["member_claims_confirmed"] == 3 and s["membership_precision"] == 0.5
    assert s["candidates_nearer_decoy_share"] == 0.5
    assert out["metrics"]["membership"]["higher_is_better"] is True


def test_membership_is_unavailable_without_decoys():
    problem = make_problem(smooth_images(4, seed=33))
    out = evaluate(problem, centred(problem, problem.train_images), family="mlp",
                   protocol={**FAST, "metrics": ["ssim", "membership"]})
    assert out["summary"]["membership_precision"] == "unavailable"
    assert "decoy" in out["summary"]["membership_precision_unavailable_reason"]


def test_init_copy_share_for_a_partition_initialisation(planted):
    train, decoys = planted.train_images, planted.decoy_images
    x0 = centred(planted, decoys[3:7])                         # partition init: unrelated decoys
    stayed = noisy(decoys[3:5], 0.002, 3)                      # two candidates barely moved
    moved = noisy(train[[6, 7]], 0.002, 4)                     # two moved onto training images
    cands = centred(planted, np.concatenate([stayed, moved]))
    out = evaluate(planted, cands, family="mlp", x0=x0, protocol={**FAST, "metrics": ["ssim", "init_copy"]})
    assert out["summary"]["init_copy_share"] == 0.5 and out["summary"]["init_copy_candidates"] == 4
    assert out["metrics"]["init_copy"]["higher_is_better"] is False
    none = evaluate(planted, cands, family="mlp", protocol={**FAST, "metrics": ["ssim", "init_copy"]})
    assert none["summary"]["init_copy_share"] == "unavailable"


def test_collapse_counts_distinct_training_images_against_candidates(planted):
    train = planted.train_images
    collapsed = centred(planted, noisy(np.repeat(train[:1], 10, axis=0), 0.002, 5))
    out = evaluate(planted, collapsed, family="mlp", protocol={**FAST, "metrics": ["ssim", "collapse"]})
    s = out["summary"]
    assert s["distinct_matched"] == 1 and s["candidates_valid"] == 10 and s["reconstructed"] == 1
    assert s["distinct_share"] == pytest.approx(1 / 8) and s["candidates_per_matched_image"] == 10
    assert s["max_candidates_per_image"] == 10
    spread = centred(planted, noisy(train, 0.002, 6))
    s = evaluate(planted, spread, family="mlp", protocol={**FAST, "metrics": ["ssim", "collapse"]})["summary"]
    assert s["distinct_matched"] == 8 and s["distinct_share"] == 1.0 and s["max_candidates_per_image"] == 1
