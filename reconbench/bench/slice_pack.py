"""A slice's pack: what leaves a device machine after a slice, and how it is merged into a results folder.

A device machine returns at most :data:`MAX_FILES` files of at most :data:`MAX_FILE_BYTES` each, so a pack is:

    manifest.json                 suite, suite file sha256, commit, device, the cells it holds, the cells that
                                  remain, whether the slice ended, and the sha256 and size of every other file
    records-<sha>.tar.xz          the cells' JSON records, the model cards of their targets, the slice's invocation
                                  record, the card JSON beside each travelling final training state, the figure
                                  pairs of every finished cell (``pairs/<cell id>.safetensors``: the float16
                                  candidates its reconstructions figure draws, ``reconbench.leaderboard.
                                  figure_pairs``) (several archives when one would be too large)
    candidates-<sha>.safetensors  the pooled candidates of the cells the suite's ``store_candidates`` keeps, in
                                  float16, keyed ``<cell id>/<tensor>`` (absent when no cell keeps them)

(``<sha>``: the first 12 hex digits of the file's sha256.)

Candidates of other cells do not leave the device (their figure pairs do): each cell was evaluated there and its
record holds the scores. ``unpack`` checks every file against the manifest and the suite file's hash before anything
is written, refuses a cell that the results folder already holds with other numbers, and writes the cells, cards,
candidates (as float32 holding the float16 values, marked so in the file's metadata), figure pairs and the
invocation record.
"""

from __future__ import annotations

import hashlib
import io
import json
import lzma
import os
import re
import shutil
import sys
import tarfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load, save

from reconbench.bench.card_clash import refuse_other_weights
from reconbench.bench.cells import expand
from reconbench.bench.runner import (
    STATUS_OK,
    cell_path,
    invocation_path,
    is_finished,
    load_cells,
    next_invocation_number,
    write_suite_file,
)
from reconbench.bench.seal import seal_problem
from reconbench.bench.slice_commit import COMMIT_ENV as COMMIT_ENV
from reconbench.bench.slice_commit import ran_commit
from reconbench.bench.suite import Suite
from reconbench.errors import ReconbenchError
from reconbench.provenance import (
    folder_lock,
    read_json,
    save_tensors_atomic,
    write_bytes_atomic,
    write_json,
    write_text_atomic,
)
from reconbench.records.cell import CELL_FILE, CellRecord
from reconbench.records.finished_ledger import (
    FINISHED_LEDGER_FILE,
    FinishedLedger,
    LedgerCard,
    LedgerCell,
    LedgerRuns,
    LedgerState,
)
from reconbench.records.measured_rate import MeasuredRate
from reconbench.records.record import FileFormat, R
from reconbench.records.slice_manifest import (
    SLICE_MANIFEST_FILE,
    DeferredCell,
    LeftOutGroup,
    LeftOutState,
    PackCandidates,
    PackedCard,
    PackedState,
    PackFile,
    RunGroup,
    SliceCosts,
    SliceManifest,
    StoppedCell,
)
from reconbench.targets.resumable import CARD_SUFFIX, card_beside, state_step

PACK_FORMAT = SliceManifest.SCHEMA
LEDGER_FORMAT = FinishedLedger.SCHEMA
#: the ledger ``unpack`` writes into the results folder: the cells finished there, by id, with their keys; a slice
#: on another machine reads it (``--finished``) instead of the records, which may not fit what travels
LEDGER_FILE = "finished.json"
MANIFEST = "manifest.json"
#: what a device machine returns: at most 8 files of at most 16 MiB each
MAX_FILES, MAX_FILE_BYTES = 8, 16 * 1024 * 1024
#: the precision candidates travel in
TRAVEL_DTYPE = torch.float16
_FILE_NAME = re.compile(r"^(records-[0-9a-f]{12}\.tar\.xz|(candidates|training|runs)-[0-9a-f]{12}\.safetensors"
                        r"|training-[0-9a-f]{12}\.part)$")
#: a training state larger than this travels split into parts of at most this many bytes (the manifest lists each
#: part with its sha256, ``unpack`` joins them and checks the whole state's sha256)
STATE_PART_BYTES = MAX_FILE_BYTES
#: where ``unpack`` keeps the training states of targets still in training, in the results folder (the ledger
#: names them; a slice's ``--finished`` continues from them)
STATES_FOLDER = "training"
_STATE_NAME = re.compile(r"^[0-9a-f]{16}\.safetensors$")
#: the records archive's member holding the card JSON beside a travelling final state
_CARD_MEMBER = re.compile(r"^training/([0-9a-f]{16})\.card\.json$")
_MEMBER = re.compile(r"^(cells/[A-Za-z0-9._-]+\.json|targets/[A-Za-z0-9._-]+\.json|invocation\.json"
                     r"|runs/[A-Za-z0-9._-]+/run-[0-9]{3}\.json|training/[0-9a-f]{16}\.card\.json"
                     r"|pairs/[A-Za-z0-9._-]+\.safetensors)$")
#: the records archive's member holding a cell's figure pairs (``reconbench.leaderboard.figure_pairs``)
_PAIRS_MEMBER = re.compile(r"^pairs/([A-Za-z0-9._-]+)\.safetensors$")
#: the tensors of a search run's file (``reconbench.runs.execute``); each travels, floats as float32 where exact
RUN_TENSORS = ("candidates", "labels", "x0", "multipliers")


class PackError(ReconbenchError):
    """A pack that cannot be written or merged; the message names the file and the fix."""


def _decoded(door: FileFormat[R], data: object, source: str | Path) -> R:
    """``data`` read by ``door`` strictly, its one-line error raised as a :class:`PackError`."""
    try:
        return door.decode(data, source)
    except PackError:
        raise
    except ReconbenchError as exc:
        raise PackError(str(exc)) from None


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# -- writing -------------------------------------------------------------------------------------------------
def _archive(members: Sequence[tuple[str, bytes]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:xz", preset=6) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _archives(members: Sequence[tuple[str, bytes]]) -> list[bytes]:
    """The members in as few xz archives as keep each within the size limit (split in halves until they fit)."""
    data = _archive(members)
    if len(data) <= MAX_FILE_BYTES:
        return [data]
    if len(members) == 1:
        raise PackError(f"{members[0][0]} alone compresses to {len(data):,} bytes, more than a pack file may hold "
                        f"({MAX_FILE_BYTES:,}); the cell stays in the results folder: copy it back another way")
    half = len(members) // 2
    return _archives(members[:half]) + _archives(members[half:])


def sample_cells(suite: Suite, all_cells: Sequence[str]) -> list[str]:
    """The cells of the suite whose candidates travel, whichever slice runs them: its ``sample_cells``, then
    ``store_candidates`` more (all with ``store_candidates = "all"``) in a fixed order (the sha256 of the id), so
    that the slices of a suite together bring back what one board keeps."""
    k = suite.leaderboard.store_candidates
    named = [c for c in suite.leaderboard.sample_cells if c in all_cells]
    rest = sorted((c for c in all_cells if c not in named), key=lambda c: hashlib.sha256(c.encode()).hexdigest())
    return named + (rest if k is None else rest[:k])


def _candidates_file(out: Path, cells: Iterable[str], limit: int = MAX_FILE_BYTES) -> tuple[bytes | None, list[str]]:
    """The sampled cells' candidates in float16 (labels and run ids unchanged) as one safetensors file, with as many
    of the cells, in order, as keep it within the size limit (``limit``: a suite's ``candidates_max_bytes`` below a
    pack file's, what its board would keep); the file (None: no cell) and the cells kept."""
    from safetensors.torch import load_file

    parts: list[tuple[str, dict[str, torch.Tensor]]] = []
    for cid in cells:
        src = out / "work" / cid / "candidates.safetensors"
        if src.exists():
            parts.append((cid, {f"{cid}/{k}": (v.to(TRAVEL_DTYPE) if v.is_floating_point() else v).contiguous()
                                for k, v in load_file(str(src)).items()}))
    kept: list[tuple[str, dict[str, torch.Tensor]]] = []
    for part in parts:   # the tensors' bytes first (cheap), then the file itself (its header counts too)
        if sum(v.numel() * v.element_size() for _, p in [*kept, part] for v in p.values()) <= limit:
            kept.append(part)
    while kept:
        data = save({k: v for _, p in kept for k, v in p.items()},
                    metadata={"dtype": str(TRAVEL_DTYPE).removeprefix("torch.")})
        if len(data) <= min(limit + 64 * 1024, MAX_FILE_BYTES):
            return data, [cid for cid, _ in kept]
        kept.pop()
    return None, []


#: the sampled cells whose candidates this process has said do not travel (the pack is rewritten after every cell)
_LEFT_SAID: set[str] = set()


def _say_candidates_left(cells: Sequence[str], out: Path, limit: int = MAX_FILE_BYTES) -> None:
    """One ``slice:`` line on stderr, once per cell in a process, for sampled cells whose candidates stay on the
    machine: their float16 tensors pass a pack file, or no file is left for them; the board then stores none of
    theirs (no re-scoring sample, no reconstructions figure of them)."""
    from safetensors.torch import load_file

    new = [c for c in cells if c not in _LEFT_SAID]
    if not new:
        return
    _LEFT_SAID.update(new)
    sizes = []
    for cid in new:
        src = out / "work" / cid / "candidates.safetensors"
        if src.exists():
            travel = sum(v.numel() * (TRAVEL_DTYPE.itemsize if v.is_floating_point() else v.element_size())
                         for v in load_file(str(src)).values())
            sizes.append(f"{cid} ({travel / 2**20:.1f} MiB in float16)")
        else:
            sizes.append(cid)
    room = (f"a pack file holds {MAX_FILE_BYTES / 2**20:.0f} MiB" if limit >= MAX_FILE_BYTES else
            f"the suite's candidates_max_bytes keeps {limit:,} bytes")
    print(f"slice: the candidates of {len(new)} sampled cell(s) stay on this machine ({room}, shared with the other "
          f"sampled cells): {', '.join(sizes)}; their figure pairs travel instead", file=sys.stderr, flush=True)


#: the cells whose figure pairs this process has said it could not take (the pack is rewritten after every cell)
_PAIRS_SAID: set[str] = set()


def figure_pairs_members(suite: Suite, out: Path, cells: Sequence[str],
                         data_root: str | None = None) -> list[tuple[str, bytes]]:
    """The records archive's ``pairs/<cell id>.safetensors`` of every finished cell of ``cells``: the candidates its
    reconstructions figure draws, in float16 (``reconbench.leaderboard.figure_pairs``), taken from its pooled
    candidates in ``out`` once (kept in ``work/<cell>/figure_pairs.safetensors``). A cell whose pairs cannot be
    taken (its candidates or its training data not at hand) is named in one ``slice:`` line and travels without
    them: its numbers are in its record."""
    from reconbench.leaderboard.figure_pairs import pairs_from_results

    members = []
    for cid in cells:
        try:
            rec = CELL_FILE.read(cell_path(out, cid))
            if rec.status != STATUS_OK:
                continue
            path = pairs_from_results(out, rec, suite.leaderboard.sample_images, data_root)
        except Exception as exc:   # noqa: BLE001 - a picture must not cost the slice its cells: say why
            if cid not in _PAIRS_SAID:
                _PAIRS_SAID.add(cid)
                print(f"slice: no figure pairs of {cid} ({type(exc).__name__}: {exc}); its record travels without "
                      "them", file=sys.stderr, flush=True)
            continue
        members.append((f"pairs/{cid}.safetensors", path.read_bytes()))
    return members


def slice_commit() -> str | None:
    """The commit the slice's code ran at (``reconbench.bench.slice_commit``: ``RECONBENCH_SLICE_COMMIT`` wins over
    the git metadata beside the code, which on a device machine can name an older commit)."""
    return ran_commit()


def _content_name(stem: str, suffix: str, data: bytes) -> str:
    return f"{stem}-{hashlib.sha256(data).hexdigest()[:12]}{suffix}"


def write_pack(pack: Path, suite: Suite, out: Path, *, cells: Sequence[str], remaining: Sequence[str],
               invocation: int, device: str, dtype: str, deferred: Sequence[DeferredCell] = (),
               deadline: float | None = None, elapsed: float | None = None, complete: bool = True,
               costs: SliceCosts | None = None, states: Sequence[Path] = (),
               max_files: int = MAX_FILES, measured: Sequence[MeasuredRate] = (),
               stopped: Sequence[StoppedCell] = (), groups: Sequence[RunGroup] = (),
               data_root: str | None = None) -> SliceManifest:
    """Write the pack of ``cells`` (ids of cells this slice wrote to ``out``) into ``pack``, replacing the pack a
    previous call wrote there; returns the manifest.

    A slice rewrites its pack after every cell (``complete`` False), so that a command killed at its time limit
    still leaves the cells it finished. Each rewrite is safe to interrupt: data files are named by their content and
    written first, the manifest replaces the old one in one rename, and only then are the files it no longer names
    removed; at every moment the manifest names files that exist with its sha256 (``unpack`` ignores leftovers).
    ``states``: training states (``reconbench.targets.resumable``, named ``<recipe key>.safetensors``) of targets
    whose training this slice began or continued, each its own file ``training-<sha>.safetensors`` (or its parts,
    ``training-<sha>.part``, when larger than :data:`STATE_PART_BYTES`). ``max_files``: the pack's files, the
    manifest included (fewer than :data:`MAX_FILES` when something else comes back beside the pack: the probe's
    JSON). ``measured``: what the slice measured of every cell that ran, finished or not; ``stopped``: the cells
    whose attack the deadline stopped (they are not in ``cells``: they stay to do). ``groups``: search runs of cells
    split across slices (:func:`_run_files`), in the files the records, candidates and states leave. ``data_root``:
    the training data the cells' figure pairs are taken with (:func:`figure_pairs_members`)."""
    records = {cid: CELL_FILE.read(cell_path(out, cid)) for cid in cells}
    members: list[tuple[str, bytes]] = []
    cards: set[str] = set()
    for cid in cells:
        members.append((f"cells/{cid}.json", cell_path(out, cid).read_bytes()))
    members += figure_pairs_members(suite, out, cells, data_root)
    for cid in cells:
        key = records[cid].target.recipe_key
        card = out / "targets" / f"{key}.json"
        if key and key not in cards and card.exists():
            cards.add(key)
            members.append((f"targets/{key}.json", card.read_bytes()))
    if invocation_path(out, invocation).exists():
        members.append(("invocation.json", invocation_path(out, invocation).read_bytes()))
    archives = max(len(_archives(members)) if members else 0, 1)   # the groups' run records join one of them
    files: dict[str, bytes] = {}
    ok = [c for c in cells if records[c].status == STATUS_OK]
    sample = sample_cells(suite, [c.cell_id for c in expand(suite)])
    wanted = [c for c in sample if c in ok]
    limit = MAX_FILE_BYTES if suite.leaderboard.candidates_max_bytes is None else min(
        suite.leaderboard.candidates_max_bytes, MAX_FILE_BYTES)   # what the board would keep of them
    candidates, sampled = _candidates_file(out, wanted, limit)
    if candidates is not None and archives + 2 <= max_files:
        files[_content_name("candidates", ".safetensors", candidates)] = candidates
    else:
        sampled = []
    _say_candidates_left([c for c in wanted if c not in sampled], out, limit)
    travelling: list[PackedState] = []
    left_out: list[LeftOutState] = []
    for state in states:
        data = state.read_bytes()
        parts = [data[i:i + STATE_PART_BYTES] for i in range(0, len(data), STATE_PART_BYTES)] or [data]
        if archives + len(files) + len(parts) + 1 > max_files:   # the cells matter more: they still go
            left_out.append(LeftOutState(recipe_key=state.stem, bytes=len(data),
                                         reason=f"no file left of the {max_files} for its {len(parts)} part(s)"))
            continue
        step, dtype_name = state_step(state)
        beside: dict[str, PackedCard] = {}
        if card_beside(state).is_file():   # a final state: its card's JSON travels with it, in the records archive
            text = card_beside(state).read_bytes()
            member = f"{STATES_FOLDER}/{state.stem}{CARD_SUFFIX}"
            members.append((member, text))
            beside["card"] = PackedCard(member=member, sha256=hashlib.sha256(text).hexdigest())
        if len(parts) == 1:
            name = _content_name("training", ".safetensors", data)
            files[name] = data
            entry = PackedState.written(recipe_key=state.stem, step=step, dtype=dtype_name, name=name, **beside)
        else:   # split: each part named by its content, in order; the whole state's sha256 checks the join
            names = [_content_name("training", ".part", part) for part in parts]
            files.update(zip(names, parts, strict=True))
            entry = PackedState.written(recipe_key=state.stem, step=step, dtype=dtype_name, parts=names,
                                        bytes=len(data), sha256=hashlib.sha256(data).hexdigest(), **beside)
        travelling.append(entry)
    # the groups' runs take the files left: a run that finds none runs again in a later slice
    run_files, packed_groups, groups_left_out = _run_files(out, groups, max_files - 1 - archives - len(files))
    for data in run_files:
        files[_content_name("runs", ".safetensors", data)] = data
    recipe_keys = {c.cell_id: c.recipe.key() for c in expand(suite)}
    for group in packed_groups:
        key = recipe_keys.get(group.cell_id, "")
        card = out / "targets" / f"{key}.json"
        if key and key not in cards and card.exists():   # the merge evaluates the cell from its card
            cards.add(key)
            members.append((f"targets/{key}.json", card.read_bytes()))
        for k in group.runs:
            members.append((f"runs/{group.cell_id}/run-{k:03d}.json", _run_path(out, group.cell_id, k, ".json")
                            .read_bytes()))
    for data in _archives(members) if members else []:
        files[_content_name("records", ".tar.xz", data)] = data
    if len(files) + 1 > max_files:
        raise PackError(f"the slice's records need {len(files)} archives, more than a pack may hold; its cells stay in "
                        f"{out}: run shorter slices (a smaller --deadline)")
    pack.mkdir(parents=True, exist_ok=True)
    listed = []
    for name, data in files.items():
        if not (pack / name).exists():
            tmp = pack / f".{name}.tmp"
            tmp.write_bytes(data)
            tmp.replace(pack / name)
        listed.append(PackFile(name=name, bytes=len(data), sha256=hashlib.sha256(data).hexdigest()))
    optional: dict[str, Any] = {}
    if left_out:   # their training starts again on the next machine: say so rather than lose the slice's cells
        optional["training_left_out"] = left_out
    if costs is not None:   # each started cell's estimate, and the (units, seconds) measured per phase
        optional["costs"] = costs
    if measured:   # every phase of every cell that ran here, finished or stopped
        optional["measured"] = list(measured)
    if stopped:
        optional["stopped"] = list(stopped)
    if packed_groups:
        optional["groups"] = packed_groups
    if groups_left_out:   # a later slice runs them again: say so rather than lose the slice's cells
        optional["groups_left_out"] = groups_left_out
    if any(g.starts for g in packed_groups):   # the merge draws those starts again: with which torch they were drawn
        optional["torch"] = torch.__version__
    manifest = SliceManifest.written(
        format=PACK_FORMAT, suite=suite.name, suite_sha256=suite.text_sha256, commit=slice_commit(),
        device=device, dtype=dtype, created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), complete=complete,
        deadline_seconds=deadline, elapsed_seconds=elapsed, invocation=invocation, files=listed, cells=list(cells),
        candidates=PackCandidates(cells=sampled, dtype=str(TRAVEL_DTYPE).removeprefix("torch.")),
        cells_remaining=list(remaining), deferred=list(deferred), training=travelling, **optional)
    write_json(pack / MANIFEST, manifest.to_dict())
    for old in pack.iterdir():
        if old.name not in files and old.name != MANIFEST and _FILE_NAME.match(old.name):
            old.unlink()
    return manifest


def _run_path(out: Path, cell_id: str, k: int, suffix: str) -> Path:
    return out / "work" / cell_id / "runs" / f"run-{k:03d}{suffix}"


def travel_tensor(t: torch.Tensor) -> torch.Tensor:
    """A run's tensor as it travels: float64 values that float32 holds exactly (an attack in float32 or TF32) as
    float32, half the bytes and the same numbers; others unchanged."""
    if t.dtype == torch.float64:
        f = t.to(torch.float32)
        if torch.equal(f.to(torch.float64), t):
            return f.contiguous()
    return t.contiguous()


def run_tensor_bytes(m: int, pixels: int, itemsize: int, *, starts: bool) -> list[int]:
    """The bytes of one run's tensors as they travel: ``m`` candidates of ``pixels`` values at ``itemsize`` bytes,
    their start the same where it travels (``starts``), labels and multipliers (int64 and float64, ``m`` each)."""
    images = m * pixels * itemsize
    return [images, *([images] if starts else []), m * 8, m * 8]


def runs_that_fit(tensor_bytes: Sequence[int], files: int, before: Sequence[Sequence[int]] = ()) -> int:
    """How many runs whose tensors have ``tensor_bytes`` (at their travel precision) fit in ``files`` pack files,
    filled as :func:`_run_files` fills them, after the runs ``before`` (each run's own tensor bytes, in the order
    they are packed: runs of other cells may be of other sizes)."""
    header = 64 * 1024
    if any(size + header > MAX_FILE_BYTES for size in tensor_bytes) or files <= 0:
        return 0

    def placed(used: list[int], tensors: Sequence[int]) -> list[int] | None:
        """The files' bytes with one more run's ``tensors`` placed greedily; None: they do not all fit."""
        trial = list(used)
        for size in tensors:
            slot = next((i for i, u in enumerate(trial) if u + size + header <= MAX_FILE_BYTES), None)
            if slot is None:
                if len(trial) >= files:
                    return None
                trial.append(0)
                slot = len(trial) - 1
            trial[slot] += size
        return trial

    used: list[int] = []
    for tensors in before:
        after = placed(used, tensors)
        if after is None:
            return 0   # the runs taken already fill the files (the packer leaves the rest out)
        used = after
    runs = 0
    while (after := placed(used, tensor_bytes)) is not None:
        used, runs = after, runs + 1
    return runs


def run_files_taken(before: Sequence[Sequence[int]]) -> int:
    """The pack files the runs ``before`` take (each run's own tensor bytes, in the order they are packed), filled
    as :func:`_run_files` fills them."""
    header = 64 * 1024
    used: list[int] = []
    for tensors in before:
        for size in tensors:
            slot = next((i for i, u in enumerate(used) if u + size + header <= MAX_FILE_BYTES), None)
            if slot is None:
                used.append(0)
                slot = len(used) - 1
            used[slot] += size
    return len(used)


def _run_files(out: Path, groups: Sequence[RunGroup], free: int) -> tuple[list[bytes], list[RunGroup],
                                                                          list[LeftOutGroup]]:
    """The groups' run tensors in at most ``free`` ``runs-<sha>.safetensors`` files of at most :data:`MAX_FILE_BYTES`,
    filled greedily run after run, keyed ``<cell id>/NNN/<tensor>``; a run whose tensors do not all fit (or a tensor
    larger than a file) is left out, with the runs after it. The files, the groups as packed (the runs that fit), and
    the runs left out by group."""
    from safetensors.torch import load_file

    files: list[dict[str, torch.Tensor]] = []
    sizes: list[int] = []
    packed: list[RunGroup] = []
    left_out: list[LeftOutGroup] = []
    header = 64 * 1024   # room for a file's JSON header (a few hundred bytes per tensor)
    full = False
    for group in groups:
        kept: list[int] = []
        dropped: list[int] = []
        dropped_bytes = 0
        for k in group.runs:
            path = _run_path(out, group.cell_id, k, ".safetensors")   # a failed run has its record alone
            loaded = load_file(str(path)) if path.exists() else {}
            tensors = [(f"{group.cell_id}/{k:03d}/{name}", travel_tensor(loaded[name])) for name in RUN_TENSORS
                       if name in loaded and not (name == "x0" and f"{k:03d}" in group.starts)]
            trial_files, trial_sizes = [dict(f) for f in files], list(sizes)
            fits = not full
            for key, t in tensors if fits else []:
                size = t.numel() * t.element_size()
                slot = next((i for i, used in enumerate(trial_sizes) if used + size + header <= MAX_FILE_BYTES), None)
                if slot is None:
                    if len(trial_files) >= free or size + header > MAX_FILE_BYTES:
                        fits = False
                        break
                    trial_files.append({})
                    trial_sizes.append(0)
                    slot = len(trial_files) - 1
                trial_files[slot][key] = t
                trial_sizes[slot] += size
            if fits:
                files, sizes = trial_files, trial_sizes
                kept.append(k)
            else:
                full = True   # the runs after it are left out too: a group's runs stay a run of numbers
                dropped.append(k)
                dropped_bytes += sum(t.numel() * t.element_size() for _, t in tensors)
        if kept:
            starts = {f"{k:03d}": group.starts[f"{k:03d}"] for k in kept if f"{k:03d}" in group.starts}
            packed.append(RunGroup(cell_id=group.cell_id, cell_key=group.cell_key, search_runs=group.search_runs,
                                   runs=kept, starts=starts, start_dtype=group.start_dtype if starts else None))
        if dropped:
            left_out.append(LeftOutGroup(cell_id=group.cell_id, runs=dropped, bytes=dropped_bytes,
                                         reason=f"no room in the {free} pack file(s) left to runs"))
    data = [save(f, metadata={"values": "float32 where that holds the run's float64 values exactly"})
            for f in files]
    return data, packed, left_out


# -- reading -------------------------------------------------------------------------------------------------
@dataclass
class UnpackReport:
    manifest: SliceManifest
    merged: list[str] = field(default_factory=list)     # cells written
    already: list[str] = field(default_factory=list)    # identical records already in the results folder
    candidates: list[str] = field(default_factory=list)
    pairs: list[str] = field(default_factory=list)   # cells whose figure pairs were written
    pairs_missing: dict[str, str] = field(default_factory=dict)   # cell id -> why its pairs were not taken here
    cards_kept: list[str] = field(default_factory=list)  # the folder's own card differed and was kept
    remaining: list[str] = field(default_factory=list)
    invocation: int | None = None
    states: list[str] = field(default_factory=list)   # recipe keys whose training state was taken
    measured: int = 0   # the measured rows added to the ledger
    runs: list[str] = field(default_factory=list)   # search runs written (``<cell id>/NNN``)
    partial: dict[str, tuple[int, int]] = field(default_factory=dict)   # cell id -> (runs held, runs in all)
    evaluated: list[str] = field(default_factory=list)   # cells evaluated here from their gathered runs
    not_evaluated: dict[str, str] = field(default_factory=dict)   # cell id -> why its gathered runs were not


def read_manifest(pack: Path) -> SliceManifest:
    """A pack's manifest, read strictly (a file of another format, or hand-edited, is a one-line error)."""
    fix = "fetch the slice's whole pack folder again (its manifest.json names every file)"
    data = read_json(pack / MANIFEST, missing=fix, damaged=fix, error=PackError)
    return _decoded(SLICE_MANIFEST_FILE, data, pack / MANIFEST)


def verify_pack(pack: Path, suite: Suite) -> SliceManifest:
    """The manifest, once every file it names has its size and sha256, no other file is present (but the pack's own
    files an interrupted rewrite left), and the suite file is the one the slice ran; else a one-line error naming the
    file and the fix."""
    manifest = read_manifest(pack)
    names = {f.name for f in manifest.files}
    for f in manifest.files:
        path = pack / f.name
        if not _FILE_NAME.match(f.name):
            raise PackError(f"{pack / MANIFEST} names {f.name!r}, which is no file a pack holds; fetch the pack again")
        if not path.is_file():
            raise PackError(f"{path} is missing (its manifest lists it); fetch the slice's whole pack folder again")
        if path.stat().st_size != f.bytes or sha256_file(path) != f.sha256:
            raise PackError(f"{path} does not match the sha256 its manifest records (damaged or edited after the "
                            "slice wrote it); fetch the pack again, or run the slice again. Nothing was merged")
    extra = sorted(p.name for p in pack.iterdir() if p.name not in names | {MANIFEST} and not p.name.startswith(".")
                   and not _FILE_NAME.match(p.name))   # a pack's own files left by an interrupted rewrite: ignored
    if extra:
        raise PackError(f"{pack / extra[0]} is not named in the pack's manifest; a pack holds only the files its "
                        "manifest names: remove it, or fetch the pack again")
    if manifest.suite_sha256 != suite.text_sha256:
        raise PackError(f"the slice ran suite {manifest.suite!r} from a file with sha256 "
                        f"{manifest.suite_sha256[:12]}, but {suite.path} has {suite.text_sha256[:12]}; "
                        f"check out the suite file of commit {manifest.commit} and unpack again")
    return manifest


def _members(pack: Path, manifest: SliceManifest) -> dict[str, bytes]:
    members: dict[str, bytes] = {}
    for f in manifest.files:
        if not f.name.endswith(".tar.xz"):
            continue
        path = pack / f.name
        try:
            with tarfile.open(path, mode="r:xz") as tar:
                for info in tar.getmembers():
                    if not info.isfile() or not _MEMBER.match(info.name):
                        raise PackError(f"{path} holds {info.name!r}, which no pack writes; run the slice again")
                    fh = tar.extractfile(info)
                    assert fh is not None
                    members[info.name] = fh.read()
        except (tarfile.TarError, lzma.LZMAError, OSError) as exc:
            raise PackError(f"{path} is not a readable archive ({exc}); fetch the pack again") from None
    return members


def _candidates(pack: Path, manifest: SliceManifest) -> dict[str, dict[str, torch.Tensor]]:
    names = [f.name for f in manifest.files if f.name.startswith("candidates-")]
    if not names:
        return {}
    path = pack / names[0]
    try:
        flat = load(path.read_bytes())
    except (SafetensorError, ValueError, OSError) as exc:
        raise PackError(f"{path} is not a readable safetensors file ({exc}); fetch the pack again") from None
    by_cell: dict[str, dict[str, torch.Tensor]] = {}
    for name, tensor in flat.items():
        cid, _, key = name.rpartition("/")
        by_cell.setdefault(cid, {})[key] = tensor.to(torch.float32) if tensor.is_floating_point() else tensor
    return by_cell


def _cell_records(members: dict[str, bytes], manifest: SliceManifest, pack: Path) -> dict[str, tuple[bytes, CellRecord]]:
    records = {}
    for name, data in members.items():
        if not name.startswith("cells/"):
            continue
        try:
            raw = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise PackError(f"{pack}: {name} is not valid JSON ({exc}); run the slice again") from None
        rec = _decoded(CELL_FILE, raw, f"{pack}: {name}")
        if rec.record_sha256 is None or seal_problem(raw) is not None:
            raise PackError(f"{pack}: {name} is not sealed as the runner writes it; run the slice again")
        if rec.suite_sha256 != manifest.suite_sha256:
            raise PackError(f"{pack}: {name} was run with another suite file than its manifest names; run the slice again")
        if name != f"cells/{rec.cell_id}.json":
            raise PackError(f"{pack}: {name} holds the record of cell {rec.cell_id!r}; run the slice again")
        records[rec.cell_id] = (data, rec)
    if sorted(records) != sorted(manifest.cells):
        raise PackError(f"{pack}: the archived cells are not the cells its manifest lists; fetch the pack again")
    return records


def _pairs(members: Mapping[str, bytes], records: Mapping[str, tuple[bytes, CellRecord]], pack: Path) -> dict[str, bytes]:
    """The archived figure pairs by cell id, each of a cell the pack holds and readable as figure pairs of it."""
    from reconbench.leaderboard.figure_pairs import FigurePairs, PairsError

    out = {}
    for name, data in members.items():
        if (match := _PAIRS_MEMBER.match(name)) is None:
            continue
        cid = match.group(1)
        try:
            pairs = FigurePairs.from_bytes(data, f"{pack}: {name}")
        except PairsError as exc:
            raise PackError(str(exc).replace("take it again from the cell's candidates, or publish the board again",
                                              "fetch the pack again")) from None
        if cid not in records or pairs.cell_id != cid:
            raise PackError(f"{pack}: {name} holds figure pairs of {pairs.cell_id!r}, not of a cell the pack holds; "
                            "fetch the pack again")
        out[cid] = data
    return out


def _conflict(existing: CellRecord, rec: CellRecord) -> bool:
    """Whether a record already in the results folder forbids the slice's: a finished cell (same key, status ok)
    with other contents. A failed or stale record gives way; an identical one is merged already."""
    return (existing.record_sha256 != rec.record_sha256 and existing.status == STATUS_OK
            and existing.cell_key == rec.cell_key)


def unpack(pack: Path, suite: Suite, out: Path, keys: Mapping[str, str], data_root: str | None = None) -> UnpackReport:
    """Merge a verified pack into the results folder ``out``; ``keys``: the suite's cell keys by cell id (to say
    which remain). Nothing is written when any check fails. A cell whose search runs slices ran in groups is
    evaluated here once all are merged (``reconbench.bench.slice_gather``; ``data_root``: its training data)."""
    manifest = verify_pack(pack, suite)
    members = _members(pack, manifest)
    records = _cell_records(members, manifest, pack)
    pairs = _pairs(members, records, pack)
    candidates = _candidates(pack, manifest)
    _state_entries(pack, manifest)   # a split state that does not join is refused before anything is written
    cards = _state_cards(pack, manifest, members)   # and a travelling card that is not the manifest's
    before = _ledger(out)   # the rows and runs merged before: a ledger that does not read is refused here
    kept_rows = list(before.measured) if before is not None else []
    # checked, no run merged before contradicted, and the starts that did not travel drawn again
    runs = _group_runs(pack, manifest, members, out, keys, suite, data_root)
    report = UnpackReport(manifest=manifest)
    with folder_lock(out, "results"):
        for cid, (_, rec) in records.items():
            path = cell_path(out, cid)
            if path.exists():
                try:
                    raw = json.loads(path.read_text())
                except (OSError, UnicodeDecodeError, json.JSONDecodeError):
                    raw = {}   # an unreadable record gives way, as a failed one does
                existing = _decoded(CELL_FILE, raw, path) if raw else CellRecord()
                if existing.record_sha256 == rec.record_sha256:
                    report.already.append(cid)
                elif _conflict(existing, rec):
                    raise PackError(f"cell {cid} is already in {out} with other numbers; remove {path} to take the "
                                    "slice's record instead, or leave the slice unmerged. Nothing was merged")
        refuse_other_weights(out, members, pack)   # a card of other weights than the folder's (card_clash.py)
        if not (out / "suite.toml").exists():
            write_suite_file(out, suite)
        for name, data in members.items():
            if name.startswith("targets/"):
                dst = out / name
                if dst.exists() and dst.read_bytes() != data:
                    report.cards_kept.append(dst.stem)
                elif not dst.exists():
                    dst.parent.mkdir(parents=True, exist_ok=True)
                    write_text_atomic(dst, data.decode())
        for cid, (data, _rec) in records.items():
            if cid in report.already:
                continue
            tensors = candidates.get(cid)
            work = out / "work" / cid
            shutil.rmtree(work, ignore_errors=True)   # a replaced (failed, stale or interrupted) run's files
            if tensors is not None:
                work.mkdir(parents=True, exist_ok=True)
                tmp = work / ".candidates.safetensors.tmp"
                tmp.write_bytes(save(tensors, metadata={"values": "float16, as the slice's pack carried them"}))
                tmp.replace(work / "candidates.safetensors")
                report.candidates.append(cid)
            if cid in pairs:   # after the candidates: a kept pairs file is newer than the candidates it came from
                from reconbench.leaderboard.figure_pairs import PAIRS_FILE

                work.mkdir(parents=True, exist_ok=True)
                write_bytes_atomic(work / PAIRS_FILE, pairs[cid])
                report.pairs.append(cid)
            write_text_atomic(cell_path(out, cid), data.decode())
            report.merged.append(cid)
        report.states = _unpack_states(pack, manifest, out, cards)
        report.runs = _write_runs(out, runs)
        if (report.merged or report.runs) and "invocation.json" in members:
            number = next_invocation_number(out)
            inv = json.loads(members["invocation.json"])
            inv["slice_pack"] = {"created": manifest.created, "commit": manifest.commit, "device": manifest.device,
                                 "deadline_seconds": manifest.deadline_seconds,
                                 "elapsed_seconds": manifest.elapsed_seconds, "invocation": manifest.invocation,
                                 "manifest_sha256": sha256_file(pack / MANIFEST),
                                 # the seal of each cell merged: how a board tells the cells a pack brought
                                 "cells": {cid: records[cid][1].record_sha256 for cid in report.merged}}
            write_json(invocation_path(out, number), inv)
            report.invocation = number
        rows = kept_rows + [row for row in manifest.measured if row not in kept_rows]   # a pack merged twice: once
        report.measured = len(rows) - len(kept_rows)
        partial = _merged_partial(before, manifest.groups, out, keys)
        complete = [cid for cid, entry in partial.items() if len(entry.runs) >= entry.search_runs]
        if complete:   # every run of these cells is here: evaluated as an unsplit run would be
            from reconbench.bench.slice_gather import evaluate_gathered

            number = report.invocation if report.invocation is not None else max(next_invocation_number(out) - 1, 0)
            report.evaluated, report.not_evaluated = evaluate_gathered(
                suite, out, complete, device=manifest.device or suite.device, dtype=manifest.dtype or suite.dtype,
                invocation=number, data_root=data_root)
            _note_evaluated(out, report.invocation, report.evaluated)
            _pairs_of_evaluated(suite, out, report, data_root)
            partial = _merged_partial(before, manifest.groups, out, keys)
        report.partial = {cid: (len(entry.runs), entry.search_runs) for cid, entry in partial.items()}
        listed = _write_ledger(out, suite, keys, rows, partial).training
        for state in (out / STATES_FOLDER).glob("*.safetensors") if (out / STATES_FOLDER).exists() else []:
            if _STATE_NAME.match(state.name) and state.stem not in listed:
                state.unlink()   # every cell of that target is finished: its training state is needed no more
                card_beside(state).unlink(missing_ok=True)
    report.remaining = remaining_cells(out, keys)
    return report


def _pairs_of_evaluated(suite: Suite, out: Path, report: UnpackReport, data_root: str | None) -> None:
    """The figure pairs of the cells evaluated here from their gathered runs, taken from their pooled candidates as a
    slice takes them (every run is here: the same subset), beside them in ``work/<cell>/``."""
    from reconbench.leaderboard.figure_pairs import pairs_from_results

    for cid in report.evaluated:
        try:
            pairs_from_results(out, CELL_FILE.read(cell_path(out, cid)), suite.leaderboard.sample_images, data_root)
        except Exception as exc:   # noqa: BLE001 - the merge keeps the cell; the figure says what it lacks
            report.pairs_missing[cid] = f"{type(exc).__name__}: {exc}"
            continue
        report.pairs.append(cid)


def _note_evaluated(out: Path, invocation: int | None, evaluated: Sequence[str]) -> None:
    """Add to this merge's invocation record (``slice_pack.evaluated``) the seal of every cell evaluated here from its
    gathered search runs: a board tells them from cells run in the folder by it (they ran at this checkout's commit,
    which their records name; ``reconbench.leaderboard.slice_origins``)."""
    path = invocation_path(out, invocation) if invocation is not None else None
    if not evaluated or path is None or not path.exists():
        return
    inv = json.loads(path.read_text())
    seals = {}
    for cid in evaluated:
        seals[cid] = json.loads(cell_path(out, cid).read_text()).get("record_sha256")
    inv.setdefault("slice_pack", {})["evaluated"] = seals
    write_json(path, inv)


def _unpack_states(pack: Path, manifest: SliceManifest, out: Path, cards: Mapping[str, bytes]) -> list[str]:
    """The pack's training states into ``out/training/<recipe key>.safetensors`` (a state is taken unless the folder
    holds one of the same target at a later step), each with the card JSON that travelled beside it
    (``<recipe key>.card.json``; ``cards`` by recipe key: a state taken without one keeps none); the recipe keys
    taken."""
    taken = []
    for entry, key, names in _state_entries(pack, manifest):
        dst = out / STATES_FOLDER / f"{key}.safetensors"
        if dst.exists() and state_step(dst)[0] > entry.step:
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        tmp = dst.with_name(f".{dst.name}.tmp")
        with tmp.open("wb") as fh:
            for name in names:
                fh.write((pack / name).read_bytes())
        tmp.replace(dst)
        if key in cards:
            write_bytes_atomic(card_beside(dst), cards[key])
        else:   # a card kept beside another state of the target is not this one's
            card_beside(dst).unlink(missing_ok=True)
        taken.append(key)
    return taken


def _state_cards(pack: Path, manifest: SliceManifest, members: Mapping[str, bytes]) -> dict[str, bytes]:
    """The card JSON that travelled beside each of the manifest's training states (by recipe key), once each is in
    the records archive under its member name with the sha256 the manifest records; an archived card no state names
    is refused too."""
    cards: dict[str, bytes] = {}
    for entry in manifest.training:
        if entry.card is None:
            continue
        data = members.get(entry.card.member)
        match = _CARD_MEMBER.match(entry.card.member)
        if data is None or match is None or match.group(1) != entry.recipe_key:
            raise PackError(f"{pack / MANIFEST} names the card of training state {entry.recipe_key} as "
                            f"{entry.card.member!r}, which its records archive does not hold; fetch the pack again")
        if hashlib.sha256(data).hexdigest() != entry.card.sha256:
            raise PackError(f"{pack}: the card beside training state {entry.recipe_key} does not match the sha256 its "
                            "manifest records; fetch the pack again. Nothing was merged")
        cards[entry.recipe_key] = data
    stray = sorted(n for n in members if _CARD_MEMBER.match(n) and n not in
                   {e.card.member for e in manifest.training if e.card is not None})
    if stray:
        raise PackError(f"{pack}: the records archive holds {stray[0]}, which no training state of its manifest names; "
                        "fetch the pack again")
    return cards


def _state_entries(pack: Path, manifest: SliceManifest) -> list[tuple[PackedState, str, list[str]]]:
    """The manifest's training states, each with its recipe key and its file (or parts, in order), once a split
    state's parts join to its recorded size and sha256 (each part's own sha256 :func:`verify_pack` checked)."""
    out = []
    listed = {f.name for f in manifest.files}
    for entry in manifest.training:
        key = entry.recipe_key
        names = entry.files
        if not _STATE_NAME.match(f"{key}.safetensors") or not names or not all(
                _FILE_NAME.match(n) and n in listed for n in names):
            raise PackError(f"{pack / MANIFEST} names a training state {key!r} in {', '.join(names)!r}, which no pack "
                            "writes; fetch the pack again")
        if len(names) > 1:
            h, size = hashlib.sha256(), 0
            for name in names:
                data = (pack / name).read_bytes()
                h.update(data)
                size += len(data)
            if size != entry.bytes or h.hexdigest() != entry.sha256:
                raise PackError(f"{pack}: the {len(names)} parts of training state {key} do not join to the size and "
                                "sha256 its manifest records (a part missing, reordered or replaced); fetch the pack "
                                "again. Nothing was merged")
        out.append((entry, key, names))
    return out


def ledger_states(out: Path, keys_in_training: set[str] | None = None) -> dict[str, LedgerState]:
    """The training states ``out/training`` holds, as the ledger lists them (file relative to ``out``, sha256,
    step, and the card JSON kept beside a final state), of the targets ``keys_in_training`` (None: all)."""
    folder = out / STATES_FOLDER
    states = {}
    for path in sorted(folder.glob("*.safetensors")) if folder.exists() else []:
        if _STATE_NAME.match(path.name) and (keys_in_training is None or path.stem in keys_in_training):
            step, dtype_name = state_step(path)
            card = card_beside(path)
            beside = {"card": LedgerCard(file=f"{STATES_FOLDER}/{card.name}", sha256=sha256_file(card))} \
                if card.is_file() else {}
            states[path.stem] = LedgerState.written(file=f"{STATES_FOLDER}/{path.name}", sha256=sha256_file(path),
                                                    step=step, dtype=dtype_name, **beside)
    return states


def import_states(ledger: Path, cache_states: Path) -> list[str]:
    """Copy the training states a ledger lists (beside it, their sha256 checked) into ``cache_states``, where a
    slice continues them, each with the card JSON the ledger lists beside it (checked too), which lets the slice
    restore the target's card instead of rebuilding it; a state the cache holds at a later step is kept. The recipe
    keys copied."""
    fix = "pass the finished.json that `reconbench bench SUITE --unpack` wrote into the results folder"
    data = read_json(ledger, missing=fix, damaged=fix, error=PackError)
    copied = []
    carry = f"carry the results folder's {STATES_FOLDER}/ folder with the ledger (benchmarks/gpu/README.md)"
    for key, entry in _decoded(FINISHED_LEDGER_FILE, data, ledger).training.items():
        src = ledger.parent / entry.file
        if not _STATE_NAME.match(f"{key}.safetensors") or src.parent.name != STATES_FOLDER:
            raise PackError(f"{ledger} names a training state {key!r} at {src}, which no unpack writes; {fix}")
        if not os.path.lexists(src):
            continue   # not carried: states_not_carried names it, and the slice leaves its target's cells
        if not src.is_file() or sha256_file(src) != entry.sha256:
            raise PackError(f"{src} does not match the sha256 {ledger.name} records; {carry}")
        card = None if entry.card is None else ledger.parent / entry.card.file
        if card is not None and (card.name != f"{key}{CARD_SUFFIX}" or card.parent != src.parent):
            raise PackError(f"{ledger} names the card of training state {key!r} at {card}, which no unpack writes; "
                            f"{fix}")
        if card is not None and entry.card is not None and (not card.is_file() or
                                                            sha256_file(card) != entry.card.sha256):
            raise PackError(f"{card} is missing or does not match the sha256 {ledger.name} records; {carry}")
        dst = cache_states / f"{key}.safetensors"
        kept = dst.exists() and state_step(dst)[0] >= entry.step
        if not kept:
            cache_states.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dst)
            copied.append(key)
        if card is not None and (not kept or not card_beside(dst).exists()):   # restore_card checks it against
            shutil.copyfile(card, card_beside(dst))                            # the weights the state re-makes
        elif card is None and not kept:
            card_beside(dst).unlink(missing_ok=True)
    return copied


def states_not_carried(ledger: Path) -> dict[str, str]:
    """The training states a ledger lists whose file is absent beside it (a call that carried only some of them),
    by recipe key: the path that was not carried. A slice leaves those targets' cells for one that carries them: it
    never trains a target whose state exists from step 0 again."""
    try:
        training = FINISHED_LEDGER_FILE.read(ledger).training
    except ReconbenchError:
        return {}   # import_states and read_ledger say what is wrong with the file
    return {key: str(ledger.parent / entry.file) for key, entry in training.items()
            if not os.path.lexists(ledger.parent / entry.file)}


def ledger_cards(ledger: Path) -> set[str]:
    """The targets (recipe keys) whose final training state the ledger lists with the card that travelled beside
    it: a slice restores those cards instead of rebuilding them (none where the ledger does not read)."""
    try:
        training = FINISHED_LEDGER_FILE.read(ledger).training
    except ReconbenchError:
        return set()   # import_states and read_ledger say what is wrong with the file
    return {key for key, entry in training.items() if entry.card is not None}


def _ledger(out: Path) -> FinishedLedger | None:
    """``out``'s ledger (None without one); a ledger that does not read is a one-line error."""
    path = out / LEDGER_FILE
    if not path.exists():
        return None
    fix = (f"restore {path} (it keeps every slice's measured rows and split cells' runs), or move it away to start "
           "a new ledger; nothing was merged")
    data = read_json(path, missing=fix, damaged=fix, error=PackError)
    return _decoded(FINISHED_LEDGER_FILE, data, path)


def ledger_measured(out: Path) -> list[MeasuredRate]:
    """The measured rows of ``out``'s ledger (none without one)."""
    ledger = _ledger(out)
    return list(ledger.measured) if ledger is not None else []


# -- runs of cells split across slices ------------------------------------------------------------------------
@dataclass
class _Run:
    cell_id: str
    k: int
    record: bytes
    tensors: dict[str, torch.Tensor]


def _group_runs(pack: Path, manifest: SliceManifest, members: Mapping[str, bytes], out: Path,
                keys: Mapping[str, str], suite: Suite, data_root: str | None) -> list[_Run]:
    """The runs the pack's groups carry, checked against the manifest, the suite and the runs ``out`` holds (a run
    held with other contents is refused: remove it to take the pack's); runs of a cell ``out`` holds finished are
    left out (its evaluation is done). A run that travelled without its start (its group's ``starts``) gets it drawn
    again here and checked against the recorded sha256 (``reconbench.bench.slice_gather.RedrawnStarts``)."""
    from reconbench.bench.slice_gather import RedrawnStarts, StartMismatch

    cards = {path.stem: path.read_bytes() for path in (out / "targets").glob("*.json")} if (
        out / "targets").exists() else {}
    cards.update({name.removeprefix("targets/").removesuffix(".json"): data for name, data in members.items()
                  if name.startswith("targets/")})
    redraw = RedrawnStarts(suite, manifest, cards, data_root, pack)
    archived = sorted(n for n in members if n.startswith("runs/"))
    listed = sorted(f"runs/{g.cell_id}/run-{k:03d}.json" for g in manifest.groups for k in g.runs)
    if archived != listed:
        raise PackError(f"{pack}: the archived search runs are not the runs its manifest's groups list; fetch the pack "
                        "again")
    tensors: dict[str, torch.Tensor] = {}
    for f in manifest.files:
        if f.name.startswith("runs-"):
            try:
                tensors.update(load((pack / f.name).read_bytes()))
            except (SafetensorError, ValueError, OSError) as exc:
                raise PackError(f"{pack / f.name} is not a readable safetensors file ({exc}); fetch the pack "
                                "again") from None
    done = load_cells(out)
    out_runs = []
    for group in manifest.groups:
        if group.cell_id not in keys:
            raise PackError(f"{pack / MANIFEST} carries runs of {group.cell_id!r}, which is no cell of suite "
                            f"{manifest.suite!r}; fetch the pack again")
        if group.cell_key != keys[group.cell_id]:
            raise PackError(f"{pack}: the runs of {group.cell_id} ran under another cell key than the suite's now (the "
                            "suite was edited): they cannot be merged; run the cell again")
        if is_finished(done.get(group.cell_id), keys[group.cell_id], False):
            continue
        for k in group.runs:
            run = {name: tensors[key].to(torch.float64) if tensors[key].is_floating_point() else tensors[key]
                   for name in RUN_TENSORS if (key := f"{group.cell_id}/{k:03d}/{name}") in tensors}
            record = members[f"runs/{group.cell_id}/run-{k:03d}.json"]
            if ("candidates" not in run or "labels" not in run) and not _failed_run(record):
                raise PackError(f"{pack}: run {k} of {group.cell_id} has no candidates in the pack's runs files; fetch "
                                "the pack again")
            if f"{k:03d}" in group.starts and "candidates" in run:
                if "x0" in run:
                    raise PackError(f"{pack}: run {k} of {group.cell_id} carries its start although its group records "
                                    "the start's sha256 instead; fetch the pack again")
                try:
                    run["x0"] = redraw.start(group, k, record)
                except StartMismatch as exc:
                    raise PackError(str(exc)) from None
            held = _run_path(out, group.cell_id, k, ".json")
            if held.exists() and held.read_bytes() != record:
                raise PackError(f"run {k} of cell {group.cell_id} is already in {held.parent} with other contents; "
                                f"remove {held.name} and {held.stem}.safetensors to take the pack's. Nothing was "
                                "merged")
            out_runs.append(_Run(group.cell_id, k, record, run))
    return out_runs


def _failed_run(record: bytes) -> bool:
    """Whether a run's record says it failed (the attack then writes no tensors)."""
    try:
        data = json.loads(record)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return False
    return isinstance(data, dict) and data.get("stopped") == "failed"


def _write_runs(out: Path, runs: Sequence[_Run]) -> list[str]:
    """The runs into ``work/<cell id>/runs/`` as the attack wrote them (floats back in float64: the same values)."""
    written = []
    for run in runs:
        path = _run_path(out, run.cell_id, run.k, ".json")
        path.parent.mkdir(parents=True, exist_ok=True)
        if run.tensors:   # a failed run has its record alone, as the attack wrote it
            save_tensors_atomic(run.tensors, path.with_suffix(".safetensors"))
        write_text_atomic(path, run.record.decode())
        written.append(f"{run.cell_id}/{run.k:03d}")
    return written


def _merged_partial(before: FinishedLedger | None, groups: Sequence[RunGroup], out: Path,
                    keys: Mapping[str, str]) -> dict[str, LedgerRuns]:
    """The ledger's runs of split cells: those it listed and the pack's groups, for cells not finished in ``out``
    whose key is still the suite's."""
    done = load_cells(out)
    merged: dict[str, LedgerRuns] = dict(before.partial) if before is not None else {}
    for group in groups:
        old = merged.get(group.cell_id)
        runs = set(group.runs) | (set(old.runs) if old is not None and old.cell_key == group.cell_key else set())
        merged[group.cell_id] = LedgerRuns(cell_key=group.cell_key, search_runs=group.search_runs, runs=sorted(runs))
    return {cid: entry for cid, entry in merged.items()
            if keys.get(cid) == entry.cell_key and not is_finished(done.get(cid), entry.cell_key, False)}


def read_ledger_runs(path: Path, suite: Suite, keys: Mapping[str, str]) -> dict[str, set[int]]:
    """The search runs a ledger lists of cells split across slices (cells whose key still matches), by cell id."""
    fix = "pass the finished.json that `reconbench bench SUITE --unpack` wrote into the results folder"
    data = read_json(path, missing=fix, damaged=fix, error=PackError)
    ledger = _decoded(FINISHED_LEDGER_FILE, data, path)
    return {cid: set(entry.runs) for cid, entry in ledger.partial.items() if keys.get(cid) == entry.cell_key}


def _write_ledger(out: Path, suite: Suite, keys: Mapping[str, str], measured: Sequence[MeasuredRate] | None = None,
                  partial: Mapping[str, LedgerRuns] | None = None) -> FinishedLedger:
    """Write ``out/finished.json`` (:func:`write_ledger`) with ``measured`` and ``partial`` (None: those it holds);
    the ledger written."""
    before = _ledger(out) if measured is None or partial is None else None
    rows = list(before.measured if before is not None else []) if measured is None else list(measured)
    if partial is None:
        partial = _merged_partial(before, (), out, keys)
    done = load_cells(out)
    cells = {c: LedgerCell(cell_key=key, status=done[c]["status"]) for c, key in keys.items()
             if is_finished(done.get(c), key, False)}
    in_training = {c.recipe.key() for c in expand(suite) if c.cell_id in keys and c.cell_id not in cells}
    extra: dict[str, Any] = {"measured": rows} if rows else {}
    if partial:
        extra["partial"] = dict(partial)
    ledger = FinishedLedger(format=LEDGER_FORMAT, suite=suite.name, suite_sha256=suite.text_sha256, cells=cells,
                            training=ledger_states(out, in_training), **extra)
    write_json(out / LEDGER_FILE, ledger.to_dict())
    return ledger


def write_ledger(out: Path, suite: Suite, keys: Mapping[str, str]) -> Path:
    """``out/finished.json``: the suite's cells (``keys``: cell key by id) the results folder holds finished, with
    their keys and status."""
    _write_ledger(out, suite, keys)
    return out / LEDGER_FILE


def read_ledger(path: Path, suite: Suite) -> dict[str, dict[str, Any]]:
    """The cells a ledger lists as finished, as the minimal records the runner's resume reads (a cell whose key no
    longer matches the suite runs again, as after an edit of the suite)."""
    fix = "pass the finished.json that `reconbench bench SUITE --unpack` wrote into the results folder"
    data = read_json(path, missing=fix, damaged=fix, error=PackError)
    ledger = _decoded(FINISHED_LEDGER_FILE, data, path)
    if ledger.suite != suite.name:
        raise PackError(f"{path} lists cells of suite {ledger.suite!r}, not {suite.name!r}; {fix}")
    return {cid: {"cell_id": cid, "cell_key": v.cell_key, "status": v.status} for cid, v in ledger.cells.items()}


def remaining_cells(out: Path, keys: Mapping[str, str],
                    elsewhere: Mapping[str, dict[str, Any]] | None = None) -> list[str]:
    """The cells (``keys``: cell key by id) that the results folder ``out`` does not hold finished (nor
    ``elsewhere``, a ledger's records)."""
    done = {**(elsewhere or {}), **load_cells(out)}
    return [c for c, key in keys.items() if not is_finished(done.get(c), key, False)]
