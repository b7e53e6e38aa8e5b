"""A checkout is dirty when its code differs from the commit, not when a published leaderboard was rewritten."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from reconbench.provenance import git_commit


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout.strip()


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_a_rewritten_leaderboard_does_not_make_the_checkout_dirty(tmp_path):
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "leaderboards" / "s").mkdir(parents=True)
    (repo / "pkg" / "code.py").write_text("x = 1\n")
    (repo / "leaderboards" / "s" / "README.md").write_text("board\n")
    _git(repo, "init", "-q")
    _git(repo, "-c", "user.email=t@t", "-c", "user.name=t", "add", ".")
    _git(repo, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "init")
    head = _git(repo, "rev-parse", "HEAD")
    assert git_commit(repo / "pkg") == head
    (repo / "leaderboards" / "s" / "README.md").write_text("board, re-published\n")
    assert git_commit(repo / "pkg") == head              # an output folder: still clean
    (repo / "pkg" / "code.py").write_text("x = 2\n")
    assert git_commit(repo / "pkg") == head + "-dirty"   # code: dirty
    (repo / "pkg" / "code.py").write_text("x = 1\n")
    (repo / "leaderboards.py").write_text("not the folder\n")
    _git(repo, "add", "leaderboards.py")
    assert git_commit(repo / "pkg") == head + "-dirty"   # a staged file elsewhere, even with a similar name
