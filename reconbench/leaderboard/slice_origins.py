"""Where each cell of a results folder came from, for a board that grows over slices (docs/slices.md, "Publishing a
board that grows over slices"): a cell merged by ``bench --unpack`` ran at its pack's commit (the folder's
``invocations/NNN.json`` of that merge names the pack's manifest sha256, its commit and the seal of every cell it
brought); a cell whose search runs came back in groups and were evaluated at a merge (``evaluated``: their seals)
was scored at the commit its record names, the merging checkout's; any other cell ran at the commit its own record
names. The publish rule and the board's
``header.cell_commits`` are read from here."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from reconbench.errors import ReconbenchError
from reconbench.records import CellRecord, CommitCells, Invocation


@dataclass(frozen=True)
class PackOrigin:
    """The merge of one slice pack into the results folder (``invocations/NNN.json`` with ``slice_pack``)."""

    file: str            # the invocation file's name in the results folder, e.g. ``003.json``
    commit: str          # the commit the slice ran at (the pack's manifest), ``None`` when it named none
    manifest_sha256: str
    device: str
    #: the cell was evaluated at this merge from its gathered search runs: its record's commit, the merging
    #: checkout's, is the one it was scored at (``commit`` is then the last pack's)
    evaluated: bool = False


@dataclass(frozen=True)
class CellOrigin:
    """The commit a cell ran at, and the pack that brought it (None: run in the results folder itself)."""

    commit: str
    pack: PackOrigin | None


def _unknown(commit: str) -> bool:
    return commit in ("", "None") or commit.endswith("-dirty")


def pack_origins(results: Path) -> dict[tuple[str, str], PackOrigin]:
    """The cells that merged packs brought, by (cell id, record seal); an invocation file that does not read is left
    out (its cells then count as run in the folder)."""
    out: dict[tuple[str, str], PackOrigin] = {}
    for path in sorted((results / "invocations").glob("*.json")) if (results / "invocations").is_dir() else []:
        try:
            inv = Invocation.from_dict(json.loads(path.read_text()))
        except (OSError, UnicodeDecodeError, ValueError, ReconbenchError):
            continue
        pack = inv.slice_pack
        if not isinstance(pack, Mapping) or not isinstance(pack.get("cells"), Mapping):
            continue
        origin = PackOrigin(file=path.name, commit=str(pack.get("commit")),
                            manifest_sha256=str(pack.get("manifest_sha256", "")), device=str(pack.get("device")))
        for cid, seal in pack["cells"].items():
            out[(str(cid), str(seal))] = origin
        evaluated = pack.get("evaluated")
        for cid, seal in evaluated.items() if isinstance(evaluated, Mapping) else ():
            out[(str(cid), str(seal))] = replace(origin, evaluated=True)
    return out


def packed_cells(records: Mapping[str, CellRecord], results: Path) -> dict[str, PackOrigin]:
    """The pack that brought each cell of ``records`` merged by ``bench --unpack`` (matched by id and seal)."""
    packs = pack_origins(results)
    return {cid: pack for cid, rec in records.items()
            if (pack := packs.get((cid, str(rec.record_sha256)))) is not None}


def cell_origins(records: Mapping[str, CellRecord], packs: Mapping[str, PackOrigin]) -> dict[str, CellOrigin]:
    """Each cell's commit (its pack's, else its record's) and pack (see the module's docstring)."""
    return {cid: CellOrigin(commit=pack.commit if (pack := packs.get(cid)) is not None and not pack.evaluated
                            else rec.git_commit, pack=pack)
            for cid, rec in records.items()}


def commit_cells(origins: Mapping[str, CellOrigin]) -> list[CommitCells] | None:
    """The board's ``header.cell_commits``: per commit, its cells (count and ids) and the packs (manifest sha256)
    that brought them; None when no cell came from a pack (a board run in one folder keeps its header as it was)."""
    if not any(o.pack is not None for o in origins.values()):
        return None
    by: dict[str, dict[str, CellOrigin]] = {}
    for cid, o in origins.items():
        by.setdefault(o.commit, {})[cid] = o
    return [CommitCells(commit=c, cells=len(os),
                        packs=sorted({o.pack.manifest_sha256 for o in os.values() if o.pack is not None}),
                        cell_ids=sorted(os))
            for c, os in sorted(by.items())]


#: the problems whose text carries its own fix (a pack's cells): the caller adds the fix of a folder's cells to the rest
PACK_PROBLEMS = ("slice packs ran at", "cells whose record names another commit", "cells evaluated at a merge")


def publish_problems(records: Mapping[str, CellRecord], origins: Mapping[str, CellOrigin],
                     tree_commit: str | None) -> list[str]:
    """What forbids publishing: the checkout is not clean; a pack ran at a dirty or unknown commit, or its cell's
    record names another commit than its pack; the cells run in the folder itself span several commits or are not
    at this checkout's (every one of them is re-scored and rendered here, as before slices existed)."""
    problems = []
    if tree_commit is None or tree_commit.endswith("-dirty"):
        problems.append(f"this checkout is {'not a git checkout' if tree_commit is None else 'dirty'}")
    packed = {cid: o for cid, o in origins.items() if o.pack is not None}
    bad_packs = sorted({f"invocations/{o.pack.file} at {o.commit}" for o in packed.values()
                        if o.pack is not None and not o.pack.evaluated and _unknown(o.commit)})
    if bad_packs:
        problems.append(f"slice packs ran at a dirty or unknown commit ({', '.join(bad_packs)}): remove their cells "
                        "and run them again in a slice from a clean commit (benchmarks/gpu/slice.sh sets "
                        "RECONBENCH_SLICE_COMMIT)")
    merged_dirty = sorted({f"invocations/{o.pack.file} at {o.commit}" for o in packed.values()
                           if o.pack is not None and o.pack.evaluated and _unknown(o.commit)})
    if merged_dirty:
        problems.append(f"cells evaluated at a merge from a dirty or unknown tree ({', '.join(merged_dirty)}): remove "
                        "them and their runs' merge, and --unpack the packs again from a clean checkout")
    mismatched = sorted(cid for cid, o in packed.items()
                        if o.pack is not None and not o.pack.evaluated
                        and records[cid].ran.git_commit not in (None, o.commit))
    if mismatched:
        problems.append(f"cells whose record names another commit than their pack's ({', '.join(mismatched[:5])}): "
                        "remove them and merge their packs again")
    direct = sorted({o.commit for o in origins.values() if o.pack is None})
    dirty = [c for c in direct if _unknown(c)]
    if dirty:
        problems.append(f"cells ran from a dirty or unknown tree ({', '.join(dirty)})")
    if len(direct) > 1:
        problems.append(f"cells ran at {len(direct)} commits ({', '.join(c[:12] for c in direct)})")
    elif direct and tree_commit and direct[0] != tree_commit.removesuffix("-dirty"):
        problems.append(f"cells ran at {direct[0][:12]}, this checkout is {tree_commit[:12]}")
    return problems
