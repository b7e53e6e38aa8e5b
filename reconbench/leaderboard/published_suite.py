"""The suite file a published board was rendered from, for ``leaderboard --verify`` once the suite has changed.

A board's header records the sha256 of its suite file's text and the commit that rendered it. When the suite file
in the checkout is another version (a suite changed on purpose, its board not yet published again), the board can
still be checked against what produced it: that version is read from the checkout's git history (``git show
COMMIT:FILE``, accepted only when its sha256 is the recorded one). Without git, the commit or a matching text, the
current suite is used and verification names the mismatch as before.
"""

from __future__ import annotations

import dataclasses
import hashlib
import subprocess
from dataclasses import dataclass
from pathlib import Path

from reconbench.bench.suite import Suite
from reconbench.leaderboard.submit import board_additions, board_results, suite_from_text
from reconbench.leaderboard.tables import collect
from reconbench.records import BoardResults


@dataclass(frozen=True)
class PublishedSuite:
    """The suite to verify a board with, and (when it is not the checkout's file) where it came from."""

    suite: Suite
    commit: str | None = None   # set when read from git history: the commit that rendered the board
    stale: int = 0              # cells of the current suite that the board holds from another version of it
    not_run: int = 0            # cells of the current suite that the board does not hold

    def note(self, board: Path) -> str | None:
        """One line saying that the board was verified against an earlier version of its suite (None: the current)."""
        if self.commit is None:
            return None
        return (f"{board}: the suite file changed since this board was rendered; verified against "
                f"{self.suite.path.name} as of commit {self.commit[:12]} (the version it was rendered from). The "
                f"current file makes {self.stale} of its cell(s) stale and plans {self.not_run} it does not hold: "
                f"run the suite and publish the board again to show the current version's numbers")


def _git_text(repo: Path, commit: str, file: str) -> str | None:
    """``git show COMMIT:FILE`` in the checkout holding ``repo`` (None: no git, no such commit or file)."""
    try:
        out = subprocess.run(["git", "-C", str(repo), "show", f"{commit}:{file}"], capture_output=True, timeout=30,
                             check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    try:
        return out.stdout.decode()
    except UnicodeDecodeError:
        return None


def published_suite(suite: Suite, board: Path) -> PublishedSuite:
    """The suite ``board`` was rendered from, its outside submissions' additions appended (as ``board_suite``)."""
    if not (board / "results.json").exists():
        return PublishedSuite(suite)
    header = BoardResults.from_dict(board_results(board)).header
    recorded = header.suite_sha256
    commit = header.rendered_with.git_commit or ""
    if not recorded or recorded == suite.text_sha256 or not commit or not header.suite_file:
        return PublishedSuite(suite)
    text = _git_text(suite.path.parent, commit, header.suite_file)
    if text is None or hashlib.sha256(text.encode()).hexdigest() != recorded:
        return PublishedSuite(suite)
    old = suite_from_text(text + "".join(board_additions(board)), suite)
    old = dataclasses.replace(old, text_sha256=recorded)
    now = collect(suite, board)
    return PublishedSuite(old, commit, stale=len(now.stale), not_run=len(now.not_run))
