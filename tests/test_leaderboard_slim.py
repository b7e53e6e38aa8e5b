"""Slim board entries: the round trip of a cell record, --slim then --verify, verification failing on edits, the
publish path writing entries, and --verify --rerun of a ci cell."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
from _helpers.cli import run_cli
from _helpers.suitekit import TOY_SUITE

from reconbench import plugins
from reconbench.bench.entries import ENTRY_SCHEMA, POSITION, ROW_RTOL, check_entry, entry_text, expand, make_entry
from reconbench.bench.runner import card_reader, load_cells, protocol_reader, read_cell, run_suite
from reconbench.bench.seal import seal_problem, sealed
from reconbench.bench.suite import load_suite
from reconbench.leaderboard import render as render_mod
from reconbench.leaderboard.render import build_leaderboard
from reconbench.leaderboard.results_file import COMPACT_FORMAT, read_results
from reconbench.leaderboard.slim import shown_keys, slim_board
from reconbench.leaderboard.verify import check_entries, check_tables, stored_cells


@pytest.fixture(scope="module")
def _toy_run(tmp_path_factory):
    """The toy suite run once for the module (its own cache folder; the toy attack registered while it runs)."""
    from conftest import ToyPlugin

    folder = tmp_path_factory.mktemp("toy")
    path = folder / "toy.toml"
    path.write_text(TOY_SUITE)
    host = plugins.host()
    name = host.register(ToyPlugin(), name="toy-slim-plugin")
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("RECONBENCH_CACHE", str(folder / "cache"))
            mp.setenv("RECONBENCH_DOWNLOAD", "0")
            run_suite(load_suite(path), folder / "res", quiet=True, command="reconbench bench toy")
    finally:
        host.unregister(name)
    return path, folder / "res"


@pytest.fixture
def toy_results(_toy_run, tmp_path):
    path, res = _toy_run
    shutil.copytree(res, tmp_path / "res")
    shutil.copyfile(path, tmp_path / "toy.toml")
    return tmp_path / "toy.toml", tmp_path / "res"


@pytest.fixture
def slim_toy_board(toy_results, tmp_path):
    path, res = toy_results
    lb = tmp_path / "lb"
    build_leaderboard(load_suite(path), res, lb, figures=False)
    report = slim_board(load_suite(path), lb)
    assert report.cells == 4 and report.already == 0 and report.readme_rendered
    return path, res, lb


def _raw_cells(folder: Path) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in sorted((folder / "cells").glob("*.json"))}


@pytest.mark.slow
def test_entry_round_trip_keeps_every_shown_number_and_rederives_the_decisions(toy_results):
    path, res = toy_results
    suite = load_suite(path)
    cards = card_reader(res)
    for cid, rec in _raw_cells(res).items():
        protocols: dict[str, dict] = {}
        entry = json.loads(entry_text(make_entry(rec, shown_keys(suite), cards(rec["target"]["recipe_key"]),
                                                 protocols)))
        assert entry["entry"]["schema"] == ENTRY_SCHEMA and seal_problem(entry) is None
        assert len(entry_text(entry)) < len(json.dumps(rec)) / 2
        back = expand(entry, cards, protocols.get)
        # what tables, README and re-scoring read comes back unchanged
        for key in ("target", "attack", "init", "seed", "spec", "runs", "attack_seconds", "status", "outcome"):
            want = rec[key]
            if key == "runs":
                want = [{k: v for k, v in r.items() if k not in ("batch", "message")} for r in want]
            assert back[key] == want, key
        for name, sel in rec["selections"].items():
            assert back["selections"][name]["summary"].items() <= sel["summary"].items()
            assert back["selections"][name].get("calibrated") == sel.get("calibrated")
        assert back["selections"]["pool"]["summary"] == rec["selections"]["pool"]["summary"]
        assert back["evaluation"]["protocol"]["metrics"].keys() == rec["evaluation"]["protocol"]["metrics"].keys()
        # per-image rows: every kept value within the stated rounding, every decision as the full record took it
        # unless its stored score lies within that rounding of the threshold
        rows, full = back["evaluation"]["per_image"], rec["evaluation"]["per_image"]
        assert len(rows) == len(full)
        for r, f in zip(rows, full, strict=True):
            for k, v in r.items():
                if k.endswith("_margin"):   # score - threshold: off by the score's rounding, checked below
                    continue
                if isinstance(v, float):
                    assert math.isclose(v, f[k], rel_tol=ROW_RTOL, abs_tol=1e-300), k
                elif not k.startswith("reconstructed"):
                    assert v == f[k], k
        for flag, d in entry["evaluation"]["per_image"]["decisions"].items():
            for r, f in zip(rows, full, strict=True):
                s = f[d["score"]]
                if s is None or abs(s - d["threshold"]) > ROW_RTOL * max(1.0, abs(s)):
                    assert r[flag] == f[flag], (cid, flag)
        assert check_entry(entry, protocol=protocols.get).problems == []


def test_a_position_column_is_stored_as_an_alias():
    rec = {"status": "ok", "cell_id": "c", "selections": {"pool": {"summary": {"n_train": 3}}},
           "evaluation": {"per_image": [{"index": i, "label": i % 2, "ssim": 0.1 * i} for i in range(3)]}}
    entry = make_entry(rec, set())
    compact = entry["evaluation"]["per_image"]
    assert compact["same"] == {"index": POSITION} and "index" not in compact["columns"]
    assert [r["index"] for r in expand(entry)["evaluation"]["per_image"]] == [0, 1, 2]


@pytest.mark.slow
def test_slim_then_verify_passes_and_the_board_reads_as_before(toy_results, tmp_path, capsys):
    path, res = toy_results
    full, slim = tmp_path / "full", tmp_path / "slim"
    build_leaderboard(load_suite(path), res, full, figures=False)
    shutil.copytree(full, slim)
    code, out, err = run_cli(["leaderboard", str(path), "--out", str(slim), "--slim"], capsys)
    assert code == 0, err
    assert all("entry" in rec for rec in _raw_cells(slim).values())
    assert len(stored_cells(slim)) == 2 and len(list((slim / "candidates").iterdir())) == 2
    # readers see the same tables from the entries as from the full records
    # (the compact results.json, its statistics' derived numbers put back, holds the full one's tables)
    assert json.loads((slim / "results.json").read_text())["format"] == COMPACT_FORMAT
    assert read_results(slim)["tables"] == json.loads((full / "results.json").read_text())["tables"]
    assert check_tables(slim) == []
    code, out, err = run_cli(["leaderboard", str(path), "--out", str(slim), "--verify"], capsys)
    assert code == 0, err
    assert "2 stored cell(s) re-scored" in out and "slim entries:" in out
    # slimming again changes nothing
    code, out, err = run_cli(["leaderboard", str(path), "--out", str(slim), "--slim"], capsys)
    assert code == 0 and "(4 already were)" in out, err


def _edit(lb: Path, edit, reseal: bool = True) -> str:
    cid = sorted(p.stem for p in (lb / "cells").glob("*.json"))[0]
    path = lb / "cells" / f"{cid}.json"
    entry = json.loads(path.read_text())
    edit(entry)
    path.write_text(entry_text(sealed(entry) if reseal else entry))
    return cid


@pytest.mark.slow
def test_verify_fails_on_a_changed_count_of_a_slim_entry(slim_toy_board, capsys):
    path, _, lb = slim_toy_board
    assert check_entries(lb).problems == []

    def more(entry):
        entry["selections"]["pool"]["summary"]["reconstructed_corr"] += 1
    cid = _edit(lb, more)   # resealed: only the re-derivation from the per-image rows can catch it
    problems = check_entries(lb).problems
    assert len(problems) == 1 and cid in problems[0] and "reconstructed_corr" in problems[0]
    code, _, err = run_cli(["leaderboard", str(path), "--out", str(lb), "--verify"], capsys)
    assert code == 2 and "reconstructed_corr" in err


@pytest.mark.slow
def test_verify_fails_on_a_score_changed_beyond_the_rounding(slim_toy_board, capsys):
    path, _, lb = slim_toy_board
    cid = sorted(p.stem for p in (lb / "cells").glob("*.json"))[0]
    entry = json.loads((lb / "cells" / f"{cid}.json").read_text())
    compact = entry["evaluation"]["per_image"]
    col = compact["columns"].index("corr")
    row = next(i for i, r in enumerate(compact["rows"]) if r[col] is not None)

    def nudge(e, by):
        e["evaluation"]["per_image"]["rows"][row][col] *= by

    within = json.loads(json.dumps(entry))
    nudge(within, 1 + ROW_RTOL / 10)   # inside the stated rounding: still agrees
    assert check_entry(within, protocol=protocol_reader(lb)).problems == []
    _edit(lb, lambda e: nudge(e, 1 + 1e-3))
    problems = check_entries(lb).problems
    assert problems and all("corr" in p for p in problems)
    # an edit that is not resealed is caught by the seal
    _edit(lb, lambda e: e["selections"]["pool"].update(attack_loss=1.0), reseal=False)
    code, _, err = run_cli(["leaderboard", str(path), "--out", str(lb), "--verify"], capsys)
    assert code == 2


@pytest.mark.slow
def test_publish_writes_slim_entries_and_a_sample_of_candidates(toy_results, tmp_path, monkeypatch):
    path, res = toy_results
    monkeypatch.setattr(render_mod, "check_publishable", lambda pub, commit: None)
    lb = tmp_path / "pub"
    build_leaderboard(load_suite(path), res, lb, figures=False, publish=True)
    raw = _raw_cells(lb)
    assert raw and all(rec["entry"]["schema"] == ENTRY_SCHEMA for rec in raw.values())
    assert list((lb / "protocols").glob("*.json"))
    assert 1 <= len(stored_cells(lb)) <= 2
    # read through the runner, an entry has the full record's shape
    full = load_cells(res)
    for cid in raw:
        rec = read_cell(lb / "cells" / f"{cid}.json")
        assert rec is not None
        assert rec["selections"]["pool"]["summary"] == full[cid]["selections"]["pool"]["summary"]
        assert len(rec["evaluation"]["per_image"]) == len(full[cid]["evaluation"]["per_image"])
    assert check_entries(lb).problems == [] and check_tables(lb) == []


@pytest.mark.slow
def test_rerun_regenerates_a_ci_cell_and_agrees(tmp_path, capsys, monkeypatch):
    """One cheap ci cell run, published (slim) to a temporary board, then re-run from its recipe and seed."""
    cid = "digits-binary--init_only--gaussian--s0"
    suite = load_suite("ci")
    res, lb = tmp_path / "res", tmp_path / "lb"
    run_suite(suite, res, only=[cid], quiet=True, command="reconbench bench ci")
    monkeypatch.setattr(render_mod, "check_publishable", lambda pub, commit: None)
    build_leaderboard(suite, res, lb, figures=False, publish=True)
    shutil.rmtree(res)
    code, out, err = run_cli(["leaderboard", "ci", "--out", str(lb), "--verify", "--rerun", cid], capsys)
    assert code == 0, err
    assert "re-run: 1 cell(s) give the board's numbers" in out
    # a stored number the re-run does not give fails
    path = lb / "cells" / f"{cid}.json"
    entry = json.loads(path.read_text())
    entry["selections"]["blind"]["summary"]["n_candidates"] += 1
    path.write_text(entry_text(sealed(entry)))
    from reconbench.leaderboard.slim import rerun_cells
    problems = rerun_cells(suite, lb, [cid])
    assert problems and all("n_candidates: stored 21, re-run 20" in p for p in problems)  # shared by oracle too
