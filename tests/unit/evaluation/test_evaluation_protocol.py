"""Protocol parsing and recording, and bad input: clear errors, never a crash or a NaN in the table."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from _helpers.evalkit import FAST, centred, make_problem, noisy, smooth_images

from reconbench import plugins
from reconbench.errors import ReconbenchError, UnknownNameError
from reconbench.evaluation import CandidateError, evaluate, extraction_score, oracle_score, resolve_protocol


@pytest.fixture(scope="module")
def problem():
    return make_problem(smooth_images(6, (3, 8, 8), seed=40), decoys=smooth_images(4, (3, 8, 8), seed=41))


def test_every_metric_is_a_registered_plugin_with_a_direction():
    names = plugins.names("metrics")
    assert {"ssim", "ssim_standard", "ssim_notebook", "lpips", "membership", "init_copy", "collapse",
            "extraction_score"} <= set(names)
    for name in names:
        m = plugins.get("metrics", name)
        assert isinstance(m.higher_is_better, bool) and m.description


def test_defaults_are_the_papers_protocol_and_every_parameter_is_recorded():
    d = resolve_protocol({}, "mlp").to_dict()
    assert d["name"] == "paper"
    assert d["distance"] == "ncc2" and d["downsample"] == {
        "factor": 2, "mode": "bicubic", "align_corners": False, "antialias": False,
        "library": "torch.nn.functional.interpolate"}
    assert d["per_dimension"] and d["best_buddy"] and d["vote"] == "mean" and d["avg_threshold"] == 1.1
    assert d["good_threshold"] == 0.4 and d["top_k"] == 10 and d["ncc"]["eps"] > 0
    ssim = d["metrics"]["ssim"]
    assert ssim["config"] == {"window_size": 3, "data_range": 1.0, "eps": 1e-12}
    assert ssim["fixed"]["sigma"] == 1.5 and "reflect" in ssim["fixed"]["padding"] and ssim["higher_is_better"]
    std = d["metrics"]["ssim_standard"]
    assert std["fixed"]["win_size"] == 7 and std["fixed"]["gaussian_weights"] is False
    assert d["metrics"]["lpips"]["higher_is_better"] is False
    assert d["metrics"]["lpips"]["fixed"]["net"] == "alex" and d["metrics"]["lpips"]["fixed"]["version"] == "0.1"


def test_overrides_are_typed_and_recorded():
    p = resolve_protocol({"distance": "ncc", "ssim.window_size": 5, "good_threshold": 0.5, "top_k": 3}, "conv")
    d = p.to_dict()
    assert d["distance"] == "ncc" and d["downsample"] is None and d["metrics"]["ssim"]["config"]["window_size"] == 5
    assert d["good_threshold"] == 0.5 and d["top_k"] == 3 and d["avg_threshold"] == 1.5 and d["name"] == "custom"
    assert resolve_protocol({"ssim.window_size": 5}, "mlp").to_dict()["name"] == "custom"
    assert resolve_protocol({"figures": False, "distance": "ncc2", "ssim_standard.win_size": 5}, "conv").is_paper()
    assert not resolve_protocol({"avg_threshold": 1.1}, "conv").is_paper()
    assert d["overrides"] == {"distance": "ncc", "ssim.window_size": 5, "good_threshold": 0.5, "top_k": 3}


@pytest.mark.parametrize("values,message", [
    ({"distanse": "ncc"}, "Did you mean: distance"),
    ({"window_size": 5}, "ssim.window_size"),
    ({"ssim.windowsize": 5}, "unknown option 'windowsize'"),
    ({"ssmi.window_size": 5}, "unknown metric 'ssmi'"),
    ({"distance": "cosine"}, "is not one of"),
    ({"top_k": "ten"}, "expected an integer"),
    ({"avg_threshold": 0.5}, "must be >= 1"),
    ({"ssim.window_size": 4}, "odd"),
    ({"ssim_notebook.window_size": 2}, "odd"),
    ({"ssim_standard.win_size": 6}, "odd"),
    ({"lpips.min_size": 8}, "must be >= 32"),
    ({"extraction_score.k": 0}, "must be >= 1"),
    ({"metrics": ["ssim", "lpipz"]}, "Did you mean: lpips"),
    ({"metrics": ["lpips"]}, "primary metric 'ssim'"),
])
def test_bad_protocol_options_are_clear_errors(values, message):
    with pytest.raises(ReconbenchError, match=message):
        resolve_protocol(values, "mlp")


def test_wrong_shape_and_dtype_are_clear_errors(problem):
    x = centred(problem, problem.train_images)
    with pytest.raises(CandidateError, match=r"shape \(M, 3, 8, 8\).*reshape"):
        evaluate(problem, x.flatten(1), family="mlp", protocol=FAST)
    with pytest.raises(CandidateError, match="floating point"):
        evaluate(problem, x.long(), family="mlp", protocol=FAST)
    with pytest.raises(CandidateError, match="must be a torch tensor"):
        evaluate(problem, x.tolist(), family="mlp", protocol=FAST)
    with pytest.raises(CandidateError, match="4 entries for 6 candidates"):
        evaluate(problem, x, family="mlp", labels=torch.zeros(4), protocol=FAST)
    with pytest.raises(CandidateError, match="x0"):
        evaluate(problem, x, family="mlp", x0=x[:2], protocol=FAST)
    with pytest.raises(CandidateError, match="empty"):
        evaluate(problem, x[:0], family="mlp", protocol=FAST)
    # float32 and numpy input are accepted
    out = evaluate(problem, x.float().numpy(), family="mlp", protocol={**FAST, "metrics": ["ssim"]})
    assert out["summary"]["reconstructed"] == 6


def test_nan_and_constant_candidates_are_counted_and_never_matched(problem):
    x = centred(problem, noisy(problem.train_images[:3], 0.005, 1))
    bad = torch.stack([torch.full_like(x[0], float("nan")), torch.full_like(x[0], float("inf")),
                       torch.zeros_like(x[0]),                        # constant in the centred space (the mean)
                       torch.as_tensor(0.5 - problem.mean)])          # constant once the mean is added back
    bad[0, 0, 0, 0] = 1.0
    cands = torch.cat([x, bad])
    out = evaluate(problem, cands, family="mlp", labels=torch.arange(7) % 2, run_ids=torch.zeros(7),
                   x0=torch.randn(7, 3, 8, 8) * 1e-3, out_dir=None, protocol=FAST)
    assert out["candidates"]["nonfinite_ids"] == [3, 4] and out["candidates"]["constant_ids"] == [5, 6]
    assert out["summary"]["invalid_candidates"] == 4 and out["summary"]["reconstructed"] == 3
    assert all(set(r["candidate_ids"]) <= {0, 1, 2} for r in out["per_image"])
    json.dumps(out, allow_nan=False)  # no NaN anywhere


def test_only_invalid_candidates_still_give_a_result(problem, tmp_path):
    cands = torch.full((3, 3, 8, 8), float("nan"), dtype=torch.float64)
    out = evaluate(problem, cands, family="mlp", x0=torch.randn(3, 3, 8, 8), out_dir=tmp_path)
    s = out["summary"]
    assert s["reconstructed"] == 0 and s["matched_images"] == 0 and s["top_k_mean_ssim"] == 0.0
    assert s["membership_precision"] is None and s["extraction_score"] is None
    assert out["figures"]["reconstructions"] == {"skipped": "no training image matched"}
    json.dumps(out, allow_nan=False)
    assert oracle_score(problem, cands) == float("inf")


def test_extraction_score_follows_the_reference_definition(problem):
    # candidates: exact copies of images 0 and 1, plus noisy copies of 2..5; k = 2 gives the two exact ones
    x = problem.x_train()
    cands = torch.cat([x[:2], x[2:] + 0.3 * torch.randn(4, 3, 8, 8, generator=torch.Generator().manual_seed(0))])
    assert extraction_score(problem, cands, k=2) < 1e-12
    # independent: per-channel standardisation with the unbiased std, squared L2 not divided by D
    def std(z: np.ndarray) -> np.ndarray:
        return (z - z.mean((-2, -1), keepdims=True)) / z.std((-2, -1), ddof=1, keepdims=True)
    t, c = std(x.numpy()), std(cands.numpy())
    d = ((c[:, None] - t[None]) ** 2).sum((2, 3, 4))          # (cands, train)
    nearest = d.argmin(1)
    best = {}
    for j, i in enumerate(nearest):
        best[i] = min(best.get(i, np.inf), d[j, i])
    expected = np.mean(sorted(best.values())[:10])
    assert extraction_score(problem, cands) == pytest.approx(expected, rel=1e-8)
    # the metric plugin gives the same number whatever the matching distance
    for dist in ("ncc2", "ncc", "l2"):
        out = evaluate(problem, cands, family="mlp", protocol={**FAST, "metrics": ["ssim", "extraction_score"],
                                                               "distance": dist})
        assert out["metrics"]["extraction_score"]["available"] is True
        assert out["summary"]["extraction_score"] == pytest.approx(expected, rel=1e-8)


def test_a_failing_metric_is_reported_unavailable_with_a_warning(problem, monkeypatch):
    from reconbench_plugins.metrics import Collapse

    def boom(self, ev, cfg):
        raise ZeroDivisionError("bug in a metric")

    monkeypatch.setattr(Collapse, "compute", boom)
    with pytest.warns(UserWarning, match="bug in a metric"):
        out = evaluate(problem, centred(problem, problem.train_images), family="mlp",
                       protocol={**FAST, "metrics": ["ssim", "collapse"]})
    assert out["metrics"]["collapse"]["available"] is False and "ZeroDivisionError" in out["metrics"]["collapse"]["reason"]
    assert out["summary"]["reconstructed"] == 6


def test_unknown_metric_name_in_registry_lookup():
    with pytest.raises(UnknownNameError):
        plugins.get("metrics", "ssimm")


def test_metrics_run_after_those_they_require(problem):
    from dataclasses import dataclass

    from reconbench import hookimpl
    from reconbench.interfaces import Metric, NoOptions

    seen: list[str] = []

    @dataclass(frozen=True)
    class After(Metric):
        name: str = "test_after_collapse"
        description: str = "test-only: reads the collapse metric's result"
        higher_is_better: bool = True
        headline: str = "test_after"
        config_cls: type = NoOptions
        requires: tuple = ("collapse",)

        def compute(self, ev, cfg):
            seen.extend(ev.results)
            return {"summary": {"test_after": ev.results["collapse"]["summary"]["distinct_matched"]}}

    class Plugin:
        @hookimpl
        def register_metrics(self, register):  # type: ignore[no-untyped-def]
            register(After())

    host = plugins.host()
    name = host.register(Plugin(), name="test-after-plugin")
    try:
        out = evaluate(problem, centred(problem, problem.train_images), family="mlp",
                       protocol={**FAST, "metrics": ["test_after_collapse", "collapse", "ssim"]})
        assert seen == ["ssim", "collapse"] and out["summary"]["test_after"] == 6
        with pytest.raises(ReconbenchError, match="needs metric 'collapse'"):
            resolve_protocol({"metrics": ["ssim", "test_after_collapse"]}, "mlp")
    finally:
        host.unregister(name)
