"""What a newcomer meets in the first hour, from the docs' examples: each point of the list that tripped one up."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from _helpers.cli import run_cli

from reconbench.attack.search import RUN_SEARCH
from reconbench.cli.run_cmd import default_out_dir, run_config
from reconbench.provenance import config_hash
from reconbench.runs.spec import RunSpec

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--dataset", "digits", "--task", "binary", "--n-per-class", "3", "--widths", "16,16", "--steps", "30"]


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs git and a checkout")
def test_the_train_examples_targets_folder_is_ignored_by_git():
    for path in ("targets/mnist-oddeven/card.json", "targets/digits-mc/weights.safetensors"):
        done = subprocess.run(["git", "check-ignore", "-q", path], cwd=ROOT, check=False)
        assert done.returncode == 0, f"{path} is not ignored by git"
    # and a tracked source file is not
    assert subprocess.run(["git", "check-ignore", "-q", "reconbench/__init__.py"], cwd=ROOT, check=False).returncode == 1


def test_the_default_run_folder_names_a_configuration_other_than_the_default():
    plain = RunSpec(attack="haim_binary_kkt", search_runs=6, search=RUN_SEARCH)   # what `run` asks by default
    assert default_out_dir("key", plain, 6) == Path("runs") / "haim_binary_kkt-gaussian-key-s0"
    assert default_out_dir("key", RunSpec(attack="haim_binary_kkt", search_runs=6, search="random"), 6) != \
        default_out_dir("key", plain, 6)
    assert default_out_dir("key", RunSpec(attack="haim_binary_kkt", search_runs=6, device="cuda", search=RUN_SEARCH), 6) == \
        default_out_dir("key", plain, 6)   # the device does not change the numbers
    others = [RunSpec(attack="haim_binary_kkt", search_runs=12, search="optuna", search_config={"batch": 4}),
              RunSpec(attack="haim_binary_kkt", search_runs=6, attack_config={"steps": 10}),
              RunSpec(attack="haim_binary_kkt", search_runs=6, dtype="float32"),
              RunSpec(attack="haim_binary_kkt", search_runs=2)]
    folders = [default_out_dir("key", spec, 6) for spec in others]
    assert len(set(folders)) == len(others) and default_out_dir("key", plain, 6) not in folders
    for spec, folder in zip(others, folders, strict=True):
        assert folder.name.endswith(config_hash(run_config("key", spec.to_dict()))[:8])


def test_an_optuna_run_after_a_default_run_gets_its_own_folder(tmp_path, capsys, monkeypatch, toy_attack_registered):
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli(["run", "--attack", "toy_identity", *TINY, "--search-runs", "2", "-q"], capsys)
    assert code == 0, err
    code, _, err = run_cli(["run", "--attack", "toy_identity", *TINY, "--search-runs", "2", "--set", "steps=5", "-q"],
                           capsys)
    assert code == 0, err
    assert len(list((tmp_path / "runs").glob("toy_identity-gaussian-*"))) == 2


def test_rerunning_a_finished_run_keeps_its_wall_time(tmp_path, capsys, toy_attack_registered):
    args = ["run", "--attack", "toy_identity", *TINY, "--search-runs", "2", "--out", str(tmp_path / "res"), "-q"]
    assert run_cli(args, capsys)[0] == 0
    result = tmp_path / "res" / "result.json"
    first = json.loads(result.read_text())
    first["wall_seconds"] = 123.25   # as if the attack had taken that long: a re-run must not replace it
    result.write_text(json.dumps(first))
    assert run_cli(args, capsys)[0] == 0
    assert json.loads(result.read_text())["wall_seconds"] == 123.25


def test_site_without_the_data_says_which_cells_lack_images_and_keeps_the_variables_case(tmp_path, capsys, monkeypatch):
    from _helpers.sitekit import BOARD, fixture_leaderboards, kept_candidates

    from reconbench.errors import DataError
    from reconbench.leaderboard.site.images import ProblemCache

    def missing(self, board, rec):  # what a board's card raises when its data files are not here
        raise DataError("mnist/t10k-images-idx3-ubyte.gz not found under the data folder (or point --data-root / "
                        "$RECONBENCH_DATA at the folder that holds mnist/t10k-images-idx3-ubyte.gz).")

    monkeypatch.setattr(ProblemCache, "problem", missing)
    boards = fixture_leaderboards(tmp_path)
    code, out, err = run_cli(["site", "--leaderboards", str(boards), "--out", str(tmp_path / "site")], capsys)
    assert code == 0, err
    stored = len(kept_candidates())
    assert f"warning: {stored} cell(s) store candidates but have no reconstructions" in err and "--data-root" in err
    assert "0 with reconstructions" in out
    page = (tmp_path / "site" / BOARD / "cells" / f"{kept_candidates()[0]}.html").read_text()
    assert "$RECONBENCH_DATA" in page and "$reconbench_data" not in page


def test_the_site_sizes_in_the_docs_are_the_published_boards():
    """docs/usage.md states the site's cell pages and how many have reconstructions: one page per cell of every
    published board, reconstructions for the cells whose candidates a board stores and for those whose figure pairs
    it keeps instead."""
    import re

    from reconbench.leaderboard.figure_pairs import BOARD_FOLDER
    from reconbench.leaderboard.site.board import find_boards, load_board
    from reconbench.leaderboard.slim import candidates_file

    text = " ".join((ROOT / "docs" / "usage.md").read_text().split())
    found = re.search(r"All (\w+) published boards \(([\d,]+) cell pages, ([\d,]+) with reconstructions, ([\d,]+) of "
                      r"them from figure pairs", text)
    assert found, "docs/usage.md no longer states the site's size"
    boards = [load_board(p) for p in find_boards(ROOT / "leaderboards")]
    pages = sum(len(b.cells) for b in boards)
    ok = [(b.folder, cid) for b in boards for cid, rec in b.cells.items() if rec.status == "ok"]
    stored = sum(1 for folder, cid in ok if candidates_file(folder, cid) is not None)
    pairs = sum(1 for folder, cid in ok if candidates_file(folder, cid) is None
                and (folder / BOARD_FOLDER / f"{cid}.safetensors").is_file())
    words = {"five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12,
             "thirteen": 13, "fourteen": 14}
    assert (words.get(found[1]), *(int(found[i].replace(",", "")) for i in (2, 3, 4))) == \
        (len(boards), pages, stored + pairs, pairs)


@pytest.mark.slow
@pytest.mark.timeout(600)   # the quick start's run: 63 s here on a 2-core machine at a load average of 14
def test_the_readmes_table_is_a_fresh_default_run(tmp_path, capsys, monkeypatch):
    """README.md's table of the quick start's run, against `reconbench run --attack multiclass_kkt` run now (the
    cache is empty: the target is trained as a newcomer's first command trains it)."""
    import torch

    from reconbench.runs.readme_table import quick_start_facts, readme_section, summary_table

    monkeypatch.chdir(tmp_path)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)   # as the README's command runs (OMP_NUM_THREADS=1)
    try:
        code, out, err = run_cli(["run", "--attack", "multiclass_kkt", "-q"], capsys)
    finally:
        torch.set_num_threads(threads)
    assert code == 0, err
    (result,) = (tmp_path / "runs").glob("multiclass_kkt-gaussian-*/result.json")
    fresh = summary_table(json.loads(result.read_text()))
    assert readme_section((ROOT / "README.md").read_text()) == fresh
    # what README's sentences on the quick start say it does (rendered from the committed measurement)
    measured = json.loads((ROOT / "benchmarks" / "results" / "quick_start.json").read_text())
    assert quick_start_facts(json.loads(result.read_text())) == measured["facts"]
    # the rows are the numbers the command printed
    for line in fresh.splitlines()[4:-1]:
        name = line.split(" | ")[0].strip("| ")
        assert f"  {name}" in out, f"{name} is not a number `reconbench run` prints"
