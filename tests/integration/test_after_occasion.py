"""benchmarks/gpu/after_occasion.py rehearsed end to end on the CPU, in a temporary git repository holding the parts of
the repository it writes (a published board, the boards' index and notes, docs/results.md, the suite): two slices of a
tiny `digits` suite, each with a probe-like JSON beside its pack, as a `run` call's files_at holds them.

The first slice's deadline stops its targets' training (a pack with training states only, as the first H100 occasion
brought back): the command unpacks it, copies the probe's JSON under the card it names, keeps the ledger and the
states in the tracked ledger (benchmarks/gpu/ledger/<suite>/) and publishes nothing; the next slice reads that
tracked ledger directly. The
second slice finishes one cell: a dirty checkout is refused in one line before anything is unpacked; a board whose
verification fails is never put in place; from the clean checkout the board appears, verifies, gets its index row
("partial, 1 of 4 cells", the slice's commit) and its docs/results.md row, and the printed git lines, run as
printed, commit exactly what the command wrote. A third slice comes back to a new checkout (no `runs/`): the results
folder is rebuilt from the tracked ledger, and the board keeps the cell it had.

Each slice runs on a "device" with no git metadata and names the repository's commit through
``RECONBENCH_SLICE_COMMIT``, as slice.sh does; the code that publishes reads the temporary repository's git state
(``provenance._git_commit_once`` patched to it), so "clean" is git's own answer there."""

from __future__ import annotations

import hashlib
import json
import shlex
import shutil
import subprocess
from collections import OrderedDict
from pathlib import Path

import pytest
from _helpers.cli import run_cli
from _helpers.examples import load_module
from _helpers.slicekit import TickClock, cheap, digits_sizes

from reconbench import provenance
from reconbench.bench.runner import run_suite
from reconbench.bench.slice_executor import DeadlineExecutor
from reconbench.bench.slice_pack import COMMIT_ENV, LEDGER_FILE
from reconbench.bench.suite import load_suite
from reconbench.cli.bench_slices import SlicePacker
from reconbench.errors import ReconbenchError
from reconbench.leaderboard.index_table import BEGIN, END
from reconbench.leaderboard.index_table import main as index_main
from reconbench.targets import defended

pytestmark = pytest.mark.usefixtures("one_torch_thread")

ROOT = Path(__file__).resolve().parents[2]
AFTER = load_module("gpu_after_occasion", ROOT / "benchmarks" / "gpu" / "after_occasion.py")
STEPS = 1200
#: two digits targets at a constant lr (their training travels between slices), Haim et al.'s attack from two starts
SUITE = """
[suite]
name = "after-rehearsal"
description = "Two digits targets trained at a constant lr; Haim et al.'s attack from two starts."
seeds = [0]
device = "cpu"
dtype = "float64"
search_runs = 2

[protocol]
figures = false

[leaderboard]
store_candidates = 4
sample_images = 4
""" + "".join(f"""
[targets.{name}]
dataset = "digits"
task = "binary"
binary_rule = "parity"
n_per_class = 5
family = "mlp"
widths = [32, 32]
loss = "bce"
lr = 0.5
steps = {STEPS}
seed = {seed}
""" for name, seed in (("a", 0), ("b", 1))) + """
[attacks.haim_binary_kkt]
config = { steps = 30 }

[inits.gaussian]
[inits.uniform]

[[grid]]
targets = ["a", "b"]
attacks = ["haim_binary_kkt"]
inits = ["gaussian", "uniform"]
"""
CELL, OTHER = "a--haim_binary_kkt--gaussian--s0", "a--haim_binary_kkt--uniform--s0"
BOARD = "rehearsal-gpu"
#: the suite's tracked ledger in the repository
HOME = "benchmarks/gpu/ledger/after-rehearsal"
GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.org", "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}


def git(repo: Path, *args: str) -> str:
    out = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True, timeout=60)
    return out.stdout


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A git repository with the committed ci board, the index (notes listing ci only), docs/results.md and the suite,
    committed clean; the results folder (runs/) ignored."""
    for k, v in GIT_ENV.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("RECONBENCH_CACHE", str(tmp_path / "cache-here"))
    monkeypatch.setenv("RECONBENCH_DOWNLOAD", "0")
    root = tmp_path / "repo"
    shutil.copytree(ROOT / "leaderboards" / "ci", root / "leaderboards" / "ci")
    shutil.copyfile(ROOT / "leaderboards" / "README.md", root / "leaderboards" / "README.md")
    (root / "leaderboards" / "index-notes.toml").write_text("# the boards\n[ci]\n")
    (root / "docs").mkdir()
    shutil.copyfile(ROOT / "docs" / "results.md", root / "docs" / "results.md")
    (root / "suite.toml").write_text(SUITE)
    (root / ".gitignore").write_text("/runs/\n")
    git(root, "init", "-q")
    git(root, "config", "commit.gpgsign", "false")
    assert index_main(["--leaderboards", str(root / "leaderboards"), "--write"]) == 0   # ci's row alone
    git(root, "add", "-A")
    git(root, "commit", "-qm", "start")
    return root


def files_at(tmp_path: Path, name: str, pack: Path, gpu: str = "NVIDIA H200") -> Path:
    """A `run` call's files_at: the pack, and a probe's and a step A/B's JSON naming the card."""
    folder = tmp_path / name
    folder.mkdir()
    shutil.copytree(pack, folder / "pack")
    for file, fmt in (("probe.json", "reconbench-gpu-probe/1"), ("step_ab.json", "step-ab")):
        (folder / file).write_text(json.dumps({"format": fmt, "conditions": {"device": "cuda", "gpu": gpu},
                                               "file": file}))
    for path in sorted(folder.rglob("*"), reverse=True) + [folder]:   # read-only, as the device tool leaves them
        path.chmod(0o555 if path.is_dir() else 0o444)
    return folder


def on_device(monkeypatch: pytest.MonkeyPatch, commit: str) -> None:
    """What a bare lent machine is: no git metadata, the commit named by the slice's environment, no weights."""
    monkeypatch.setattr(provenance, "_git_commit_once", lambda where: None)
    monkeypatch.setenv(COMMIT_ENV, commit)
    monkeypatch.setattr(defended, "_TRAINED", OrderedDict())


def here(monkeypatch: pytest.MonkeyPatch, repo: Path) -> None:
    """Back in the repository: the code's commit is the repository's, read from git."""
    monkeypatch.delenv(COMMIT_ENV, raising=False)
    monkeypatch.setattr(provenance, "_git_commit_once", lambda where: provenance.read_git_commit(repo))


def after(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = AFTER.main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def slice_cell(capsys: pytest.CaptureFixture[str], suite_file: Path, tmp_path: Path, name: str, cell: str,
               *extra: str) -> Path:
    """One slice on the "device" that finishes ``cell`` (``extra``: e.g. the ledger to continue from): its pack."""
    pack = tmp_path / f"pack{name}"
    code, out, err = run_cli(["bench", str(suite_file), "--device", "cpu", "--deadline", "3000", "--pack", str(pack),
                              "--out", str(tmp_path / f"device{name}"), "--cache", str(tmp_path / f"cache{name}"),
                              *extra, "--only", cell, "-q"], capsys)
    assert code == 0, out + err
    return pack


def run_printed(repo: Path, out: str) -> list[str]:
    """Run the `git add` and `git commit` lines the command printed, as printed; the lines."""
    lines = [ln for ln in out.splitlines() if ln.startswith("git ")]
    assert [ln.split()[:2] for ln in lines] == [["git", "add"], ["git", "commit"]], out
    for line in lines:
        subprocess.run(shlex.split(line), cwd=repo, check=True, capture_output=True, timeout=60)
    assert git(repo, "status", "--porcelain") == ""   # everything the command wrote is committed
    return lines


def test_after_an_occasion_on_the_cpu_from_a_training_state_to_a_partial_board(repo, tmp_path, capsys, monkeypatch):
    suite_file = repo / "suite.toml"
    results = repo / "runs" / "bench" / "after-rehearsal"
    common = ["--repo", str(repo), "--suite", str(suite_file), "--board", BOARD, "--no-figures"]
    head = git(repo, "rev-parse", "HEAD").strip()

    # -- slice 1: its deadline stops both targets' training (one stack); the pack holds their states only
    on_device(monkeypatch, head)
    suite = load_suite(str(suite_file))
    ex = DeadlineExecutor(30.0, cheap(), digits_sizes(suite), start=0.0, clock=TickClock(),
                          states=tmp_path / "cache1" / "training")
    packer = SlicePacker(tmp_path / "pack1", suite, tmp_path / "device1", ex, "cpu", None, 0.0, {})
    report = run_suite(suite, tmp_path / "device1", cache=str(tmp_path / "cache1"), quiet=True, executor=ex,
                       on_cell=packer.cell)
    manifest = packer.write(report.ran, complete=True)
    assert manifest.cells == [] and len(manifest.training) == 2 and manifest.commit == head

    here(monkeypatch, repo)
    code, out, err = after(capsys, str(files_at(tmp_path, "files1", tmp_path / "pack1")), *common)
    assert code == 0, out + err
    assert "nothing to publish: the pack held no finished cell (training state(s): " in out
    assert not (repo / "leaderboards" / BOARD).exists()
    assert sorted(json.loads((results / LEDGER_FILE).read_text())["training"]) == sorted(
        s.recipe_key for s in manifest.training)   # unpacked: the states travel to the next slice
    probe = repo / "benchmarks" / "results" / "gpu" / "probe_h200.json"
    assert json.loads(probe.read_text())["file"] == "probe.json"   # named by the card the JSON names
    assert json.loads(probe.with_name("step_ab_h200.json").read_text())["file"] == "step_ab.json"
    home = repo / HOME
    kept = json.loads((home / LEDGER_FILE).read_text())
    assert sorted(kept["training"]) == sorted(s.recipe_key for s in manifest.training)
    assert all((home / e["file"]).read_bytes() == (results / e["file"]).read_bytes() for e in kept["training"].values())
    assert not [p for p in home.rglob("*") if p.is_file() and str(tmp_path) in p.read_bytes().decode("latin-1")]
    lines = run_printed(repo, out)
    assert lines[0] == ("git add -A -- benchmarks/results/gpu/probe_h200.json "
                        f"benchmarks/results/gpu/step_ab_h200.json {HOME}")
    assert "no finished cell, nothing published" in lines[1] and head[:12] in lines[1]
    assert HOME in lines[1]
    stat = git(repo, "show", "--stat", "--format=", "HEAD")
    assert stat.count("|") == 2 + 1 + 2 + 1, stat   # the probe files, the ledger, the two states, the suite's copy

    # -- slice 2, from the new commit: training continues from the ledger's states and one cell finishes
    head = git(repo, "rev-parse", "HEAD").strip()
    on_device(monkeypatch, head)
    shutil.rmtree(repo / "runs")   # a new checkout: what travels is the tracked ledger, read where it is
    slice_cell(capsys, suite_file, tmp_path, "2", CELL, "--finished", str(repo / HOME / LEDGER_FILE))
    files2 = files_at(tmp_path, "files2", tmp_path / "pack2")
    here(monkeypatch, repo)

    # a dirty checkout: refused in one line, before anything is unpacked or published
    readme = repo / "leaderboards" / "README.md"
    original = readme.read_text()
    (repo / "docs" / "results.md").write_text((repo / "docs" / "results.md").read_text() + "\nhand edit\n")
    code, out, err = after(capsys, str(files2), *common)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 1 and len(lines) == 1, err
    assert lines[0].startswith("error: step 2 (clean): the checkout has uncommitted changes (docs/results.md)")
    assert "git checkout -- docs/results.md" in lines[0]
    assert not (results / "cells").exists() and not (repo / "leaderboards" / BOARD).exists()
    assert not results.exists()   # nothing rebuilt either
    git(repo, "checkout", "--", "docs/results.md")

    # a board that fails its verification is never put in place, and its draft is removed
    def tampered(*args, **kwargs):
        raise ReconbenchError("a tampered number")

    with monkeypatch.context() as mp:
        mp.setattr("reconbench.cli.leaderboard_cmd.verify_leaderboard", tampered)
        code, out, err = after(capsys, str(files2), *common)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 1 and lines[-1].startswith("error: step 5 (verify):") and "a tampered number" in lines[-1], err
    assert f"leaderboards/{BOARD} is unchanged" in lines[-1]
    assert not (repo / "leaderboards" / BOARD).exists() and not list((repo / "runs").glob(".publishing-*"))
    assert git(repo, "status", "--porcelain") == ""   # nothing tracked was written
    assert (results / "cells" / f"{CELL}.json").is_file()   # the unpack ran (and runs again below)
    assert "rebuilt from the tracked ledger" in out
    # the first occasion's files again: no finished cell in the pack, but the merged cell the board lacks is published
    # (its older training states are not taken over the later ones)
    with monkeypatch.context() as mp:
        mp.setattr("reconbench.cli.leaderboard_cmd.verify_leaderboard", tampered)
        code, out, err = after(capsys, str(tmp_path / "files1"), *common)
    assert code == 1 and "error: step 5 (verify):" in err
    assert "the pack held no finished cell, but runs/bench/after-rehearsal holds 1 the board lacks" in out

    # the clean checkout: the board appears, verifies, and its rows are written
    code, out, err = after(capsys, str(files2), *common)
    assert code == 0, out + err
    board = repo / "leaderboards" / BOARD
    header = json.loads((board / "results.json").read_text())["header"]
    assert header["progress"] == "1 of 4 cells" and header["git_commits"] == [head]
    assert header["rendered_by"] == (f"reconbench leaderboard {suite_file} --results runs/bench/after-rehearsal "
                                     f"--publish --out leaderboards/{BOARD} --no-figures")
    assert not any(".publishing-" in p.read_text() for p in board.rglob("*") if p.suffix in (".json", ".md"))
    assert run_cli(["leaderboard", str(suite_file), "--out", str(board), "--verify"], capsys)[0] == 0
    text = readme.read_text()
    row = (f"| [`{BOARD}`]({BOARD}/) | cells at `{head[:7]}` (1 cell(s), 1 slice pack(s)); rendered at "
           f"`{head[:7]}` | partial, 1 of 4 cells; current (first publication) |")
    assert row in text.split(BEGIN)[1].split(END)[0]
    assert "| [`ci`](ci/) | commit `b075c8c` | current |" in text
    assert text.split(END)[1] == original.split(END)[1]   # the hand-written sections below as they were
    assert text.split(BEGIN)[0] == original.split(BEGIN)[0]
    assert f"[{BOARD}](../leaderboards/{BOARD}/) (partial: 1 of 4 cells)" in (repo / "docs" / "results.md").read_text()
    assert f"[{BOARD}]" in (repo / "leaderboards" / "index-notes.toml").read_text()
    lines = run_printed(repo, out)
    assert lines[0] == (f"git add -A -- leaderboards/{BOARD} leaderboards/README.md leaderboards/index-notes.toml "
                        f"docs/results.md {HOME}")   # the probe files are as committed from the first occasion
    assert CELL in json.loads((repo / HOME / LEDGER_FILE).read_text())["cells"]
    _, _, _, subject, _, body = shlex.split(lines[1])
    assert subject == f"{BOARD}: 1 new cell(s), board 1 of 4 cells (h200 occasion, the slice at {head[:12]})"
    assert body.startswith(f"New on the board: {CELL}. Cells merged from this occasion's pack: {CELL}. The board's "
                           f"cells ran at commits {head[:12]} (1 cell(s), 1 slice pack(s)). {HOME}: the ledger and the "
                           "training states that travel to the next call ("), body
    assert index_main(["--leaderboards", str(repo / "leaderboards"), "--check"]) == 0

    # -- slice 3, a later occasion at the next commit: the board grows, and is no longer at its first publication
    first = head
    head = git(repo, "rev-parse", "HEAD").strip()
    on_device(monkeypatch, head)
    shutil.rmtree(repo / "runs")   # a new checkout again: the board holds CELL, no results folder does
    slice_cell(capsys, suite_file, tmp_path, "3", OTHER, "--finished", str(repo / HOME / LEDGER_FILE))
    here(monkeypatch, repo)
    code, out, err = after(capsys, str(files_at(tmp_path, "files3", tmp_path / "pack3")), *common)
    assert code == 0, out + err
    assert "rebuilt from the tracked ledger" in out
    assert sorted(json.loads((results / LEDGER_FILE).read_text())["cells"]) == sorted([CELL, OTHER])
    header = json.loads((board / "results.json").read_text())["header"]
    assert header["progress"] == "2 of 4 cells" and header["git_commits"] == sorted([first, head])
    row = next(ln for ln in readme.read_text().splitlines() if ln.startswith(f"| [`{BOARD}`]"))
    assert row.endswith("| partial, 2 of 4 cells; current |")
    assert f"`{first[:7]}` (1 cell(s), 1 slice pack(s))" in row and f"`{head[:7]}` (1 cell(s), 1 slice pack(s))" in row
    lines = run_printed(repo, out)
    _, _, _, subject, _, body = shlex.split(lines[1])
    assert subject == f"{BOARD}: 1 new cell(s), board 2 of 4 cells (h200 occasion, the slice at {head[:12]})"
    assert body.startswith(f"New on the board: {OTHER}. Cells merged from this occasion's pack: {OTHER}. The board's "
                           "cells ran at commits ")
    assert all(f"{c[:12]} (1 cell(s), 1 slice pack(s))" in body for c in (first, head))


def test_the_card_comes_from_the_json_and_a_cpu_probe_needs_one(tmp_path, capsys):
    assert [AFTER.card_name(g) for g in ("NVIDIA H100 80GB HBM3", "NVIDIA H200", "NVIDIA A100-SXM4-80GB",
                                         "NVIDIA GeForce RTX 4090", "Tesla V100-SXM2-16GB", "NVIDIA L4")] == \
        ["h100", "h200", "a100", "rtx4090", "v100", "l4"]
    folder = tmp_path / "files"
    folder.mkdir()
    (folder / "probe.json").write_text(json.dumps({"conditions": {"device": "cpu"}}))
    code, out, err = after(capsys, str(folder), "--repo", str(tmp_path))
    assert code == 1 and err.strip() == ("error: step 1 (read): probe.json names no GPU (conditions.gpu: a CPU run?); "
                                         "give --card NAME to name the files")
    (folder / "probe.json").write_text(json.dumps({"conditions": {"gpu": "NVIDIA H100 80GB HBM3"}}))
    code, out, err = after(capsys, str(folder), "--repo", str(tmp_path), "--card", "h200")
    assert code == 1 and "--card h200, but the JSON names the card h100" in err
    code, out, err = after(capsys, str(folder), "--repo", str(tmp_path), "--board", "../paper-gpu")
    assert code == 1 and err.startswith("error: step 1 (read): --board '../paper-gpu' is not a board's folder name")
    with pytest.MonkeyPatch.context() as mp:   # a bug is one line too, naming its step
        mp.setattr(AFTER, "card_name", lambda gpu: 1 / 0)
        code, out, err = after(capsys, str(folder), "--repo", str(tmp_path))
        assert code == 1 and err.strip() == ("error: step 1 (read): unexpected ZeroDivisionError: division by zero; "
                                             "leaderboards/paper-gpu is as it was: run again with --debug for the "
                                             "traceback")
        with pytest.raises(ZeroDivisionError):
            AFTER.main([str(folder), "--repo", str(tmp_path), "--debug"])
    code, out, err = after(capsys, str(tmp_path / "nowhere"), "--repo", str(tmp_path))
    assert code == 1 and "step 1 (read)" in err and "is not a folder" in err
    # a folder that is not a git checkout: refused at step 2, nothing written
    code, out, err = after(capsys, str(folder), "--repo", str(tmp_path))
    assert code == 1 and err.startswith("error: step 2 (clean):") and "not a git checkout" in err
    assert not (tmp_path / "benchmarks").exists()


def test_a_board_whose_cells_brought_no_candidates_is_not_placed(repo, tmp_path, capsys, monkeypatch):
    """--verify re-derives no number of such a board published without figures (its GPU cells cannot be re-run
    here, and no figure pairs are kept): the command stops at step 5 naming the suite's sampled cells, the cells whose
    candidates packs carry, and publishing with figures."""
    suite_file = repo / "suite.toml"
    suite_file.write_text(SUITE.replace("store_candidates = 4", "store_candidates = 1"))
    git(repo, "commit", "-qam", "one sampled cell")
    ids = [f"{t}--haim_binary_kkt--{i}--s0" for t in ("a", "b") for i in ("gaussian", "uniform")]
    sampled = min(ids, key=lambda c: hashlib.sha256(c.encode()).hexdigest())   # the order packs sample in
    assert sampled != CELL
    on_device(monkeypatch, git(repo, "rev-parse", "HEAD").strip())
    slice_cell(capsys, suite_file, tmp_path, "", CELL)
    here(monkeypatch, repo)
    monkeypatch.chdir(tmp_path)   # the suite named by a path relative to here, not to the repository
    code, out, err = after(capsys, str(files_at(tmp_path, "files", tmp_path / "pack")), "--repo", str(repo),
                           "--suite", str(suite_file.relative_to(tmp_path)), "--board", BOARD, "--no-figures")
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 1 and lines[-1].startswith("error: step 5 (verify):"), out + err
    assert "none of its cells brought candidates or figure pairs back" in lines[-1], lines[-1]
    assert f"the suite's sampled cells that fit its file ({sampled})" in lines[-1]
    assert "publish with figures (no --no-figures)" in lines[-1]
    assert not (repo / "leaderboards" / BOARD).exists() and git(repo, "status", "--porcelain") == ""


@pytest.mark.parametrize("step, function", [("probe", "copy_probe_files"), ("index", "write_index"),
                                            ("results", "write_results_page")])
def test_a_run_again_after_the_board_was_placed_finishes_the_steps_and_counts_the_cells_as_new(
        repo, tmp_path, capsys, monkeypatch, step, function):
    """A run that placed a new board and then stopped (at step 7, 8 or 9): the same command again (after the
    restore its step-2 line names, where the stopped run wrote the index) writes the index and docs/results.md rows,
    and its commit message counts the board's cells as new (they are not in the checkout's HEAD), as the run that
    stopped would have."""
    suite_file = repo / "suite.toml"
    common = ["--repo", str(repo), "--suite", str(suite_file), "--board", BOARD, "--no-figures"]
    head = git(repo, "rev-parse", "HEAD").strip()
    on_device(monkeypatch, head)
    slice_cell(capsys, suite_file, tmp_path, "", CELL)
    here(monkeypatch, repo)
    files = str(files_at(tmp_path, "files", tmp_path / "pack"))

    def stopped(*args: object, **kwargs: object) -> None:
        AFTER.begin(step)
        raise OSError("disk full")

    with monkeypatch.context() as mp:
        mp.setattr(AFTER, function, stopped)
        code, out, err = after(capsys, files, *common)
    assert code == 1 and f"({step}): unexpected OSError: disk full; the board is in place" in err, out + err
    assert (repo / "leaderboards" / BOARD / "results.json").is_file()

    code, out, err = after(capsys, files, *common)
    if "error: step 2 (clean):" in err:   # the stopped run wrote the index: its line says how to restore it
        restore = err.split("`git checkout -- ")[1].split("`")[0]
        git(repo, "checkout", "--", *restore.split())
        code, out, err = after(capsys, files, *common)
    assert code == 0, out + err
    assert f"[`{BOARD}`]({BOARD}/)" in (repo / "leaderboards" / "README.md").read_text()
    assert f"[{BOARD}](../leaderboards/{BOARD}/)" in (repo / "docs" / "results.md").read_text()
    _, _, _, subject, _, body = shlex.split(run_printed(repo, out)[1])
    assert subject.startswith(f"{BOARD}: 1 new cell(s), board 1 of 4 cells"), subject
    assert body.startswith(f"New on the board: {CELL}."), body


def test_a_publication_from_a_new_checkout_keeps_the_cells_the_board_has(repo, tmp_path, capsys, monkeypatch):
    """`runs/` is ignored: a new checkout has no results folder while the committed board holds a cell. A later
    occasion's cell, unpacked there, joins the board's cell instead of replacing it (the results folder is rebuilt from
    the tracked ledger first; unpacked into an empty folder, the publication rendered from it would drop the board's
    cell), and the ledger the next slice reads still lists it. The second slice reads a copy of the ledger taken
    before the checkout was lost, as a call carried it before the ledger was tracked."""
    suite_file = repo / "suite.toml"
    results = repo / "runs" / "bench" / "after-rehearsal"
    common = ["--repo", str(repo), "--suite", str(suite_file), "--board", BOARD, "--no-figures"]
    on_device(monkeypatch, git(repo, "rev-parse", "HEAD").strip())
    slice_cell(capsys, suite_file, tmp_path, "1", CELL)
    here(monkeypatch, repo)
    code, out, err = after(capsys, str(files_at(tmp_path, "files1", tmp_path / "pack1")), *common)
    assert code == 0, out + err
    run_printed(repo, out)
    carried = tmp_path / "carried"
    shutil.copytree(results, carried)
    shutil.rmtree(repo / "runs")   # the new checkout
    board = repo / "leaderboards" / BOARD
    assert {p.stem for p in (board / "cells").glob("*.json")} == {CELL}

    on_device(monkeypatch, git(repo, "rev-parse", "HEAD").strip())
    slice_cell(capsys, suite_file, tmp_path, "2", OTHER, "--finished", str(carried / LEDGER_FILE))
    here(monkeypatch, repo)
    code, out, err = after(capsys, str(files_at(tmp_path, "files2", tmp_path / "pack2")), *common)
    assert code == 0, out + err
    assert {p.stem for p in (board / "cells").glob("*.json")} == {CELL, OTHER}
    assert json.loads((board / "results.json").read_text())["header"]["progress"] == "2 of 4 cells"
    assert sorted(json.loads((results / LEDGER_FILE).read_text())["cells"]) == sorted([CELL, OTHER])
    assert sorted(json.loads((repo / HOME / LEDGER_FILE).read_text())["cells"]) == sorted([CELL, OTHER])
