"""Many candidate sets scored in one pass give each set the column it gets scored alone (evaluation/batched.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _helpers.evalkit import make_problem, smooth_images

from reconbench.attack.candidates import candidate_labels
from reconbench.data import ProblemSpec
from reconbench.evaluation import batched, decisions, resolve_protocol
from reconbench.evaluation import null as null_mod
from reconbench.evaluation.bars import light_protocol, light_scorer
from reconbench.evaluation.context import CandidateError
from reconbench.evaluation.evaluate import score
from reconbench.targets.problems import build_problem


@pytest.fixture(scope="module")
def digits():
    return build_problem(ProblemSpec(dataset="digits", task="multiclass", n_per_class=2))   # n = 20


def _sets(problem, labels: np.ndarray, m: int) -> list[torch.Tensor]:
    """Held-out and prior draws, near-copies of the training images with duplicates (several candidates averaged
    per image), and sets holding non-finite, constant and -0.0-valued candidates."""
    sets = [null_mod.draw(problem, labels, m, 0, null_mod.CALIBRATION_STREAM, k) for k in range(3)]
    sets += [null_mod.prior_draw(problem, labels, m, 0, k) for k in range(2)]
    gen = torch.Generator().manual_seed(1)
    truth = problem.x_train(torch.float64)[torch.arange(m) % problem.n]
    for sd in (0.02, 0.3):
        sets.append(truth + sd * torch.randn(truth.shape, generator=gen, dtype=torch.float64))
    odd = sets[0].clone()
    odd[0] = float("nan")
    odd[1, 0, 0, 0] = float("inf")
    odd[2] = 0.25
    odd[3] = -0.0
    odd[4, 0, :3] = -0.0   # part of an image: still a valid candidate
    sets.append(odd)
    return sets


def _alone(problem, protocol, labels, cand, column):
    out = score(problem, cand, protocol, labels=None if labels is None else torch.as_tensor(labels),
                with_protocol=False)
    return null_mod.scores_of(out, column)


@pytest.mark.parametrize("column", ["corr", "ssim"])
@pytest.mark.parametrize("options", [{}, {"vote": "min"}, {"best_buddy": False}, {"distance": "l2"}])
def test_each_set_gets_its_own_column_bit_for_bit(digits, column, options):
    resolved = resolve_protocol({"figures": False, "calibrated_score": column, **options}, "mlp")
    light = light_protocol(resolved)
    labels = candidate_labels("multiclass", 10, 40).numpy()
    sets = _sets(digits, labels, 40)
    scorer = batched.column_scorer(digits, light, labels, column)
    assert scorer is not None
    got = scorer(sets)
    assert len(got) == len(sets)
    for cand, col in zip(sets, got, strict=True):
        np.testing.assert_array_equal(col, _alone(digits, light, labels, cand, column))
    assert all(np.isfinite(col).any() for col in got)
    if options.get("best_buddy", True):   # some training images stay unmatched (NaN) in some set
        assert any(np.isnan(col).any() for col in got)


@pytest.mark.parametrize("column", ["corr", "ssim"])
def test_colour_images_without_labels(column):
    train = smooth_images(6, (3, 12, 10), seed=3)
    problem = make_problem(train)
    resolved = resolve_protocol({"figures": False, "calibrated_score": column}, "mlp")
    light = light_protocol(resolved)
    gen = torch.Generator().manual_seed(2)
    base = problem.x_train(torch.float64)
    sets = [base[torch.randint(0, 6, (9,), generator=gen)] + 0.1 * torch.randn(9, 3, 12, 10, generator=gen,
                                                                                 dtype=torch.float64)
            for _ in range(4)]
    scorer = batched.column_scorer(problem, light, None, column)
    assert scorer is not None
    for cand, col in zip(sets, scorer(sets), strict=True):
        np.testing.assert_array_equal(col, _alone(problem, light, None, cand, column))


def test_small_batches_give_the_same_columns(digits, monkeypatch):
    resolved = resolve_protocol({"figures": False}, "mlp")
    labels = candidate_labels("multiclass", 10, 30).numpy()
    sets = _sets(digits, labels, 30)
    scorer = batched.column_scorer(digits, light_protocol(resolved), labels, "corr")
    assert scorer is not None
    whole = scorer(sets)
    monkeypatch.setattr(batched, "BATCH_VALUES", sets[0].numel() * 2 + 1)   # two or three sets a batch
    for a, b in zip(whole, scorer(sets), strict=True):
        np.testing.assert_array_equal(a, b)


def test_calibration_equals_draw_by_draw_scoring(digits):
    """The calibrated threshold and every draw's maximum, with the batched columns and without them."""
    resolved = resolve_protocol({"figures": False, "calibration_draws": 6, "prior_draws": 4}, "mlp")
    labels = candidate_labels("multiclass", 10, 40).numpy()
    light = light_protocol(resolved)
    scorer = light_scorer(digits, resolved, labels)
    null_mod.clear_caches()
    alone = null_mod.calibrate(digits, resolved, labels, 40, scorer)
    null_mod.clear_caches()
    many = null_mod.calibrate(digits, resolved, labels, 40, scorer,
                              columns=batched.column_scorer(digits, light, labels, "corr"))
    null_mod.clear_caches()
    assert many == alone
    assert len(many["draw_maxima"]) == 6 and len(many["prior_draw_maxima"]) == 4

    def rank(cand: torch.Tensor) -> float:
        return float(cand[:, 0, 0, 0].sum())

    selected = [null_mod.calibrate_selected(digits, resolved, labels, 40, 3, scorer, rank, "test", columns=cols)
                for cols in (None, batched.column_scorer(digits, light, labels, "corr"))
                if null_mod.clear_caches() is None]
    null_mod.clear_caches()
    assert selected[0] == selected[1]


def test_guided_scoring_stays_draw_by_draw(digits):
    """Under a decision guide every draw is scored on its own, in its scope: no batched scorer is offered, and one
    made before the guide refuses to run inside it."""
    resolved = resolve_protocol({"figures": False}, "mlp")
    labels = candidate_labels("multiclass", 10, 20).numpy()
    light = light_protocol(resolved)
    made = batched.column_scorer(digits, light, labels, "corr")
    assert made is not None
    with decisions.guided(64):
        assert batched.column_scorer(digits, light, labels, "corr") is None
        with pytest.raises(RuntimeError, match="decision guide"):
            made([null_mod.draw(digits, labels, 20, 0, 0, 0)])


def test_a_column_without_a_batched_metric_is_scored_draw_by_draw(digits):
    resolved = resolve_protocol({"figures": False, "calibrated_score": "ssim_standard"}, "mlp")
    assert batched.column_scorer(digits, light_protocol(resolved), None, "ssim_standard") is None
    assert batched.column_scorer(digits, light_protocol(resolved), None, "not_a_metric") is None


def test_problem_values_are_kept_per_problem_object_and_cleared(digits):
    """The memo hands out one computation per problem object and key, forgets a dead problem, and clear_caches
    empties it."""
    import copy
    import gc

    from reconbench.evaluation import problem_memo

    calls = []

    def compute() -> int:
        calls.append(1)
        return len(calls)

    assert problem_memo.memo(digits, "k", compute) == problem_memo.memo(digits, "k", compute) == 1
    other = copy.copy(digits)
    assert problem_memo.memo(other, "k", compute) == 2   # another object: computed for it
    del other
    gc.collect()
    assert all(ref() is not None for ref, _ in problem_memo._MEMO.values())
    null_mod.clear_caches()
    assert problem_memo.memo(digits, "k", compute) == 3
    null_mod.clear_caches()


@pytest.mark.parametrize("options", [{}, {"vote": "min", "ssim_standard.win_size": 5}, {"best_buddy": False}])
def test_score_many_equals_scoring_each_set_alone(digits, options):
    """Every metric's numbers (the batched SSIM family and correlation, the others context by context), the
    summary, the per-image rows and the candidate counts: each set's record equals its own scoring's."""
    from reconbench.evaluation.evaluate import restricted, score_many
    from reconbench.evaluation.scores import jsonable

    resolved = restricted(resolve_protocol({"figures": False, **options}, "mlp"), None)
    labels = candidate_labels("multiclass", 10, 40).numpy()
    sets = _sets(digits, labels, 40)
    many = score_many(digits, sets, resolved, labels=labels)
    assert len(many) == len(sets)
    for cand, got in zip(sets, many, strict=True):
        alone = score(digits, cand, resolved, labels=torch.as_tensor(labels), with_protocol=False)
        assert jsonable(got) == jsonable(alone)
    assert any(out["candidates"]["nonfinite"] and out["candidates"]["constant"] for out in many)
    with decisions.guided(64), pytest.raises(RuntimeError, match="decision guide"):
        score_many(digits, sets[:2], resolved, labels=labels)


def test_a_failing_batched_metric_falls_back_to_each_context(digits, monkeypatch):
    """compute_many raising: every context is scored by compute, as alone."""
    from reconbench_plugins.metrics import PaperSsim

    from reconbench.evaluation.evaluate import restricted, score_many
    from reconbench.evaluation.scores import jsonable

    def broken(self, evs, cfg):
        raise ValueError("broken batch")

    monkeypatch.setattr(PaperSsim, "compute_many", broken)
    resolved = restricted(resolve_protocol({"figures": False, "metrics": ["ssim", "corr"]}, "mlp"), None)
    labels = candidate_labels("multiclass", 10, 20).numpy()
    sets = _sets(digits, labels, 20)[:3]
    for cand, got in zip(sets, score_many(digits, sets, resolved, labels=labels), strict=True):
        assert jsonable(got) == jsonable(score(digits, cand, resolved, labels=torch.as_tensor(labels),
                                               with_protocol=False))


def test_evaluate_is_the_same_in_small_batches_and_under_a_decision_guide(digits, monkeypatch):
    """The whole record (calibration, reported null draws, every number) scored in one batch, a set per batch
    (null.BATCH_VALUES below one set) and draw by draw under a decision guide."""
    from reconbench.evaluation import evaluate
    from reconbench.evaluation.scores import jsonable

    labels = torch.as_tensor(candidate_labels("multiclass", 10, 30))
    cand = _sets(digits, labels.numpy(), 30)[5]
    protocol = {"figures": False, "calibration_draws": 5, "prior_draws": 3, "null_draws": 4}

    def numbers() -> dict:
        null_mod.clear_caches()
        out = jsonable(evaluate(digits, cand, family="mlp", labels=labels, protocol=protocol))
        out.pop("seconds")
        return out

    whole = numbers()
    monkeypatch.setattr(null_mod, "BATCH_VALUES", 1)
    assert numbers() == whole
    monkeypatch.undo()
    with decisions.guided(64):
        guided = numbers()
    assert guided == whole
    assert whole["null"]["draws"] == 4 and len(whole["protocol"]["calibration"]["prior_draw_maxima"]) == 3


def test_evaluate_many_equals_each_sets_own_evaluation(digits):
    """Pool and selected runs with their labels, run ids and starting candidates: each record is the set's own
    evaluate record (all but its seconds); a bad set fails with evaluate's message."""
    from reconbench.evaluation import evaluate
    from reconbench.evaluation.evaluate import evaluate_many

    labels = torch.as_tensor(candidate_labels("multiclass", 10, 20))
    sets_ = _sets(digits, labels.numpy(), 20)
    pool = {"candidates": torch.cat([sets_[5], sets_[6]]), "labels": torch.cat([labels, labels]),
            "run_ids": torch.arange(2).repeat_interleave(20), "x0": torch.cat([sets_[0], sets_[1]])}
    picks = [{k: v[pool["run_ids"] == r] for k, v in pool.items()} for r in (0, 1)]
    protocol = {"figures": False, "calibration_draws": 4, "prior_draws": 2, "null_draws": 3}
    many = evaluate_many(digits, [pool, *picks], family="mlp", protocol=protocol)
    for chosen, got in zip([pool, *picks], many, strict=True):
        null_mod.clear_caches()
        alone = evaluate(digits, chosen["candidates"], family="mlp", protocol=protocol, labels=chosen["labels"],
                         run_ids=chosen["run_ids"], x0=chosen["x0"])
        assert {k: v for k, v in got.items() if k != "seconds"} == {k: v for k, v in alone.items() if k != "seconds"}
    assert many[0]["metrics"]["init_copy"]["available"]
    bad = {**picks[0], "x0": picks[0]["x0"][:5]}
    with pytest.raises(CandidateError, match="x0 has 5 starting candidates for 20"):
        evaluate_many(digits, [pool, bad], family="mlp", protocol=protocol)
