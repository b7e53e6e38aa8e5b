"""LPIPS: unavailable (with the reason) without the ImageNet backbone; its plumbing tested with a random backbone.

Every number below comes from a RANDOM AlexNet backbone and only checks the plumbing (shapes, channels, resizing,
weight loading, identical pairs). None of them is an LPIPS value.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from _helpers.evalkit import FAST, centred, make_problem, noisy, smooth_images

from reconbench.evaluation import evaluate
from reconbench.evaluation.context import build_context
from reconbench.evaluation.lpips_metric import ALEXNET_FILE, LpipsScorer, LpipsUnavailable, check_available
from reconbench.evaluation.protocol import resolve_protocol

pytest.importorskip("lpips")


@pytest.fixture
def empty_hub(tmp_path, monkeypatch):
    """torch's hub cache pointed at an empty folder: the backbone weights are certainly absent."""
    old = torch.hub.get_dir()
    torch.hub.set_dir(str(tmp_path / "hub"))
    yield tmp_path / "hub"
    torch.hub.set_dir(old)


@pytest.fixture(scope="module")
def random_scorer():
    return LpipsScorer(random_backbone=True, seed=0)  # RANDOM backbone: plumbing only


def test_without_backbone_weights_lpips_is_unavailable_with_the_reason(empty_hub):
    with pytest.raises(LpipsUnavailable, match="never downloads"):
        check_available()
    problem = make_problem(smooth_images(4, seed=1))
    x = centred(problem, noisy(problem.train_images, 0.01, 2))
    out = evaluate(problem, x, family="mlp", protocol={**FAST, "metrics": ["ssim", "lpips"]})
    assert out["summary"]["lpips_mean"] == "unavailable"
    reason = out["summary"]["lpips_mean_unavailable_reason"]
    assert ALEXNET_FILE in reason and str(empty_hub) in reason
    assert out["metrics"]["lpips"]["available"] is False and out["metrics"]["lpips"]["reason"] == reason
    assert all("lpips" not in row for row in out["per_image"])
    json.dumps(out, allow_nan=False)


def test_random_backbone_plumbing_identical_pairs_and_shapes(random_scorer):
    rgb = torch.as_tensor(smooth_images(3, (3, 32, 32), seed=3))
    other = torch.as_tensor(smooth_images(3, (3, 32, 32), seed=4))
    same = random_scorer(rgb, rgb)
    diff = random_scorer(rgb, other)
    assert same.shape == (3,) and diff.shape == (3,)
    np.testing.assert_allclose(same, 0.0, atol=1e-7)
    assert (diff > 0).all() and np.isfinite(diff).all()
    # grayscale and tiny images (MNIST size, digits size) are repeated to 3 channels and up-sampled
    for shape in [(1, 28, 28), (1, 8, 8)]:
        g = torch.as_tensor(smooth_images(2, shape, seed=5))
        assert random_scorer(g, g).shape == (2,)
        as_rgb = torch.as_tensor(np.repeat(g.numpy(), 3, axis=1))
        np.testing.assert_allclose(random_scorer(g, as_rgb), 0.0, atol=1e-7)  # gray is compared as 3 equal channels


def test_backbone_weights_are_loaded_from_a_torchvision_alexnet_file(tmp_path):
    import torchvision

    torch.manual_seed(123)
    state = torchvision.models.alexnet(weights=None).features.state_dict()
    path = tmp_path / ALEXNET_FILE
    torch.save({f"features.{k}": v for k, v in state.items()}, path)  # the layout of torchvision's file
    scorer = LpipsScorer(backbone_weights=str(path))  # still RANDOM weights, from a file: plumbing only
    own = scorer.model.net.state_dict()
    for key, value in own.items():
        _, idx, param = key.split(".")
        torch.testing.assert_close(value, state[f"{idx}.{param}"])
    assert not scorer.random_backbone


def test_a_foreign_weights_file_is_reported_not_crashed(tmp_path):
    bad = tmp_path / "bad.pth"
    torch.save({"something": torch.zeros(3)}, bad)
    with pytest.raises(LpipsUnavailable, match="not torchvision's AlexNet"):
        LpipsScorer(backbone_weights=str(bad))
    problem = make_problem(smooth_images(3, seed=6))
    out = evaluate(problem, centred(problem, problem.train_images), family="mlp",
                   protocol={**FAST, "metrics": ["ssim", "lpips"], "lpips.backbone_weights": str(bad)})
    assert out["summary"]["lpips_mean"] == "unavailable"


def test_the_metric_marks_random_backbone_results(random_scorer):
    from reconbench_plugins.metrics import score_lpips

    problem = make_problem(smooth_images(4, (1, 16, 16), seed=7))
    x = centred(problem, noisy(problem.train_images[:2], 0.01, 8))
    proto = resolve_protocol({**FAST, "metrics": ["ssim", "lpips"]}, "mlp")
    ev = build_context(problem, x, proto)
    ev.results["ssim"] = proto.metric("ssim").compute(ev, proto.metric_configs["ssim"])
    res = score_lpips(ev, random_scorer)
    assert res["details"]["random_backbone"] is True
    col = res["per_image"]["lpips"]
    assert [v is not None for v in col] == list(ev.matching.matched)
    assert all(v >= 0 for v in col if v is not None)
