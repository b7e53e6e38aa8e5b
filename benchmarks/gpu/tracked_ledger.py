"""The tracked home of a suite's GPU results, so that a new checkout loses nothing an occasion brought back.

    python benchmarks/gpu/tracked_ledger.py keep SUITE [--results DIR] [--cap-mib 18]
    python benchmarks/gpu/tracked_ledger.py restore SUITE [--results DIR]

Only what is committed survives between sessions: `runs/` (the merged results folder, its ledger and its training
states) is ignored. `keep` copies into `benchmarks/gpu/ledger/<suite>/` (tracked):

* ``finished.json``: the results folder's ledger, listing only the training states kept here and no search runs of
  cells split over slices (their runs are not kept: each is a 12 MiB tensor file);
* ``training/<recipe key>.safetensors`` and the card JSON beside it: the states of targets with cells left (the
  ledger lists no other), in the suite's cell order, while their bytes stay within the cap (what the device call
  carries: tracked files travel), one line naming each state not kept;
* ``records/``: what a later publication needs of the results folder besides them: ``suite.toml``,
  ``invocations/`` (the slices' commits and the seals of the cells they brought), ``cells/<id>.json.xz`` and
  ``targets/<key>.json.xz`` (the full records, xz-compressed: a board keeps slim entries only), ``work/<id>/`` (a
  finished cell's figure pairs and stored candidates).

A slice reads the ledger and its states where they are (``--finished benchmarks/gpu/ledger/<suite>/finished.json``):
they travel as tracked files, no carry needed. `restore` rebuilds a results folder that is absent (a new checkout)
from that home, so that an `--unpack` into it keeps the cells merged before and a publication keeps the board's
cells; `after_occasion.py` runs both.
"""

from __future__ import annotations

import argparse
import json
import lzma
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

HOME = Path("benchmarks/gpu/ledger")
LEDGER, TRAINING, RECORDS = "finished.json", "training", "records"
#: the default cap on the tracked states' bytes (cards included): one paper-size float32 state with its card (8.2 MiB
#: and 0.66 MiB, as the H200 occasion brought back the CIFAR-10 and MNIST binary ones), not two. Tracked files travel
#: in every call of every suite: a CIFAR-10 paper call carries the tree, the wheels (0.2 MiB) and `.data/cifar10`
#: (13.7 MiB, every image of which its cells read), and a claims-gpu step needs room for two training stacks of
#: about 5 MB beside them (tests/unit/bench/test_claims_gpu_slices.py); a second tracked state would take that room
CAP_MIB = 10.0
#: the results folder's parts a publication reads, as they are (small) or compressed (``.xz``: the full records)
PLAIN, COMPRESSED = ("suite.toml", "invocations"), ("cells", "targets")


class LedgerError(Exception):
    """A home or results folder this script cannot use: its message is the one line to print."""


@dataclass
class Kept:
    """What ``keep`` wrote and left out."""

    states: list[str] = field(default_factory=list)   # recipe keys kept
    left_out: list[str] = field(default_factory=list)   # the one-line messages of what was not kept
    records: int = 0   # record files written


def home_of(suite_name: str) -> Path:
    return HOME / suite_name


def state_files(entry: dict[str, object]) -> list[str]:
    """A ledger's state entry's files (relative to its folder): the state, and the card beside it when there is one."""
    card = entry.get("card")
    return [str(entry["file"])] + ([str(card["file"])] if isinstance(card, dict) else [])


def _absolute_strings(data: object) -> list[str]:
    """The strings of a JSON value that look like absolute machine paths."""
    if isinstance(data, str):
        return [data] if data.startswith("/") else []
    if isinstance(data, dict):
        return [s for v in data.values() for s in _absolute_strings(v)]
    if isinstance(data, list):
        return [s for v in data for s in _absolute_strings(v)]
    return []


def suite_name_of(suite: str) -> str:
    """The name a suite (a name or a .toml path, as `reconbench bench` takes it) gives itself."""
    from reconbench.bench.suite import load_suite

    return load_suite(suite).name


def state_order(suite: str, keys: Sequence[str]) -> list[str]:
    """``keys`` in the order of the suite's cells (the order slices take them); keys of no cell last."""
    from reconbench.bench.cells import expand
    from reconbench.bench.suite import load_suite

    order = list(dict.fromkeys(c.recipe.key() for c in expand(load_suite(suite))))
    return sorted(keys, key=lambda k: (order.index(k) if k in order else len(order), k))


def keep(suite: str, results: Path, home: Path, cap: int) -> Kept:
    """Write ``home`` from ``results`` (what it held before is replaced); see the module's docstring."""
    path = results / LEDGER
    if not path.is_file():
        raise LedgerError(f"{path} does not exist; give --results with the folder `reconbench bench SUITE --unpack` "
                          "merged into")
    ledger = json.loads(path.read_text())
    if ledger.get("suite") != (name := suite_name_of(suite)):
        raise LedgerError(f"{path} is the ledger of suite {ledger.get('suite')!r}, not {name!r}; give the suite it "
                          "lists")
    kept = Kept()
    training: dict[str, dict[str, object]] = dict(ledger.get("training") or {})
    used = 0
    chosen: dict[str, dict[str, object]] = {}
    for key in state_order(suite, list(training)):
        size = sum((results / f).stat().st_size for f in state_files(training[key]))
        if used + size > cap:
            kept.left_out.append(f"training state {key} ({size / 2**20:.1f} MiB) not kept: the tracked states would "
                                 f"pass the cap of {cap / 2**20:.1f} MiB; its target trains again from step 0 (raise "
                                 "--cap-mib only if the calls still fit: travel_size.py)")
            continue
        used += size
        chosen[key] = training[key]
    if ledger.get("partial"):
        kept.left_out.append("search runs of cells split over slices not kept (" + ", ".join(sorted(ledger["partial"]))
                             + "): each run is a large tensor file; those cells run again whole")
    ledger = {**ledger, "training": chosen}
    ledger.pop("partial", None)
    absolute = _absolute_strings(ledger)
    if absolute:
        raise LedgerError(f"{path} holds absolute paths ({', '.join(absolute[:3])}); the tracked ledger keeps none: "
                          "merge the packs again with a current `reconbench bench --unpack`")
    staged = home.with_name(f".{home.name}.writing")   # beside it: one rename puts it in place
    shutil.rmtree(staged, ignore_errors=True)
    try:
        (staged / TRAINING).mkdir(parents=True)
        for key, entry in chosen.items():
            for name in state_files(entry):
                shutil.copyfile(results / name, staged / name)
            kept.states.append(key)
        (staged / LEDGER).write_text(json.dumps(ledger, indent=1) + "\n")
        kept.records = _write_records(results, staged / RECORDS)
        shutil.rmtree(home, ignore_errors=True)
        staged.rename(home)
    finally:
        shutil.rmtree(staged, ignore_errors=True)   # a stopped write leaves nothing that would travel
    return kept


def _write_records(results: Path, records: Path) -> int:
    """The results folder's parts a publication reads, under ``records``; the files written."""
    written = 0
    for name in PLAIN:
        src = results / name
        if src.is_file():
            records.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, records / name)
            written += 1
        elif src.is_dir():
            shutil.copytree(src, records / name)
            written += sum(1 for p in (records / name).rglob("*") if p.is_file())
    for name in COMPRESSED:
        for src in sorted((results / name).glob("*.json")) if (results / name).is_dir() else []:
            dst = records / name / f"{src.name}.xz"
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.write_bytes(lzma.compress(src.read_bytes(), preset=9))
            written += 1
    for cell in sorted((results / "cells").glob("*.json")) if (results / "cells").is_dir() else []:
        work = results / "work" / cell.stem
        for src in sorted(work.glob("*.safetensors")) if work.is_dir() else []:
            dst = records / "work" / cell.stem / src.name
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dst)
            written += 1
    return written


def restore(home: Path, results: Path) -> int:
    """Rebuild the absent results folder ``results`` from ``home``: the ledger, the kept states and the records; the
    files written. A results folder that exists is left as it is (0)."""
    if results.exists():
        return 0
    if not (home / LEDGER).is_file():
        raise LedgerError(f"{home / LEDGER} does not exist; nothing to restore {results} from (a suite's first "
                          "occasion has no ledger yet: run without it)")
    staged = results.with_name(f".{results.name}.restoring")
    shutil.rmtree(staged, ignore_errors=True)
    try:
        written = _restore_into(home, staged)
        staged.rename(results)
    finally:
        shutil.rmtree(staged, ignore_errors=True)
    return written


def _restore_into(home: Path, staged: Path) -> int:
    """The ledger, the kept states and the records of ``home`` written into the new folder ``staged``."""
    staged.mkdir(parents=True)
    written = 0
    shutil.copyfile(home / LEDGER, staged / LEDGER)
    if (home / TRAINING).is_dir():
        shutil.copytree(home / TRAINING, staged / TRAINING)
    written += 1 + sum(1 for p in (staged / TRAINING).rglob("*") if p.is_file())
    records = home / RECORDS
    for src in sorted(records.rglob("*")) if records.is_dir() else []:
        if not src.is_file():
            continue
        rel = src.relative_to(records)
        if rel.parts[0] in COMPRESSED and src.suffix == ".xz":
            dst = staged / rel.with_suffix("")
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.write_bytes(lzma.decompress(src.read_bytes()))
        else:
            dst = staged / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dst)
        written += 1
    return written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("action", choices=("keep", "restore"), help="keep: results folder -> tracked home; restore: "
                    "tracked home -> an absent results folder")
    ap.add_argument("suite", help="the suite's name (its home is benchmarks/gpu/ledger/<name>)")
    ap.add_argument("--results", type=Path, help="the results folder (default: runs/bench/<suite name>)")
    ap.add_argument("--home", type=Path, help="the tracked home (default: benchmarks/gpu/ledger/<suite name>)")
    ap.add_argument("--cap-mib", type=float, default=CAP_MIB, help=f"the most MiB of training states (cards "
                    f"included) kept (default: {CAP_MIB:g})")
    args = ap.parse_args(argv)
    try:
        name = suite_name_of(args.suite)
    except Exception as exc:   # a suite that does not load (ReconbenchError and kin): one line
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    results = args.results or Path("runs/bench") / name
    home = args.home or home_of(name)
    try:
        if args.action == "keep":
            kept = keep(args.suite, results, home, int(args.cap_mib * 2**20))
            for line in kept.left_out:
                print(f"note: {line}", file=sys.stderr)
            print(f"kept in {home}: the ledger, {len(kept.states)} training state(s) ({', '.join(kept.states) or 'none'}),"
                  f" {kept.records} record file(s)")
        else:
            n = restore(home, results)
            print(f"restored {results} from {home}: {n} file(s)" if n else f"{results} exists: left as it is")
    except (LedgerError, OSError, ValueError) as exc:
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
