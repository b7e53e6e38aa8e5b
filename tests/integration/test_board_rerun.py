"""`leaderboard B --verify --rerun-sample K --rerun-seed S`: a forged cell without stored candidates (a count edited,
its seal recomputed, the board published from it, so that seals, tables, README and manifest all agree) passes the
checks that read only the board, and is caught when the seeded sample re-runs it; the sample's detection probability
against an enumeration of every sample; "0 cells re-scored or re-run" is a failure."""

from __future__ import annotations

import json
import shutil
from itertools import combinations
from pathlib import Path

import pytest
from _helpers.cli import run_cli
from _helpers.suitekit import TOY_SUITE

from reconbench import plugins
from reconbench.bench.seal import sealed
from reconbench.bench.suite import load_suite
from reconbench.leaderboard import render as render_mod
from reconbench.leaderboard.render import build_leaderboard
from reconbench.leaderboard.rerun import CheckCount, detection_probability, draw_sample, unstored_cells

#: one stored cell of four: three cells are reachable only by re-running them
SUITE = TOY_SUITE.replace("store_candidates = 3", "store_candidates = 1")


@pytest.fixture(scope="module")
def toy_run(tmp_path_factory):
    """The tiny suite run once for the module, in its own target cache."""
    from conftest import ToyPlugin

    folder = tmp_path_factory.mktemp("rerun")
    path = folder / "toy.toml"
    path.write_text(SUITE)
    host = plugins.host()
    name = host.register(ToyPlugin(), name="toy-rerun-plugin")
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("RECONBENCH_CACHE", str(folder / "cache"))
            from reconbench.bench.runner import run_suite

            run_suite(load_suite(path), folder / "res", quiet=True, command="reconbench bench toy")
    finally:
        host.unregister(name)
    return path, folder / "res"


def _publish(path: Path, res: Path, lb: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(render_mod, "check_publishable", lambda pub, commit: None)
    build_leaderboard(load_suite(path), res, lb, figures=False, publish=True)
    return lb


@pytest.fixture
def forged(toy_run, tmp_path, monkeypatch, toy_attack_registered):
    """A published toy board one cell of which (without stored candidates) claims 5 more blind reconstructions than
    its run gave: the record edited in the results folder, its seal recomputed, the board published from it."""
    path, res0 = toy_run
    res = tmp_path / "res"
    shutil.copytree(res0, res)
    honest = _publish(path, res, tmp_path / "honest", monkeypatch)
    cid = unstored_cells(honest)[0]
    cell = res / "cells" / f"{cid}.json"
    rec = json.loads(cell.read_text())
    rec["selections"]["blind"]["summary"]["reconstructed"] += 5
    cell.write_text(json.dumps(sealed(rec)))
    lb = _publish(path, res, tmp_path / "lb", monkeypatch)
    assert cid in unstored_cells(lb)
    return path, lb, cid


def _verify(path: Path, lb: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str, str]:
    return run_cli(["leaderboard", str(path), "--out", str(lb), "--verify", *extra], capsys)


@pytest.mark.slow
def test_a_forged_cell_passes_the_board_checks_and_is_caught_when_sampled(forged, capsys, monkeypatch):
    path, lb, cid = forged
    monkeypatch.setenv("RECONBENCH_CACHE", str(lb.parent / "verifier-cache"))
    code, out, err = _verify(path, lb, capsys)
    assert code == 0, err   # seals, entries, tables, README and manifest all agree: only a re-run can tell
    assert "checked 4 cell(s): 1 re-scored from stored candidates, 0 re-run" in out
    hit = next(s for s in range(1000) if draw_sample(lb, 1, s).cells == [cid])
    code, out, err = _verify(path, lb, capsys, "--rerun-sample", "1", "--rerun-seed", str(hit))
    assert code != 0
    assert f"seed {hit}" in out and "probability 0.33" in out   # one forged cell of 3 without candidates, K = 1
    assert f"MISMATCH (re-run) {cid} [blind] summary.reconstructed" in out
    errors = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and cid in errors[0] and "Traceback" not in err, err
    # the verifier's own cache was not used: the target was trained again in a temporary one
    assert not (lb.parent / "verifier-cache" / "targets").exists()


def test_the_sample_is_drawn_from_the_cells_without_candidates_and_repeats_with_its_seed(tmp_path):
    board = tmp_path / "b"
    (board / "cells").mkdir(parents=True)
    (board / "candidates").mkdir()
    for k in range(10):
        (board / "cells" / f"c{k}.json").write_text("{}")
    (board / "candidates" / "c3.safetensors.xz").write_bytes(b"")
    assert unstored_cells(board) == [f"c{k}" for k in range(10) if k != 3]
    a, b = draw_sample(board, 4, 12345), draw_sample(board, 4, 12345)
    assert a == b and len(a.cells) == 4 and "c3" not in a.cells and a.population == 9
    assert len({tuple(draw_sample(board, 4, s).cells) for s in range(50)}) > 10   # the seed moves the sample
    assert draw_sample(board, 40, 0).cells == unstored_cells(board)   # more than there are: all of them


@pytest.mark.parametrize(("k", "n", "f"), [(1, 3, 1), (2, 5, 1), (3, 7, 2), (5, 5, 1), (0, 4, 1), (2, 6, 3)])
def test_detection_probability_is_the_share_of_samples_that_hold_a_forged_cell(k, n, f):
    forged = set(range(f))
    samples = list(combinations(range(n), k))
    share = sum(1 for s in samples if forged & set(s)) / len(samples)
    assert detection_probability(k, n, f) == pytest.approx(share, rel=1e-14, abs=1e-15)
    if f == 1:
        assert detection_probability(k, n) == pytest.approx(k / n, rel=1e-14, abs=1e-15)


def test_no_cell_re_scored_or_re_run_is_a_failure():
    assert CheckCount(cells=65, rescored=0, rerun=0).problem() is not None
    assert "0 cells re-scored or re-run" in str(CheckCount(cells=65, rescored=0, rerun=0).problem())
    assert CheckCount(cells=65, rescored=0, rerun=1).problem() is None
    assert CheckCount(cells=65, rescored=5, rerun=0).hashes_only == 60
