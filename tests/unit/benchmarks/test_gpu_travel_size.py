"""benchmarks/gpu/travel_size.py: what a device call carries, summed as the device tool counts it (tracked files,
untracked files git does not ignore, the carried paths), against an independent count of the bytes written into a
temporary git repository; the refusal line when over the limit; the training states and data folders a slice of
`paper` needs, against its cells' recipes; and the next occasion's call as benchmarks/gpu/README.md states it,
priced with the states its ledger will hold after it (from the recipes' sizes: CI has no runs/)."""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
import subprocess
from pathlib import Path

import pytest
from _helpers.examples import load_module
from _helpers.travel import CARRY, DATA, LEDGER, READS, WHEELS, state_file_bytes, tree_bytes

from reconbench.bench.cells import expand
from reconbench.bench.suite import load_suite

ROOT = Path(__file__).resolve().parents[3]
travel = load_module("gpu_travel_size", ROOT / "benchmarks" / "gpu" / "travel_size.py")
PAPER = load_suite("paper")
CELLS = expand(PAPER)


def write(path: Path, n: int) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * n)
    return n


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True,
                   capture_output=True)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A git repository with tracked, untracked, ignored and to-be-carried files of known sizes."""
    r = tmp_path / "repo"
    r.mkdir()
    git(r, "init", "-q")
    write(r / ".gitignore", 0)
    (r / ".gitignore").write_text("/big/\n/.whl/\n*.log\n")
    write(r / "a.py", 1000)
    write(r / "docs" / "b.md", 2345)
    write(r / "gone.txt", 10)
    git(r, "add", "-A")
    git(r, "commit", "-qm", "tracked")
    (r / "gone.txt").unlink()   # tracked, deleted: nothing of it travels
    write(r / "new.txt", 77)   # untracked, not ignored: travels
    write(r / "run.log", 5000)   # ignored, not carried
    write(r / "big" / "x.bin", 40_000)   # ignored; carried as a folder below
    write(r / "big" / "sub" / "y.bin", 1_234)
    write(r / ".whl" / "k.whl", 3_000)   # ignored; carried as one file below
    write(r / ".whl" / "other.whl", 9_999)   # ignored, not carried
    return r


def test_the_sum_is_what_travels_by_an_independent_count(repo):
    gitignore = len((repo / ".gitignore").read_bytes())
    t = travel.measure(repo, ["big", ".whl/k.whl", "big/sub/y.bin", "absent"])
    assert t.parts["tracked"] == gitignore + 1000 + 2345
    assert t.parts["untracked, not ignored"] == 77
    assert t.parts["carry big"] == 40_000 + 1_234
    assert t.parts["carry .whl/k.whl"] == 3_000
    assert t.parts["carry big/sub/y.bin"] == 0   # inside a folder already carried: counted once
    assert t.missing == ["absent"]
    assert t.total == gitignore + 1000 + 2345 + 77 + 40_000 + 1_234 + 3_000


def test_over_the_limit_it_refuses_in_one_line_naming_what_to_drop(repo, capsys):
    limit = 0.01   # MiB: 10,485 bytes, under the carried folder
    assert travel.main(["--repo", str(repo), "--carry", "big", "--carry", ".whl/k.whl",
                        "--limit-mib", str(limit)]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("error: ") and "drop big (" in err and "from carry" in err
    assert travel.main(["--repo", str(repo), "--carry", ".whl/k.whl", "--limit-mib", "1"]) == 0
    assert "fits" in capsys.readouterr().out


def test_more_paths_than_the_run_tool_takes_are_refused(repo, capsys):
    assert travel.main(["--repo", str(repo), *sum((["--carry", f"p{i}"] for i in range(9)), [])]) == 1
    assert "at most 8" in capsys.readouterr().err


def ledger(repo: Path, keys: list[str], finished: dict[str, str], cards: set[str]) -> Path:
    """A `paper` ledger in ``repo/runs/bench/paper`` listing a state of each of ``keys`` (its file written, a card
    beside those in ``cards``) and the cells of ``finished`` (cell id -> key) as finished."""
    results = repo / "runs" / "bench" / "paper"
    training = {}
    for key in keys:
        write(results / "training" / f"{key}.safetensors", 100)
        entry = {"file": f"training/{key}.safetensors", "sha256": "0" * 64, "step": 5, "dtype": "torch.float32"}
        if key in cards:
            write(results / "training" / f"{key}.card.json", 10)
            entry["card"] = {"file": f"training/{key}.card.json", "sha256": "0" * 64}
        training[key] = entry
    cells = {cid: {"cell_key": k, "status": "ok"} for cid, k in finished.items()}
    (results / "finished.json").write_text(json.dumps({"format": "reconbench-finished-cells/3", "suite": "paper",
                                                       "cells": cells, "training": training}))
    return results


PATTERNS = ["cifar-binary--haim_binary_kkt*--gaussian--*", "mnist-binary--haim_binary_kkt*--gaussian--*",
            "cifar-multiclass--*"]


def test_a_slice_of_paper_carries_only_its_cells_states_and_data(repo):
    keys = sorted({c.recipe.key() for c in CELLS})
    done = next(c for c in CELLS if fnmatch.fnmatchcase(c.cell_id, PATTERNS[2]))   # finished: its state not needed
    alone = all(c.cell_id == done.cell_id or c.recipe.key() != done.recipe.key()
                for c in CELLS if any(fnmatch.fnmatchcase(c.cell_id, p) for p in PATTERNS))
    results = ledger(repo, keys, {done.cell_id: done.key(PAPER)}, cards={keys[0]})
    needs = travel.slice_needs("paper", PATTERNS, results.relative_to(repo), repo)
    mine = [c for c in CELLS if any(fnmatch.fnmatchcase(c.cell_id, p) for p in PATTERNS) and c is not done]
    assert needs.cells == [c.cell_id for c in mine]
    want = {c.recipe.key() for c in mine}
    assert set(needs.states) == want and (done.recipe.key() not in want) == alone
    for key, files in needs.states.items():
        base = f"runs/bench/paper/training/{key}"
        assert files == [f"{base}.safetensors"] + ([f"{base}.card.json"] if key == keys[0] else [])
    reads = {c.recipe.problem.dataset for c in mine}
    assert needs.data == sorted(folder for folder, ref in READS.items() if ref in reads)
    carry = needs.carry("runs/bench/paper/finished.json")
    assert len(carry) <= travel.MAX_CARRY and carry[0] == ".whl" and "runs/bench/paper/finished.json" in carry
    assert any(p.endswith(".safetensors") or p.endswith("/training") for p in carry)


def test_without_a_ledger_a_slice_carries_no_state(repo):
    needs = travel.slice_needs("paper", PATTERNS[:1], Path("runs/bench/paper"), repo)
    assert not needs.states and needs.targets_without_state == \
        list(dict.fromkeys(c.recipe.key() for c in CELLS if fnmatch.fnmatchcase(c.cell_id, PATTERNS[0])))
    assert needs.data == [".data/cifar10"]


def test_many_states_collapse_to_their_folder_within_eight_paths():
    needs = travel.SliceNeeds([], {f"k{i}": [f"r/training/k{i}.safetensors"] for i in range(6)},
                              [".data/cifar10", ".data/mnist"], [])
    assert needs.carry("r/finished.json") == [".whl", ".data/cifar10", ".data/mnist", "r/finished.json",
                                              "r/training"]


OCCASION = re.compile(r"## During an occasion.*?```\ncommand:\s*(.*?)\ncarry:\s*(.*?)\n", re.S)
#: a full `paper-gpu` board's disk use (benchmarks/paper_board_size.py): what publishing it adds to the tree at most
PAPER_GPU = json.loads((ROOT / "benchmarks" / "results" / "paper_board_size.json").read_text())["disk_use"]
tracked_ledger = load_module("gpu_tracked_ledger", ROOT / "benchmarks" / "gpu" / "tracked_ledger.py")
#: the tracked ledger of `paper` and what its records may take (compressed cell and target records, figure pairs,
#: invocations: about 0.2 MiB a cell)
HOME = "benchmarks/gpu/ledger/paper"
RECORDS = 1 * 2**20


def next_call() -> tuple[list[str], list[str], dict[str, list], list[str]]:
    """The README's next call: its --only patterns, its carry list, its cells' targets (name -> [recipe, data
    folder]) and its command's words."""
    match = OCCASION.search((ROOT / "benchmarks" / "gpu" / "README.md").read_text())
    assert match, "benchmarks/gpu/README.md states no call under \"During an occasion\""
    command, carry = shlex.split(match.group(1)), json.loads(match.group(2))
    patterns = [command[i + 1] for i, word in enumerate(command) if word == "--only"]
    assert patterns and "paper" in command
    folder = {ref: f for f, ref in READS.items()}
    targets = {c.cell_id.split("--")[0]: [c.recipe, folder[c.recipe.problem.dataset]] for c in CELLS
               if any(fnmatch.fnmatchcase(c.cell_id, p) for p in patterns)}
    return patterns, carry, targets, command


def tree_without_home() -> int | None:
    """The tracked tree's bytes less the tracked ledger's (which the next occasion's lands in, at most the cap)."""
    tree = tree_bytes()
    if tree is None:
        return None
    home = ROOT / HOME
    return tree - sum(p.stat().st_size for p in home.rglob("*") if p.is_file()) if home.is_dir() else tree


def test_the_next_occasions_call_as_the_readme_states_it_reads_the_tracked_ledger_and_fits():
    """The README's next call, the CIFAR-10 binary cells: its slice reads the tracked ledger where it is (no carry:
    tracked files travel), the call carries the wheels and the one data folder its cells read, and it fits beside
    the tree as it is with the tracked ledger at its cap (its states and cards) and its records."""
    tree = tree_without_home()
    if tree is None:
        pytest.skip("not a git checkout: the working tree's size is unknown")
    _, carry, targets, command = next_call()
    assert set(targets) == {"cifar-binary"}
    assert f"{HOME}/finished.json" in command
    assert carry == [".whl", ".data/cifar10"]
    call = tree + WHEELS + LEDGER + RECORDS + tracked_ledger.CAP_MIB * 2**20 + DATA[".data/cifar10"]
    assert call <= CARRY, (call - CARRY) / 2**20


def test_the_cap_holds_one_binary_state_with_its_card_not_two_and_call_a_keeps_4_mib():
    """Either binary state (CIFAR-10's or MNIST's, sized from its recipe) with the card the H200 occasion brought back
    beside it (690,234 and 689,830 bytes) fits the default cap; both together would not. The CIFAR-10 call (a), beside
    the tree as it is with the tracked ledger at its cap, still leaves at least 4 MiB."""
    cards = {"cifar-binary": 690_234, "mnist-binary": 689_830}
    both = [state_file_bytes(next(c.recipe for c in CELLS if c.cell_id.startswith(f"{name}--haim_binary_kkt--")))
            + card for name, card in cards.items()]
    cap = tracked_ledger.CAP_MIB * 2**20
    assert max(both) <= cap < sum(both)
    tree = tree_without_home()
    if tree is None:
        pytest.skip("not a git checkout: the working tree's size is unknown")
    call = tree + WHEELS + LEDGER + RECORDS + cap + DATA[".data/cifar10"]
    assert call <= CARRY - 4 * 2**20, (call - CARRY) / 2**20


#: the tracked states beside a full `paper-gpu` board: one paper-size state with its card, the default cap (a target
#: whose cells are all on the board keeps no state)
ONE_STATE = 10 * 2**20


@pytest.mark.parametrize("name", ["cifar-binary", "mnist-binary"])
def test_each_targets_cells_travel_in_a_call_of_their_own_beside_a_full_paper_gpu_board(name):
    """A call of one target's cells carries its data folder; the tracked ledger travels in the tree: with one
    paper-size state it fits beside the tree as it is and a full `paper-gpu` board (what travel_size.py prints for
    `--only` of that target's cells), as at the default cap; a second state beside a full board would not leave the
    CIFAR-10 call room (benchmarks/gpu/README.md, "What travels")."""
    tree = tree_without_home()
    if tree is None:
        pytest.skip("not a git checkout: the working tree's size is unknown")
    folder = {ref: f for f, ref in READS.items()}
    data = next(folder[c.recipe.problem.dataset] for c in CELLS if c.cell_id.startswith(f"{name}--"))
    call = tree + PAPER_GPU + WHEELS + LEDGER + RECORDS + DATA[data]
    assert call + ONE_STATE <= CARRY, (name, (call + ONE_STATE - CARRY) / 2**20)
    assert call + tracked_ledger.CAP_MIB * 2**20 <= CARRY
    if name == "cifar-binary":
        assert call + 2 * ONE_STATE > CARRY


def test_a_tracked_ledger_travels_in_the_tree_and_is_not_carried(repo, capsys):
    """A ledger and a state committed under benchmarks/gpu/ledger/paper: travel_size reads it by default, counts its
    files in the tree's part, and carries only the wheels and the data folder."""
    keys = list(dict.fromkeys(c.recipe.key() for c in CELLS if fnmatch.fnmatchcase(c.cell_id, PATTERNS[0])))
    home = ledger(repo, keys[:1], {}, cards={keys[0]})
    (repo / HOME).parent.mkdir(parents=True)
    home.rename(repo / HOME)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "the tracked ledger")
    write(repo / ".whl" / "k.whl", 3_000)
    assert travel.main(["--repo", str(repo), "--suite", "paper", "--only", PATTERNS[0]]) == 0
    out = capsys.readouterr().out
    assert f"in the tree (no carry needed): {HOME}/finished.json, {HOME}/training/{keys[0]}.safetensors, " \
           f"{HOME}/training/{keys[0]}.card.json" in out
    assert 'carry: [".whl"]' in out   # .data/cifar10 is absent here: not carried
    tracked = sum(p.stat().st_size for p in repo.rglob("*") if p.is_file() and ".git" not in p.parts
                  and p.parts[len(repo.parts)] not in ("big", ".whl", "new.txt", "run.log"))
    assert f"tracked {travel.mib(tracked):>10s}".split() == next(
        ln for ln in out.splitlines() if ln.startswith("tracked")).split()


def test_a_states_file_is_bounded_by_its_recipes_arithmetic():
    """The CIFAR-10 binary target's state at step 10^6 came back from the first occasion as 8,560,328 bytes
    (benchmarks/gpu/README.md): the bound holds it, within 2%."""
    recipe = next(c.recipe for c in CELLS if c.cell_id.startswith("cifar-binary--haim_binary_kkt--"))
    assert recipe.train.steps == 10**6
    assert 8_560_328 <= state_file_bytes(recipe) <= 1.02 * 8_560_328


def test_an_ignored_shared_folder_travels_too(repo):
    (repo / ".gitignore").write_text((repo / ".gitignore").read_text() + "/shared/\n")
    write(repo / "shared" / "notes" / "n.md", 321)
    assert travel.measure(repo, []).parts["shared/"] == 321


def test_after_an_occasion_the_next_calls_carry_is_printed(repo, capsys):
    after = load_module("gpu_after_occasion", ROOT / "benchmarks" / "gpu" / "after_occasion.py")
    write(repo / ".whl" / "k.whl", 3_000)
    after.next_call(repo, str(ROOT / "benchmarks" / "gpu" / "tiny.toml"), repo / "runs" / "bench" / "tiny", [])
    out = capsys.readouterr().out
    assert "the next call (every cell left" in out
    assert 'carry: [".whl"]' in out and "fits" in out   # digits reads no file; no ledger yet: not carried


def test_a_selection_of_no_cell_is_one_line(repo, capsys):
    assert travel.main(["--repo", str(repo), "--suite", "paper", "--only", "no-such-cell*"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "selects no cell of suite paper" in err
