"""The commit a bench's code ran at, as its records name it: the one the caller names in
``RECONBENCH_SLICE_COMMIT`` when it is set, else what git says of the checkout (``reconbench.provenance.git_commit``,
``-dirty`` where the code differs from it).

The caller's word wins because the git metadata beside a copy of the code need not be the code's: a lent device
machine gets a copy of the working tree whose git metadata can name an older commit (the one its session began at),
clean, while the files are a later commit's. The pack's manifest, every cell record's provenance and the invocation
record take the commit from here, so a slice's pack and its cells name one commit, its own."""

from __future__ import annotations

import os
from typing import Any

from reconbench.provenance import git_commit

#: the environment variable naming the commit a slice's code ran at (``benchmarks/gpu/slice.sh`` passes it on)
COMMIT_ENV = "RECONBENCH_SLICE_COMMIT"


def ran_commit() -> str | None:
    """The commit the code of this process ran at: ``RECONBENCH_SLICE_COMMIT`` where set (not blank), else git's
    reading of the checkout (None outside one)."""
    named = os.environ.get(COMMIT_ENV, "").strip()
    return named or git_commit()


def with_ran_commit(prov: dict[str, Any]) -> dict[str, Any]:
    """``prov`` (a ``reconbench.provenance.provenance`` dict) naming :func:`ran_commit` as its ``git_commit``."""
    prov["git_commit"] = ran_commit()
    return prov
