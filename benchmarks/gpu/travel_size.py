"""What a device call would carry, measured here before the call, and the `carry` list a slice of a suite needs.

    python benchmarks/gpu/travel_size.py [--carry PATH ...] [--suite paper] [--only PATTERN ...] [--results DIR]

A `run` call copies the working tree (every tracked file, and every untracked file git does not ignore, as
`git ls-files --cached --others --exclude-standard` lists them; a `shared/` folder of the checkout) plus the ignored
paths named in `carry` (files or folders), and refuses the call when the whole passes 64 MiB (the device tool's
README, "Limits"). This sums exactly those files' bytes (a symbolic link counts as the link), prints each part and the
total against the limit, and exits 1 with one line naming what to drop when it is over.

With `--suite` (and `--only`), the carry list comes from the suite instead of `--carry`: the wheels (`.whl`), the data
folders the selected cells read (`.data/mnist`, `.data/cifar10`, as `copy_data.py` fills them), the ledger
(`RESULTS/finished.json`) and only the training states of the selected cells' targets that the ledger lists
(`RESULTS/training/<recipe key>.safetensors`, with the card JSON beside it when there is one). A cell the ledger lists
as finished needs no state. RESULTS is by default the suite's tracked ledger, `benchmarks/gpu/ledger/<suite name>`
(tracked_ledger.py), where it exists: its ledger and states are files of the tree, which travel without a carry, and
are counted in the tree's part; only what is not in the tree is carried. It prints that `carry` list, ready for the
call.

Hand-written over a `du`: the limit counts git's view of the tree (ignored files do not travel unless carried), which
no disk-usage tool knows.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: the device tool's limit on what one call carries (its README, "Limits")
LIMIT = 64 * 2**20
WHEELS, DATA = ".whl", ".data"
SHARED = "shared"
#: the most paths one call's `carry` names (the `run` tool's arguments)
MAX_CARRY = 8
#: the data folder (under `.data`) of each data-set source that reads files; an `npz:` set reads the folder its path
#: starts with, the embedded `digits` none
DATA_FOLDERS = {"mnist": "mnist", "mnist_test": "mnist", "cifar10": "cifar10", "cifar100": "cifar100"}


class TravelError(Exception):
    """A suite, ledger or data set this script cannot price: its message is the one line to print."""


def mib(n: float) -> str:
    return f"{n / 2**20:.1f} MiB"


def _size(path: Path) -> int:
    """A file's bytes; a symbolic link travels as a link (its own size)."""
    return os.lstat(path).st_size


def tree_files(repo: Path) -> tuple[list[str], list[str]]:
    """The working tree's files that travel (relative paths): the tracked ones that exist, and the untracked ones git
    does not ignore."""
    def listed(*args: str) -> list[str]:
        out = subprocess.run(["git", "ls-files", "-z", *args], cwd=repo, capture_output=True, check=True).stdout
        return [p for p in out.decode().split("\0") if p]

    tracked = [p for p in listed("--cached") if os.path.lexists(repo / p)]
    untracked = listed("--others", "--exclude-standard")
    return tracked, untracked


def path_files(repo: Path, rel: str) -> list[str]:
    """Every file under ``rel`` (a file or a folder, ignored or not), relative to ``repo``; none when it is absent."""
    top = repo / rel
    if top.is_symlink() or top.is_file():
        return [rel]
    if not top.is_dir():
        return []
    found = []
    for folder, dirs, files in os.walk(top):
        for name in files + [d for d in dirs if os.path.islink(os.path.join(folder, d))]:
            found.append(os.path.relpath(os.path.join(folder, name), repo))
    return sorted(found)


@dataclass
class Travel:
    """What one call carries: its parts (name -> bytes), in the order they print; paths counted once."""

    parts: dict[str, int] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)   # carried paths that do not exist (simply not carried)
    carried: dict[str, int] = field(default_factory=dict)   # the carry list's paths -> bytes (what one could drop)

    @property
    def total(self) -> int:
        return sum(self.parts.values())


def measure(repo: Path, carry: Sequence[str]) -> Travel:
    """The parts a call from ``repo`` carrying ``carry`` takes, as the device tool counts them."""
    tracked, untracked = tree_files(repo)
    seen: set[str] = set()
    travel = Travel()

    def part(name: str, files: Iterable[str]) -> int:
        new = [f for f in files if f not in seen]
        seen.update(new)
        travel.parts[name] = sum(_size(repo / f) for f in new)
        return travel.parts[name]

    part("tracked", tracked)
    part("untracked, not ignored", untracked)
    if (repo / SHARED).is_dir():
        part(f"{SHARED}/", path_files(repo, SHARED))
    for rel in carry:
        rel = os.path.normpath(rel)
        if not os.path.lexists(repo / rel):
            travel.missing.append(rel)
            continue
        travel.carried[rel] = part(f"carry {rel}", path_files(repo, rel))
    return travel


def what_to_drop(travel: Travel, limit: int = LIMIT) -> str:
    """What to drop to bring ``travel`` within ``limit``: the smallest carried path that alone suffices, else the
    largest carried paths in turn, else the largest top-level folder of the tree."""
    over = travel.total - limit
    enough = sorted((b, p) for p, b in travel.carried.items() if b >= over)
    if enough:
        b, p = enough[0]
        return f"drop {p} ({mib(b)}) from carry"
    names, freed = [], 0
    for p, b in sorted(travel.carried.items(), key=lambda kv: -kv[1]):
        names.append(p)
        freed += b
        if freed >= over:
            return f"drop {', '.join(names)} ({mib(freed)}) from carry"
    left = over - freed
    what = f"drop {', '.join(names)} from carry and " if names else ""
    return f"{what}take {mib(left)} out of the tree (ignore or delete untracked files, or slim the largest tracked folder)"


def verdict(travel: Travel, limit: int = LIMIT) -> tuple[bool, str]:
    """Whether ``travel`` fits ``limit``, and the line that says so (over: what to drop)."""
    if travel.total <= limit:
        return True, f"total {mib(travel.total)} of {mib(limit)}: fits ({mib(limit - travel.total)} left)"
    return False, (f"error: the call would carry {mib(travel.total)}, {mib(travel.total - limit)} over the device's "
                   f"{mib(limit)}; {what_to_drop(travel, limit)}")


def largest_folders(repo: Path, files: Sequence[str], k: int = 3) -> list[tuple[str, int]]:
    """The ``k`` top-level folders of ``files`` holding the most bytes."""
    sizes: dict[str, int] = {}
    for f in files:
        top = f.split("/", 1)[0] + ("/" if "/" in f else "")
        sizes[top] = sizes.get(top, 0) + _size(repo / f)
    return sorted(sizes.items(), key=lambda kv: -kv[1])[:k]


# -- what a slice of a suite needs ---------------------------------------------------------------------------
@dataclass
class SliceNeeds:
    """The training states (recipe key -> the state's files, relative to the repository) and data folders that the
    selected cells need, and the cells and targets they came from."""

    cells: list[str]
    states: dict[str, list[str]]
    data: list[str]
    targets_without_state: list[str]   # targets of the cells that the ledger lists no state of (they train from step 0)
    names: dict[str, str] = field(default_factory=dict)   # recipe key -> the target's name in its cells' ids

    def carry(self, ledger: str, most: int = MAX_CARRY) -> list[str]:
        """The call's carry list: the wheels, the data folders, the ledger and the states' files; where that passes
        ``most`` paths (the `run` tool takes at most 8), the states' folder and then `.data` whole instead."""
        states = [f for files in self.states.values() for f in files]
        paths = [WHEELS, *self.data, ledger, *states]
        if len(paths) > most and states:
            paths = [WHEELS, *self.data, ledger, str(Path(states[0]).parent)]
        if len(paths) > most:
            paths = [WHEELS, DATA, *paths[1 + len(self.data):]]
        return paths


def data_folder(ref: str) -> str | None:
    """The folder under `.data` a data-set reference reads (None: an embedded set, no file)."""
    name, _, arg = ref.partition(":")
    if name == "npz":
        return arg.split("/", 1)[0] if "/" in arg else arg
    if name == "digits":
        return None
    if name in DATA_FOLDERS:
        return DATA_FOLDERS[name]
    raise TravelError(f"data set {ref!r}: which folder of {DATA} it reads is not known here; add it to DATA_FOLDERS "
                      "in benchmarks/gpu/travel_size.py")


def slice_needs(suite_name: str, only: Sequence[str], results: Path, repo: Path) -> SliceNeeds:
    """What the cells of ``suite_name`` selected by ``only`` need carried, from the ledger ``results/finished.json``
    (absent: the first slice, no state and no finished cell)."""
    from reconbench.bench.cells import expand, select
    from reconbench.bench.runner import is_finished
    from reconbench.bench.slice_pack import LEDGER_FILE, STATES_FOLDER
    from reconbench.bench.suite import load_suite
    from reconbench.records.finished_ledger import FINISHED_LEDGER_FILE
    from reconbench.targets.resumable import CARD_SUFFIX

    suite = load_suite(suite_name)
    ledger_path = results / LEDGER_FILE
    ledger = FINISHED_LEDGER_FILE.read(repo / ledger_path) if (repo / ledger_path).is_file() else None
    if ledger is not None and ledger.suite != suite.name:
        raise TravelError(f"{ledger_path} is the ledger of suite {ledger.suite!r}, not {suite.name!r}; pass --results "
                          "with that suite's results folder")
    done = {cid: {"cell_key": c.cell_key, "status": c.status} for cid, c in ledger.cells.items()} if ledger else {}
    chosen = select(expand(suite), list(only) or None)
    if only and not chosen:
        raise TravelError(f"--only {' '.join(only)} selects no cell of suite {suite.name}; `reconbench bench "
                          f"{suite_name} --list` lists them")
    cells = [c for c in chosen if not is_finished(done.get(c.cell_id), c.key(suite), False)]
    listed = dict(ledger.training) if ledger is not None else {}
    states: dict[str, list[str]] = {}
    without: list[str] = []
    for key in dict.fromkeys(c.recipe.key() for c in cells):
        if key not in listed:
            without.append(key)
            continue
        files = [str(results / listed[key].file)]
        card = results / STATES_FOLDER / f"{key}{CARD_SUFFIX}"
        if listed[key].card is not None or (repo / card).is_file():
            files.append(str(card))
        states[key] = files
    folders = sorted({f"{DATA}/{d}" for c in cells if (d := data_folder(c.recipe.problem.dataset)) is not None})
    names = {c.recipe.key(): c.cell_id.split("--")[0] for c in reversed(cells)}
    return SliceNeeds([c.cell_id for c in cells], states, folders, without, names)


def default_results(repo: Path, suite: str) -> Path:
    """The folder whose ledger a slice reads: the suite's tracked ledger where it holds one, else its results
    folder."""
    from reconbench.bench.suite import load_suite

    name = load_suite(suite).name
    home = Path("benchmarks/gpu/ledger") / name
    return home if (repo / home / "finished.json").is_file() else Path("runs/bench") / name


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--carry", action="append", default=[], metavar="PATH",
                    help="a path the call carries (repeatable); with --suite, added to the suite's list")
    ap.add_argument("--suite", help="derive the carry list from this suite's selected cells and its ledger")
    ap.add_argument("--only", action="append", default=[], metavar="PATTERN",
                    help="the cells of the slice, as `reconbench bench --only` takes them (repeatable; needs --suite)")
    ap.add_argument("--results", type=Path, help="the suite's folder holding the ledger, relative to the repository "
                    "(default: the tracked ledger benchmarks/gpu/ledger/<suite name> where it holds one, else "
                    "runs/bench/<suite name>)")
    ap.add_argument("--repo", type=Path, default=ROOT, help="the checkout the call sends (default: this one)")
    ap.add_argument("--limit-mib", type=float, default=LIMIT / 2**20, help="the call's limit (default: 64)")
    args = ap.parse_args(argv)
    if args.only and not args.suite:
        ap.error("--only selects cells of a suite: pass --suite too")
    repo = args.repo.resolve()
    limit = int(args.limit_mib * 2**20)
    carry = list(args.carry)
    if args.suite:
        from reconbench.errors import ReconbenchError

        try:
            results = args.results or default_results(repo, args.suite)
            if results.is_absolute():   # carry names paths relative to the repository
                results = results.resolve().relative_to(repo)
            needs = slice_needs(args.suite, args.only, results, repo)
        except (TravelError, ReconbenchError, OSError, ValueError) as exc:   # a suite or ledger that does not read
            print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
            return 2
        from reconbench.bench.slice_pack import LEDGER_FILE

        print(f"{args.suite}: {len(needs.cells)} cell(s) to run" + (f" of --only {' '.join(args.only)}"
                                                                    if args.only else ""))
        for key, files in needs.states.items():
            print(f"  training state {key} ({needs.names[key]}): {', '.join(files)}")
        if needs.targets_without_state:
            print(f"  {len(needs.targets_without_state)} target(s) with no state in the ledger (each trains from its "
                  "start, or whole in its cells): " + ", ".join(f"{k} ({needs.names[k]})"
                                                               for k in needs.targets_without_state))
        print(f"  data: {', '.join(needs.data) or 'none (embedded data sets only)'}")
        derived = needs.carry(str(results / LEDGER_FILE))
        in_tree = set(sum(tree_files(repo), []))
        travels = [p for p in derived if (files := path_files(repo, p)) and set(files) <= in_tree]
        if travels:
            print(f"  in the tree (no carry needed): {', '.join(travels)}")
        derived = [p for p in derived if p not in travels]
        needed = {f for files in needs.states.values() for f in files}
        idle = [f for f in path_files(repo, str(results / "training")) if f in in_tree and f not in needed]
        if idle:
            print(f"  in the tree, not read by these cells: {len(idle)} file(s) of other targets' states "
                  f"({mib(sum(_size(repo / f) for f in idle))})")
        carry = derived + [c for c in carry if c not in derived]
    try:
        travel = measure(repo, carry)
    except (OSError, subprocess.CalledProcessError) as exc:
        print(f"error: {repo} is not a git checkout ({exc}); pass --repo with the checkout the call sends",
              file=sys.stderr)
        return 2
    width = max(len(n) for n in [*travel.parts, *(f"carry {r}" for r in travel.missing)])
    for name, size in travel.parts.items():
        print(f"{name:{width}s} {mib(size):>10s}")
    for rel in travel.missing:
        print(f"{'carry ' + rel:{width}s} {'absent':>10s} (not carried)")
    if len(carry) > MAX_CARRY:
        print(f"error: carry names {len(carry)} paths; the `run` tool takes at most {MAX_CARRY}: carry their "
              "folders instead", file=sys.stderr)
        return 1
    if args.suite:
        print("carry: " + json.dumps([c for c in carry if c not in travel.missing]))
    ok, line = verdict(travel, limit)
    if ok:
        print(line)
        return 0
    tracked, untracked = tree_files(repo)
    print("the tree's largest folders: " + ", ".join(f"{p} {mib(b)}" for p, b in
                                                    largest_folders(repo, tracked + untracked)))
    print(line, file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
