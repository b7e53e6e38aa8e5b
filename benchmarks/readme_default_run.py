"""Regenerate the README's table of the quick start's run from a fresh run of that command.

    OMP_NUM_THREADS=1 python benchmarks/readme_default_run.py          # rewrites README.md between its markers
    python benchmarks/readme_default_run.py --check                     # exit 1 if README.md differs

The run goes into a temporary folder with its own target cache (trained from scratch, as a newcomer's first run);
the table is `reconbench.cli.summary.markdown_table` of its result.json, the same rows `reconbench run` prints.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BEGIN, END = "<!-- default-run:begin -->", "<!-- default-run:end -->"
COMMAND = ["reconbench", "run", "--attack", "multiclass_kkt"]


def fresh_result(folder: Path) -> dict:
    """result.json of the quick start's command run in ``folder`` with an empty target cache."""
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
           "RECONBENCH_CACHE": str(folder / "cache")}
    cmd = [sys.executable, "-m", "reconbench", *COMMAND[1:], "-q", "--out", str(folder / "run")]
    subprocess.run(cmd, check=True, cwd=folder, env=env, capture_output=True, text=True)
    return json.loads((folder / "run" / "result.json").read_text())


def block(result: dict) -> str:
    from reconbench.cli.summary import markdown_table

    return f"{BEGIN}\n{markdown_table(result['evaluation'])}\n{END}"


def readme_block(text: str) -> str:
    found = re.search(re.escape(BEGIN) + r".*?" + re.escape(END), text, flags=re.S)
    if found is None:
        raise SystemExit(f"README.md has no {BEGIN} ... {END} block; put the markers where the table goes")
    return found[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="compare instead of writing; exit 1 on a difference")
    args = parser.parse_args()
    readme = REPO / "README.md"
    text = readme.read_text()
    old = readme_block(text)
    with tempfile.TemporaryDirectory() as tmp:
        new = block(fresh_result(Path(tmp)))
    if args.check:
        if new != old:
            print(f"README.md's table differs from a fresh run:\n{new}", file=sys.stderr)
            return 1
        return 0
    readme.write_text(text.replace(old, new))
    print(new)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
