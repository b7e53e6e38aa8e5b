"""The membership test is at chance for uninformative candidates over random member sets, far above it for an
informative attack, and stored evaluations re-score with the computation they recorded (docs/calibration.md)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from reconbench import plugins
from reconbench.attack.candidates import candidate_labels
from reconbench.config import build_config
from reconbench.data import Problem, ProblemSpec
from reconbench.evaluation import null
from reconbench.evaluation.context import build_context
from reconbench.evaluation.membership import pearson_matrix, population_mean, without
from reconbench.evaluation.protocol import resolve_protocol
from reconbench.evaluation.rescore import pinned_protocol
from reconbench.targets.problems import build_problem

SETS = 100  # random member sets: the digits file walked in 100 seeded orders


def membership_auc(problem: Problem, cand: torch.Tensor, labels: np.ndarray, method: str,
                   **options: str) -> float:
    resolved = resolve_protocol({"metrics": ["corr"], "primary_metric": "corr", "calibration_draws": 0,
                                 "null_draws": 0, "figures": False}, "mlp")
    ev = build_context(problem, cand, resolved, labels=torch.as_tensor(labels))
    metric = plugins.get("metrics", "membership_test")
    return float(metric.compute(ev, build_config(metric.config_cls, {"method": method, **options}))["summary"]["membership_auc"])


def candidates(problem: Problem, kind: str, seed: int) -> tuple[torch.Tensor, np.ndarray]:
    m = 12 * problem.n
    labels = candidate_labels(problem.task, problem.num_classes, m).numpy()
    if kind == "held_out":  # the evaluation's own null: random held-out images of the candidates' labels
        return null.draw(problem, labels, m, seed, null.REPORT_STREAM, 0), labels
    if kind == "decoys":  # what a partition start hands the attack: the decoy pool's images, unchanged
        return problem.x_decoy(torch.float64), np.asarray(problem.decoy_labels)
    noise = torch.randn((m, *problem.image_shape), generator=torch.Generator().manual_seed(seed),
                        dtype=torch.float64)
    if kind == "informative":  # a noisy copy of every training image (noise of the image's own RMS)
        x = problem.x_train()
        noise[:problem.n] = x + x.flatten(1).pow(2).mean(1).sqrt().reshape(-1, 1, 1, 1) * noise[:problem.n]
    return noise, labels


@pytest.fixture(scope="module")
def member_sets() -> list[Problem]:
    return [build_problem(ProblemSpec(dataset="digits", task="multiclass", n_per_class=1, order_seed=s))
            for s in range(SETS)]


def mean_auc(member_sets: list[Problem], kind: str, method: str) -> float:
    return float(np.mean([membership_auc(p, *candidates(p, kind, s), method) for s, p in enumerate(member_sets)]))


@pytest.mark.parametrize("kind", ["held_out", "noise"])
def test_uninformative_candidates_score_chance_over_random_member_sets(member_sets, kind):
    """Natural images the model never saw and pure noise carry no membership evidence: the mean AUC over 100 random
    member sets (n = 10, m = 120; standard error about 0.009) lies in [0.45, 0.55]."""
    assert 0.45 <= mean_auc(member_sets, kind, "offset_removed") <= 0.55


def test_an_informative_attack_scores_far_above_chance(member_sets):
    assert mean_auc(member_sets[:20], "informative", "offset_removed") > 0.9


def test_the_recorded_computation_is_biased_below_chance(member_sets):
    """What stored evaluations recorded (method train_centred): held-out images as candidates score below 0.45, which
    is why new evaluations use offset_removed."""
    assert mean_auc(member_sets, "held_out", "train_centred") < 0.45


def test_offset_removed_score_matches_an_independent_computation():
    """The plugin's per-image scores against numpy: each channel's mean and its component along the released mean's
    offset from the class-weighted held-out mean removed, then the Pearson correlation averaged over channels."""
    rng = np.random.default_rng(0)
    images = rng.random((60, 3, 4, 4))
    labels = np.arange(60) % 3
    from reconbench.data import ImageData

    data = ImageData("fake", images, labels, ["a", "b", "c"], "x")
    p = build_problem(ProblemSpec(dataset="npz:x", task="multiclass", n_per_class=2, n_decoy_per_class=2,
                                  n_test_per_class=2), data=data)
    held = images[p.held_out_indices]
    class_means = np.stack([held[p.held_out_labels == c].mean(0) for c in range(3)])
    np.testing.assert_allclose(p.held_out_class_means(), class_means, rtol=0, atol=1e-15)
    pop = class_means.mean(0)  # two members per class: equal weights
    np.testing.assert_allclose(population_mean(class_means, p.class_counts), pop, rtol=0, atol=1e-15)
    offset = p.mean - pop
    cand = rng.normal(size=(7, 3, 4, 4))

    def residual(x: np.ndarray) -> np.ndarray:  # (C, 16): per channel, mean and offset direction removed
        f = x.reshape(3, -1) - x.reshape(3, -1).mean(1, keepdims=True)
        u = offset.reshape(3, -1) - offset.reshape(3, -1).mean(1, keepdims=True)
        u = u / np.linalg.norm(u, axis=1, keepdims=True)
        return f - (f * u).sum(1, keepdims=True) * u

    want = np.array([[np.mean([np.corrcoef(residual(a)[c], residual(b)[c])[0, 1] for c in range(3)]) for b in cand]
                     for a in p.x_train().numpy()])
    got = pearson_matrix(p.x_train(), torch.as_tensor(cand), remove=torch.as_tensor(offset)).numpy()
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
    f = torch.as_tensor(residual(cand[0]))[None]
    np.testing.assert_allclose(without(f, torch.as_tensor(offset)).numpy(), f.numpy(), rtol=0, atol=1e-12)


def test_non_members_have_the_members_class_proportions():
    p = build_problem(ProblemSpec(dataset="digits", task="binary", n_per_class=3, order_seed=4))
    cand = torch.randn((24, *p.image_shape), generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    resolved = resolve_protocol({"metrics": ["corr", "membership_test"], "primary_metric": "corr",
                                 "calibration_draws": 0, "null_draws": 0, "figures": False}, "mlp")
    ev = build_context(p, cand, resolved)
    metric = plugins.get("metrics", "membership_test")
    out = metric.compute(ev, build_config(metric.config_cls, {}))
    assert out["details"]["non_members"] == 10 * p.n and out["details"]["method"] == "offset_removed"


def test_stored_evaluations_without_the_method_rescore_with_the_recorded_computation():
    old = {"metrics": {"ssim": {"config": {}}, "membership_test": {"config": {"pool_per_member": 10,
                                                                          "fpr": 0.01, "seed": 0}}}}
    pinned = pinned_protocol({"figures": False}, old)
    assert pinned["membership_test.method"] == "train_centred" and pinned["metrics"] == ["ssim", "membership_test"]
    new = {"metrics": {"membership_test": {"config": {"method": "offset_removed"}}}}
    assert "membership_test.method" not in pinned_protocol({}, new)
    # an explicit choice wins, and a metric the re-scoring leaves out gets no option
    assert pinned_protocol({"membership_test.method": "offset_removed"}, old)["membership_test.method"] == \
        "offset_removed"
    assert "membership_test.method" not in pinned_protocol({"metrics": ["ssim"]}, old)


def test_copies_of_the_partition_start_score_chance_against_held_out_non_members(member_sets):
    """A partition start copies decoys. Counted as non-members (decoys_first, what earlier evaluations did) those
    copies outscore every member; with held-out non-members only (the default) they carry no membership evidence."""
    sets = member_sets[:40]

    def mean(non_members: str) -> float:
        return float(np.mean([membership_auc(p, *candidates(p, "decoys", s), "offset_removed", non_members=non_members)
                              for s, p in enumerate(sets)]))
    fair = mean("held_out")
    assert 0.43 <= fair <= 0.57   # 40 sets of n = 10: standard error about 0.015
    assert mean("decoys_first") < fair - 0.05


def test_stored_evaluations_without_non_members_rescore_with_decoys_first():
    recorded = {"metrics": {"membership_test": {"config": {"method": "offset_removed"}}}}
    assert pinned_protocol({}, recorded)["membership_test.non_members"] == "decoys_first"
    new = {"metrics": {"membership_test": {"config": {"method": "offset_removed", "non_members": "held_out"}}}}
    assert "membership_test.non_members" not in pinned_protocol({}, new)
