"""The contributor's path of CONTRIBUTING.md ("Submitting your results"), end to end on the command line, against a
board made the way published boards are made: `reconbench bench` and `reconbench leaderboard SUITE --publish` (slim
entries, compact model cards, the stored candidate sample, the reconstructions figure drawn), its targets trained and
certified in one cache. The outsider copies the board's suite file, appends the tables of an attack of their own
plugin, runs their cells in a fresh cache (the board's targets trained again there), and packs them with
`leaderboard submit`; the maintainer runs `leaderboard add` and `leaderboard SUITE --verify`, which must pass with the
outside row marked and the figures unchanged, and again after the board is published anew.

The board's model cards are certified by the dense autograd Jacobian (an equally exact code path, as the published
ci board's cards were), each of its entries moved one unit in its last place (the rounding another processor or library
gives it: the two code paths alone agree bit for bit on some processors), and the outsider's by the closed-form one,
so the two certificates of identical weights differ in their last digits on any processor, as they do between machines
and versions."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import math
import shutil
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from _helpers.cli import run_cli
from _helpers.metric_numbers import last_place_apart, numbers

from reconbench import hookimpl, plugins, provenance
from reconbench.bench.seal import sealed
from reconbench.bench.suite import load_suite
from reconbench.cli import main
from reconbench.config import option
from reconbench.interfaces import Attack, AttackOutput, AttackTarget, ThreatModel
from reconbench.leaderboard import render as render_mod
from reconbench.leaderboard.accept import add_submission
from reconbench.leaderboard.slim import RERUN_RTOL
from reconbench.leaderboard.submit import pack, submission_text
from reconbench.targets import certificate, defended

pytestmark = pytest.mark.usefixtures("one_torch_thread")

#: the board's suite: one tiny two-hidden-layer target (the ci board's widths), a built-in baseline, two seeds, figures on
SUITE = """\
[suite]
name = "roundtrip"
description = "A tiny board for the contributor's round trip."
seeds = [0, 1]
seed_targets = true
search_runs = 1

[targets.bin]
dataset = "digits"
task = "binary"
n_per_class = 3
family = "mlp"
widths = [32, 32]
steps = 30

[attacks.init_only]

[inits.gaussian]
config = { scale = 0.05 }

[leaderboard]
store_candidates = 1
figures = true
sample_images = 2

[[grid]]
targets = ["bin"]
attacks = ["init_only"]
"""
#: the outsider's tables, appended to the board's suite file as CONTRIBUTING.md's step 2 says
ADDITION = """
[attacks.halved]
config = { factor = 0.5 }

[[grid]]
targets = ["bin"]
attacks = ["halved"]
inits = ["gaussian"]
"""
OUTSIDE_CELLS = ["bin--halved--gaussian--s0", "bin--halved--gaussian--s1"]
BOARD_COMMIT = "0123456789abcdef0123456789abcdef01234567"
CONTRIBUTOR_COMMIT = "89abcdef0123456789abcdef0123456789abcdef"
FIGURE = "figures/reconstructions.png"
#: the longest refusal line a user should have to read
MAX_LINE = 400


@dataclass
class HalvedConfig:
    factor: float = option(0.5, "each starting candidate is multiplied by this", gt=0)


@dataclass(frozen=True)
class Halved(Attack[HalvedConfig]):
    """The outsider's attack: the starting candidates scaled towards zero (a plugin, not an attack worth a row)."""

    name: str = "halved"
    description: str = "test-only outside attack: the starting candidates scaled by a factor"
    needs: frozenset[str] = frozenset()
    threat: ThreatModel = ThreatModel()
    tasks: frozenset[str] = frozenset({"binary", "multiclass", "regression"})
    config_cls: type[HalvedConfig] = HalvedConfig

    def run(self, target: AttackTarget, x0: torch.Tensor, labels: torch.Tensor, config: HalvedConfig, *,
            generator: torch.Generator, progress: Any = None) -> AttackOutput:
        return AttackOutput(candidates=x0 * config.factor, labels=labels.clone(), final_loss=0.0, steps=0)


@hookimpl
def register_attacks(register: Any) -> None:
    """This module is the outsider's plugin: the hook CONTRIBUTING.md's worked example registers its attack with."""
    register(Halved())


def cli(args: list[str]) -> str:
    """`reconbench ARGS` in this process (fixtures cannot take capsys); its output, or a failure that shows it."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(args)
            code: Any = 0
        except SystemExit as stop:
            code = stop.code
    assert code in (0, None), f"reconbench {' '.join(args)} exited {code}: {err.getvalue()}{out.getvalue()}"
    return out.getvalue()


def figure_hashes(board: Path) -> dict[str, str]:
    """The sha256 of each file under the board's figures/."""
    return {str(p.relative_to(board)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted((board / "figures").rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The board published from cache A at BOARD_COMMIT (`leaderboards/roundtrip` under the returned folder); the
    outsider's cells run with the board's suite file plus ADDITION from a fresh cache B at CONTRIBUTOR_COMMIT, with
    the plugin registered only while they run."""
    root = tmp_path_factory.mktemp("roundtrip")
    (root / "roundtrip.toml").write_text(SUITE)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)   # the board's and the outsider's count (CONTRIBUTING.md: the board's Machine line)
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)
        mp.setenv("RECONBENCH_DOWNLOAD", "0")
        mp.setattr(render_mod, "check_publishable", lambda pub, commit: None)   # no clean git tree here
        # the maintainer: the board's targets trained, and certified by the dense autograd Jacobian, in cache A
        mp.setenv("RECONBENCH_CACHE", str(root / "cache-a"))
        mp.setattr(provenance, "git_commit", lambda path=None: BOARD_COMMIT)
        with pytest.MonkeyPatch.context() as autograd:
            autograd.setattr(certificate, "chain_jacobian", lambda *args, **kwargs: None)
            autograd.setattr(certificate, "dense_jacobian", last_place_apart(certificate.dense_jacobian))
            cli(["bench", "roundtrip.toml", "--out", "runs/bench/roundtrip"])
        cli(["leaderboard", "roundtrip.toml", "--results", "runs/bench/roundtrip", "--publish"])
        # the outsider, on another machine: nothing cached, nothing remembered by the process
        mp.setenv("RECONBENCH_CACHE", str(root / "cache-b"))
        mp.setattr(provenance, "git_commit", lambda path=None: CONTRIBUTOR_COMMIT)
        defended.clear_caches()
        (root / "my-roundtrip.toml").write_text((root / "roundtrip.toml").read_text() + ADDITION)
        host = plugins.host()
        name = host.register(sys.modules[__name__], name="outside-roundtrip-plugin")
        try:
            cli(["bench", "my-roundtrip.toml", "--only", "*halved*", "--out", "runs/bench/my-roundtrip"])
        finally:
            host.unregister(name)
            defended.clear_caches()
            torch.set_num_threads(threads)
    yield root


def test_the_contributors_path_takes_a_submission_into_a_published_board(workspace: Path, tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str],
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copytree(workspace, tmp_path / "repo", ignore=shutil.ignore_patterns("cache-*"))
    monkeypatch.chdir(tmp_path / "repo")
    board = Path("leaderboards") / "roundtrip"
    published = json.loads((board / "results.json").read_text())
    assert published["figures"], "the board must be published with its reconstructions figure"
    figures = figure_hashes(board)
    assert FIGURE in figures
    # the outsider packs their cells (step 4)
    code, out, err = run_cli(["leaderboard", "submit", "runs/bench/my-roundtrip", "--board", str(board), "--out",
                              "halved-roundtrip.json", "--contributor", "Your Name"], capsys)
    assert code == 0, err
    sub = json.loads(Path("halved-roundtrip.json").read_text())
    assert sorted(e["cell_id"] for e in sub["entries"]) == OUTSIDE_CELLS
    # the maintainer takes it in and verifies the board, without the outsider's plugin: the candidates are re-scored
    assert "halved" not in plugins.names("attacks")
    code, out, err = run_cli(["leaderboard", "add", "halved-roundtrip.json", "--board", str(board)], capsys)
    assert code == 0, err + out
    # the check add prints is the one to run (a suite not shipped with reconbench is named by its file)
    printed = out.split("`reconbench ")[-1].split("`")[0].split()
    assert printed == ["leaderboard", "roundtrip.toml", "--out", str(board), "--verify"], out
    code, out, err = run_cli(printed, capsys)
    assert code == 0, err + out
    readme = (board / "README.md").read_text()
    assert "## Outside submissions" in readme and "halved (outside)" in readme and "Your Name" in readme
    assert "init_only (outside)" not in readme
    assert figure_hashes(board) == figures   # the board's figures stay as it published them
    assert json.loads((board / "results.json").read_text())["figures"] == published["figures"]
    # published again later from the board's own results: the outside row is kept, the figures drawn again
    monkeypatch.setattr(provenance, "git_commit", lambda path=None: BOARD_COMMIT)
    monkeypatch.setattr(render_mod, "check_publishable", lambda pub, commit: None)
    code, out, err = run_cli(["leaderboard", "roundtrip.toml", "--results", "runs/bench/roundtrip", "--publish"],
                             capsys)
    assert code == 0 and "4 ok" in out and not err, err + out
    assert "halved (outside)" in (board / "README.md").read_text()
    code, out, err = run_cli(["leaderboard", "roundtrip.toml", "--out", str(board), "--verify"], capsys)
    assert code == 0, err + out


def test_the_outsiders_targets_have_the_boards_weights_and_a_certificate_apart_in_its_last_digits(
        workspace: Path) -> None:
    """What makes the round trip a test of comparing training metrics to a re-run's rounding: the outsider's cache
    holds the board's weights, certified to other last digits."""
    board = workspace / "leaderboards" / "roundtrip" / "targets"
    mine = workspace / "runs" / "bench" / "my-roundtrip" / "targets"
    cards = sorted(board.glob("*.json"))
    assert len(cards) == 2 and sorted(p.name for p in mine.glob("*.json")) == [p.name for p in cards]
    apart = []
    for card in cards:
        theirs, again = json.loads(card.read_text()), json.loads((mine / card.name).read_text())
        assert theirs["weights"]["sha256"] == again["weights"]["sha256"]
        stored, retrained = dict(numbers(theirs["metrics"])), dict(numbers(again["metrics"]))
        assert stored.keys() == retrained.keys()
        assert all(math.isclose(stored[k], retrained[k], rel_tol=RERUN_RTOL, abs_tol=1e-15) for k in stored)
        apart += [k for k in stored if stored[k] != retrained[k]]
    assert any(k.startswith("certificate.") for k in apart), "the certificates agree bit for bit: nothing is tested"


def test_a_target_trained_to_other_weights_is_refused_naming_the_thread_count(workspace: Path, tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Another torch thread count can train a recipe to other weights (CONTRIBUTING.md): the refusal says to match
    the board's, which its README's Machine line gives."""
    shutil.copytree(workspace, tmp_path / "repo", ignore=shutil.ignore_patterns("cache-*"))
    monkeypatch.chdir(tmp_path / "repo")
    board = Path("leaderboards") / "roundtrip"
    assert "torch threads 1" in (board / "README.md").read_text()
    sub = pack(Path("runs/bench/my-roundtrip"), board, "Your Name")
    for card in sub["cards"].values():
        card["weights"]["sha256"] = "0" * 64
    sealed(sub)
    path = tmp_path / "other-weights.json"
    path.write_text(submission_text(sub))
    before = (board / "results.json").read_text()
    report = add_submission(path, load_suite("roundtrip.toml"), board)
    assert len(report.refusals) == 2, report.refusals
    assert all("weights sha256" in r and "torch thread count" in r and "OMP_NUM_THREADS" in r
               and len(r) <= MAX_LINE and "\n" not in r for r in report.refusals), report.refusals
    assert (board / "results.json").read_text() == before

