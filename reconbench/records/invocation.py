"""One ``reconbench bench`` invocation of a results folder (``invocations/NNN.json``; the file carries no version
stamp)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from reconbench.records.record import FileFormat, Record, unchanged


@dataclass(frozen=True)
class Invocation(Record):
    """One ``reconbench bench`` invocation of a results folder (``invocations/NNN.json``), as ``bench/runner.py``
    builds it (fields in the order it writes them)."""

    invocation: int | None = None
    command: str | None = None
    started: str | None = None
    status: str | None = None
    elapsed_seconds: float | None = None
    suite: str | None = None
    suite_sha256: str | None = None
    only: list[str] | None = None
    device: str | None = None
    dtype: str | None = None
    executor: Mapping[str, Any] | None = None
    reconbench_version: str | None = None
    git_commit: str | None = None
    torch_version: str | None = None
    machine: Mapping[str, Any] | None = None
    cells_run: list[str] | None = None
    cells_skipped: int | None = None
    cells_lost: list[str] | None = None
    #: an invocation merged from a slice's pack (``bench --unpack``): the pack's manifest fields and its sha256
    slice_pack: Mapping[str, Any] | None = None


#: the door of an invocation file: it carries no version stamp (its first form is the one it has)
INVOCATION_FILE: FileFormat[Invocation] = FileFormat(Invocation, None, {None: unchanged})
