"""Slim board entries: the round trip of a cell record, --slim then --verify, verification failing on edits, the
publish path writing entries, and --verify --rerun of a ci cell."""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import struct
from pathlib import Path

import pytest
import torch
from _helpers.cli import run_cli
from _helpers.suitekit import TOY_SUITE
from safetensors.torch import load_file

from reconbench import plugins
from reconbench.bench.entries import ENTRY_SCHEMA, POSITION, ROW_RTOL, check_entry, entry_text, expand, make_entry
from reconbench.bench.runner import card_reader, load_cells, protocol_reader, read_cell, run_suite
from reconbench.bench.seal import seal_problem, sealed
from reconbench.bench.suite import load_suite
from reconbench.errors import ModelCardError
from reconbench.leaderboard import render as render_mod
from reconbench.leaderboard.board_cards import (
    BOARD_CARD_SCHEMA,
    board_card,
    load_board_card,
    restore_card,
    write_board_card,
)
from reconbench.leaderboard.manifest import write_manifest
from reconbench.leaderboard.render import build_leaderboard
from reconbench.leaderboard.results_file import COMPACT_FORMAT, read_results, results_text
from reconbench.leaderboard.results_file import expand as expand_results
from reconbench.leaderboard.slim import read_candidates, shown_keys, slim_board
from reconbench.leaderboard.tables import Stat
from reconbench.leaderboard.verify import check_entries, check_tables, stored_cells
from reconbench.targets.cards import content_sha256


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
    write_manifest(lb)  # the manifest made to agree too: the check under test must catch the edit on its own
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


# -- compact board files: model cards, candidates, results.json ------------------------------------------------
REPO = Path(__file__).resolve().parents[3]
PUBLISHED = sorted(p.parent for p in (REPO / "leaderboards").glob("*/results.json"))
#: the budget for leaderboards/ (disk use counted in 4 KiB blocks, each file and folder at least one): 8 MiB for the
#: first six boards, 16 MiB since the training-length, claims-c and threat-models boards joined them, 20 MiB since
#: defenses-cpu and architectures run 5 seeds each retraining (their cells alone are 3 MiB), 28 MiB since the
#: paper-size board (`paper-gpu`, suite `paper`) may join them: built from generated numbers at its full 79 cells
#: (tests/_helpers/paper_board.py, benchmarks/paper_board_size.py) it weighs about 6.5 MiB, 4.9 MiB of it the slim
#: entries of n = 500 per-image rows, and it keeps no full candidates (its figure pairs picture it); 36 MiB since
#: `claims-gpu` may join them too: its full board of 224 cells (152 targets: 8 seeds, each retraining) weighs about
#: 8.3 MiB the same way (benchmarks/results/claims_gpu_board_size.json), 4.9 MiB of it the entries of n = 100 rows and
#: 1.8 MiB its 152 cards, so the published boards (19.4 MiB) and both GPU boards come to about 34 MiB; and each board
#: on its own at most 4 MiB, a GPU board its own budget
BOARDS_BUDGET = 36 * 2**20
BOARD_BUDGET = 4 * 2**20
#: the suites whose boards are GPU boards (figure pairs in place of stored candidates: no cell's candidates fit), and
#: what one such board may weigh: `paper` (n = 500 images a cell) 8 MiB; `claims-gpu` (n = 100, but 224 cells and
#: 152 cards) 10 MiB
GPU_BOARD_BUDGETS = {"paper": 8 * 2**20, "claims-gpu": 10 * 2**20}
PAPER_SIZE_SUITES = tuple(GPU_BOARD_BUDGETS)
PAPER_BOARD_BUDGET = GPU_BOARD_BUDGETS["paper"]
#: what each model card of a board may weigh (a card of n = 500 lists 500 margins and multipliers: about 40 KB)
CARD_BUDGET, PAPER_CARD_BUDGET = 16 * 1024, 64 * 1024
#: a board's stored candidates, and a GPU board's figure pairs (six figure cells of ten CIFAR-10 pairs: about
#: 0.5 MiB)
CANDIDATES_BUDGET, PAIRS_BUDGET = 384 * 1024, 1024 * 1024
BLOCK = 4096


def _disk_use(folder: Path) -> int:
    blocks = 0
    for p in [folder, *folder.rglob("*")]:
        blocks += 1 if p.is_dir() else math.ceil(p.stat().st_size / BLOCK)
    return blocks * BLOCK


def _suite_of(board: Path) -> str:
    return str(json.loads((board / "results.json").read_text())["header"]["suite"])


def _paper_size(board: Path) -> bool:
    return _suite_of(board) in PAPER_SIZE_SUITES


def _budget_problems(board: Path, paper_size: bool, suite: str = "paper") -> list[str]:
    """What of one board passes the budget of its kind (empty: within it); ``suite``: a GPU board's, whose own
    budget it has."""
    problems = []
    if _disk_use(board) > (GPU_BOARD_BUDGETS[suite] if paper_size else BOARD_BUDGET):
        problems.append(f"{board}: {_disk_use(board):,} bytes on disk")
    for path in (board / "targets").glob("*.json"):
        text = path.read_text()
        if len(text) > (PAPER_CARD_BUDGET if paper_size else CARD_BUDGET) or "\n " in text:
            problems.append(f"{path}: {len(text):,} bytes, or not compact")   # compact, no training curve
    files = sorted((board / "candidates").iterdir()) if (board / "candidates").is_dir() else []
    pairs = sorted((board / "figure_pairs").iterdir()) if (board / "figure_pairs").is_dir() else []
    if not files and not (paper_size and pairs):   # a paper-size board's figure pairs stand for its candidates
        problems.append(f"{board}: no stored candidates")
    if not all(p.name.endswith(".safetensors.xz") for p in files):
        problems.append(f"{board}: stored candidates not xz-compressed")
    if sum(p.stat().st_size for p in files) > CANDIDATES_BUDGET:
        problems.append(f"{board}: stored candidates pass {CANDIDATES_BUDGET:,} bytes")
    if sum(p.stat().st_size for p in pairs) > PAIRS_BUDGET or (pairs and not paper_size):
        problems.append(f"{board}: figure pairs pass {PAIRS_BUDGET:,} bytes, or on a board of another kind")
    return problems


def _test_indices_sha256(indices: list[int]) -> str:
    return hashlib.sha256(struct.pack(f"<{len(indices)}q", *indices)).hexdigest()


def test_published_boards_stay_within_the_size_budget_by_kind():
    assert PUBLISHED, "no published board"
    assert _disk_use(REPO / "leaderboards") <= BOARDS_BUDGET
    for board in PUBLISHED:
        assert _budget_problems(board, _paper_size(board), _suite_of(board)) == []
        for path in (board / "targets").glob("*.json"):
            card = json.loads(path.read_text())
            assert card["board_card"]["schema"] == BOARD_CARD_SCHEMA and "history" not in card, path
        assert json.loads((board / "results.json").read_text())["format"] == COMPACT_FORMAT, board
        assert all("\n " not in p.read_text() for p in (board / "protocols").glob("*.json")), board


@pytest.fixture(scope="module")
def paper_board(tmp_path_factory) -> tuple[Path, dict]:
    """A full paper-size board of generated numbers (tests/_helpers/paper_board.py), built once for the module."""
    from _helpers.paper_board import build_paper_board

    folder = tmp_path_factory.mktemp("paper") / "paper-gpu"
    return folder, build_paper_board(folder)


def test_the_budget_holds_with_a_full_paper_size_board_beside_the_published_ones(paper_board):
    board, sizes = paper_board
    assert sizes["cells"] == 79 and sizes["figure_cells"] >= 1
    assert _budget_problems(board, paper_size=True) == []
    total = _disk_use(REPO / "leaderboards") + _disk_use(board)
    assert total <= BOARDS_BUDGET, f"{total:,} bytes with the paper-size board"
    # the kinds' limits bite: the same board judged as a board of another kind fails on its size and its cards
    assert any("bytes on disk" in p for p in _budget_problems(board, paper_size=False))
    assert any("not compact" in p for p in _budget_problems(board, paper_size=False))   # its cards pass 16 KB


@pytest.fixture(scope="module")
def claims_gpu_board(tmp_path_factory) -> tuple[Path, dict]:
    """A full claims-gpu board of generated numbers, each cell at its own size (n = 100, 4 runs of m = 200, MNIST or
    CIFAR-10 images), built once for the module."""
    from _helpers.paper_board import build_paper_board

    folder = tmp_path_factory.mktemp("claims-gpu") / "claims-gpu"
    return folder, build_paper_board(folder, suite_name="claims-gpu", own_sizes=True)


def test_claims_gpu_keeps_figure_pairs_for_cells_whose_candidates_no_board_keeps():
    """No claims-gpu cell's pooled candidates fit 256 KiB in float16 (runs x m x pixels x 2 bytes), so the board keeps
    none and its figure pairs picture it, as paper's do."""
    from reconbench.bench.cells import expand as expand_cells

    suite = load_suite("claims-gpu")
    lb = suite.leaderboard
    assert lb.figure_pairs and lb.candidates_max_bytes == 256 * 1024
    for cell in expand_cells(suite):
        p = cell.recipe.problem
        n = p.n_per_class * (p.num_classes or 2)
        pixels = 3 * 32 * 32 if "cifar" in p.dataset else 28 * 28
        assert cell.attack.search_runs * 2 * n * pixels * 2 > lb.candidates_max_bytes, cell.cell_id


def test_the_budget_holds_with_both_full_gpu_boards_beside_the_published_ones(paper_board, claims_gpu_board):
    board, sizes = claims_gpu_board
    assert sizes["cells"] == 224 and sizes["targets"] == 152 and sizes["figure_cells"] >= 1
    assert _budget_problems(board, paper_size=True, suite="claims-gpu") == []
    assert any("bytes on disk" in p for p in _budget_problems(board, paper_size=False))   # an ordinary board's fails
    total = _disk_use(REPO / "leaderboards") + _disk_use(paper_board[0]) + _disk_use(board)
    assert total <= BOARDS_BUDGET, f"{total:,} bytes with both GPU boards"


def _priced_board(folder: Path, planned: int, ok: int, readme_bytes: int) -> None:
    (folder / "cells").mkdir(parents=True)
    for i in range(ok):
        (folder / "cells" / f"c{i}.json").write_text("{}")
    (folder / "results.json").write_text(json.dumps({"header": {"cells": {"planned": planned, "ok": ok}}}))
    (folder / "README.md").write_bytes(b"x" * readme_bytes)


def test_results_and_readme_are_priced_per_cell_by_the_complete_boards_alone(tmp_path):
    """A partial board (1 of 79 cells) spreads its whole README over one cell; it prices no cell of the estimate."""
    from _helpers.paper_board import published_bytes_per_cell

    _priced_board(tmp_path / "full", planned=4, ok=4, readme_bytes=400)
    _priced_board(tmp_path / "other", planned=2, ok=2, readme_bytes=300)
    assert published_bytes_per_cell(tmp_path)["README.md"] == 150.0   # the larger of 400 / 4 and 300 / 2
    _priced_board(tmp_path / "partial", planned=79, ok=1, readme_bytes=17_000)
    priced = published_bytes_per_cell(tmp_path)
    assert priced["README.md"] == 150.0
    assert priced["results.json"] == max(len((tmp_path / b / "results.json").read_bytes()) / n
                                         for b, n in (("full", 4), ("other", 2)))


def test_the_committed_claims_gpu_board_estimate_is_what_the_writers_give(claims_gpu_board):
    """benchmarks/results/claims_gpu_board_size.json (``python benchmarks/paper_board_size.py --suite claims-gpu``)
    against the board built here."""
    _, sizes = claims_gpu_board
    committed = json.loads((REPO / "benchmarks" / "results" / "claims_gpu_board_size.json").read_text())
    assert committed["parts"]["cells"] == sizes["parts"]["cells"]
    assert committed["disk_use"] == pytest.approx(sizes["disk_use"], rel=0.05)
    assert committed["disk_use"] <= GPU_BOARD_BUDGETS["claims-gpu"]


def test_a_board_card_keeps_what_verify_needs_and_gives_the_card_back(toy_results, tmp_path):
    _, res = toy_results
    path = sorted((res / "targets").glob("*.json"))[0]
    full = json.loads(path.read_text())
    test = full["problem"]["indices"]["test"]
    slim = board_card(full)
    assert board_card(slim) is slim and "history" not in slim
    assert slim["board_card"]["history"]["points"] == len(full["history"])
    assert slim["problem"]["indices"]["test"] == {"count": len(test), "sha256": _test_indices_sha256(test)}
    # everything a reader of the board uses is there unchanged: recipe, metrics (margins, certificate), hashes
    for key in full.keys() - {"history", "problem"}:
        assert slim[key] == full[key], key
    assert {k: v for k, v in slim["problem"].items() if k != "indices"} == \
        {k: v for k, v in full["problem"].items() if k != "indices"}
    assert slim["problem"]["indices"]["train"] == full["problem"]["indices"]["train"]
    without_history = {k: v for k, v in full.items() if k != "history"}
    assert restore_card(slim, test, path) == without_history
    assert content_sha256(restore_card(slim, test, path)) == full["content_sha256"]
    with pytest.raises(ModelCardError, match="held-out test images"):
        restore_card(slim, [test[0] + 1, *test[1:]], path)
    # on a board: the problem is rebuilt from the recipe, the test indices checked and put back, the hash checked
    board = tmp_path / "board"
    write_board_card(board / "targets" / path.name, full)
    problem, card = load_board_card(board, path.stem, None)
    assert problem.test_indices.tolist() == test and card.data == without_history
    edited = json.loads((board / "targets" / path.name).read_text())
    edited["problem"]["indices"]["decoy"] = edited["problem"]["indices"]["decoy"][::-1]
    (board / "targets" / path.name).write_text(json.dumps(edited))
    with pytest.raises(ModelCardError, match="content_sha256"):
        load_board_card(board, path.stem, None)


@pytest.mark.slow
def test_slim_brings_a_full_board_to_the_published_form_once(toy_results, tmp_path):
    path, res = toy_results
    suite = load_suite(path)
    full, pub = tmp_path / "full", tmp_path / "pub"
    build_leaderboard(suite, res, full, figures=False)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(render_mod, "check_publishable", lambda p, commit: None)
        build_leaderboard(suite, res, pub, figures=False, publish=True)
    slim_board(suite, full)
    first = {p.relative_to(full): p.read_bytes() for p in full.rglob("*") if p.is_file()}
    report = slim_board(suite, full)   # a board in the compact form is left as it is
    assert (report.already, report.cards, report.protocols, report.removed) == (report.cells, 0, 0, [])
    assert {p.relative_to(full): p.read_bytes() for p in full.rglob("*") if p.is_file()} == first
    # the migration writes what a publication writes: the same cards, protocols and tables
    for sub in ("targets", "protocols"):
        assert {p.name: p.read_bytes() for p in (full / sub).iterdir()} == \
            {p.name: p.read_bytes() for p in (pub / sub).iterdir()}, sub
    assert read_results(full)["tables"] == read_results(pub)["tables"]
    assert all(p.name.endswith(".safetensors.xz") for p in (full / "candidates").iterdir())
    for cid in stored_cells(full):   # compressed candidates read back to the run's own, in the attack's precision
        stored = read_candidates(full / "candidates" / f"{cid}.safetensors.xz")
        ran = load_file(str(res / "work" / cid / "candidates.safetensors"))
        assert stored.keys() == ran.keys() and all(torch.equal(stored[k].to(ran[k].dtype), ran[k]) for k in ran)


def test_compact_results_leave_out_only_what_the_values_give_back():
    consistent = Stat([3.0, 5.0, 4.0], (0.0, 10.0)).to_dict()
    edited = {**consistent, "mean": 4.5}   # not the mean of its values: kept as written
    data = {"format": "reconbench-leaderboard/1", "tables": {"pool": [{"metrics": {"a": consistent, "b": edited}}]}}
    text = results_text(data)
    stored = json.loads(text)["tables"]["pool"][0]["metrics"]
    assert set(stored["a"]) == {"values", "value_range"} and stored["b"] == edited
    assert stored["a"]["values"] == [3.0, 5.0, 4.0]
    back = expand_results(json.loads(text))["tables"]["pool"][0]["metrics"]
    assert back["a"]["mean"] == 4.0 and back["a"]["n"] == 3 and back["a"]["sd"] == 1.0
    q = 0.975   # Student t quantile with 2 degrees of freedom in closed form: (2q - 1) sqrt(2 / (4 q (1 - q)))
    half = (2 * q - 1) * math.sqrt(2 / (4 * q * (1 - q))) / math.sqrt(3)
    assert back["a"]["ci95"] == pytest.approx([4.0 - half, 4.0 + half], rel=1e-12)
    assert back == data["tables"]["pool"][0]["metrics"]


def test_the_committed_paper_board_estimate_is_what_the_writers_give_and_what_the_docs_say(paper_board):
    """benchmarks/results/paper_board_size.json against the board built here (the same generated numbers; the
    published boards' bytes per cell, which price results.json and README.md, may have moved since), and the
    numbers docs/leaderboard-entries.md quotes from it."""
    _, sizes = paper_board
    committed = json.loads((REPO / "benchmarks" / "results" / "paper_board_size.json").read_text())
    assert committed["parts"]["cells"] == sizes["parts"]["cells"]   # the slim entries: generated, then written
    assert committed["disk_use"] == pytest.approx(sizes["disk_use"], rel=0.05)
    text = " ".join((REPO / "docs" / "leaderboard-entries.md").read_text().split())
    assert f"a full `paper-gpu` board uses {committed['disk_use'] / 2**20:.1f} MiB" in text
    assert f"{committed['parts']['cells'] / 2**20:.1f} MiB of slim entries" in text
    assert committed["disk_use"] <= PAPER_BOARD_BUDGET
