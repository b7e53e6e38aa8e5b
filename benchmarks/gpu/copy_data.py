"""Copy the data files a suite needs into a folder of the repository, for a machine that gets the repository only.

    python benchmarks/gpu/copy_data.py SUITE [--from DATA_ROOT] [--to .data]

Every data set of the suite's targets is loaded once from DATA_ROOT (default: $RECONBENCH_DATA); the file or folder
it reports as its source is copied to the same relative path under the destination (an ignored folder, carried to
the device machine). Data sets that read no file under DATA_ROOT (the embedded `digits`) copy nothing.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

from reconbench.bench.cells import expand
from reconbench.bench.suite import load_suite
from reconbench.errors import ReconbenchError
from reconbench.targets.problems import load_dataset


def needed(suite_name: str, root: Path) -> list[Path]:
    """The files and folders under ``root`` that the suite's data sets are read from, relative to ``root``."""
    suite = load_suite(suite_name)
    refs = sorted({cell.recipe.problem.dataset for cell in expand(suite)})
    found = []
    for ref in refs:
        source = Path(load_dataset(ref, root).source)
        try:
            rel = source.resolve().relative_to(root.resolve())
        except ValueError:
            continue   # not read from the data root (an embedded data set)
        found.append(rel)
    return sorted(set(found))


def copy(rel: Path, src: Path, dst: Path) -> int:
    """Copy ``src/rel`` to ``dst/rel`` unless an identical-size copy is there; bytes copied."""
    a, b = src / rel, dst / rel
    if a.is_dir():
        return sum(copy(rel / p.name, src, dst) for p in sorted(a.iterdir()))
    if b.exists() and b.stat().st_size == a.stat().st_size:
        return 0
    b.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(a, b)
    return a.stat().st_size


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("suite", help="a suite name or .toml path")
    ap.add_argument("--from", dest="src", default=os.environ.get("RECONBENCH_DATA"),
                    help="the data root to copy from (default: $RECONBENCH_DATA)")
    ap.add_argument("--to", dest="dst", default=".data", help="the folder to copy into (default: .data)")
    args = ap.parse_args(argv)
    if not args.src:
        print("error: no data root: pass --from DIR or set RECONBENCH_DATA", file=sys.stderr)
        return 2
    src, dst = Path(args.src), Path(args.dst)
    try:
        rels = needed(args.suite, src)
    except ReconbenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    total = sum(copy(rel, src, dst) for rel in rels)
    print(f"{args.suite}: {len(rels)} data path(s) in {dst} ({', '.join(map(str, rels)) or 'none needed'}); "
          f"{total / 2**20:.1f} MiB copied")
    return 0


if __name__ == "__main__":
    sys.exit(main())
