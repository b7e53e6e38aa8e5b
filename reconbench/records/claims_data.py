"""The tables of the claims data file (``benchmarks/claims.toml``, read by ``claims/records.py``): the papers, the
claims suites' cost notes, and the claim records (each checked field by field there, for its own messages)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from reconbench.records.record import Record


@dataclass(frozen=True)
class PaperEntry(Record):
    """A ``[papers.KEY]`` table: the paper's title, its short name and the file of the papers' folder holding its
    text (each required: empty reads as missing)."""

    title: str = ""
    short: str = ""
    text: str = ""


@dataclass(frozen=True)
class SuiteCostNote(Record):
    """A ``[suites.NAME]`` table: what a claims suite costs to run, in words (shown where no board measured it)."""

    cost: str = "not estimated"


@dataclass(frozen=True)
class ClaimsData(Record):
    """The file's top-level tables."""

    papers: Mapping[str, PaperEntry] = field(default_factory=dict)
    claims: list[Mapping[str, Any]] = field(default_factory=list)
    suites: Mapping[str, SuiteCostNote] = field(default_factory=dict)
