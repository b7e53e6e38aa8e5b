"""A submission packed by ``leaderboard submit`` (``reconbench-submission/1``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from reconbench.records.record import FileFormat, Record, unchanged


@dataclass(frozen=True)
class SubmissionBoard(Record):
    """The board a submission is for: its suite and the sha256 of the suite's text."""

    suite: str | None = None
    suite_sha256: str | None = None


@dataclass(frozen=True)
class SubmissionProvenance(Record):
    """Who packed a submission, with which commits, versions, machines and commands."""

    contributor: str | None = None
    git_commits: list[str] | None = None
    reconbench_versions: list[str] | None = None
    machines: list[str] | None = None
    commands: list[Any] | None = None
    packed: str | None = None


@dataclass(frozen=True)
class SubmissionFile(Record):
    """A submission packed by ``leaderboard submit`` (``leaderboard/submit.py``): the board it is for, the suite
    addition its cells ran with, its slim entries (kept as stored: each is sealed), their protocols and candidates."""

    SCHEMA = "reconbench-submission/1"

    format: str | None = None
    board: SubmissionBoard = SubmissionBoard()
    suite_sha256: str | None = None
    suite_addition: str | None = None
    entries: list[Any] = field(default_factory=list)
    protocols: Mapping[str, Any] = field(default_factory=dict)
    cards: Mapping[str, Any] = field(default_factory=dict)
    candidates: Mapping[str, str] = field(default_factory=dict)
    provenance: SubmissionProvenance = SubmissionProvenance()
    record_sha256: str | None = None

    def candidates_of(self, cell_id: str) -> str | None:
        return self.candidates[cell_id] if cell_id in self.candidates else None


#: the door of a packed submission
SUBMISSION_FILE: FileFormat[SubmissionFile] = FileFormat(SubmissionFile, "format", {SubmissionFile.SCHEMA: unchanged},
                                                         fix="pack your results with `reconbench leaderboard submit`")
