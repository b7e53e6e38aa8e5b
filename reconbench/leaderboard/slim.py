"""Slim published boards: cell records as slim entries, candidates for a sample of cells only, no target weights.

``write_entry`` writes one cell of a board as its slim entry (``reconbench/bench/entries.py``); ``store_sample``
picks the cells whose candidates a board keeps (the re-scoring sample) and writes them in the attack's precision,
xz-compressed (``candidates/<cell>.safetensors.xz``; ``read_candidates`` reads both that and an uncompressed
``<cell>.safetensors``); ``slim_board`` turns an already published board into this form in place, model cards
included (``board_cards.py``; ``reconbench leaderboard BOARD --slim``);
``rerun_cells`` re-runs chosen cells from their recipes and seeds and compares their numbers with the board's
(``--verify --rerun``).
"""

from __future__ import annotations

import hashlib
import json
import lzma
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load, load_file, save

from reconbench.bench.entries import entry_text, is_entry, make_entry, null_keys
from reconbench.bench.runner import STATUS_OK, card_reader, load_cell_records, run_suite
from reconbench.bench.suite import Suite
from reconbench.errors import ReconbenchError
from reconbench.evaluation.rescore import close
from reconbench.leaderboard.board_cards import board_card, card_text
from reconbench.leaderboard.manifest import write_manifest
from reconbench.leaderboard.readme import rerender_readme
from reconbench.leaderboard.results_file import read_results, write_results
from reconbench.provenance import read_json, write_text_atomic
from reconbench.records import BoardResults, CellRecord, Selection, mapping
from reconbench.safe_paths import member

#: how many cells of a board keep their candidates (at most; fewer when the suite asks for fewer)
SAMPLE_CELLS = 2
#: a second (third, ...) sampled cell is kept only while the board's candidates stay within this many bytes; the
#: first is always kept
SAMPLE_BYTES = 256 * 1024
#: relative tolerance of a re-run's continuous numbers against the board's (float32 attacks: a few units of
#: float32 roundoff through the attack's steps; identical libraries on the same kind of processor reproduce exactly)
RERUN_RTOL = 1e-6
#: a board's stored candidates: safetensors compressed with xz (``lzma``, preset 6: the files are far smaller than
#: its dictionary); a board published before keeps ``<cell>.safetensors`` uncompressed, read the same way
CANDIDATES_SUFFIX, PLAIN_CANDIDATES_SUFFIX = ".safetensors.xz", ".safetensors"
XZ_PRESET = 6


def candidates_file(folder: Path, cell_id: str) -> Path | None:
    """The stored candidates of a cell in a board's ``candidates/`` (compressed or not), None when not stored."""
    for suffix in (CANDIDATES_SUFFIX, PLAIN_CANDIDATES_SUFFIX):
        if (path := member(folder / "candidates", cell_id, suffix, "cell id")).exists():
            return path
    return None


def stored_candidate_ids(folder: Path) -> list[str]:
    """The cells whose candidates a board stores (either form)."""
    names = [p.name for p in (folder / "candidates").glob("*.safetensors*")]
    return sorted({n[: -len(s)] for n in names for s in (CANDIDATES_SUFFIX, PLAIN_CANDIDATES_SUFFIX)
                   if n.endswith(s) and not n.startswith(".")})


def read_candidates(path: Path) -> dict[str, torch.Tensor]:
    """The tensors of a stored candidates file (``.safetensors.xz`` or ``.safetensors``)."""
    try:
        raw = path.read_bytes()
        return load(lzma.decompress(raw) if path.name.endswith(CANDIDATES_SUFFIX) else raw)
    except (OSError, lzma.LZMAError, SafetensorError, ValueError) as exc:
        raise ReconbenchError(f"{path} is not a readable candidates file ({type(exc).__name__}: {exc}); render "
                              "the leaderboard again") from None


def write_candidates(path: Path, tensors: dict[str, torch.Tensor]) -> None:
    """Write tensors to ``path`` (``<cell>.safetensors.xz``) compressed, through a temporary file."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(lzma.compress(save({k: v.contiguous() for k, v in tensors.items()}), preset=XZ_PRESET))
    tmp.replace(path)


def shown_keys(suite: Suite) -> set[str]:
    """The summary keys whose null a board's entries keep: its columns' keys and the two headlines."""
    return null_keys(k for c in suite.leaderboard.columns for k in c.keys)


def write_entry(path: Path, rec: dict[str, Any], suite: Suite, board: Path) -> dict[str, Any]:
    """Write ``rec`` (a full record or an entry) to ``path`` as a slim entry, its evaluation protocol to the board's
    ``protocols/`` (once per protocol); returns the entry."""
    key = str((rec.get("target") or {}).get("recipe_key"))
    protocols: dict[str, dict[str, Any]] = {}
    entry = make_entry(rec, shown_keys(suite), card_reader(board)(key), protocols)
    for ref, shared in protocols.items():
        target = member(board / "protocols", ref, ".json", "protocol hash")
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            write_text_atomic(target, protocol_text(shared))
    write_text_atomic(path, entry_text(entry))
    return entry


def in_attack_precision(tensors: dict[str, torch.Tensor], dtype: str | None) -> dict[str, torch.Tensor]:
    """Candidates in the precision the attack computed them in: float64 tensors of a float32 attack as float32
    when that loses nothing (every value is a float32), else unchanged."""
    if dtype != "float32":
        return tensors
    out = {}
    for k, v in tensors.items():
        if v.dtype == torch.float64 and torch.equal(v.float().double(), v):
            v = v.float()
        out[k] = v
    return out


def _sample_order(cell_id: str) -> str:
    return hashlib.sha256(cell_id.encode()).hexdigest()


def pick_sample(files: dict[str, Path], k: int, budget: int = SAMPLE_BYTES, named: tuple[str, ...] = (),
                max_bytes: int | None = None) -> list[str]:
    """The ``named`` cells that have candidates, and up to ``k`` more, smallest files first (ties in a fixed order,
    the hash of the id), while their stored size (in the attack's precision, estimated as half a float64 file) stays
    within ``budget`` bytes; the first is always taken. With ``max_bytes`` (the suite's ``[leaderboard]
    candidates_max_bytes``) every cell, named or first, is taken only while the sample stays within it and
    ``budget``: a paper-size cell's candidates (about 190 MB in float32 for 16 runs of m = 1000 on CIFAR-10) would
    pass any board's size budget, and its figure pairs picture it instead (``figure_pairs.py``)."""
    def stored(c: str) -> int:
        return files[c].stat().st_size // 2

    if max_bytes is not None:
        budget = min(budget, max_bytes)
    chosen: list[str] = []
    total = 0
    for cid in [c for c in named if c in files]:
        if max_bytes is None or total + stored(cid) <= budget:
            chosen.append(cid)
            total += stored(cid)
    files = {c: p for c, p in files.items() if c not in named}
    for cid in sorted(files, key=lambda c: (files[c].stat().st_size, _sample_order(c)))[:k]:
        if (chosen or max_bytes is not None) and total + stored(cid) > budget:
            break
        chosen.append(cid)
        total += stored(cid)
    return sorted(chosen)


def store_sample(files: dict[str, Path], records: Mapping[str, CellRecord], out: Path, k: int,
                 named: tuple[str, ...] = (), max_bytes: int | None = None) -> list[str]:
    """Write the candidates of the ``named`` cells and a sample of ``k`` more to ``out`` (in the attack's
    precision, xz-compressed; ``max_bytes``: :func:`pick_sample`); their ids."""
    chosen = pick_sample(files, k, named=named, max_bytes=max_bytes)
    out.mkdir(parents=True, exist_ok=True)
    for cid in chosen:
        store_candidates(files[cid], records[cid].dtype if cid in records else None, out / f"{cid}{CANDIDATES_SUFFIX}")
    return chosen


def store_candidates(src: Path, dtype: str | None, dst: Path) -> None:
    """One cell's pooled candidates from ``src`` (either form) to ``dst`` in the precision of an attack that
    computed in ``dtype`` (the cell's ``spec.dtype``), compressed."""
    tensors = read_candidates(src) if src.name.endswith(CANDIDATES_SUFFIX) else load_file(str(src))
    write_candidates(dst, in_attack_precision(tensors, dtype))


def sample_size(suite: Suite) -> int:
    k = suite.leaderboard.store_candidates
    return SAMPLE_CELLS if k is None else min(k, SAMPLE_CELLS)


def compact_figures(board: Path) -> int:
    """Re-encode a board's figures as palette PNGs (at most 256 colours; plots and image grids keep their look at a
    third of the bytes) where that is smaller; the bytes saved."""
    from PIL import Image
    from PIL.PngImagePlugin import PngInfo

    from reconbench.evaluation.pair_figure import LAYOUT_KEY

    saved = 0
    for path in sorted((board / "figures").glob("*.png")):
        with Image.open(path) as im:
            if im.mode == "P":
                continue
            small = im.convert("RGB").quantize(256)
            info = PngInfo()
            if LAYOUT_KEY in im.info:  # where each pair of a figure of pairs lies (pair_figure.read_layout)
                info.add_text(LAYOUT_KEY, str(im.info[LAYOUT_KEY]))
        tmp = path.with_name(f".{path.name}.tmp")
        small.save(tmp, format="PNG", optimize=True, pnginfo=info)
        if tmp.stat().st_size < path.stat().st_size:
            saved += path.stat().st_size - tmp.stat().st_size
            tmp.replace(path)
        else:
            tmp.unlink()
    return saved


@dataclass
class SlimReport:
    cells: int = 0
    already: int = 0
    cards: int = 0
    protocols: int = 0
    sample: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    bytes_before: int = 0
    bytes_after: int = 0
    readme_rendered: bool = False
    manifest_files: int = 0


def _folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def _rewrite(path: Path, text: str) -> bool:
    """Write ``text`` to ``path`` unless it holds it already; whether it was written."""
    if path.read_text() == text:
        return False
    write_text_atomic(path, text)
    return True


def protocol_text(shared: dict[str, Any]) -> str:
    """A board's ``protocols/<ref>.json`` (compact; its name hashes its content, not its text)."""
    return json.dumps(shared, sort_keys=True, separators=(",", ":")) + "\n"


def _read_json(path: Path, what: str) -> Any:
    fix = f"restore the {what} before slimming the board"
    return read_json(path, missing=fix, damaged=fix)


def slim_board(suite: Suite, board: Path) -> SlimReport:
    """Rewrite a published board in place into the compact form a publication writes: cells as slim entries, model
    cards as board cards, protocols compact, candidates for a sample of cells only (in the attack's precision,
    xz-compressed), no target weights; ``results.json`` and README.md name the sample; MANIFEST.json lists every
    file (``manifest.py``). Nothing is run again; a
    board already in this form is left as it is."""
    if not (board / "results.json").exists():
        raise ReconbenchError(f"{board} holds no leaderboard (no results.json); pass a published board folder")
    report = SlimReport(bytes_before=_folder_bytes(board))
    for path in sorted((board / "targets").glob("*.json")):
        report.cards += _rewrite(path, card_text(board_card(_read_json(path, "model card"))))
    for path in sorted((board / "protocols").glob("*.json")):
        report.protocols += _rewrite(path, protocol_text(_read_json(path, "protocol")))
    records: dict[str, CellRecord] = {}
    for path in sorted((board / "cells").glob("*.json")):
        rec = _read_json(path, "cell")
        report.cells += 1
        if is_entry(rec):
            report.already += 1
        else:
            write_entry(path, rec, suite, board)
        records[path.stem] = CellRecord.from_dict(rec, path)
    report.sample, report.removed = _slim_candidates(suite, board, records)
    for p in sorted((board / "targets").glob("*.safetensors")):  # weights: regenerated from the recorded recipes
        p.unlink()
        report.removed.append(f"targets/{p.name}")
    compact_figures(board)
    report.readme_rendered = _name_sample(suite, board, report.sample)
    report.manifest_files = write_manifest(board)  # last: every file the board holds now
    report.bytes_after = _folder_bytes(board)
    return report


def _slim_candidates(suite: Suite, board: Path, records: Mapping[str, CellRecord]) -> tuple[list[str], list[str]]:
    """Uncompressed candidates cut to the sample and compressed; compressed ones (a sample picked when the board was
    published or a submission added) are kept. The sample's ids and the files removed."""
    folder = board / "candidates"
    packed = sorted(p.name[: -len(CANDIDATES_SUFFIX)] for p in folder.glob(f"*{CANDIDATES_SUFFIX}"))
    plain = {p.stem: p for p in sorted(folder.glob(f"*{PLAIN_CANDIDATES_SUFFIX}"))}
    if not plain:
        return packed, []
    files = {c: p for c, p in plain.items() if c in records and records[c].status == STATUS_OK}
    removed = []
    with tempfile.TemporaryDirectory(dir=board) as tmp:
        kept = store_sample(files, records, Path(tmp), max(sample_size(suite) - len(packed), 0),
                            tuple(c for c in suite.leaderboard.sample_cells if c not in packed),
                            suite.leaderboard.candidates_max_bytes)
        for cid, p in plain.items():
            p.unlink()
            if cid not in kept:
                removed.append(p.name)
        for cid in kept:
            (Path(tmp) / f"{cid}{CANDIDATES_SUFFIX}").replace(folder / f"{cid}{CANDIDATES_SUFFIX}")
    return sorted({*packed, *kept}), removed


_STORED_LINE = re.compile(r"The pooled candidates of \d+ cell\(s\) are stored")


def _name_sample(suite: Suite, board: Path, kept: list[str]) -> bool:
    """results.json's ``stored_candidates`` (written compactly) and README.md: rendered again from results.json and
    the entries when the suite file is the one the board was rendered from (True), else only its sentence that
    counts the stored candidates is updated (False)."""
    data = read_results(board)
    board_data = BoardResults.from_dict(data)
    old = len(board_data.stored_candidates)
    data["stored_candidates"] = kept
    write_results(board, data)
    readme = board / "README.md"
    if board_data.header.suite_sha256 == suite.text_sha256:
        write_text_atomic(readme, rerender_readme(suite, board, data))
        return True
    text = readme.read_text()
    if old and kept:
        text = _STORED_LINE.sub(f"The pooled candidates of {len(kept)} cell(s) are stored", text, count=1)
    write_text_atomic(readme, text)
    return False


# -- re-running cells -------------------------------------------------------------------------------------------
def _numbers(sel: Selection) -> dict[str, Any]:
    """A selection's stored numbers: its summary's (but unavailable ones and reasons) and its attack loss."""
    out = {f"summary.{k}": v for k, v in sel.summary.items() if v != "unavailable" and not k.endswith("_reason")}
    if "attack_loss" in (sel.key_order or ()):   # stored (a record read from its file names its keys)
        out["attack_loss"] = sel.attack_loss
    return out


def compare_rerun(cell_id: str, stored: CellRecord, fresh: CellRecord, rtol: float = RERUN_RTOL) -> list[str]:
    """The board's numbers of a cell (every selection's stored summary keys and attack loss) that a re-run of the
    cell does not give: counts exactly, other numbers within ``rtol`` relative."""
    if fresh.status != STATUS_OK:
        return [f"{cell_id}: the re-run did not finish (status {fresh.status}: "
                f"{mapping(fresh.error)['message']})"]   # a cell that did not finish records its error
    problems = []
    for name, sel in (stored.selections or {}).items():
        now = _numbers(fresh.selection(name))
        for key, value in _numbers(sel).items():
            if key not in now:
                problems.append(f"{cell_id} [{name}] {key}: stored {value!r}, the re-run does not produce it")
            elif not close(value, now[key], rtol):
                problems.append(f"{cell_id} [{name}] {key}: stored {value!r}, re-run {now[key]!r}")
    return problems


def rerun_cells(suite: Suite, board: Path, cell_ids: list[str], *, data_root: str | None = None,
                cache: str | None = None, work: Path | None = None,
                stored: Mapping[str, CellRecord] | None = None) -> list[str]:
    """Re-run ``cell_ids`` of a board (targets from the recipe cache, trained again when absent; attacks from the
    recorded seeds, in this process) and compare; the problems (empty: every stored number agrees). ``stored``: the
    board's cells when already read."""
    stored = load_cell_records(board) if stored is None else stored
    missing = [c for c in cell_ids if c not in stored]
    if missing:
        raise ReconbenchError(f"{board} has no cell {missing[0]!r}; name cells of the board (its cells/ folder)")
    dtypes = {stored[c].dtype for c in cell_ids}
    problems: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        out = work or Path(tmp)
        chosen: list[str | None] = [*sorted(d for d in dtypes if d)] or [None]
        for dtype in chosen:
            ids = [c for c in cell_ids if stored[c].dtype == dtype]
            run_suite(suite, out / str(dtype), only=ids, dtype=dtype, cache=cache, data_root=data_root, quiet=True,
                      command="leaderboard --verify --rerun")
            fresh = load_cell_records(out / str(dtype))
            for cid in ids:
                if cid not in fresh:
                    problems.append(f"{cid}: the re-run wrote no record")
                else:
                    problems += compare_rerun(cid, stored[cid], fresh[cid])
    return problems

