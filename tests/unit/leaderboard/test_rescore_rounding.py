"""Re-scoring that is exact where it can be and honest where it cannot: tolerances derived from float64 rounding,
borderline decisions, real edits that must fail, hand edits of shown numbers, and a card bound to its result."""

from __future__ import annotations

import json
import math
import shutil
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import torch
from _helpers.cli import run_cli

from reconbench.bench.entries import card_metrics
from reconbench.bench.runner import card_reader
from reconbench.bench.seal import SEAL_FIELD, seal, sealed
from reconbench.evaluation import decisions
from reconbench.leaderboard.slim import candidates_file
from reconbench.leaderboard.verify import check_cell, check_records, read_record, rescore_inputs
from reconbench.runs.result import score_selection

REPO = Path(__file__).resolve().parents[3]
CI = REPO / "leaderboards" / "ci"
#: a published cell without a borderline decision
PLAIN = "digits-binary--haim_binary_kkt--gaussian--s0"
TINY = ["--dataset", "digits", "--task", "binary", "--n-per-class", "3", "--widths", "16,16", "--steps", "30"]


# -- the tolerance ---------------------------------------------------------------------------------------------
def test_gamma_is_highams_closed_form():
    u = 2.0 ** -53
    assert decisions.gamma(1000) == pytest.approx(1000 * u / (1 - 1000 * u), rel=1e-14)
    assert decisions.score_tolerance(64) == 2 * decisions.CHAINED * decisions.gamma(64)
    with pytest.raises(ValueError):
        decisions.gamma(2 ** 53)


@pytest.mark.parametrize("n", [64, 784, 3072])
def test_score_tolerance_bounds_the_rounding_of_a_correlation(n):
    """A float64 Pearson correlation against the exact rational one (Fraction arithmetic on the same float inputs):
    one machine's error is within half the two-machine tolerance, for sums in two orders (forward, reversed)."""
    rng = np.random.default_rng(n)
    a, b = rng.standard_normal(n), 0.3 * rng.standard_normal(n) + rng.standard_normal(n)

    def exact(x: np.ndarray, y: np.ndarray) -> float:
        fx, fy = [Fraction(float(v)) for v in x], [Fraction(float(v)) for v in y]
        mx, my = sum(fx) / n, sum(fy) / n
        dx, dy = [v - mx for v in fx], [v - my for v in fy]
        num = sum(p * q for p, q in zip(dx, dy, strict=True))
        return float(num) / math.sqrt(float(sum(p * p for p in dx)) * float(sum(q * q for q in dy)))

    truth = exact(a, b)
    for x, y in ((a, b), (a[::-1].copy(), b[::-1].copy())):
        ta, tb = torch.from_numpy(x)[None, None], torch.from_numpy(y)[None, None]
        fa, fb = ta - ta.mean(-1, keepdim=True), tb - tb.mean(-1, keepdim=True)
        r = float((fa * fb).sum() / (fa.norm() * fb.norm()))
        assert abs(r - truth) <= decisions.score_tolerance(n) / 2


def test_decisions_are_plain_comparisons_outside_a_guide_and_flip_only_within_rounding():
    tol = decisions.score_tolerance(64)
    scores = np.array([0.4 + tol / 4, 0.4 - tol / 4, 0.4 + 4 * tol, 0.4 - 4 * tol, np.nan])
    plain = decisions.above(scores, 0.4, "reconstructed")
    assert plain.tolist() == [True, False, True, False, False]
    with decisions.guided(64) as guide:
        assert decisions.above(scores, 0.4, "reconstructed").tolist() == plain.tolist()
    assert sorted(b.index for b in guide.seen.values()) == [0, 1]
    with decisions.guided(64, flip_all=True):
        assert decisions.above(scores, 0.4, "reconstructed").tolist() == [False, True, True, False, False]
    with decisions.guided(64, flip=frozenset({("", "reconstructed", 1)})):
        assert decisions.above(scores, 0.4, "reconstructed").tolist() == [True, True, True, False, False]


def test_argmin_ties_flip_to_the_runner_up_and_clear_choices_do_not():
    dist = torch.tensor([[1.0, 1.0 + 1e-17, 2.0], [3.0, 1.0, 2.0]], dtype=torch.float64)

    def scale() -> torch.Tensor:
        return torch.full_like(dist, 2.0)

    assert decisions.argmin(dist, 1, "nearest", scale).tolist() == [0, 1]
    with decisions.guided(64, flip_all=True) as guide:
        assert decisions.argmin(dist, 1, "nearest", scale).tolist() == [1, 1]
    assert [b.index for b in guide.seen.values()] == [0]


# -- re-scoring a published cell ----------------------------------------------------------------------------------
def board_with(tmp_path: Path, *cells: str) -> Path:
    """A copy of the published ci board's files that re-scoring a cell reads (cell, model card, candidates)."""
    board = tmp_path / "board"
    for sub in ("cells", "targets", "candidates"):
        (board / sub).mkdir(parents=True)
    for cid in cells:
        shutil.copy(CI / "cells" / f"{cid}.json", board / "cells")
        shutil.copy(str(candidates_file(CI, cid)), board / "candidates")
        key = json.loads((CI / "cells" / f"{cid}.json").read_text())["target"]["recipe_key"]
        shutil.copy(CI / "targets" / f"{key}.json", board / "targets")
    if (CI / "protocols").is_dir():   # a slim board's entries name their evaluation protocol there
        shutil.copytree(CI / "protocols", board / "protocols")
    return board


def edit(board: Path, cid: str, change) -> None:  # type: ignore[no-untyped-def]
    path = board / "cells" / f"{cid}.json"
    rec = json.loads(path.read_text())
    change(rec)
    path.write_text(json.dumps(rec))


def shown_metrics(board: Path, rec: dict) -> dict:  # type: ignore[type-arg]
    """The target's training metrics a cell shows: its own, or its model card's (a slim entry's ``"card"``)."""
    metrics = rec["target"]["train_metrics"]
    if metrics == "card":
        metrics = card_metrics(card_reader(board)(rec["target"]["recipe_key"]))
    assert isinstance(metrics, dict) and "test_error" in metrics
    return dict(metrics)


def test_a_changed_count_fails_naming_cell_metric_values_and_margin(tmp_path):
    board = board_with(tmp_path, PLAIN)
    assert check_cell(board, PLAIN).problems == []
    stored = json.loads((board / "cells" / f"{PLAIN}.json").read_text())["selections"]["pool"]["summary"]
    edit(board, PLAIN, lambda r: r["selections"]["pool"]["summary"].update(reconstructed_corr=
                                                                             stored["reconstructed_corr"] + 1))
    problems = check_cell(board, PLAIN).problems
    assert len(problems) == 1
    assert problems[0].startswith(f"{PLAIN} [pool] reconstructed_corr: stored {stored['reconstructed_corr'] + 1}, "
                                  f"re-scored {stored['reconstructed_corr']}")
    assert "from their threshold" in problems[0] and "not a rounding difference" in problems[0]


def test_a_score_changed_beyond_the_tolerance_fails_and_within_it_passes(tmp_path):
    board = board_with(tmp_path, PLAIN)
    rec = json.loads((board / "cells" / f"{PLAIN}.json").read_text())
    value = rec["selections"]["blind"]["summary"]["top_k_mean_ssim"]
    tol = check_cell(board, PLAIN).rtol
    edit(board, PLAIN, lambda r: r["selections"]["blind"]["summary"].update(top_k_mean_ssim=value + 0.25 * tol))
    assert check_cell(board, PLAIN).problems == []
    edit(board, PLAIN, lambda r: r["selections"]["blind"]["summary"].update(top_k_mean_ssim=value + 4 * tol))
    problems = check_cell(board, PLAIN).problems
    # a slim entry stores a summary equal to an earlier selection's once (``same_as``): the edit shows in each
    sharing = {n for n, sel in rec["selections"].items() if (sel.get("same_as") or {}).get("summary") == "blind"}
    assert len(problems) == 1 + len(sharing) and "[blind] top_k_mean_ssim" in problems[0]
    assert all("top_k_mean_ssim" in p and "rounding tolerance" in p for p in problems)
    assert {p.split("[")[1].split("]")[0] for p in problems} == {"blind"} | sharing


#: a toy board whose pooled runs hold identical candidates and whose training set holds one image twice: the two
#: copies' nearest-candidate choices tie between identical candidates, and which copy each takes sets how many
#: distinct candidates reconstruct them
TIE_SUITE = """\
[suite]
name = "tie-toy"
seeds = [0]
search_runs = 2
candidates = 6

[protocol]
figures = false

[leaderboard]
figures = false

[targets.dup]
dataset = "npz:dup.npz"
task = "binary"
n_per_class = 3
n_test_per_class = 6
n_decoy_per_class = 6
order = "file"
widths = [8]
steps = 30

[attacks.toy_identity]
config = { shift = 0.0 }

[inits.ground_truth]

[[grid]]
targets = ["dup"]
attacks = ["toy_identity"]
inits = ["ground_truth"]
"""
TIE_CELL = "dup--toy_identity--ground_truth--s0"


def tied_board(tmp_path: Path) -> Path:
    """A published toy board of one cell (candidates stored) on digits whose first training image appears twice."""
    from sklearn.datasets import load_digits

    from reconbench.bench.runner import run_suite
    from reconbench.bench.suite import load_suite
    from reconbench.leaderboard.render import build_leaderboard

    digits = load_digits()
    keep = np.concatenate([np.flatnonzero(digits.target == c)[:20] for c in (0, 1)])   # parity: 0 even, 1 odd
    images, labels = digits.images[keep] / 16.0, digits.target[keep]
    images[1] = images[0]                                  # file order: both are training images of class 0
    np.savez(tmp_path / "dup.npz", images=images.astype(np.float32), labels=labels)
    path = tmp_path / "tie-toy.toml"
    path.write_text(TIE_SUITE)
    suite = load_suite(path, strict=True)
    run_suite(suite, tmp_path / "res", quiet=True, command="test", data_root=str(tmp_path))
    board = tmp_path / "lb"
    build_leaderboard(suite, tmp_path / "res", board, command="test", figures=False, data_root=str(tmp_path))
    assert candidates_file(board, TIE_CELL) is not None, "the board keeps the cell's candidates for re-scoring"
    return board


@pytest.mark.slow
def test_a_count_that_differs_only_through_a_tie_is_borderline_and_another_fails(tmp_path, toy_attack_registered,
                                                                                 one_torch_thread):
    """Machine-independent: the stored number is set to what the tied decision gives when taken the other way.
    One torch thread: the test scores a 12-image board over a hundred times, and two threads on such tiny tensors wait on
    each other wherever fewer cores are free than threads (ten times slower on a loaded 1-core machine)."""
    board = tied_board(tmp_path)
    # the record in its full shape (a slim entry expanded): its protocol, target and per-image rows
    _, rec = read_record(board, board / "cells" / f"{TIE_CELL}.json")
    problem, pooled, protocol, family, card = rescore_inputs(board, rec, str(tmp_path))
    key = "notebook_distinct_candidates_reconstructed"
    first = score_selection(problem, pooled, None, family=family, protocol=protocol, card=card)
    with decisions.guided(64) as guide:
        plain = score_selection(problem, pooled, None, family=family, protocol=protocol, card=card)["summary"][key]
    assert guide.seen, "the pooled runs hold identical candidates: their nearest-candidate choices tie"
    alternatives = set()
    for decision in guide.seen:
        with decisions.guided(64, flip=frozenset({decision})):
            ev = score_selection(problem, pooled, None, family=family, protocol=protocol, card=card)
        alternatives.add(ev["summary"][key])
    flipped = next((v for v in alternatives if v != plain), None)
    assert flipped is not None, f"a tied choice of the duplicated image changes {key}"
    with decisions.guided(64, flip_all=True):  # flipped decisions, the null draws' included, leave no cached trace
        score_selection(problem, pooled, None, family=family, protocol=protocol, card=card)
    again = score_selection(problem, pooled, None, family=family, protocol=protocol, card=card)
    assert again["summary"] == first["summary"] and again["null"] == first["null"]
    for value in (plain, flipped):
        edit(board, TIE_CELL, lambda r, v=value: r["selections"]["pool"]["summary"].update({key: v}))
        check = check_cell(board, TIE_CELL, data_root=str(tmp_path))
        assert check.problems == [] and len(check.borderline) >= 1
        assert len(check.explained) == (value != plain)
    edit(board, TIE_CELL, lambda r: r["selections"]["pool"]["summary"].update({key: max(plain, flipped) + 3}))
    problems = check_cell(board, TIE_CELL, data_root=str(tmp_path)).problems
    assert len(problems) == 1 and f"[pool] {key}: stored {max(plain, flipped) + 3}" in problems[0]


# -- numbers a board shows that re-scoring cannot re-derive --------------------------------------------------------
def test_hand_edited_attack_seconds_or_test_error_fail_the_record_check(tmp_path):
    unseal = lambda r: r.pop(SEAL_FIELD, None)  # noqa: E731  (a cell written before seals existed)
    board = board_with(tmp_path, PLAIN)
    edit(board, PLAIN, unseal)
    assert check_records(board).problems == [] and check_records(board).unsealed == 1
    edit(board, PLAIN, lambda r: r.update(attack_seconds=r["attack_seconds"] / 2))
    assert "attack_seconds" in check_records(board).problems[0]
    board = board_with(tmp_path / "b", PLAIN)
    edit(board, PLAIN, unseal)
    edit(board, PLAIN, lambda r: r["target"].update(train_metrics={**shown_metrics(board, r), "test_error": 0.0}))
    problems = check_records(board).problems
    assert len(problems) == 1 and "train_metrics.test_error is 0.0" in problems[0]


def test_a_sealed_record_fails_after_any_edit(tmp_path):
    board = board_with(tmp_path, PLAIN)
    edit(board, PLAIN, sealed)
    assert check_records(board).problems == [] and check_records(board).sealed == 1
    rec = json.loads((board / "cells" / f"{PLAIN}.json").read_text())
    assert rec[SEAL_FIELD] == seal(rec)
    edit(board, PLAIN, lambda r: r.update(wall_seconds=r["wall_seconds"] + 1))
    assert "record_sha256 does not match" in check_records(board).problems[0]


# -- a card bound to its result -------------------------------------------------------------------------------
@pytest.mark.slow
def test_evaluate_refuses_a_card_other_than_the_results(tmp_path, capsys, toy_attack_registered):
    cards = [tmp_path / "card-a", tmp_path / "card-b"]
    for card, seed in zip(cards, ("0", "1"), strict=True):
        code, _, err = run_cli(["train", *TINY, "--train-seed", seed, "--out", str(card), "-q"], capsys)
        assert code == 0, err
    res = tmp_path / "res"
    code, _, err = run_cli(["run", "--attack", "toy_identity", "--model", str(cards[0]), "--init", "gaussian",
                            "--out", str(res), "-q"], capsys)
    assert code == 0, err
    hashes = [json.loads((c / "card.json").read_text())["recipe_key"] for c in cards]
    for extra in (["--check"], []):
        code, out, err = run_cli(["evaluate", str(res), *extra, "--model", str(cards[1]), "-q"], capsys)
        assert code == 2, out
        line = err.strip().splitlines()[-1]
        assert hashes[0] in line and hashes[1] in line and "not the card" in line
    assert not (res / "evaluations").exists()   # refused before any work
    code, out, err = run_cli(["evaluate", str(res), "--check", "--model", str(cards[0]), "-q"], capsys)
    assert code == 0 and "stored numbers reproduced" in out, err


@pytest.mark.slow
@pytest.mark.parametrize("field", ["attack_seconds", "test_error"])
def test_a_hand_edit_of_a_shown_number_fails_verify_after_the_board_is_rendered_again(tmp_path, capsys, field,
                                                                                      toy_attack_registered):
    from _helpers.suitekit import toy_targets

    from reconbench.bench.runner import run_suite
    from reconbench.bench.suite import load_suite

    path = tmp_path / "toy.toml"
    path.write_text(f'[suite]\nname = "toy"\nseeds = [0]\nsearch_runs = 1\n\n{toy_targets(20)}\n'
                    '[attacks.toy_identity]\nconfig = { steps = 1 }\n\n[inits.gaussian]\n\n'
                    '[leaderboard]\nstore_candidates = "all"\nfigures = false\n\n'
                    '[[grid]]\ntargets = ["bin"]\nattacks = ["toy_identity"]\n')
    res, lb = tmp_path / "res", tmp_path / "lb"
    run_suite(load_suite(path), res, quiet=True, command="reconbench bench toy")
    render = ["leaderboard", str(path), "--results", str(res), "--out", str(lb), "--no-figures"]
    assert run_cli(render, capsys)[0] == 0
    code, out, err = run_cli(["leaderboard", str(path), "--out", str(lb), "--verify"], capsys)
    assert code == 0 and "no seal" not in out, err
    (cell,) = (res / "cells").glob("*.json")
    rec = json.loads(cell.read_text())
    if field == "attack_seconds":
        rec["attack_seconds"] *= 10
    else:
        rec["target"]["train_metrics"]["test_error"] = 0.0
    cell.write_text(json.dumps(rec))
    assert run_cli(render, capsys)[0] == 0
    shown = (lb / "README.md").read_text()
    assert ("0.000" in shown) if field == "test_error" else True
    code, out, err = run_cli(["leaderboard", str(path), "--out", str(lb), "--verify"], capsys)
    assert code == 2 and "record_sha256 does not match" in out
    assert (f"train_metrics.{field}" if field == "test_error" else "attack_seconds") in out
