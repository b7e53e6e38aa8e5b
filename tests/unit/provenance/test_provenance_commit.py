"""A checkout is dirty when its code differs from the commit, not when a published leaderboard was rewritten; the
commit is read once per process (the code it runs is what it imported), and a new process reads it again."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from reconbench import provenance
from reconbench.provenance import git_commit, read_git_commit


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout.strip()


needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def _repo(tmp_path: Path) -> tuple[Path, str]:
    """A git repository with code under pkg/ and a published board under leaderboards/, and its commit."""
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "leaderboards" / "s").mkdir(parents=True)
    (repo / "pkg" / "code.py").write_text("x = 1\n")
    (repo / "leaderboards" / "s" / "README.md").write_text("board\n")
    _git(repo, "init", "-q")
    _git(repo, "-c", "user.email=t@t", "-c", "user.name=t", "add", ".")
    _git(repo, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "init")
    return repo, _git(repo, "rev-parse", "HEAD")


@needs_git
def test_a_rewritten_leaderboard_does_not_make_the_checkout_dirty(tmp_path):
    repo, head = _repo(tmp_path)
    git_commit = read_git_commit   # what git says now, at every step
    assert git_commit(repo / "pkg") == head
    (repo / "leaderboards" / "s" / "README.md").write_text("board, re-published\n")
    assert git_commit(repo / "pkg") == head              # an output folder: still clean
    (repo / "pkg" / "code.py").write_text("x = 2\n")
    assert git_commit(repo / "pkg") == head + "-dirty"   # code: dirty
    (repo / "pkg" / "code.py").write_text("x = 1\n")
    (repo / "leaderboards.py").write_text("not the folder\n")
    _git(repo, "add", "leaderboards.py")
    assert git_commit(repo / "pkg") == head + "-dirty"   # a staged file elsewhere, even with a similar name


@needs_git
def test_the_commit_is_read_once_per_process_and_folder(tmp_path, monkeypatch):
    repo, head = _repo(tmp_path)
    calls: list[list[str]] = []
    real_run = subprocess.run

    def counting_run(args, *a, **k):
        calls.append(list(args))
        return real_run(args, *a, **k)

    monkeypatch.setattr(provenance.subprocess, "run", counting_run)
    assert [git_commit(repo / "pkg") for _ in range(5)] == [head] * 5
    assert len(calls) == 2 and calls[0][:2] == ["git", "rev-parse"] and calls[1][:2] == ["git", "status"]
    (repo / "pkg" / "code.py").write_text("x = 2\n")   # edited after the process read it: its record stands
    assert git_commit(repo / "pkg") == head and len(calls) == 2
    assert git_commit(repo / "leaderboards") == head + "-dirty" and len(calls) == 4   # another folder: read now
    assert read_git_commit(repo / "pkg") == head + "-dirty" and len(calls) == 6


@needs_git
def test_a_new_process_sees_a_new_commit(tmp_path):
    repo, first = _repo(tmp_path)
    script = ("import sys; from pathlib import Path; from reconbench.provenance import git_commit; "
              "print(git_commit(Path(sys.argv[1])))")

    def in_a_new_process() -> str:
        return subprocess.run([sys.executable, "-c", script, str(repo / "pkg")], capture_output=True, text=True,
                              check=True).stdout.strip()

    assert git_commit(repo / "pkg") == first == in_a_new_process()
    (repo / "pkg" / "code.py").write_text("x = 2\n")
    _git(repo, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qam", "second")
    second = _git(repo, "rev-parse", "HEAD")
    assert second != first
    assert in_a_new_process() == second
    assert git_commit(repo / "pkg") == first   # this process keeps the commit it read first
